// Command gpulink_exporter exports the health of the links that feed a GPU:
// PCIe, NVLink, NICs and NUMA placement. main only wires the parts together.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/dcgm"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/podresources"
	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
)

// defaultAddress avoids node_exporter (9100), dcgm-exporter (9400) and
// nvidia_gpu_exporter (9835).
const defaultAddress = ":9849"

func main() {
	app := kingpin.New("gpulink_exporter", "Prometheus exporter for GPU links: PCIe, NVLink, NICs and NUMA placement.")
	var (
		metricsPath       = app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").String()
		maxRequests       = app.Flag("web.max-requests", "Maximum number of parallel scrape requests; 0 disables the limit.").Default("10").Int()
		sysfsRoot         = app.Flag("path.sysfs", "sysfs mount point.").Default("/sys").String()
		procfsRoot        = app.Flag("path.procfs", "procfs mount point.").Default("/proc").String()
		topologyEvery     = app.Flag("topology.interval", "How often to read NUMA nodes and the PCIe tree's link states.").Default("15s").Duration()
		nicEvery          = app.Flag("nic.interval", "How often to read NIC port state and counters.").Default("5s").Duration()
		processEvery      = app.Flag("process.interval", "How often to read the CPU and memory placement of GPU processes. Reading a process's numa_maps walks its page tables: a few ms per GiB resident.").Default("15s").Duration()
		perProcess        = app.Flag("process.per-process-metrics", "Export gpulink_process_* series per GPU process; without it only the per-GPU counts.").Default("true").Bool()
		nvmlLib           = app.Flag("nvml.library", "Path or name of the NVML library to load.").Default("libnvidia-ml.so.1").String()
		nvmlEvery         = app.Flag("nvml.interval", "How often to sample NVML.").Default("5s").Duration()
		nvmlTimeout       = app.Flag("nvml.timeout", "Deadline of one NVML sample; past it the source is reported down and stale.").Default("4s").Duration()
		cudaLib           = app.Flag("cuda.library", "Path or name of the CUDA driver library the probes load.").Default("libcuda.so.1").String()
		probePolicy       = app.Flag("probe.policy", "When to run the CUDA link probes: idle (only on a GPU with no other compute process and low utilisation), always, or off. Never on a GPU in EXCLUSIVE_PROCESS or PROHIBITED compute mode, with MIG on, or lost.").Default(probes.PolicyIdle).Enum(probes.Policies...)
		probeEvery        = app.Flag("probe.interval", "How often to probe each GPU (with jitter); stretched when a round costs more than --probe.max-duty allows.").Default("10m").Duration()
		probeDuty         = app.Flag("probe.max-duty", "Most of a GPU's time the probes may take: a round that cost a GPU L seconds (its probes and its peers' against it) is followed by at least L / this. 1 turns the bound off.").Default("0.001").Float64()
		probeFirst        = app.Flag("probe.first-delay", "Wait before the first probe round after start-up.").Default("1m").Duration()
		probeJitter       = app.Flag("probe.jitter", "Spread of the probe interval, as a fraction of it, so a fleet does not probe in step.").Default("0.1").Float64()
		probeTimeout      = app.Flag("probe.timeout", "Deadline of one GPU's probe child; past it the child is killed.").Default("60s").Duration()
		probeSize         = app.Flag("probe.size", "Size of one transfer for the bandwidth probes; each probe holds at most two such buffers on the GPU and two pinned on the host.").Default("64MiB").Bytes()
		probeSamples      = app.Flag("probe.samples", "Timed samples per probe result; the median is exported.").Default(strconv.Itoa(probes.DefaultSamples)).Int()
		probeKinds        = app.Flag("probe.kind", "Probe to run (repeatable); default all.").Enums(probes.KindNames()...)
		probeUtil         = app.Flag("probe.utilization-threshold", "Under the idle policy, skip a GPU busier than this (0..1).").Default("0.05").Float64()
		noExporterMetrics = app.Flag("web.disable-exporter-metrics", "Exclude the exporter's own go_* and process_* metrics.").Bool()
		maxProcs          = app.Flag("runtime.gomaxprocs", "The target number of CPUs Go will run on (GOMAXPROCS).").Envar("GOMAXPROCS").Default("1").Int()
		dcgmAddress       = app.Flag("dcgm.address", "Address of the DCGM host engine (nv-hostengine): host:port, a unix socket path (starting with /), or a DCGM 4.5+ connection string (tcp://, unix://).").Default(dcgm.DefaultAddress).String()
		dcgmEmbedded      = app.Flag("dcgm.embedded", "When no host engine answers at --dcgm.address, run DCGM's engine inside the exporter's process (with the exporter's privileges).").Bool()
		dcgmEvery         = app.Flag("dcgm.interval", "How often to sample DCGM; also the interval DCGM averages the profiling fields over.").Default("5s").Duration()
		dcgmLib           = app.Flag("dcgm.library", "Path or name of libdcgm.so.4; a path must name a library whose SONAME is libdcgm.so.4.").Default(dcgm.DefaultLibrary).String()
		podSocket         = app.Flag("kubernetes.pod-resources-socket", "The kubelet's pod-resources socket, read by the kubernetes collector.").Default(podresources.DefaultSocket).String()
		podEvery          = app.Flag("kubernetes.interval", "How often to ask the kubelet which pods the GPUs are assigned to.").Default("30s").Duration()
		simProfile        = app.Flag("sim", "Serve a simulated node instead of this machine: NVML, sysfs/procfs and the probe runner are modelled, everything else is the real exporter. One of: "+strings.Join(sim.ProfileNames(), ", ")+".").PlaceHolder("PROFILE").Enum(sim.ProfileNames()...)
		simFaults         = app.Flag("sim.faults", "YAML file of faults to inject into the simulated node (with --sim); re-read when it changes. Missing or empty: a healthy node.").PlaceHolder("FILE").String()
		webConfig         = kingpinflag.AddFlags(app, defaultAddress)
	)
	switches := collector.RegisterSwitches(app)
	app.Command("serve", "Run the exporter (the default).").Default()
	topologyCmd := app.Command("topology", "Print the GPU and NIC topology matrix as nvidia-smi topo -m does, and exit.")
	probe := &probes.Command{}
	probeCmd := probes.AddCommand(app, probe)
	logConfig := &promslog.Config{}
	flag.AddFlags(app, logConfig)
	app.Version(version.Print("gpulink_exporter"))
	app.HelpFlag.Short('h')
	command := kingpin.MustParse(app.Parse(os.Args[1:]))

	logger := promslog.New(logConfig)
	fsys := numa.FS{Sys: *sysfsRoot, Proc: *procfsRoot}
	newNVML := func() gonvml.Interface { return gonvml.New(gonvml.WithLibraryPath(*nvmlLib)) }
	// With --sim the three hardware seams are the simulated node's; exit
	// removes its tree on every way out.
	var simNode *sim.Node
	exit := func(code int) {
		if simNode != nil {
			simNode.Close()
		}
		os.Exit(code)
	}
	switch {
	case *simProfile != "" && command == probeCmd.FullCommand():
		fmt.Fprintln(os.Stderr, "--sim serves a simulated node; the probe command needs a real GPU")
		os.Exit(1)
	case *simProfile != "":
		n, err := sim.Start(sim.Config{Profile: *simProfile, FaultsFile: *simFaults, Logger: logger})
		if err != nil {
			fmt.Fprintln(os.Stderr, "simulated node:", err)
			os.Exit(1)
		}
		simNode = n
		defer simNode.Close()
		fsys = simNode.FS()
		newNVML = simNode.NVML
	case *simFaults != "":
		fmt.Fprintln(os.Stderr, "--sim.faults needs --sim")
		os.Exit(1)
	}
	if command == topologyCmd.FullCommand() {
		if err := printTopology(fsys, newNVML(), logger); err != nil {
			fmt.Fprintln(os.Stderr, err)
			exit(1)
		}
		return
	}
	if command == probeCmd.FullCommand() {
		probe.Library, probe.FS = *cudaLib, fsys
		if probe.Output == "table" {
			// One read of the tree serves the expectations and the host nodes.
			probe.Topology, _ = fsys.Topology()
			probe.Annotate = expectedPaths(probe.Topology, fsys.Sys, *nvmlLib, logger)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := probe.Run(ctx, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	logger.Info("starting gpulink_exporter", "version", version.Info(), "collectors", switches.Names())
	logger.Info("build context", "build_context", version.BuildContext())
	// An exporter needs little parallelism; more Ps only cost memory and GC
	// work (node_exporter defaults to 1 for the same reason). NVML calls are
	// cgo calls and do not hold a P while they block.
	runtime.GOMAXPROCS(*maxProcs)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	reg := prometheus.NewRegistry()
	reg.MustRegister(versioncollector.NewCollector("gpulink_exporter"))
	if !*noExporterMetrics {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	var statuses []sampler.StatusReporter
	var versions []scrape.Versioned
	// Sources that label GPUs by NVML index ask the reader; without it
	// they know GPUs by PCI address alone.
	var gpuIDs interface{ Identities() []nvml.Identity }
	var reader *nvml.Reader
	var nvmlSampler *sampler.Sampler[*nvml.Snapshot]
	var probeRunner probes.RoundRunner // the probe child unless simulated
	if simNode != nil {
		logger.Info("serving a simulated node", "profile", *simProfile, "faults", *simFaults, "sysfs", fsys.Sys, "procfs", fsys.Proc)
		go simNode.Run(ctx)
		statuses = append(statuses, simNode)
		versions = append(versions, simNode)
		probeRunner = simNode.Runner()
	}

	if switches.Enabled("nvml") || switches.Enabled("xid") || switches.Enabled("process") {
		reader = nvml.NewReader(newNVML(), fsys.Sys, logger)
		defer reader.Shutdown()
		if err := reader.Init(); err != nil {
			// Not fatal: a machine without a driver still serves the rest,
			// and the sampler keeps trying in case the driver loads later.
			logger.Warn("NVML unavailable; the nvml source reports down", "err", err)
		}
		gpuIDs = reader
		if switches.Enabled("nvml") {
			nvmlSampler = sampler.New[*nvml.Snapshot]("nvml", reader, sampler.Options{
				Interval: *nvmlEvery, Timeout: *nvmlTimeout, Logger: logger})
			go nvmlSampler.Run(ctx)
			reg.MustRegister(collector.NewNVMLCollector(nvmlSampler))
			statuses = append(statuses, nvmlSampler)
			versions = append(versions, nvmlSampler)
		}
		if switches.Enabled("xid") {
			w := nvml.NewXIDWatcher(reader, logger)
			go w.Run(ctx, *nvmlEvery)
			reg.MustRegister(collector.NewXIDCollector(w, reader))
			statuses = append(statuses, w)
			versions = append(versions, w)
		}
	}
	// The process source judges placement against the topology, so the
	// topology is sampled when either is on.
	var topology *sampler.Sampler[*numa.Topology]
	if switches.Enabled("topology") || switches.Enabled("process") {
		topology = sampler.New[*numa.Topology]("topology", &numa.TopologyReader{FS: fsys}, sampler.Options{
			Interval: *topologyEvery, Logger: logger})
		go topology.Run(ctx)
		statuses = append(statuses, topology)
		versions = append(versions, topology)
		if switches.Enabled("topology") {
			reg.MustRegister(collector.NewTopologyCollector(topology, gpuIDs))
		}
	}
	if switches.Enabled("process") && reader != nil {
		s := sampler.New[*process.Snapshot]("process", &process.Reader{
			FS:        fsys,
			Processes: reader.ComputeProcesses,
			Topology:  topology.LatestData,
			GPUs:      reader.Identities,
		}, sampler.Options{Interval: *processEvery, Logger: logger})
		go s.Run(ctx)
		reg.MustRegister(collector.NewProcessCollector(s, *perProcess))
		statuses = append(statuses, s)
		versions = append(versions, s)
	}
	if *probePolicy != probes.PolicyOff {
		if nvmlSampler == nil {
			logger.Warn("the probes need the nvml collector to know the GPUs and whether they are idle; not probing")
		} else {
			s, err := newProbeScheduler(probeSchedulerConfig{
				policy: *probePolicy, every: *probeEvery, first: *probeFirst, jitter: *probeJitter,
				timeout: *probeTimeout, size: int64(*probeSize), samples: *probeSamples, kinds: *probeKinds,
				util: *probeUtil, duty: *probeDuty, cudaLib: *cudaLib, fsys: fsys, logger: logger, runner: probeRunner,
			}, nvmlSampler, reader, topologyLatest(topology))
			if err != nil {
				logger.Error("invalid probe settings", "err", err)
				exit(1)
			}
			go s.Run(ctx)
			reg.MustRegister(collector.NewProbeCollector(s))
			statuses = append(statuses, s)
			versions = append(versions, s)
		}
	}
	// NVML's identities give the DCGM and pod series NVML's index and PCI
	// address; without NVML they carry DCGM's and the kubelet's alone.
	var nvmlIDs func() []nvml.Identity
	if gpuIDs != nil {
		nvmlIDs = gpuIDs.Identities
	}
	if switches.Enabled("dcgm") {
		r := dcgm.NewReader(dcgm.Config{Address: *dcgmAddress, Embedded: *dcgmEmbedded, Library: *dcgmLib,
			Interval: *dcgmEvery, GPUs: nvmlIDs, Logger: logger})
		defer r.Close()
		s := sampler.New[*dcgm.Snapshot]("dcgm", r, sampler.Options{Interval: *dcgmEvery, Logger: logger})
		go s.Run(ctx)
		reg.MustRegister(collector.NewDCGMCollector(s))
		statuses = append(statuses, s)
		versions = append(versions, s)
	} else if simNode == nil {
		// A hint only: the source stays off unless asked for, since DCGM's
		// profiling watches take the GPU's performance counters from
		// profilers. One local connect, off the start-up path.
		go func() {
			if dcgm.EngineListening(*dcgmAddress, 200*time.Millisecond) {
				logger.Info("a DCGM host engine answers; --collector.dcgm adds its profiling and health metrics", "address", *dcgmAddress)
			}
		}()
	}
	if switches.Enabled("kubernetes") {
		s := sampler.New[*podresources.Snapshot]("kubernetes",
			&podresources.Reader{Socket: *podSocket, GPUs: nvmlIDs, Logger: logger},
			sampler.Options{Interval: *podEvery, Timeout: 10 * time.Second, Logger: logger})
		go s.Run(ctx)
		reg.MustRegister(collector.NewPodCollector(s))
		statuses = append(statuses, s)
		versions = append(versions, s)
	}
	if switches.Enabled("nic") {
		s := sampler.New[*nic.Snapshot]("nic", &nic.Reader{FS: fsys}, sampler.Options{
			Interval: *nicEvery, Logger: logger})
		go s.Run(ctx)
		reg.MustRegister(collector.NewNICCollector(s))
		statuses = append(statuses, s)
		versions = append(versions, s)
	}
	reg.MustRegister(collector.NewExporterCollector(statuses...))

	metrics := scrape.NewHandler(reg, versions, *maxRequests, logger)
	if err := serve(ctx, logger, metrics, webConfig, *metricsPath); err != nil {
		logger.Error("server failed", "err", err)
		exit(1)
	}
}

// printTopology is the topology command: one NVML sample for the NVLink
// counts (none without a driver), the PCIe tree from sysfs.
func printTopology(fsys numa.FS, lib gonvml.Interface, logger *slog.Logger) error {
	topo, err := fsys.Topology()
	if topo == nil {
		return err
	}
	if err != nil {
		logger.Warn("some topology values could not be read", "err", err)
	}
	var gpus []numa.MatrixGPU
	reader := nvml.NewReader(lib, fsys.Sys, logger)
	defer reader.Shutdown()
	if err := reader.Init(); err != nil {
		logger.Warn("NVML unavailable; GPUs in PCI address order, no NVLinks", "err", err)
		for _, g := range topo.GPUs {
			gpus = append(gpus, numa.MatrixGPU{Address: g.Address, NVLinks: make([]int, len(topo.GPUs))})
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		snap, err := reader.Sample(ctx)
		if snap == nil {
			return fmt.Errorf("NVML sample: %w", err)
		}
		links := snap.NVLinkCounts()
		for i, g := range snap.GPUs {
			gpus = append(gpus, numa.MatrixGPU{Address: g.PCIBusID, NVLinks: links[i]})
		}
	}
	fmt.Print(topo.Matrix(gpus))
	return nil
}

type probeSchedulerConfig struct {
	policy                string
	every, first, timeout time.Duration
	jitter, util, duty    float64
	size                  int64
	samples               int
	kinds                 []string
	cudaLib               string
	fsys                  numa.FS
	logger                *slog.Logger
	// runner runs the rounds; nil means the probe child.
	runner probes.RoundRunner
}

// newProbeScheduler joins the probe scheduler to the sources it judges by:
// NVML for the GPUs and whether they are idle, the topology for host nodes
// and, with NVML, for what each path should give. The child is this same
// binary unless c.runner is set.
func newProbeScheduler(c probeSchedulerConfig, nvmlSampler *sampler.Sampler[*nvml.Snapshot], reader *nvml.Reader, topo func() *numa.Topology) (*probes.Scheduler, error) {
	runner := c.runner
	if runner == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding this binary to run the probe child: %w", err)
		}
		runner = &probes.ChildRunner{Logger: c.logger, Command: []string{exe, "probe",
			"--cuda.library=" + c.cudaLib, "--path.sysfs=" + c.fsys.Sys, "--path.procfs=" + c.fsys.Proc}}
	}
	var kinds []probes.Kind
	for _, k := range c.kinds {
		kinds = append(kinds, probes.Kind(k))
	}
	return probes.NewScheduler(probes.SchedulerConfig{
		Policy: c.policy, Interval: c.every, Jitter: c.jitter, FirstDelay: c.first, Timeout: c.timeout,
		Options:              probes.Options{Probes: kinds, SizeBytes: c.size, Samples: c.samples},
		UtilizationThreshold: c.util,
		MaxDuty:              c.duty,
		Runner:               runner,
		GPUs:                 nvmlSampler.LatestData,
		Processes:            reader.ComputeProcesses,
		HostNodes:            func(addr string) []int { return topo().HostNodes(addr) },
		Annotate: func(g *probes.GPURound) {
			probes.PathFor(nvmlSampler.LatestData(), topo(), g.PCIBusID).Annotate(g)
		},
		Logger: c.logger,
	})
}

// topologyLatest reads the topology sampler's latest tree; without the
// sampler (both topology and process collectors off) the probes run with
// unbound host buffers and no PCIe expectation from sysfs.
func topologyLatest(s *sampler.Sampler[*numa.Topology]) func() *numa.Topology {
	if s == nil {
		return func() *numa.Topology { return nil }
	}
	return s.LatestData
}

// expectedPaths is what the probe table compares with: one NVML sample and
// the PCIe tree, as the daemon uses them. Without NVML only the PCIe part
// is known.
func expectedPaths(topo *numa.Topology, sysfs, nvmlLib string, logger *slog.Logger) func(*probes.GPURound) {
	var snap *nvml.Snapshot
	reader := nvml.NewReader(gonvml.New(gonvml.WithLibraryPath(nvmlLib)), sysfs, logger)
	if err := reader.Init(); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		snap, _ = reader.Sample(ctx)
		cancel()
		reader.Shutdown()
	}
	return func(g *probes.GPURound) { probes.PathFor(snap, topo, g.PCIBusID).Annotate(g) }
}

func serve(ctx context.Context, logger *slog.Logger, metrics http.Handler, webConfig *web.FlagConfig, metricsPath string) error {
	mux := http.NewServeMux()
	mux.Handle(metricsPath, metrics)
	if metricsPath != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "gpulink_exporter",
			Description: "Prometheus exporter for GPU links: PCIe, NVLink, NICs and NUMA placement",
			Version:     version.Info(),
			Links:       []web.LandingLinks{{Address: metricsPath, Text: "Metrics"}},
		})
		if err != nil {
			return fmt.Errorf("landing page: %w", err)
		}
		mux.Handle("/", landing)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- web.ListenAndServe(srv, webConfig, logger) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		logger.Info("shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/dcgm"
	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/kubelet"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/internal/slurm"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// A source is one row of the table. Its name, written once, makes the
// --collector.<name> switch, the --<name>.interval and --<name>.timeout
// flags, the prefix of its other flags, the sampler's name and the source
// label of gpulink_source_*.
type source struct {
	name string
	// help is what --collector.<name> turns on, on its default; without
	// help the source has no switch (the probes: --probe.policy).
	help string
	on   bool
	// interval and timeout are the defaults and help of --<name>.interval
	// and --<name>.timeout; an empty default: no such flag. A sampled
	// source without a timeout gets the interval as its deadline.
	interval, timeout durationFlag
	// flags registers the source's other flags, named <name>.<suffix>.
	flags func(f flagFunc, c *config)
	// usesNVML and usesTopology: the source reads the NVML reader or the
	// topology sampler, opened when a source that uses them is on,
	// whether or not their own collectors are.
	usesNVML, usesTopology bool
	// ownTimer: the interval and timeout are not a sampler's (the probe
	// scheduler's: its timeout bounds one GPU's child, not the interval).
	ownTimer bool
	// check checks the source's other flags (nil: none); it warns where a
	// missing path may appear later.
	check func(c *config, st setting, warn func(string, ...any)) error
	// start starts the source and registers its collector; rows start in
	// table order, so a row may use what a row above it started.
	start func(w *wiring, s setting)
}

type durationFlag struct{ def, help string }

type flagFunc func(suffix, help string) *kingpin.FlagClause

type sourceID int

const (
	nvmlSource sourceID = iota
	xidSource
	topologySource
	processSource
	probeSource
	dcgmSource
	kubernetesSource
	slurmSource
	nicSource
	nodeProbeSource
	ncclSource
	numSources
)

// kubeletTimeout bounds one pod-resources call (or the interval, when
// that is shorter).
const kubeletTimeout = 10 * time.Second

var sources = [numSources]source{
	nvmlSource: {
		name: "nvml", on: true, usesNVML: true,
		help:     "GPU identity, clocks and throttling, power, memory, ECC, PCIe and NVLink counters from NVML.",
		interval: durationFlag{"5s", "How often to sample NVML."},
		timeout:  durationFlag{"4s", "Deadline of one NVML sample; past it the source is reported down and stale."},
		flags: func(f flagFunc, c *config) {
			f("library", "Path or name of the NVML library to load.").Default("libnvidia-ml.so.1").StringVar(&c.nvmlLib)
			f("slow-interval", "How often to read NVML's slow counters (ECC, row remapping, retired pages, PCIe and NVLink error counters, NVLink fabric state); samples in between carry the last values. At most as often as --nvml.interval.").
				Default(nvml.DefaultSlowInterval.String()).DurationVar(&c.nvmlSlow)
			f("nvlink-speed", "Export gpulink_gpu_nvlink_speed_bytes_per_second for every NVLink: a constant per link that no shipped rule or panel reads (18 series a GPU on NVLink 4).").
				Default("false").BoolVar(&c.nvlinkSpeed)
			f("nvlink-link-traffic", "Read and export each NVLink's data counters (gpulink_gpu_nvlink_link_{transmit,receive}_bytes_total) every sample, beside the GPU's totals over all its links, which are always read. Costly: on two H100s with 18 links each, 36 field values that took 27 ms of CPU a GPU a sample.").
				Default("false").BoolVar(&c.nvlinkTraffic)
		},
		check: checkNVML,
		start: func(w *wiring, s setting) {
			w.nvml = sample(w, s, w.reader)
			w.reg.MustRegister(collector.NewNVMLCollector(w.nvml, collector.WithNVLinkSpeed(w.cfg.nvlinkSpeed)))
		},
	},
	xidSource: {
		name: "xid", on: true, usesNVML: true,
		help: "XID error events from NVML.",
		start: func(w *wiring, s setting) {
			x := nvml.NewXIDWatcher(w.reader, w.logger)
			go x.Run(w.ctx, w.cfg.src[nvmlSource].interval)
			w.add(s, x, x, collector.NewXIDCollector(x, w.reader))
		},
	},
	topologySource: {
		name: "topology", on: true, usesTopology: true,
		help:     "NUMA nodes and distances, the PCIe tree's link states, and each GPU's NUMA affinity, path to every NIC and slowest hop to the CPU, from sysfs.",
		interval: durationFlag{"15s", "How often to read NUMA nodes and the PCIe tree's link states."},
		start: func(w *wiring, s setting) {
			var ids interface{ Identities() []nvml.Identity }
			if w.reader != nil {
				ids = w.reader
			}
			w.reg.MustRegister(collector.NewTopologyCollector(w.topology, ids))
		},
	},
	processSource: {
		name: "process", on: true, usesNVML: true, usesTopology: true,
		help:     "CPU and memory placement of every process holding a GPU against the GPU's NUMA node, from NVML and procfs.",
		interval: durationFlag{"15s", "How often to read the CPU and memory placement of GPU processes. Reading a process's numa_maps walks its page tables: a few ms per GiB resident."},
		flags: func(f flagFunc, c *config) {
			f("per-process-metrics", "Export gpulink_process_* series per GPU process; without it only the per-GPU counts.").Default("true").BoolVar(&c.perProcess)
		},
		start: func(w *wiring, s setting) {
			w.process = sample(w, s, &process.Reader{FS: w.fsys, Processes: w.reader.ComputeProcesses,
				Topology: w.topology.LatestData, GPUs: w.reader.Identities})
			w.reg.MustRegister(collector.NewProcessCollector(w.process, w.cfg.perProcess))
		},
	},
	probeSource: {
		name:     "probe",
		interval: durationFlag{formatDuration(schedule.DefaultInterval), "How often to probe each GPU (with jitter); stretched when a round costs more than --probe.max-duty allows."},
		timeout:  durationFlag{formatDuration(schedule.DefaultTimeout), "Deadline of one GPU's probe child; past it the child is killed."},
		flags:    probeFlags,
		ownTimer: true,
		check:    checkProbes,
		start:    startProbes,
	},
	dcgmSource: {
		name:     "dcgm",
		help:     "Profiling fields (engine, SM, tensor and DRAM activity, PCIe and NVLink traffic) and health watches from an NVIDIA DCGM host engine (nv-hostengine); needs libdcgm.so.4.",
		interval: durationFlag{"5s", "How often to sample DCGM; also the interval DCGM averages the profiling fields over."},
		flags: func(f flagFunc, c *config) {
			f("address", "Address of the DCGM host engine (nv-hostengine): host:port, a unix socket path (starting with /), or a DCGM 4.5+ connection string (tcp://, unix://).").Default(dcgm.DefaultAddress).StringVar(&c.dcgm.Address)
			f("embedded", "When no host engine answers at --dcgm.address, run DCGM's engine inside the exporter's process (with the exporter's privileges).").BoolVar(&c.dcgm.Embedded)
			f("library", "Path or name of libdcgm.so.4; a path must name a library whose SONAME is libdcgm.so.4.").Default(dcgm.DefaultLibrary).StringVar(&c.dcgm.Library)
		},
		check: checkDCGM,
		start: func(w *wiring, s setting) {
			cfg := w.cfg.dcgm
			cfg.Interval, cfg.GPUs, cfg.Logger = s.interval, w.nvmlIDs(), w.logger
			r := dcgm.NewReader(cfg)
			w.closers = append(w.closers, r.Close)
			w.reg.MustRegister(collector.NewDCGMCollector(sample(w, s, r)))
		},
	},
	kubernetesSource: {
		name:     "kubernetes",
		help:     "Which pod and container the kubelet assigned each GPU to, from its pod-resources socket (gpulink_gpu_pod_info).",
		interval: durationFlag{"30s", "How often to ask the kubelet which pods the GPUs are assigned to."},
		flags: func(f flagFunc, c *config) {
			f("pod-resources-socket", "The kubelet's pod-resources socket, read by the kubernetes collector.").Default(kubelet.DefaultSocket).StringVar(&c.podSocket)
		},
		check: checkKubernetes,
		start: func(w *wiring, s setting) {
			s.timeout = min(kubeletTimeout, s.interval)
			r := &kubelet.Reader{Socket: w.cfg.podSocket, GPUs: w.nvmlIDs(), Logger: w.logger}
			w.reg.MustRegister(collector.NewPodCollector(sample(w, s, r)))
		},
	},
	// The jobs of the GPU processes' cgroups come with the process
	// source, and the mapping files are read only where
	// --slurm.job-mapping-dir names them; the switch turns both off.
	slurmSource: {
		name: "slurm", on: true,
		help:     "Which Slurm job holds each GPU (gpulink_gpu_job_info), from the GPU processes' cgroups (with the process collector) and the job-mapping files of --slurm.job-mapping-dir.",
		interval: durationFlag{"15s", "How often to read --slurm.job-mapping-dir."},
		flags: func(f flagFunc, c *config) {
			f("job-mapping-dir", "Directory of Slurm job-mapping files in dcgm-exporter's format (its --hpc-job-mapping-dir), which a prolog writes and an epilog removes: one file per GPU named by its index (or <gpu>.<gpu_instance> for a MIG instance) holding a job ID a line. Its jobs join those of the GPU processes' cgroups on gpulink_gpu_job_info. Empty: not read.").
				PlaceHolder("DIR").StringVar(&c.slurmMappingDir)
		},
		check: checkSlurm,
		start: startSlurm,
	},
	nicSource: {
		name: "nic", on: true,
		help:     "InfiniBand, RoCE and EFA port state, rate and counters, and physical Ethernet interfaces, from sysfs.",
		interval: durationFlag{"5s", "How often to read NIC port state and counters."},
		start: func(w *wiring, s setting) {
			w.nic = sample(w, s, &nic.Reader{FS: w.fsys})
			w.reg.MustRegister(collector.NewNICCollector(w.nic))
			// Each GPU's nearest usable NIC: the ports joined with the
			// PCIe tree, where a source that reads it is on (w.topology
			// nil: nothing rendered).
			var ids interface{ Identities() []nvml.Identity }
			if w.reader != nil {
				ids = w.reader
			}
			w.reg.MustRegister(collector.NewNearestNICCollector(w.nic, w.topology, ids))
		},
	},
	// Not sampled: node-to-node probes run when Prometheus asks /probe
	// (nodeprobe.go). The probe scheduler gives them GPUs; the topology
	// and NIC samples, where those sources are on, what the path should
	// carry.
	nodeProbeSource: {
		name:  "node-probe",
		flags: nodeProbeFlags,
		check: checkNodeProbe,
		start: startNodeProbe,
	},
	ncclSource: {
		name: "nccl", on: true, usesTopology: true,
		help:     "What an NCCL session between this node and another would use and lack, without running one: the library, the network plugin, the RDMA devices, the memlock limit, and the network and GPUDirect RDMA the NICs call for (as `collectives --check` prints it).",
		interval: durationFlag{"1m", "How often to check what NCCL between nodes would use."},
		start:    startNCCLCheck,
	},
}

// wiring is what the sources share while they start.
type wiring struct {
	ctx     context.Context
	cancel  context.CancelFunc // ends ctx: close stops the sources first
	cfg     *config
	logger  *slog.Logger
	reg     *scrape.Registry
	fsys    hostfs.Root
	newNVML func() gonvml.Interface
	sim     *sim.Node // nil unless --sim

	reader   *nvml.Reader                        // nil unless a source that uses NVML is on
	nvml     *sampler.Sampler[*nvml.Snapshot]    // nil unless the nvml source is on
	topology *sampler.Sampler[*numa.Topology]    // nil unless a source that uses it is on
	nic      *sampler.Sampler[*nic.Snapshot]     // nil unless the nic source is on
	process  *sampler.Sampler[*process.Snapshot] // nil unless the process source is on
	sched    *schedule.Scheduler                 // nil unless the probes run

	// routes are handlers the sources serve beside the metrics.
	routes []route

	statuses []sampler.StatusReporter
	versions []scrape.Versioned
	closers  []func() // run last first when the daemon stops
	err      error    // why a source could not start
}

// newWiring returns the wiring of the sources c switches on, to run until
// ctx ends or close is called; sim is nil unless --sim.
func newWiring(ctx context.Context, c *config, logger *slog.Logger, reg *scrape.Registry, fsys hostfs.Root,
	newNVML func() gonvml.Interface, sim *sim.Node) *wiring {
	ctx, cancel := context.WithCancel(ctx)
	return &wiring{ctx: ctx, cancel: cancel, cfg: c, logger: logger, reg: reg, fsys: fsys, newNVML: newNVML, sim: sim}
}

// startSources opens what the switched-on sources share and starts them
// in table order.
func (w *wiring) startSources() error {
	if w.sim != nil {
		w.logger.Info("serving a simulated node", "profile", w.cfg.sim, "faults", w.cfg.simFaults, "sysfs", w.fsys.Sys, "procfs", w.fsys.Proc)
		go w.sim.Run(w.ctx)
		w.statuses, w.versions = append(w.statuses, w.sim), append(w.versions, w.sim)
	}
	if w.anyOn(func(s *source) bool { return s.usesNVML }) {
		w.reader = nvml.NewReader(w.newNVML(), w.fsys.Sys, w.logger, nvml.WithSlowInterval(w.cfg.nvmlSlow),
			nvml.WithLinkTraffic(w.cfg.nvlinkTraffic))
		w.closers = append(w.closers, w.reader.Shutdown)
		if err := w.reader.Init(); err != nil {
			// Not fatal: a machine without a driver still serves the rest,
			// and the sampler keeps trying in case the driver loads later.
			w.logger.Warn("NVML unavailable; the nvml source reports down", "err", err)
		}
	}
	if w.anyOn(func(s *source) bool { return s.usesTopology }) {
		w.topology = sample(w, w.cfg.src[topologySource], &numa.TopologyReader{FS: w.fsys, CuFileConfig: w.cfg.cufileConfig})
	}
	for id := range sources {
		if s := w.cfg.src[id]; s.on && w.err == nil {
			sources[id].start(w, s)
		}
	}
	if w.err != nil {
		return w.err
	}
	if !w.cfg.src[dcgmSource].on && w.sim == nil {
		// A hint only: the source stays off unless asked for, since DCGM's
		// profiling watches take the GPU's performance counters from
		// profilers. One local connect, off the start-up path.
		go func() {
			if dcgm.EngineListening(w.cfg.dcgm.Address, 200*time.Millisecond) {
				w.logger.Info("a DCGM host engine answers; --collector.dcgm adds its profiling and health metrics", "address", w.cfg.dcgm.Address)
			}
		}()
	}
	w.reg.MustRegister(collector.NewExporterCollector(w.statuses...))
	return nil
}

func (w *wiring) anyOn(uses func(*source) bool) bool {
	for id := range sources {
		if w.cfg.src[id].on && uses(&sources[id]) {
			return true
		}
	}
	return false
}

func (w *wiring) close() {
	// The sources stop before what they share is closed, also when the
	// server could not start: NVML is not unloaded under a sample.
	w.cancel()
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
}

// sample is the step every sampled source shares: a sampler named after
// the source on its interval and deadline, started, its health reported.
func sample[T any](w *wiring, s setting, src sampler.Source[T]) *sampler.Sampler[T] {
	smp := sampler.New(s.name, src, sampler.Options{Interval: s.interval, Timeout: s.deadline(), Logger: w.logger})
	go smp.Run(w.ctx)
	w.add(s, smp, smp, nil)
	return smp
}

// add reports a started source's health under the source's name and
// registers its collector (c may be nil).
func (w *wiring) add(s setting, st sampler.StatusReporter, v scrape.Versioned, c prometheus.Collector) {
	w.statuses = append(w.statuses, named{st, s.name})
	w.versions = append(w.versions, v)
	if c != nil {
		w.reg.MustRegister(c)
	}
}

// named gives a source's status the table's name: the label follows the
// table even for sources that are not samplers (xid, probe).
type named struct {
	sampler.StatusReporter
	name string
}

func (n named) Status() sampler.Status {
	st := n.StatusReporter.Status()
	st.Name = n.name
	return st
}

// nvmlIDs gives what joins other sources to NVML's GPUs (the DCGM and
// pod series, the Slurm mapping files' indices) NVML's index and PCI
// address; without NVML each carries its own source's alone.
func (w *wiring) nvmlIDs() func() []nvml.Identity {
	if w.reader == nil {
		return nil
	}
	return w.reader.Identities
}

// startSlurm reads the job-mapping files where a directory is given, and
// serves gpulink_gpu_job_info from them and from the process source,
// whichever of the two is on.
func startSlurm(w *wiring, s setting) {
	var files *sampler.Sampler[*slurm.Mappings]
	if w.cfg.slurmMappingDir != "" {
		w.logger.Info("reading Slurm job-mapping files", "dir", w.cfg.slurmMappingDir, "interval", s.interval)
		files = sample(w, s, &slurm.MappingReader{Dir: w.cfg.slurmMappingDir, GPUs: w.nvmlIDs()})
	}
	if files != nil || w.process != nil {
		w.reg.MustRegister(collector.NewJobCollector(w.process, files))
	}
}

// startProbes joins the probe scheduler to the sources it judges by: NVML
// for the GPUs and whether they are idle, the topology (when a source
// samples it) for host nodes and what each path should give. The rounds,
// the probes' and the collectives', run in a child, this same binary,
// unless the node is simulated.
func startProbes(w *wiring, s setting) {
	c := w.cfg.probe
	if c.Policy == schedule.PolicyOff {
		return
	}
	if w.nvml == nil {
		w.logger.Warn("the probes need the nvml collector to know the GPUs and whether they are idle; not probing")
		return
	}
	if w.sim != nil {
		c.Runner = w.sim.Runner()
		c.CollectiveRunner = w.sim.Runner()
	} else {
		exe, err := os.Executable()
		if err != nil {
			w.err = fmt.Errorf("finding this binary to run the probe child: %w", err)
			return
		}
		c.Runner = &probes.ChildRunner{Logger: w.logger, Command: []string{exe, "probe",
			"--cuda.library=" + w.cfg.cudaLib, "--cufile.library=" + w.cfg.cufileLib, "--path.sysfs=" + w.fsys.Sys, "--path.procfs=" + w.fsys.Proc}}
		c.CollectiveRunner = &probes.ChildRunner{Logger: w.logger, Command: collectivesCommand(exe, w.cfg)}
	}
	topo := func() *numa.Topology { return nil } // unbound host buffers, no PCIe expectation
	if w.topology != nil {
		topo = w.topology.LatestData
		// With a zero first delay the first round would otherwise race
		// the first topology sample and bind no host buffer.
		c.Ready = w.topology.Sampled
	}
	c.Interval, c.Timeout, c.Options.Probes = s.interval, s.timeout, typed[probes.Kind](w.cfg.probeKinds)
	c.GPUs, c.Processes, c.Logger = w.nvml.LatestData, w.reader.ComputeProcesses, w.logger
	// NVML utilisation averages up to a second before the sample: the
	// scheduler reads it as another's work only in a sample taken clear
	// of the GPU's own probes.
	c.GPUsTaken = func() time.Time {
		if snap := w.nvml.Latest(); snap != nil {
			return snap.Taken
		}
		return time.Time{}
	}
	c.HostNodes = func(addr string) []int { return topo().HostNodes(addr) }
	expect := probes.Expectations{GPUs: w.nvml.LatestData, Topology: topo}
	c.Annotate, c.CollectiveAnnotate = expect.Annotate, expect.AnnotateCollective
	c.CollectiveOptions.Collectives = typed[probes.Collective](w.cfg.collectiveKinds)
	sched, err := schedule.NewScheduler(c)
	if err != nil {
		w.err = fmt.Errorf("invalid probe settings: %w", err)
		return
	}
	go sched.Run(w.ctx)
	w.sched = sched
	w.add(s, sched, sched, collector.NewProbeCollector(sched))
	w.reg.MustRegister(collector.NewCollectiveCollector(sched))
}

// collectivesCommand is the collective rounds' child: this binary's
// collectives command with the CUDA driver and NCCL libraries of the
// flags, NVLS (multicast) off unless --nccl.nvls turns it on.
func collectivesCommand(exe string, c *config) []string {
	cmd := []string{exe, "collectives", "--cuda.library=" + c.cudaLib, "--library=" + c.ncclLib}
	if c.ncclNVLS {
		cmd = append(cmd, "--nvls")
	}
	return cmd
}

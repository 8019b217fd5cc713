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
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
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
	"github.com/gpulink/gpulink_exporter/internal/gpu"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/numa"
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
		noExporterMetrics = app.Flag("web.disable-exporter-metrics", "Exclude the exporter's own go_* and process_* metrics.").Bool()
		maxProcs          = app.Flag("runtime.gomaxprocs", "The target number of CPUs Go will run on (GOMAXPROCS).").Envar("GOMAXPROCS").Default("1").Int()
		webConfig         = kingpinflag.AddFlags(app, defaultAddress)
	)
	switches := collector.RegisterSwitches(app)
	app.Command("serve", "Run the exporter (the default).").Default()
	topologyCmd := app.Command("topology", "Print the GPU and NIC topology matrix as nvidia-smi topo -m does, and exit.")
	logConfig := &promslog.Config{}
	flag.AddFlags(app, logConfig)
	app.Version(version.Print("gpulink_exporter"))
	app.HelpFlag.Short('h')
	command := kingpin.MustParse(app.Parse(os.Args[1:]))

	logger := promslog.New(logConfig)
	fsys := numa.FS{Sys: *sysfsRoot, Proc: *procfsRoot}
	if command == topologyCmd.FullCommand() {
		if err := printTopology(fsys, *nvmlLib, logger); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
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
	var gpuIDs interface{ Identities() []gpu.Identity }
	var reader *gpu.Reader

	if switches.Enabled("nvml") || switches.Enabled("xid") || switches.Enabled("process") {
		reader = gpu.NewReader(nvml.New(nvml.WithLibraryPath(*nvmlLib)), *sysfsRoot, logger)
		defer reader.Shutdown()
		if err := reader.Init(); err != nil {
			// Not fatal: a machine without a driver still serves the rest,
			// and the sampler keeps trying in case the driver loads later.
			logger.Warn("NVML unavailable; the nvml source reports down", "err", err)
		}
		gpuIDs = reader
		if switches.Enabled("nvml") {
			s := sampler.New[*gpu.Snapshot]("nvml", reader, sampler.Options{
				Interval: *nvmlEvery, Timeout: *nvmlTimeout, Logger: logger})
			go s.Run(ctx)
			reg.MustRegister(collector.NewNVMLCollector(s))
			statuses = append(statuses, s)
			versions = append(versions, s)
		}
		if switches.Enabled("xid") {
			w := gpu.NewXIDWatcher(reader, logger)
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
		s := sampler.New[*numa.PlacementSnapshot]("process", &numa.PlacementReader{
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
	if switches.Enabled("nic") {
		s := sampler.New[*numa.NICSnapshot]("nic", &numa.NICReader{FS: fsys}, sampler.Options{
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
		os.Exit(1)
	}
}

// printTopology is the topology command: one NVML sample for the NVLink
// counts (none without a driver), the PCIe tree from sysfs.
func printTopology(fsys numa.FS, nvmlLib string, logger *slog.Logger) error {
	topo, err := fsys.Topology()
	if topo == nil {
		return err
	}
	if err != nil {
		logger.Warn("some topology values could not be read", "err", err)
	}
	var gpus []numa.MatrixGPU
	reader := gpu.NewReader(nvml.New(nvml.WithLibraryPath(nvmlLib)), fsys.Sys, logger)
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

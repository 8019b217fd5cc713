// Command gpulink_exporter exports the health of the links that feed a GPU:
// PCIe, NVLink, NICs and NUMA placement. main only wires the parts
// together: the flags (flags.go, checked by validate.go) and the table of
// sources (sources.go).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/version"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/probes"
)

// selfMetricsInterval is how often the exporter's own go_* and process_*
// metrics are collected, off the scrape path.
const selfMetricsInterval = 5 * time.Second

func main() {
	l := newCLI()
	command := kingpin.MustParse(l.app.Parse(os.Args[1:]))
	logger := promslog.New(&l.cfg.log)
	// Every flag is checked before anything starts: a bad value stops
	// start-up with the flag named.
	if err := l.validate(command, logger); err != nil {
		l.app.Fatalf("%s", err)
	}
	os.Exit(run(l, command, logger))
}

// run runs the command and returns the exit status, so that what it
// defers (the simulated node's tree, NVML and DCGM) is undone first.
func run(l *cli, command string, logger *slog.Logger) int {
	c := l.cfg
	fsys := hostfs.Root{Sys: c.sysfs, Proc: c.procfs}
	newNVML := func() gonvml.Interface { return gonvml.New(gonvml.WithLibraryPath(c.nvmlLib)) }
	// With --sim the three hardware seams are the simulated node's.
	var node *sim.Node
	if c.sim != "" {
		cfg := sim.Config{Profile: c.sim, FaultsFile: c.simFaults, Logger: logger}
		if c.simHostProcesses {
			cfg.HostProcesses = c.procfs
		}
		n, err := sim.Start(cfg)
		if err != nil {
			probes.PrintError(os.Stderr, fmt.Errorf("simulated node: %w", err))
			return 1
		}
		node = n
		defer node.Close()
		fsys, newNVML = node.FS(), node.NVML
		c.cufileConfig = node.CuFileConfig()
	}
	switch command {
	case l.topology.FullCommand():
		if err := printTopology(fsys, c.cufileConfig, newNVML(), logger); err != nil {
			probes.PrintError(os.Stderr, err)
			return 1
		}
		return 0
	case l.probeCmd.FullCommand():
		return runProbe(l.probe, c, fsys, logger)
	case l.collectivesCmd.FullCommand():
		if l.ncclCheck {
			return runNCCLCheck(l.collectives.Library, fsys, node, os.Stdout)
		}
		return runCollectives(l.collectives, c, fsys, logger)
	}

	logger.Info("starting gpulink_exporter", "version", version.Info(), "collectors", c.collectors())
	logger.Info("build context", "build_context", version.BuildContext())
	// An exporter needs little parallelism; more Ps only cost memory and GC
	// work (node_exporter defaults to 1 for the same reason). NVML calls are
	// cgo calls and do not hold a P while they block.
	runtime.GOMAXPROCS(c.maxProcs)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	reg := scrape.NewRegistry()
	reg.MustRegister(versioncollector.NewCollector("gpulink_exporter"))
	if !c.noExporterMetrics {
		// Sampled on their own schedule: the process collector reads
		// /proc at every collect, a millisecond of a scrape.
		for _, self := range []prometheus.Collector{collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
			s := scrape.NewSampled(self, selfMetricsInterval, logger)
			go s.Run(ctx)
			reg.MustRegister(s)
		}
	}
	w := newWiring(ctx, c, logger, reg, fsys, newNVML, node)
	defer w.close()
	if err := w.startSources(); err != nil {
		logger.Error("cannot start", "err", err)
		return 1
	}
	metrics := scrape.NewHandler(reg, w.versions, c.maxRequests, logger)
	go metrics.Run(ctx)
	routes := w.routes
	if c.pprof {
		routes = append(routes, pprofRoutes()...)
	}
	if err := serve(ctx, logger, metrics, routes, c.web, c.metricsPath); err != nil {
		logger.Error("server failed", "err", err)
		return 1
	}
	return 0
}

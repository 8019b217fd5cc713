package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpulink/gpulink_exporter/internal/nodeprobe"
	"github.com/gpulink/gpulink_exporter/probes"
)

// route is a handler a source serves beside the metrics, on the same
// server and so behind the same web config (TLS, basic auth).
type route struct {
	path    string
	handler http.Handler
}

// startNodeProbe serves /probe, and /node-probe/join when this node agreed
// to be joined, over the probe scheduler (the GPUs, and the round lock a
// session shares) and the collective runner.
func startNodeProbe(w *wiring, _ setting) {
	c := w.cfg.nodeProbe
	file := c.file
	if file == nil {
		file = nodeprobe.DefaultFile()
	}
	modules := nodeprobe.NewModules(file)
	var gate nodeprobe.Gate
	if w.sched != nil {
		gate = w.sched
	}
	runner, err := collectiveRunner(w)
	if err != nil {
		w.err = err
		return
	}
	name, err := os.Hostname()
	if err != nil {
		w.logger.Warn("no host name to give node-to-node targets", "err", err)
	}
	n := nodeprobe.New(nodeprobe.Config{Modules: modules, Runner: runner, Gate: gate, GPUs: c.gpus, MinInterval: c.minInterval,
		Name: name, NICRate: w.nicRate(), Token: c.token, WebBasicAuth: c.webBasicAuth, Logger: w.logger})
	if c.token == "" && c.enabled {
		w.logger.Warn("node-to-node probes without --node-probe.token-file: any host that reaches this port may reserve this node's GPUs and run sessions on them")
	}
	w.reg.MustRegister(n)
	w.routes = append(w.routes, route{nodeprobe.ProbePath, n.ProbeHandler()})
	if c.enabled {
		w.routes = append(w.routes, route{nodeprobe.ReservePath, n.ReserveHandler()}, route{nodeprobe.JoinPath, n.JoinHandler()})
	}
	if c.configFile != "" {
		go reloadOnHangup(w.ctx, modules, c.configFile, w.logger)
	}
}

// collectiveRunner runs this node's part of a session: the collectives
// child (`gpulink_exporter collectives`, NCCL over CUDA, the libraries and
// NVLS setting of the flags) on a real node, the simulated node's model of
// its side (its GPUs' rail NICs) under --sim, so two simulated exporters
// probe each other.
func collectiveRunner(w *wiring) (probes.CollectiveRunner, error) {
	if w.sim != nil {
		return w.sim.Runner(), nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary to run the collectives child: %w", err)
	}
	return &probes.ChildRunner{Logger: w.logger, Command: collectivesCommand(exe, w.cfg)}, nil
}

// nicRate is what the NIC nearest a GPU carries, from the latest topology
// and NIC samples; nil without either source.
func (w *wiring) nicRate() func(string) float64 {
	if w.topology == nil || w.nic == nil {
		return nil
	}
	return probes.Expectations{Topology: w.topology.LatestData, NICs: w.nic.LatestData}.NearestNICRate
}

// reloadOnHangup re-reads the modules file on every SIGHUP, as
// blackbox_exporter does; a file that does not load leaves the modules in
// force.
func reloadOnHangup(ctx context.Context, modules *nodeprobe.Modules, path string, logger *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := modules.Reload(path); err != nil {
				logger.Error("node-to-node modules file not reloaded; the modules in force stay", "file", path, "err", err)
				continue
			}
			logger.Info("node-to-node modules file reloaded", "file", path)
		}
	}
}

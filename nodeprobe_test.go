package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/gpulink/gpulink_exporter/internal/nodeprobe"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/probes"
)

// The modules file is read at start: a bad one stops start-up with the
// flag, the module and the field named; a good one is what the node
// serves.
func TestNodeProbeModulesFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	bad := write("bad.yml", "modules:\n  ring:\n    gpus_per_node: 0\n")
	err := check(t, "--node-probe.config.file="+bad)
	if err == nil || !strings.Contains(err.Error(), "--node-probe.config.file="+bad+`: module "ring": gpus_per_node: 0: want 1 to 64`) {
		t.Errorf("bad module: %v", err)
	}
	unknown := write("unknown.yml", "modules:\n  ring:\n    gpus: 2\n")
	if err := check(t, "--node-probe.config.file="+unknown); err == nil || !strings.Contains(err.Error(), "field gpus not found") {
		t.Errorf("unknown field: %v", err)
	}
	good := write("good.yml", "modules:\n  ring:\n    gpus_per_node: 8\n")
	l := newCLI()
	command, err := l.app.Parse([]string{"--node-probe.config.file=" + good})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.validate(command, quiet); err != nil {
		t.Fatal(err)
	}
	if f := l.cfg.nodeProbe.file; f == nil || f.Modules["ring"].GPUsPerNode != 8 {
		t.Errorf("the modules file read at start is not kept: %+v", f)
	}
}

// /probe is served always, /node-probe/join only when the node agreed to
// be joined; the sessions counter is on /metrics.
func TestNodeProbeRoutes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{nodeprobe.ProbePath}},
		{[]string{"--node-probe.enabled"}, []string{nodeprobe.ProbePath, nodeprobe.JoinPath}},
	} {
		l := newCLI()
		command, err := l.app.Parse(append(tc.args, "--sim=dgx-h100"))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.validate(command, quiet); err != nil {
			t.Fatal(err)
		}
		node, err := sim.Start(sim.Config{Profile: l.cfg.sim, Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		w := &wiring{ctx: ctx, cfg: l.cfg, logger: quiet, reg: scrape.NewRegistry(), fsys: node.FS(), newNVML: node.NVML, sim: node}
		if err := w.startSources(); err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, r := range w.routes {
			paths = append(paths, r.path)
		}
		if !slices.Equal(paths, tc.want) {
			t.Errorf("%q: routes %v, want %v", tc.args, paths, tc.want)
		}
		if w.sched == nil || w.nicRate() == nil {
			t.Errorf("%q: the node probe lacks the scheduler or the NIC rates", tc.args)
		}
		mfs, err := w.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == "gpulink_node_probe_sessions_total" }) {
			t.Errorf("%q: no gpulink_node_probe_sessions_total on /metrics", tc.args)
		}
		cancel()
		w.close()
		node.Close()
	}
}

// On a real node the sessions run in the collectives child of this same
// binary, with the exporter's CUDA and NCCL libraries, as the node's own
// collective rounds do.
func TestNodeProbeRunsTheCollectivesChild(t *testing.T) {
	l := newCLI()
	if _, err := l.app.Parse([]string{"--cuda.library=/opt/cuda/libcuda.so.1", "--nccl.library=/opt/nccl/libnccl.so.2"}); err != nil {
		t.Fatal(err)
	}
	r, err := collectiveRunner(&wiring{cfg: l.cfg, logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	child, ok := r.(*probes.ChildRunner)
	if !ok || !slices.Equal(child.Command[1:], []string{"collectives", "--cuda.library=/opt/cuda/libcuda.so.1", "--library=/opt/nccl/libnccl.so.2"}) {
		t.Errorf("runner %#v, want the collectives child", r)
	}
}

// ringPasswordHash is bcrypt("ring-secret"), cost 4.
const ringPasswordHash = "$2a$04$mmiXph5GLp45j0kVikuH/.L8BN0avj8WiTT8pgRHs40os.POn3D3."

// serve puts the routes behind the web config as it puts /metrics: with
// basic auth on, /probe and /node-probe/join refuse a caller without the
// password and reach their handlers with it.
func TestServeCoversNodeProbe(t *testing.T) {
	dir := t.TempDir()
	webConfig := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(webConfig, []byte("basic_auth_users:\n  prober: "+ringPasswordHash+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	n := nodeprobe.New(nodeprobe.Config{})
	routes := []route{{nodeprobe.ProbePath, n.ProbeHandler()}, {nodeprobe.JoinPath, n.JoinHandler()}}
	ctx, cancel := context.WithCancel(context.Background())
	none := false
	errc := make(chan error, 1)
	go func() {
		errc <- serve(ctx, quiet, http.NotFoundHandler(), routes,
			&web.FlagConfig{WebListenAddresses: &[]string{addr}, WebSystemdSocket: &none, WebConfigFile: &webConfig}, "/metrics")
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	call := func(method, path, password string) int {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if password != "" {
			req.SetBasicAuth("prober", password)
		}
		var resp *http.Response
		for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
			resp, err = http.DefaultClient.Do(req)
			var op *net.OpError
			if err == nil || !errors.As(err, &op) || time.Since(start) > 10*time.Second {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		method, path, password string
		want                   int
	}{
		{http.MethodPost, nodeprobe.JoinPath, "", http.StatusUnauthorized},
		{http.MethodPost, nodeprobe.JoinPath, "guess", http.StatusUnauthorized},
		{http.MethodGet, nodeprobe.ProbePath, "", http.StatusUnauthorized},
		{http.MethodPost, nodeprobe.JoinPath, "ring-secret", http.StatusBadRequest}, // the handler read "{}"
		{http.MethodGet, nodeprobe.ProbePath, "ring-secret", http.StatusBadRequest}, // no target
	} {
		if got := call(tc.method, tc.path, tc.password); got != tc.want {
			t.Errorf("%s %s (password %q): %d, want %d", tc.method, tc.path, tc.password, got, tc.want)
		}
	}
}

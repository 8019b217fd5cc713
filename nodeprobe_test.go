package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/gpulink/gpulink_exporter/internal/nodeprobe"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/probes"
)

// tempWriter writes files into a directory of the test's: write(name,
// body) returns the file's path.
func tempWriter(t *testing.T) func(name, body string) string {
	dir := t.TempDir()
	return func(name, body string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
}

// The modules file is read at start: a bad one stops start-up with the
// flag, the module and the field named; a good one is what the node
// serves.
func TestNodeProbeModulesFile(t *testing.T) {
	write := tempWriter(t)
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
		{[]string{"--node-probe.enabled"}, []string{nodeprobe.ProbePath, nodeprobe.ReservePath, nodeprobe.JoinPath}},
	} {
		w, _ := wireSim(t, append(tc.args, "--sim=dgx-h100")...)
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
	}
}

// simExporter is one simulated exporter as main wires it, its routes on a
// loopback server, and its fault file.
type simExporter struct {
	token  string // sent to /probe as Prometheus' authorization sends it
	node   *sim.Node
	faults string
	srv    *httptest.Server
}

func startSimExporter(t *testing.T, profile string, args ...string) *simExporter {
	t.Helper()
	faults := filepath.Join(t.TempDir(), "faults.yml")
	w, _ := wireSim(t, append([]string{"--sim=" + profile, "--sim.faults=" + faults}, args...)...)
	mux := http.NewServeMux()
	for _, r := range w.routes {
		mux.Handle(r.path, r.handler)
	}
	e := &simExporter{node: w.sim, faults: faults, srv: httptest.NewServer(mux)}
	t.Cleanup(e.srv.Close) // before wireSim's: cleanups run last first
	return e
}

// probe asks the exporter to probe target as Prometheus does, and parses
// the answer.
func (e *simExporter) probe(t *testing.T, target *simExporter) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+nodeprobe.ProbePath+"?target="+strings.TrimPrefix(target.srv.URL, "http://"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/probe: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// gauge is the value of name's series with labels (name, value pairs),
// and whether there is one.
func gauge(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	for _, m := range mfs[name].GetMetric() {
		match := len(m.GetLabel())*2 == len(labels)
		for i, l := range m.GetLabel() {
			match = match && l.GetName() == labels[2*i] && l.GetValue() == labels[2*i+1]
		}
		if match {
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// Two simulated exporters probe each other through the real wiring: the
// simulated node's runner on both sides, each modelling its own GPU's
// rail NIC (a 400 Gb/s ConnectX-7, 50 GB/s, of which NCCL's network
// transport gets 0.8). A port of either node's rail NIC down fails the
// session, on that node's side.
func TestNodeProbeBetweenSimulatedNodes(t *testing.T) {
	// --probe.policy=always: the profile's GPU 0 runs a job, and the
	// session takes the first GPU the policy allows.
	args := []string{"--probe.policy=always", "--node-probe.enabled", "--node-probe.min-interval=0"}
	prober, target := startSimExporter(t, "dgx-h100", args...), startSimExporter(t, "dgx-h100", args...)

	// The first answers may come before the first NVML, topology and NIC
	// samples: declined, or without what the path should carry.
	var mfs map[string]*dto.MetricFamily
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		mfs = prober.probe(t, target)
		ok, _ := gauge(mfs, "probe_success")
		_, expected := gauge(mfs, "gpulink_node_probe_expected_bus_bandwidth_bytes_per_second", "collective", "send_recv", "gpu", "0")
		if ok == 1 && expected {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("no successful probe with its expectation within 20s; the last: %v", mfs)
		}
	}
	for _, c := range []struct{ collective, gpu string }{{"send_recv", "0"}, {"all_reduce", "all"}} {
		bw, _ := gauge(mfs, "gpulink_node_probe_bus_bandwidth_bytes_per_second", "collective", c.collective, "gpu", c.gpu)
		want, _ := gauge(mfs, "gpulink_node_probe_expected_bus_bandwidth_bytes_per_second", "collective", c.collective, "gpu", c.gpu)
		ratio, _ := gauge(mfs, "gpulink_node_probe_bus_bandwidth_ratio", "collective", c.collective, "gpu", c.gpu)
		if bw < 39e9 || bw > 41e9 || want != 50e9 || ratio < 0.78 || ratio > 0.82 {
			t.Errorf("%s gpu=%s: %.4g B/s, expected %.4g, ratio %.3g; want about 40e9 of 50e9", c.collective, c.gpu, bw, want, ratio)
		}
	}
	if lat, _ := gauge(mfs, "gpulink_node_probe_latency_seconds", "collective", "send_recv", "gpu", "0"); lat <= 0 || lat > 100e-6 {
		t.Errorf("send_recv latency %g s", lat)
	}
	// Ring and send/recv, both nodes' ranks: 4 channels each way, over
	// InfiniBand with GPUDirect RDMA.
	if n, _ := gauge(mfs, "gpulink_node_probe_channels", "gdr", "1", "network", "IB", "plugin", "IB", "transport", "net"); n != 8 || len(mfs["gpulink_node_probe_channels"].GetMetric()) != 1 {
		t.Errorf("channels %v, want 8 over IB with GPUDirect RDMA only", mfs["gpulink_node_probe_channels"])
	}

	// The prober's GPU 0 sends through mlx5_0: down, nothing goes.
	if err := os.WriteFile(prober.faults, []byte("faults:\n- {kind: nic_down, device: mlx5_0}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The node reads its fault file and writes its tree on its tick.
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		mfs = prober.probe(t, target)
		if ok, _ := gauge(mfs, "probe_success"); ok == 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("probe_success still 1 10s after the prober's rail port went down")
		}
	}
	if v, _ := gauge(mfs, "gpulink_node_probe_failure_info", "reason", nodeprobe.ReasonNCCLError, "side", nodeprobe.SideProber); v != 1 {
		t.Errorf("failure %v, want nccl_error on the prober's side", mfs["gpulink_node_probe_failure_info"])
	}
	if _, ok := gauge(mfs, "gpulink_node_probe_bus_bandwidth_bytes_per_second", "collective", "send_recv", "gpu", "0"); ok {
		t.Error("a send_recv bandwidth from a GPU whose NIC is down")
	}
	// The other way round the failed port is on the target: its side of
	// the session fails, and so does the session, on the target's side.
	mfs = target.probe(t, prober)
	if v, _ := gauge(mfs, "gpulink_node_probe_failure_info", "reason", nodeprobe.ReasonNCCLError, "side", nodeprobe.SideTarget); v != 1 {
		t.Errorf("probe of the node whose port is down: failure %v, want nccl_error on the target's side", mfs["gpulink_node_probe_failure_info"])
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
// basic auth on, /probe, /node-probe/join and --web.enable-pprof's
// profiles refuse a caller without the password and reach their handlers
// with it.
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
	routes := append([]route{{nodeprobe.ProbePath, n.ProbeHandler()}, {nodeprobe.ReservePath, n.ReserveHandler()},
		{nodeprobe.JoinPath, n.JoinHandler()}}, pprofRoutes()...)
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
		{http.MethodPost, nodeprobe.ReservePath, "", http.StatusUnauthorized},
		{http.MethodPost, nodeprobe.ReservePath, "ring-secret", http.StatusBadRequest},
		{http.MethodGet, nodeprobe.ProbePath, "ring-secret", http.StatusBadRequest}, // no target
		{http.MethodGet, "/debug/pprof/cmdline", "", http.StatusUnauthorized},
		{http.MethodGet, "/debug/pprof/cmdline", "ring-secret", http.StatusOK},
	} {
		if got := call(tc.method, tc.path, tc.password); got != tc.want {
			t.Errorf("%s %s (password %q): %d, want %d", tc.method, tc.path, tc.password, got, tc.want)
		}
	}
}

// --node-probe.token-file is read at start: a file that cannot be read or
// holds no usable token stops start-up naming the flag; a good one is the
// node's token, and a web config with basic-auth users lets /probe take
// those instead.
func TestNodeProbeTokenFile(t *testing.T) {
	write := tempWriter(t)
	short := write("short", "secret\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-probe.token-file=/nonexistent/token"}, "--node-probe.token-file=/nonexistent/token: open"},
		{[]string{"--node-probe.token-file=" + short}, "--node-probe.token-file=" + short + ": the token is 6 characters: want at least 32"},
	} {
		if err := check(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
	token := write("token", "  "+ringToken+"\n")
	webConfig := write("web.yml", "basic_auth_users:\n  prober: "+ringPasswordHash+"\n")
	l := newCLI()
	command, err := l.app.Parse([]string{"--node-probe.token-file=" + token, "--web.config.file=" + webConfig})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.validate(command, quiet); err != nil {
		t.Fatal(err)
	}
	if np := l.cfg.nodeProbe; np.token != ringToken || !np.webBasicAuth {
		t.Errorf("token %q, web basic auth %v; want the file's token and true", np.token, np.webBasicAuth)
	}
}

// ringToken is the token of the tests' rings.
const ringToken = "0123456789abcdef0123456789abcdef"

// Two simulated exporters with the ring's token probe each other through
// the real wiring; a third without it is refused by the target, which
// counts it, and says unauthorized.
func TestNodeProbeTokenBetweenSimulatedNodes(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(ringToken), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--probe.policy=always", "--node-probe.enabled", "--node-probe.min-interval=0"}
	ring := append([]string{"--node-probe.token-file=" + tokenFile}, args...)
	prober, target := startSimExporter(t, "dgx-h100", ring...), startSimExporter(t, "dgx-h100", ring...)
	prober.token = ringToken
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		mfs := prober.probe(t, target)
		if ok, _ := gauge(mfs, "probe_success"); ok == 1 {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("no successful probe with the token within 20s; the last: %v", mfs)
		}
	}
	stranger := startSimExporter(t, "dgx-h100", args...)
	mfs := stranger.probe(t, target)
	if v, _ := gauge(mfs, "gpulink_node_probe_failure_info", "reason", nodeprobe.ReasonUnauthorized, "side", nodeprobe.SideTarget); v != 1 {
		t.Errorf("a prober without the token: failure %v, want unauthorized on the target's side", mfs["gpulink_node_probe_failure_info"])
	}
	resp, err := http.Get(target.srv.URL + nodeprobe.ProbePath + "?target=" + strings.TrimPrefix(prober.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/probe without the token: %s, want 401", resp.Status)
	}
}

package nodeprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// testNode is one exporter's node-to-node side on loopback: its Node
// behind a real HTTP server, with a fake runner and gate.
type testNode struct {
	node   *Node
	runner *fakeRunner
	gate   *fakeGate
	clock  *virtualClock // the node's now and sleep, its rand a fixed 0.5
	srv    *httptest.Server
	mux    *http.ServeMux
	log    syncBuffer // the node's log
}

// syncBuffer is a log both HTTP servers' goroutines may write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// sessionGPUs are a node's GPUs in PCI address order; NVML's indices are
// not that order, so the gpu label shows which index a series took.
var sessionGPUs = []schedule.SessionGPU{{Index: 2, PCIBusID: "0000:18:00.0"}, {Index: 0, PCIBusID: "0000:2a:00.0"}}

// newTestNode serves a node's /probe, and /node-probe/join when join is
// set; its NICs carry nic bytes per second; edit adjusts its config.
func newTestNode(t *testing.T, fab *fabric, name string, nic float64, join bool, edit func(*Config)) *testNode {
	t.Helper()
	tn := &testNode{
		runner: &fakeRunner{fab: fab, busBW: 40e9, latency: 25e-6, transport: probes.TransportNet},
		gate:   &fakeGate{gpus: sessionGPUs},
	}
	cfg := Config{Runner: tn.runner, Gate: tn.gate, Name: name, NICRate: func(string) float64 { return nic },
		Logger: slog.New(slog.NewTextHandler(&tn.log, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if edit != nil {
		edit(&cfg)
	}
	tn.node = New(cfg)
	tn.clock = &virtualClock{}
	tn.node.now, tn.node.sleep, tn.node.rand = tn.clock.now, tn.clock.sleep, func() float64 { return 0.5 }
	tn.mux = http.NewServeMux()
	tn.mux.Handle(ProbePath, tn.node.ProbeHandler())
	if join {
		tn.mux.Handle(ReservePath, tn.node.ReserveHandler())
		tn.mux.Handle(JoinPath, tn.node.JoinHandler())
	}
	tn.srv = httptest.NewServer(tn.mux)
	t.Cleanup(tn.srv.Close)
	return tn
}

// hostport is the node's address as Prometheus would give it as a target.
func (tn *testNode) hostport() string { return strings.TrimPrefix(tn.srv.URL, "http://") }

// probe calls the node's /probe as Prometheus does, with its scrape
// timeout header when timeout is set.
func (tn *testNode) probe(t *testing.T, params url.Values, timeout string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, tn.srv.URL+ProbePath+"?"+params.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if timeout != "" {
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", timeout)
	}
	if tok := tn.node.cfg.Token; tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok) // as Prometheus' authorization sends it
	}
	defer tn.node.giving.Wait() // a give-back runs on after the answer
	return do(t, req)
}

// do sends req and returns the answer's status and body.
func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func target(hostport string) url.Values { return url.Values{"target": {hostport}} }

// scrape is a /probe answer parsed.
type scrape map[string]*dto.MetricFamily

func parse(t *testing.T, body string) scrape {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("not the text format: %v\n%s", err, body)
	}
	return mfs
}

// value is the series of name with exactly labels; ok false when absent.
func (s scrape) value(name string, labels ...string) (float64, bool) {
	mf := s[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel())*2 != len(labels) {
			continue
		}
		match := true
		for i, l := range m.GetLabel() {
			if l.GetName() != labels[2*i] || l.GetValue() != labels[2*i+1] {
				match = false
			}
		}
		if match {
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// labelsOf is a series' labels by name.
func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// failed checks a probe that did not succeed, for reason, and on side
// when one is given.
func (s scrape) failed(t *testing.T, reason string, side ...string) {
	t.Helper()
	if v, _ := s.value("probe_success"); v != 0 {
		t.Errorf("probe_success %g, want 0", v)
	}
	var got []string
	found := false
	for _, m := range s["gpulink_node_probe_failure_info"].GetMetric() {
		labels := labelsOf(m)
		got = append(got, labels["reason"]+" on "+labels["side"])
		if labels["reason"] == reason && (len(side) == 0 || labels["side"] == side[0]) && m.GetGauge().GetValue() == 1 {
			found = true
		}
	}
	if !found || len(got) != 1 {
		t.Errorf("failure %v, want %s on %v", got, reason, side)
	}
	if _, ok := s.value("probe_duration_seconds"); !ok {
		t.Error("no probe_duration_seconds")
	}
}

func sessions(n *Node, role, result string) float64 {
	return testutil.ToFloat64(n.sessions.WithLabelValues(role, result))
}

func declines(n *Node, role, reason string) float64 {
	return testutil.ToFloat64(n.declines.WithLabelValues(role, reason))
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// Two exporters on loopback: the prober's /probe makes the id, the
// target joins with it, and the answer has send/recv per GPU and the
// all-reduce over both nodes beside the slower NIC.
func TestProbeSuccess(t *testing.T) {
	for _, k := range []int{1, 2} {
		fab := newFabric()
		m := DefaultModule()
		m.GPUsPerNode = k
		mods := NewModules(&File{Modules: map[string]Module{"ring": m}})
		a := newTestNode(t, fab, "node-a", 50e9, true, func(c *Config) { c.Modules = mods })
		b := newTestNode(t, fab, "node-b", 25e9, true, func(c *Config) { c.Modules = mods })
		params := target(b.hostport())
		params.Set("module", "ring")
		status, body := a.probe(t, params, "")
		if status != http.StatusOK {
			t.Fatalf("k=%d: status %d: %s", k, status, body)
		}
		s := parse(t, body)
		if v, _ := s.value("probe_success"); v != 1 {
			t.Fatalf("k=%d: probe_success %g:\n%s", k, v, body)
		}
		if _, ok := s["gpulink_node_probe_failure_info"]; ok {
			t.Errorf("k=%d: a failure reason on success", k)
		}
		// Modelled: 25 µs plus the bytes over 40 GB/s; the bus factor of
		// all-reduce over 2k ranks is 2(2k-1)/2k.
		size := float64(256 << 20)
		wantSR := size / (25e-6 + size/40e9)
		arFactor := probes.BusFactor(probes.AllReduce, 2*k)
		wantAR := size * arFactor / (25e-6 + size*arFactor/40e9)
		for i := range k {
			gpu := []string{"2", "0"}[i] // NVML's index of the GPU in rank order
			bw, ok := s.value("gpulink_node_probe_bus_bandwidth_bytes_per_second", "collective", "send_recv", "gpu", gpu)
			if !ok || !near(bw, wantSR) {
				t.Errorf("k=%d: send_recv gpu %s: %g, want %g", k, gpu, bw, wantSR)
			}
			if exp, _ := s.value("gpulink_node_probe_expected_bus_bandwidth_bytes_per_second", "collective", "send_recv", "gpu", gpu); exp != 25e9 {
				t.Errorf("k=%d: send_recv gpu %s: expected %g, want the slower NIC's 25e9", k, gpu, exp)
			}
			if r, _ := s.value("gpulink_node_probe_bus_bandwidth_ratio", "collective", "send_recv", "gpu", gpu); !near(r, wantSR/25e9) {
				t.Errorf("k=%d: send_recv gpu %s: ratio %g", k, gpu, r)
			}
			lat, _ := s.value("gpulink_node_probe_latency_seconds", "collective", "send_recv", "gpu", gpu)
			if !near(lat, 25e-6+float64(8<<10)/40e9) {
				t.Errorf("k=%d: send_recv gpu %s: latency %g", k, gpu, lat)
			}
		}
		if bw, _ := s.value("gpulink_node_probe_bus_bandwidth_bytes_per_second", "collective", "all_reduce", "gpu", "all"); !near(bw, wantAR) {
			t.Errorf("k=%d: all_reduce: %g, want %g", k, bw, wantAR)
		}
		if _, ok := s.value("gpulink_node_probe_latency_seconds", "collective", "all_reduce", "gpu", "all"); !ok {
			t.Errorf("k=%d: no all_reduce latency", k)
		}
		// Two channels from each rank to its counterpart, both ways.
		if ch, _ := s.value("gpulink_node_probe_channels", "gdr", "1", "network", "IB", "plugin", "IB", "transport", "net"); ch != float64(4*k) {
			t.Errorf("k=%d: net channels %g, want %d", k, ch, 4*k)
		}

		// The target ran the other half of the same communicator.
		pa, _ := a.runner.calls()
		pb, _ := b.runner.calls()
		if len(pa) != 1 || len(pb) != 1 {
			t.Fatalf("k=%d: runs %d and %d, want one each", k, len(pa), len(pb))
		}
		if pa[0].UniqueID != "" || pa[0].FirstRank != 0 || pa[0].Ranks != 2*k || len(pa[0].GPUs) != k || pa[0].Peer != b.hostport() {
			t.Errorf("k=%d: prober's options %+v", k, pa[0])
		}
		if pb[0].UniqueID == "" || pb[0].FirstRank != k || pb[0].Ranks != 2*k || len(pb[0].GPUs) != k || pb[0].Peer != "node-a" {
			t.Errorf("k=%d: target's options %+v", k, pb[0])
		}
		if pb[0].SizeBytes != 256<<20 || pb[0].SmallBytes != 8<<10 || pb[0].Iterations != 20 {
			t.Errorf("k=%d: the target did not get the module's options: %+v", k, pb[0])
		}
		if sessions(a.node, RoleProber, ResultSuccess) != 1 || sessions(b.node, RoleTarget, ResultSuccess) != 1 {
			t.Errorf("k=%d: sessions not counted as successes", k)
		}
		if a.gate.isHeld() || b.gate.isHeld() {
			t.Errorf("k=%d: a gate is still held after the session", k)
		}
	}
}

// A probe that succeeded logs every result of both sides with its
// samples' spread (at debug), which /probe's median does not show.
func TestProbeLogsTheSpread(t *testing.T) {
	fab := newFabric()
	a := newTestNode(t, fab, "node-a", 50e9, true, nil)
	b := newTestNode(t, fab, "node-b", 50e9, true, nil)
	a.runner.spread, b.runner.spread = 0.1, 0.2
	if status, body := a.probe(t, target(b.hostport()), ""); status != http.StatusOK || !strings.Contains(body, "probe_success 1") {
		t.Fatalf("status %d:\n%s", status, body)
	}
	// 256 MiB over 40 GB/s plus 25 µs: 6.74 ms (6.06-7.41 at 10%, 5.39-8.08
	// at 20%); 8 KiB: 25.2 µs. In run order, all-reduce first.
	var line string
	for _, l := range strings.Split(a.log.String(), "\n") {
		if strings.Contains(l, "node-to-node probe succeeded") {
			line = l
		}
	}
	for _, want := range []string{
		`results="prober: all_reduce 256MiB 6.74ms [6.06ms-7.41ms], all_reduce 8KiB 25.2µs [22.7µs-27.7µs], send_recv 0->1 256MiB 6.74ms [6.06ms-7.41ms], send_recv 0->1 8KiB 25.2µs [22.7µs-27.7µs]; `,
		`; target: all_reduce 256MiB 6.74ms [5.39ms-8.08ms], all_reduce 8KiB 25.2µs [20.2µs-30.2µs], send_recv 0->1 256MiB 6.74ms [5.39ms-8.08ms], send_recv 0->1 8KiB 25.2µs [20.2µs-30.2µs]"`,
	} {
		if !strings.Contains(line, want) {
			t.Errorf("the success line lacks %q:\n%s", want, line)
		}
	}
}

// Each node times its own side of an operation; the answer has the
// slower side's, whichever node that is: a target whose NIC is slow slows
// what it receives as much as a slow prober slows what it sends.
func TestProbeReportsTheSlowerSide(t *testing.T) {
	size := float64(256 << 20)
	at := func(bw float64) float64 { return size / (25e-6 + size/bw) } // both collectives over 2 ranks: bus factor 1
	for _, tc := range []struct {
		name           string
		prober, target float64 // each side's modelled bus bandwidth
	}{
		{"target slower", 40e9, 10e9},
		{"prober slower", 10e9, 40e9},
		{"both alike", 40e9, 40e9},
	} {
		fab := newFabric()
		a := newTestNode(t, fab, "node-a", 50e9, true, nil)
		b := newTestNode(t, fab, "node-b", 50e9, true, nil)
		a.runner.busBW, b.runner.busBW = tc.prober, tc.target
		status, body := a.probe(t, target(b.hostport()), "")
		s := parse(t, body)
		if v, _ := s.value("probe_success"); status != http.StatusOK || v != 1 {
			t.Fatalf("%s: status %d:\n%s", tc.name, status, body)
		}
		want := at(min(tc.prober, tc.target))
		for _, c := range []struct{ collective, gpu string }{{"send_recv", "2"}, {"all_reduce", "all"}} {
			if bw, _ := s.value("gpulink_node_probe_bus_bandwidth_bytes_per_second", "collective", c.collective, "gpu", c.gpu); !near(bw, want) {
				t.Errorf("%s: %s %g, want the slower side's %g", tc.name, c.collective, bw, want)
			}
		}
	}
}

// Without NIC rates on one side the expected value and ratio are absent,
// the bandwidth not.
func TestProbeExpectedNeedsBothNodes(t *testing.T) {
	fab := newFabric()
	a := newTestNode(t, fab, "a", 50e9, true, nil)
	b := newTestNode(t, fab, "b", 0, true, nil)
	_, body := a.probe(t, target(b.hostport()), "")
	s := parse(t, body)
	if v, _ := s.value("probe_success"); v != 1 {
		t.Fatalf("probe failed:\n%s", body)
	}
	if _, ok := s["gpulink_node_probe_expected_bus_bandwidth_bytes_per_second"]; ok {
		t.Error("expected bandwidth with one node's NIC unknown")
	}
	if _, ok := s["gpulink_node_probe_bus_bandwidth_ratio"]; ok {
		t.Error("ratio with one node's NIC unknown")
	}
	if _, ok := s.value("gpulink_node_probe_bus_bandwidth_bytes_per_second", "collective", "send_recv", "gpu", "2"); !ok {
		t.Error("no bandwidth")
	}
}

// A target that declines: its reason reaches the prober's answer, and the
// prober, which asked the target to reserve itself first, starts no
// child. (A target in another session is tried again: retry_test.go.)
func TestProbeTargetDeclines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(b *testNode)
		reason string
		status int // the target's answer
	}{
		{"busy GPU", func(b *testNode) { b.gate.refuse(schedule.SkipBusyProcess) }, ReasonBusy, http.StatusConflict},
		{"probe round running", func(b *testNode) { b.gate.refuse(schedule.SessionRoundRunning) }, ReasonBusy, http.StatusConflict},
		{"MIG", func(b *testNode) { b.gate.refuse(schedule.SkipMIG) }, ReasonUnavailable, http.StatusServiceUnavailable},
		{"no runner", func(b *testNode) { b.node.cfg.Runner = nil }, ReasonUnavailable, http.StatusServiceUnavailable},
	} {
		for _, solo := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/solo=%v", tc.name, solo), func(t *testing.T) {
				fab := newFabric()
				a := newTestNode(t, fab, "a", 50e9, true, nil)
				// solo: the prober's side measures without the target, as
				// the simulated node's does; what it measured alone is no
				// result of the session.
				a.runner.solo = solo
				b := newTestNode(t, fab, "b", 50e9, true, nil)
				tc.setup(b)
				_, body := a.probe(t, target(b.hostport()), "")
				parse(t, body).failed(t, tc.reason)
				if strings.Contains(body, "gpulink_node_probe_bus_bandwidth_bytes_per_second") {
					t.Errorf("a declined probe has bandwidth series:\n%s", body)
				}
				if runs, _ := a.runner.calls(); len(runs) != 0 {
					t.Errorf("prober's child: %d runs; want none, the reservation declined", len(runs))
				}
				if runs, _ := b.runner.calls(); len(runs) != 0 {
					t.Errorf("the declining target ran %d children", len(runs))
				}
				if sessions(a.node, RoleProber, ResultDeclined) != 1 || sessions(b.node, RoleTarget, ResultDeclined) != 1 {
					t.Error("the decline is not counted on both nodes")
				}
				if declines(a.node, RoleProber, tc.reason) != 1 || declines(b.node, RoleTarget, tc.reason) != 1 {
					t.Error("the decline is not counted by its reason on both nodes")
				}
				// The target's own answer, as the prober got it.
				status, d := postJoin(t, b, validJoin())
				if status != tc.status || d.Reason != tc.reason {
					t.Errorf("target answered %d %+v, want %d %s", status, d, tc.status, tc.reason)
				}
			})
		}
	}
}

// The prober's own node declines before asking anyone.
func TestProbeProberDeclines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(a *testNode)
		reason string
	}{
		{"busy utilisation", func(a *testNode) { a.gate.refuse(schedule.SkipBusyUtilization) }, ReasonBusy},
		{"in a session", func(a *testNode) { a.node.session.Lock() }, ReasonSession},
		{"too few GPUs", func(a *testNode) { a.gate.refuse(schedule.SessionTooFewGPUs) }, ReasonUnavailable},
		{"probes off", func(a *testNode) { a.node.cfg.Gate = nil }, ReasonUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fab := newFabric()
			a := newTestNode(t, fab, "a", 50e9, true, nil)
			b := newTestNode(t, fab, "b", 50e9, true, nil)
			tc.setup(a)
			_, body := a.probe(t, target(b.hostport()), "")
			parse(t, body).failed(t, tc.reason)
			if runs, _ := a.runner.calls(); len(runs) != 0 {
				t.Error("the prober started a child while declining")
			}
			if runs, _ := b.runner.calls(); len(runs) != 0 || sessions(b.node, RoleTarget, ResultDeclined) != 0 {
				t.Error("the target was asked")
			}
		})
	}
}

// One session per --node-probe.min-interval in each role: the prober's
// second call inside it is declined locally; a second prober asking the
// same target inside it gets the target's 429.
func TestProbeRateLimited(t *testing.T) {
	fab := newFabric()
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
	}
	limited := func(c *Config) { c.MinInterval = time.Minute }
	a := newTestNode(t, fab, "a", 50e9, true, limited)
	b := newTestNode(t, fab, "b", 50e9, true, limited)
	c := newTestNode(t, fab, "c", 50e9, true, limited)
	for _, n := range []*testNode{a, b, c} {
		n.node.now = clock
	}
	success := func(s scrape) bool { v, _ := s.value("probe_success"); return v == 1 }

	if s := parse(t, second(a.probe(t, target(b.hostport()), ""))); !success(s) {
		t.Fatal("first probe failed")
	}
	advance(30 * time.Second)
	parse(t, second(a.probe(t, target(c.hostport()), ""))).failed(t, ReasonRateLimited)
	// b was a target 30s ago, never a prober: it may probe.
	if s := parse(t, second(b.probe(t, target(c.hostport()), ""))); !success(s) {
		t.Error("the limit of one role held back the other")
	}
	// c was just a target: another prober asking it inside the minute
	// gets its 429.
	d := newTestNode(t, fab, "d", 50e9, true, limited)
	d.node.now = clock
	parse(t, second(d.probe(t, target(c.hostport()), ""))).failed(t, ReasonRateLimited)
	if sessions(c.node, RoleTarget, ResultDeclined) != 1 {
		t.Error("the target's decline is not counted")
	}
	// d's probe was declined before any session ran: it spent none of
	// d's own limit (issue 34), so its next probe inside the minute runs.
	e := newTestNode(t, fab, "e", 50e9, true, limited)
	e.node.now = clock
	if s := parse(t, second(d.probe(t, target(e.hostport()), ""))); !success(s) {
		t.Error("a probe the target declined spent the prober's limit")
	}
	status, dec := postJoin(t, c, validJoin())
	if status != http.StatusTooManyRequests || dec.Reason != ReasonRateLimited {
		t.Errorf("target answered %d %+v, want 429 %s", status, dec, ReasonRateLimited)
	}
	advance(time.Minute)
	if s := parse(t, second(a.probe(t, target(c.hostport()), ""))); !success(s) {
		t.Error("still limited after the interval")
	}
}

func second(_ int, body string) string { return body }

// Bad parameters are HTTP errors with blackbox_exporter's texts, and no
// session.
func TestProbeBadParameters(t *testing.T) {
	a := newTestNode(t, newFabric(), "a", 50e9, true, nil)
	for _, tc := range []struct {
		params url.Values
		header string
		status int
		text   string
	}{
		{url.Values{}, "", http.StatusBadRequest, "Target parameter is missing"},
		{url.Values{"target": {"b:9849"}, "module": {"nope"}}, "", http.StatusBadRequest, `Unknown module "nope"`},
		{url.Values{"target": {"b"}}, "", http.StatusBadRequest, `Invalid target "b": want host:port`},
		{url.Values{"target": {":9849"}}, "", http.StatusBadRequest, "no host"},
		{url.Values{"target": {"b:99999"}}, "", http.StatusBadRequest, "want 1 to 65535"},
		{url.Values{"target": {"ftp://b:21"}}, "", http.StatusBadRequest, `scheme "ftp"`},
		{url.Values{"target": {"http://b:9849/metrics"}}, "", http.StatusBadRequest, "host and port only"},
		{url.Values{"target": {"b:9849"}}, "soon", http.StatusInternalServerError, "Failed to parse timeout from Prometheus header"},
	} {
		status, body := a.probe(t, tc.params, tc.header)
		if status != tc.status || !strings.Contains(body, tc.text) {
			t.Errorf("%v (header %q): %d %q, want %d %q", tc.params, tc.header, status, body, tc.status, tc.text)
		}
	}
	if runs, _ := a.runner.calls(); len(runs) != 0 {
		t.Errorf("%d sessions started on bad parameters", len(runs))
	}
	for _, result := range []string{ResultSuccess, ResultFailed, ResultDeclined} {
		if sessions(a.node, RoleProber, result) != 0 {
			t.Errorf("bad parameters counted as %s", result)
		}
	}
}

// A target that takes the join and never answers: the module's timeout
// ends the probe, the prober's child is cancelled, and the answer says
// timeout well before Prometheus would give up.
func TestProbeTargetNeverAnswers(t *testing.T) {
	fab := newFabric()
	m := DefaultModule()
	m.Timeout = model.Duration(300 * time.Millisecond)
	a := newTestNode(t, fab, "a", 50e9, true, func(c *Config) {
		c.Modules = NewModules(&File{Modules: map[string]Module{DefaultModuleName: m}})
	})
	// It reads the request, so that the server notices the prober
	// hanging up, and then waits for that (or the test's end).
	stop := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(stop) })
	start := time.Now()
	_, body := a.probe(t, target(strings.TrimPrefix(hung.URL, "http://")), "10")
	took := time.Since(start)
	s := parse(t, body)
	s.failed(t, ReasonTimeout)
	if took > 5*time.Second {
		t.Errorf("the probe took %s with a 300ms module timeout", took)
	}
	if d, _ := s.value("probe_duration_seconds"); d < 0.3 || d > 5 {
		t.Errorf("probe_duration_seconds %g", d)
	}
	// The reservation never came back: no child started.
	if runs, _ := a.runner.calls(); len(runs) != 0 {
		t.Errorf("prober's child: %d runs; want none", len(runs))
	}
	if sessions(a.node, RoleProber, ResultFailed) != 1 {
		t.Error("the timeout is not counted as a failed session")
	}
	if a.gate.isHeld() {
		t.Error("the prober's GPUs are still held")
	}
}

// Prometheus' scrape timeout, less half a second, bounds the session
// where it is shorter than the module's.
func TestProbeTimeout(t *testing.T) {
	m := DefaultModule() // 30s
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"", 30 * time.Second},
		{"10", 9500 * time.Millisecond},
		{"60", 30 * time.Second},
		{"0.2", 30 * time.Second}, // less than the offset: the module's
	} {
		r := httptest.NewRequest(http.MethodGet, "/probe", nil)
		if tc.header != "" {
			r.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", tc.header)
		}
		got, err := probeTimeout(r, m)
		if err != nil || got != tc.want {
			t.Errorf("header %q: %s %v, want %s", tc.header, got, err, tc.want)
		}
	}
}

// Failures of the children and of the target's answer.
func TestProbeFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noJoin bool // the target serves no join endpoint of its own
		setup  func(a, b *testNode)
		reason string
		detail string
	}{
		{"no NCCL on the prober", false, func(a, _ *testNode) {
			a.runner.failOpen = errors.New("loading NCCL: libnccl.so.2: cannot open shared object file")
		}, ReasonNCCLError, "libnccl.so.2"},
		{"no NCCL on the target", false, func(_, b *testNode) {
			b.runner.failOpen = errors.New("loading NCCL: libnccl.so.2: cannot open shared object file")
		}, ReasonNCCLError, "target: loading NCCL"},
		{"all-reduce fails on the prober", false, func(a, _ *testNode) { a.runner.failOn = probes.AllReduce }, ReasonNCCLError, "all_reduce at 256MiB"},
		{"join not enabled", true, func(_, b *testNode) {}, ReasonDisabled, "404"},
		{"not an exporter", true, func(_, b *testNode) {
			b.mux.HandleFunc(JoinPath, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })
		}, ReasonBadResponse, "the target's answer: invalid character"},
		{"a round of another session", true, func(_, b *testNode) {
			b.mux.HandleFunc(JoinPath, func(w http.ResponseWriter, _ *http.Request) {
				writeJSON(w, http.StatusOK, JoinResponse{Round: &probes.CollectiveRound{Version: probes.CollectiveContractVersion,
					Ranks: 4, FirstRank: 2, GPUs: []string{"a", "b"}}, NICBytesPerSecond: []float64{1, 1}})
			})
		}, ReasonBadResponse, "want version 1, ranks 2 from 1 on 1 GPUs"},
		{"NIC rates of other GPUs", true, func(_, b *testNode) {
			b.mux.HandleFunc(JoinPath, func(w http.ResponseWriter, _ *http.Request) {
				writeJSON(w, http.StatusOK, JoinResponse{Round: &probes.CollectiveRound{Version: probes.CollectiveContractVersion,
					Ranks: 2, FirstRank: 1, GPUs: []string{"a"}}, NICBytesPerSecond: []float64{1, 1}})
			})
		}, ReasonBadResponse, "2 NIC rates for 1 GPUs"},
		{"a 500 without a reason", true, func(_, b *testNode) {
			b.mux.HandleFunc(JoinPath, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "oops", http.StatusInternalServerError) })
		}, ReasonBadResponse, "500"},
		{"unreachable", false, func(_, b *testNode) { b.srv.Close() }, ReasonUnreachable, "connect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fab := newFabric()
			a := newTestNode(t, fab, "a", 50e9, true, nil)
			b := newTestNode(t, fab, "b", 50e9, !tc.noJoin, nil)
			if tc.noJoin && tc.reason != ReasonDisabled {
				fakeReservations(b.mux)
			}
			tc.setup(a, b)
			status, body := a.probe(t, target(b.hostport()), "")
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
			parse(t, body).failed(t, tc.reason)
			if sessions(a.node, RoleProber, ResultSuccess) != 0 {
				t.Error("counted as a success")
			}
			if a.gate.isHeld() || b.gate.isHeld() {
				t.Error("a gate is still held after the session")
			}
			out := a.log.String()
			if !strings.Contains(out, tc.detail) {
				t.Errorf("detail %q lacks %q", out, tc.detail)
			}
		})
	}
}

// validJoin is a join request a target takes.
func validJoin() JoinRequest {
	return JoinRequest{Version: JoinVersion, ID: strings.Repeat("ab", 128), Ranks: 2, FirstRank: 1, Module: "nccl_ring",
		Options: sessionOptions(DefaultModule(), 2*time.Second), Prober: "a"}
}

func postJoin(t *testing.T, tn *testNode, req JoinRequest) (int, Decline) {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	status, body := postRaw(t, tn, string(b))
	var d Decline
	if status != http.StatusOK {
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatalf("a %d answer that is not a decline: %q", status, body)
		}
	}
	return status, d
}

func postRaw(t *testing.T, tn *testNode, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tn.srv.URL+JoinPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return do(t, req)
}

// The join endpoint reads its body strictly and says what is wrong.
func TestJoinRefusesBadRequests(t *testing.T) {
	b := newTestNode(t, newFabric(), "b", 50e9, true, nil)
	mutate := func(f func(*JoinRequest)) string {
		r := validJoin()
		f(&r)
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	for _, tc := range []struct {
		body, want string
	}{
		{"", "EOF"},
		{"{", "unexpected EOF"},
		{`{"version":1,"surprise":true}`, `unknown field \"surprise\"`},
		{mutate(func(r *JoinRequest) {}) + " {}", "more than one JSON value"},
		{mutate(func(r *JoinRequest) { r.Version = JoinVersion + 1 }), fmt.Sprintf("version %d", JoinVersion+1)},
		{mutate(func(r *JoinRequest) { r.ID = "" }), "id: --unique-id"},
		{mutate(func(r *JoinRequest) { r.ID = "zz" }), "NCCL unique id: 2 characters"},
		{mutate(func(r *JoinRequest) { r.ID = strings.Repeat("zz", 128) }), "is not a hex digit"},
		{mutate(func(r *JoinRequest) { r.Ranks = 3 }), "ranks 3, first_rank 1"},
		{mutate(func(r *JoinRequest) { r.FirstRank = 0 }), "want ranks 2, first_rank 1"},
		{mutate(func(r *JoinRequest) { r.Options.SizeBytes = 8 << 30 }), "size: 8GiB"},
		{mutate(func(r *JoinRequest) { r.Options.Collectives = []probes.Collective{"broadcast"} }), "collectives: broadcast"},
		{mutate(func(r *JoinRequest) { r.Options.TimeoutSeconds = 0 }), "timeout_seconds 0"},
		{mutate(func(r *JoinRequest) { r.Options.TimeoutSeconds = 3600 }), "timeout: 1h"},
		{strings.Repeat(" ", maxJoinBytes+1) + "{}", "too large"},
	} {
		status, body := postRaw(t, b, tc.body)
		if status != http.StatusBadRequest || !strings.Contains(body, tc.want) || !strings.Contains(body, ReasonBadRequest) {
			t.Errorf("%.60q: %d %s, want 400 with %q", tc.body, status, body, tc.want)
		}
	}
	resp, err := http.Get(b.srv.URL + JoinPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodPost {
		t.Errorf("GET: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if runs, _ := b.runner.calls(); len(runs) != 0 {
		t.Errorf("%d children started on bad requests", len(runs))
	}
}

// A joining target whose child hangs is ended by the prober's deadline
// it was sent, and says timeout.
func TestJoinChildHangs(t *testing.T) {
	fab := newFabric()
	b := newTestNode(t, fab, "b", 50e9, true, nil)
	b.runner.block = true
	id, _ := fab.open()
	r := validJoin()
	r.ID = id
	r.Options.TimeoutSeconds = 0.2
	start := time.Now()
	status, body := postRaw(t, b, string(must(json.Marshal(r))))
	if time.Since(start) > 5*time.Second {
		t.Errorf("the join took %s with 0.2s left", time.Since(start))
	}
	var resp JoinResponse
	if status != http.StatusOK || json.Unmarshal([]byte(body), &resp) != nil || resp.Round == nil {
		t.Fatalf("%d %s", status, body)
	}
	round := resp.Round
	if len(resp.NICBytesPerSecond) != 1 || resp.NICBytesPerSecond[0] != 50e9 {
		t.Errorf("NIC rates %v, want the one GPU's 50e9", resp.NICBytesPerSecond)
	}
	if !strings.Contains(round.Error, "deadline") {
		t.Errorf("round error %q, want the deadline named", round.Error)
	}
	if sessions(b.node, RoleTarget, ResultFailed) != 1 {
		t.Error("the hung session is not counted as failed")
	}
	if len(round.Results) == 0 || !strings.Contains(round.Results[0].Error, "aborted") {
		t.Errorf("results %+v, want the aborted operation", round.Results)
	}
	if _, cancelled := b.runner.calls(); cancelled != 1 {
		t.Error("the target's child was not ended by the deadline")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The sessions counter starts every series at zero, and a /probe answer
// passes promtool (PROMTOOL, as make test sets it).
func TestMetricsLint(t *testing.T) {
	fab := newFabric()
	a := newTestNode(t, fab, "a", 50e9, true, nil)
	b := newTestNode(t, fab, "b", 50e9, true, nil)
	// Sessions: 2 roles x 3 results; declines: 2 roles x 5 reasons;
	// reservations; their ends: 4 ways.
	if n := testutil.CollectAndCount(a.node); n != 6+10+1+4 {
		t.Errorf("%d series, want 21", n)
	}
	if problems, err := testutil.CollectAndLint(a.node); err != nil || len(problems) > 0 {
		t.Errorf("sessions counter: %v %v", problems, err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(ProbeFamilies())
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
		t.Errorf("ProbeFamilies gathered %d families, %v; want only descriptions", len(mfs), err)
	}
	_, ok := a.probe(t, target(b.hostport()), "")
	_, failed := a.probe(t, url.Values{"target": {"127.0.0.1:1"}}, "")
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		t.Skip("PROMTOOL not set (make test sets it)")
	}
	for name, body := range map[string]string{"success": ok, "failure": failed} {
		cmd := exec.CommandContext(context.Background(), promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("%s: promtool check metrics: %v\n%s\n%s", name, err, out.String(), body)
		}
	}
}

// A module whose http_client cannot be built (its CA file gone since it
// was loaded) fails the probe as bad_module before any try: it takes no
// session lock, reaches no target and counts nothing toward the rate
// limit, so the next probe fails the same way, not declined_rate_limited.
func TestProbeBadModuleTakesNoSession(t *testing.T) {
	fab := newFabric()
	b := newTestNode(t, fab, "b", 50e9, true, nil)
	m := DefaultModule()
	m.HTTPClient.TLSConfig.CAFile = filepath.Join(t.TempDir(), "gone.pem")
	a := newTestNode(t, fab, "a", 50e9, true, func(c *Config) {
		c.MinInterval = time.Hour
		c.Modules = NewModules(&File{Modules: map[string]Module{DefaultModuleName: m}})
	})
	for i := range 2 {
		parse(t, second(a.probe(t, target(b.hostport()), ""))).failed(t, ReasonBadModule, SideProber)
		if got := sessions(a.node, RoleProber, ResultFailed); got != float64(i+1) {
			t.Errorf("probe %d: failed sessions %g, want %d", i+1, got, i+1)
		}
	}
	if runs, _ := b.runner.calls(); len(runs) != 0 || b.gate.isHeld() {
		t.Errorf("the target ran %d children (held: %v) for a prober that cannot reach it", len(runs), b.gate.isHeld())
	}
	if runs, _ := a.runner.calls(); len(runs) != 0 {
		t.Errorf("the prober ran %d children", len(runs))
	}
}

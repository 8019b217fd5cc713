package nodeprobe

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/probes"
)

// A failure on either side of a session fails it for both, and the
// prober's answer says whose it was (issue 24, item 4).

// The target's child fails an operation the prober's did not: the
// session fails, on the target's side, in the prober's answer, its log
// and the target's own count.
func TestTargetChildFailureFailsSession(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(a, b *testNode)
		side   string
		detail string
	}{
		{"a collective fails on the target", func(_, b *testNode) { b.runner.failOn = probes.AllReduce }, SideTarget,
			"target: all_reduce at 256MiB: ncclAllReduce"},
		{"the target's child cannot start", func(_, b *testNode) { b.runner.failOpen = errFakeNoNCCL }, SideTarget, "target: loading NCCL"},
		// The target answers first (the prober's child stays a while after
		// its round): both rounds are judged, and both failed.
		{"a collective fails on both", func(a, b *testNode) {
			a.runner.failOn, b.runner.failOn, a.runner.linger = probes.AllReduce, probes.AllReduce, 200*time.Millisecond
		}, SideBoth, "this node: all_reduce at 256MiB: ncclAllReduce"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fab := newFabric()
			a := newTestNode(t, fab, "a", 50e9, true, nil)
			b := newTestNode(t, fab, "b", 50e9, true, nil)
			tc.setup(a, b)
			_, body := a.probe(t, target(b.hostport()), "")
			parse(t, body).failed(t, ReasonNCCLError, tc.side)
			log := a.log.String()
			if !strings.Contains(log, "side="+tc.side) || !strings.Contains(log, tc.detail) {
				t.Errorf("the prober's log does not say side=%s and %q:\n%s", tc.side, tc.detail, log)
			}
			if sessions(b.node, RoleTarget, ResultFailed) != 1 || sessions(b.node, RoleTarget, ResultSuccess) != 0 {
				t.Errorf("the target counted its session: %g failed, %g succeeded; want it failed",
					sessions(b.node, RoleTarget, ResultFailed), sessions(b.node, RoleTarget, ResultSuccess))
			}
			if sessions(a.node, RoleProber, ResultFailed) != 1 {
				t.Error("the prober did not count the session failed")
			}
		})
	}
}

// The prober's child fails an operation while the target's round is
// still to answer: the prober ends the join, and the target counts the
// session failed too, not a success.
func TestProberChildFailureFailsTargetToo(t *testing.T) {
	fab := newFabric()
	a := newTestNode(t, fab, "a", 50e9, true, nil)
	a.runner.failOn = probes.AllReduce
	b := newTestNode(t, fab, "b", 50e9, true, nil)
	b.runner.linger = 5 * time.Second
	start := time.Now()
	_, body := a.probe(t, target(b.hostport()), "")
	parse(t, body).failed(t, ReasonNCCLError, SideProber)
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("the probe waited %s for the target after its own child failed", took)
	}
	waitFor(t, "the target to count the session", func() bool {
		return sessions(b.node, RoleTarget, ResultFailed)+sessions(b.node, RoleTarget, ResultSuccess) > 0
	})
	if sessions(b.node, RoleTarget, ResultFailed) != 1 {
		t.Errorf("the target counted %g failed, %g succeeded; want the session failed on both",
			sessions(b.node, RoleTarget, ResultFailed), sessions(b.node, RoleTarget, ResultSuccess))
	}
}

// Two GPUs a node: what is measured is what is reported. Send/recv runs
// from each of the prober's GPUs to its counterpart on the target (ranks
// 0->2, 1->3) and nothing else on either node, and each of those pairs is
// in the answer.
func TestTwoGPUsANodeMeasuresWhatItReports(t *testing.T) {
	fab := newFabric()
	m := DefaultModule()
	m.GPUsPerNode = 2
	mods := func(c *Config) { c.Modules = NewModules(&File{Modules: map[string]Module{DefaultModuleName: m}}) }
	a := newTestNode(t, fab, "a", 50e9, true, mods)
	b := newTestNode(t, fab, "b", 50e9, true, mods)
	_, body := a.probe(t, target(b.hostport()), "")
	s := parse(t, body)
	if v, _ := s.value("probe_success"); v != 1 {
		t.Fatalf("probe failed:\n%s\n%s", body, a.log.String())
	}
	want := []string{"0->2/268435456", "1->3/268435456", "0->2/8192", "1->3/8192"}
	for _, n := range []*testNode{a, b} {
		n.runner.mu.Lock()
		got := slices.Clone(n.runner.sendRecvs)
		n.runner.mu.Unlock()
		if !slices.Equal(got, want) {
			t.Errorf("%s measured send/recv %v, want only the reported pairs %v", n.node.cfg.Name, got, want)
		}
	}
	var reported []string
	for _, mt := range s["gpulink_node_probe_bus_bandwidth_bytes_per_second"].GetMetric() {
		labels := labelsOf(mt)
		if labels["collective"] == string(probes.SendRecv) {
			reported = append(reported, labels["gpu"])
		}
	}
	slices.Sort(reported)
	if !slices.Equal(reported, []string{"0", "2"}) {
		t.Errorf("send_recv reported for GPUs %v, want the prober's two (NVML 2 and 0)", reported)
	}
}

var errFakeNoNCCL = errors.New("loading NCCL: libnccl.so.2: cannot open shared object file")

package nodeprobe

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// probeAsync calls a node's /probe from another goroutine; its body, or
// the error, comes back on the channel.
func (tn *testNode) probeAsync(params url.Values) <-chan string {
	out := make(chan string, 1)
	go func() {
		resp, err := http.Get(tn.srv.URL + ProbePath + "?" + params.Encode())
		if err != nil {
			out <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			out <- "error: " + err.Error()
			return
		}
		out <- string(b)
	}()
	return out
}

// Nodes in a ring whose probes fall at the same moment: each holds its
// session lock while asking the next to join, and every first try is
// declined_session. Each lets go, waits a jittered while (the real
// sleep, each node's own draw) and tries again, and every probe
// succeeds.
func TestProbeCollidingRing(t *testing.T) {
	for _, size := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d nodes", size), func(t *testing.T) {
			fab := newFabric()
			// Prometheus' offsets put the scrapes at one moment: every
			// prober takes its session lock before any asks its target,
			// and none lets go before every one has its answer.
			started, answered := meeting(size), meeting(size)
			ring := make([]*testNode, size)
			for i := range ring {
				tn := newTestNode(t, fab, fmt.Sprintf("node-%d", i), 50e9, true, nil)
				tn.node.locked, tn.node.unlocking = started(), answered()
				draw := (float64(i) + 0.5) / float64(size) // 0.25, 0.75; 0.17, 0.5, 0.83
				tn.node.now, tn.node.sleep, tn.node.rand = time.Now, schedule.SleepUnlessDone, func() float64 { return draw }
				ring[i] = tn
			}
			answers := make([]<-chan string, size)
			for i, tn := range ring {
				answers[i] = tn.probeAsync(target(ring[(i+1)%size].hostport()))
			}
			for i, tn := range ring {
				body := <-answers[i]
				s := parse(t, body)
				if v, _ := s.value("probe_success"); v != 1 {
					t.Errorf("node-%d: probe_success %g:\n%s\nlog:\n%s", i, v, body, tn.log.String())
					continue
				}
				// The barrier made the first try collide: it took more.
				if n, _ := s.value("gpulink_node_probe_attempts"); n < 2 {
					t.Errorf("node-%d: %g attempts, want at least 2 after the first collided", i, n)
				}
			}
			for i, tn := range ring {
				if got := sessions(tn.node, RoleProber, ResultSuccess); got != 1 {
					t.Errorf("node-%d: %g successes as prober, want 1 (the probe counted once)", i, got)
				}
				if got := sessions(tn.node, RoleProber, ResultDeclined); got != 0 {
					t.Errorf("node-%d: %g declines as prober, want none: the retries are one probe", i, got)
				}
				if got := sessions(tn.node, RoleTarget, ResultSuccess); got != 1 {
					t.Errorf("node-%d: %g successes as target, want 1", i, got)
				}
				if got := sessions(tn.node, RoleTarget, ResultDeclined); got < 1 {
					t.Errorf("node-%d: %g declines as target, want the first try's at least", i, got)
				}
				if tn.gate.isHeld() {
					t.Errorf("node-%d: its GPUs are still held", i)
				}
				// A declined try started no child: the target was
				// reserved first.
				runs, _ := tn.runner.calls()
				if children := len(slices.DeleteFunc(runs, func(o probes.CollectiveOptions) bool { return o.UniqueID != "" })); children != 1 {
					t.Errorf("node-%d: its probe started %d children, want 1 (the try that was not declined)", i, children)
				}
			}
		})
	}
}

// A target that stays in its session past the probe's budget: the prober
// tries while half the budget is left (no session of the module on record
// yet), waiting three quarters of each doubling ceiling at a draw of 0.5,
// the last wait cut to what is left; then it gives up with
// declined_session, saying how many tries, before the deadline.
func TestProbeTargetStaysInSession(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		header string // Prometheus' scrape timeout
		budget time.Duration
		waits  []time.Duration // all but the last, cut one
		last   time.Duration   // at most
	}{
		// The module's 30s: 15s of tries.
		{"", 30 * time.Second, []time.Duration{75 * ms, 150 * ms, 300 * ms, 600 * ms, 1200 * ms, 2400 * ms, 3750 * ms, 3750 * ms}, 2775 * ms},
		// A 12s scrape timeout less 0.5s: 5.75s of tries.
		{"12", 11500 * ms, []time.Duration{75 * ms, 150 * ms, 300 * ms, 600 * ms, 1200 * ms, 2400 * ms}, 1025 * ms},
	} {
		t.Run("budget "+tc.budget.String(), func(t *testing.T) {
			fab := newFabric()
			a := newTestNode(t, fab, "a", 50e9, true, nil)
			b := newTestNode(t, fab, "b", 50e9, true, nil)
			b.node.session.Lock()
			start := time.Now()
			_, body := a.probe(t, target(b.hostport()), tc.header)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the probe took %s of real time: the waits are the virtual clock's", took)
			}
			s := parse(t, body)
			s.failed(t, ReasonSession)
			tries := len(tc.waits) + 2
			if n, _ := s.value("gpulink_node_probe_attempts"); n != float64(tries) {
				t.Errorf("attempts %g, want %d", n, tries)
			}
			waits := a.clock.waits()
			if len(waits) != tries-1 {
				t.Fatalf("waits %v, want %d", waits, tries-1)
			}
			var slept time.Duration
			for i, w := range waits {
				slept += w
				if i < len(tc.waits) && w != tc.waits[i] {
					t.Errorf("wait %d: %s, want %s", i+1, w, tc.waits[i])
				}
			}
			// The last try started with half the budget left, and the
			// probe ended inside it.
			if last := waits[len(waits)-1]; last > tc.last || last < tc.last-time.Second {
				t.Errorf("last wait %s, want what was left of the tries' half, about %s", last, tc.last)
			}
			if slept > tc.budget/2 {
				t.Errorf("slept %s: past the last moment a session fits, %s", slept, tc.budget/2)
			}
			if d, _ := s.value("probe_duration_seconds"); d < slept.Seconds() || d >= tc.budget.Seconds() {
				t.Errorf("probe_duration_seconds %g, want from %g to under the budget %g", d, slept.Seconds(), tc.budget.Seconds())
			}
			want := fmt.Sprintf("(%d tries; too little of the probe's %s left for another session)", tries, tc.budget)
			if log := a.log.String(); !strings.Contains(log, want) || !strings.Contains(log, "target: this node is already in") {
				t.Errorf("log lacks the target's detail and %q:\n%s", want, log)
			}
			// Each try asked the target to reserve itself and was
			// declined before the prober started a child.
			if got := sessions(b.node, RoleTarget, ResultDeclined); got != float64(tries) {
				t.Errorf("target declined %g reservations, want %d", got, tries)
			}
			if runs, _ := a.runner.calls(); len(runs) != 0 {
				t.Errorf("prober started %d children for a target that declined every try, want none", len(runs))
			}
			if runs, _ := b.runner.calls(); len(runs) != 0 {
				t.Errorf("the target in a session ran %d children", len(runs))
			}
			if sessions(a.node, RoleProber, ResultDeclined) != 1 {
				t.Error("the probe is not counted once as declined")
			}
			if a.gate.isHeld() {
				t.Error("the prober's GPUs are still held")
			}
			status, d := postJoin(t, b, validJoin())
			if status != http.StatusConflict || d.Reason != ReasonSession {
				t.Errorf("target answered %d %+v, want 409 %s", status, d, ReasonSession)
			}
		})
	}
}

// A session that comes free while the prober waits is taken: the
// prober's own (it was a target) and the target's. A try the target
// declined does not count toward the prober's --node-probe.min-interval.
func TestProbeSessionComesFree(t *testing.T) {
	for _, tc := range []struct {
		name string
		busy func(a, b *testNode) *testNode // locks a node's session, returns it
	}{
		{"prober's own", func(a, _ *testNode) *testNode { return a }},
		{"target's", func(_, b *testNode) *testNode { return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fab := newFabric()
			limited := func(c *Config) { c.MinInterval = time.Minute }
			a := newTestNode(t, fab, "a", 50e9, true, limited)
			b := newTestNode(t, fab, "b", 50e9, true, nil)
			busy := tc.busy(a, b)
			busy.node.session.Lock()
			a.clock.onSleep = func(n int) {
				if n == 3 {
					busy.node.session.Unlock()
				}
			}
			_, body := a.probe(t, target(b.hostport()), "")
			s := parse(t, body)
			if v, _ := s.value("probe_success"); v != 1 {
				t.Fatalf("probe_success %g:\n%s\nlog:\n%s", v, body, a.log.String())
			}
			if n, _ := s.value("gpulink_node_probe_attempts"); n != 4 {
				t.Errorf("attempts %g, want 4: three waits, the session free after the third", n)
			}
			if sessions(a.node, RoleProber, ResultSuccess) != 1 || sessions(b.node, RoleTarget, ResultSuccess) != 1 {
				t.Error("the session is not counted as a success on both nodes")
			}
			// The success is on record: the next probe's tries need twice
			// its length, not half the budget.
			if need := a.node.sessionLength(DefaultModuleName, time.Hour); need <= 0 || need >= time.Hour/2 {
				t.Errorf("the module's session length is taken as %s after a success", need)
			}
		})
	}
}

// Only declined_session is tried again: a busy, rate limited, unable,
// disabled, unauthorised or unreachable node fails the probe at once.
func TestProbeOtherDeclinesNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noJoin bool
		setup  func(a, b *testNode)
		reason string
	}{
		{"target busy", false, func(_, b *testNode) { b.gate.refuse(schedule.SkipBusyProcess) }, ReasonBusy},
		{"target rate limited", false, func(_, b *testNode) {
			b.node.cfg.MinInterval = time.Hour
			b.node.last[RoleTarget] = b.node.now()
		}, ReasonRateLimited},
		{"target unavailable", false, func(_, b *testNode) { b.gate.refuse(schedule.SkipMIG) }, ReasonUnavailable},
		{"target disabled", true, func(_, _ *testNode) {}, ReasonDisabled},
		{"unauthorized", true, func(_, b *testNode) {
			b.mux.HandleFunc(ReservePath, func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
			})
		}, ReasonUnauthorized},
		{"unreachable", false, func(_, b *testNode) { b.srv.Close() }, ReasonUnreachable},
		{"prober busy", false, func(a, _ *testNode) { a.gate.refuse(schedule.SessionRoundRunning) }, ReasonBusy},
		{"prober rate limited", false, func(a, _ *testNode) {
			a.node.cfg.MinInterval = time.Hour
			a.node.last[RoleProber] = a.node.now()
		}, ReasonRateLimited},
		{"prober unavailable", false, func(a, _ *testNode) { a.node.cfg.Runner = nil }, ReasonUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fab := newFabric()
			a := newTestNode(t, fab, "a", 50e9, true, nil)
			b := newTestNode(t, fab, "b", 50e9, !tc.noJoin, nil)
			tc.setup(a, b)
			_, body := a.probe(t, target(b.hostport()), "")
			s := parse(t, body)
			s.failed(t, tc.reason)
			if n, _ := s.value("gpulink_node_probe_attempts"); n != 1 {
				t.Errorf("attempts %g, want 1", n)
			}
			if w := a.clock.waits(); len(w) != 0 {
				t.Errorf("the prober waited %v to try again", w)
			}
			if runs, _ := a.runner.calls(); len(runs) > 1 {
				t.Errorf("the prober started %d children", len(runs))
			}
		})
	}
}

// The wait before each try: three quarters of a ceiling doubling from
// retryFirstWait to retryMaxWait at a draw of 0.5, from half to all of it
// as the draw goes from 0 to 1, cut to what is left once a session is
// set aside; none when no session fits. A session is taken as half the
// budget until one is on record, then as sessionMargin times the last.
func TestRetryWait(t *testing.T) {
	n := New(Config{})
	now := time.Unix(1_700_000_000, 0)
	n.now = func() time.Time { return now }
	draw := 0.5
	n.rand = func() float64 { return draw }
	budget := 30 * time.Second
	end := now.Add(budget)
	ms := time.Millisecond
	for _, tc := range []struct {
		tries int
		draw  float64
		want  time.Duration
	}{
		{1, 0.5, 75 * ms}, {2, 0.5, 150 * ms}, {3, 0.5, 300 * ms}, {7, 0.5, 3750 * ms}, {8, 0.5, 3750 * ms},
		{1_000, 0.5, 3750 * ms}, // no overflow of the doubling
		{1, 0, 50 * ms}, {1, 0.98, 99 * ms}, {7, 0, 2500 * ms},
	} {
		draw = tc.draw
		got, ok := n.retryWait("m", tc.tries, budget, end)
		if !ok || got.Round(ms) != tc.want {
			t.Errorf("try %d, draw %g: %s %v, want %s", tc.tries, tc.draw, got, ok, tc.want)
		}
	}
	draw = 0.5
	// 15.1s left, 15s set aside for a session: the wait is cut to 100ms.
	if got, ok := n.retryWait("m", 7, budget, now.Add(15100*ms)); !ok || got != 100*ms {
		t.Errorf("with 100ms to spare: %s %v", got, ok)
	}
	if got, ok := n.retryWait("m", 1, budget, now.Add(15*time.Second)); ok {
		t.Errorf("with no time to spare: %s %v, want no try", got, ok)
	}
	// A session of the module on record: twice it is set aside.
	n.tookSession("m", 2*time.Second)
	if got := n.sessionLength("m", budget); got != 4*time.Second {
		t.Errorf("session length %s after one of 2s, want 4s", got)
	}
	if got, ok := n.retryWait("m", 7, budget, now.Add(5*time.Second)); !ok || got != time.Second {
		t.Errorf("5s left and a 2s session on record: %s %v, want a 1s wait", got, ok)
	}
	if got := n.sessionLength("other", budget); got != budget/2 {
		t.Errorf("another module's session length %s, want half the budget", got)
	}
}

// The module's timeout bounds the tries when it is the shorter budget.
func TestProbeRetryModuleTimeout(t *testing.T) {
	m := DefaultModule()
	m.Timeout = model.Duration(time.Second)
	fab := newFabric()
	a := newTestNode(t, fab, "a", 50e9, true, func(c *Config) {
		c.Modules = NewModules(&File{Modules: map[string]Module{DefaultModuleName: m}})
	})
	b := newTestNode(t, fab, "b", 50e9, true, nil)
	b.node.session.Lock()
	_, body := a.probe(t, target(b.hostport()), "60")
	s := parse(t, body)
	s.failed(t, ReasonSession)
	var slept time.Duration
	for _, w := range a.clock.waits() {
		slept += w
	}
	// 500ms of tries: waits of 75, 150 and 275 or a little less.
	if n, _ := s.value("gpulink_node_probe_attempts"); n != 4 || slept > 500*time.Millisecond {
		t.Errorf("%g attempts, %s slept; want 4 within half the module's 1s", n, slept)
	}
}

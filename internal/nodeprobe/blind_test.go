package nodeprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gpulink/gpulink_exporter/probes"
)

// The ways an attacker on the cluster network, or a buggy peer, could
// blind node-to-node monitoring (issue 34), each replayed with fake
// targets and probers on loopback.

// ringToken is the shared token of the tests' rings.
const ringToken = "0123456789abcdef0123456789abcdef"

func withToken(c *Config) { c.Token = ringToken }

// 1. The target's min-interval was spent by anyone: a reservation given
// back at once started it, so one client took the slot every interval,
// and the decline told it how many seconds were left. Now only a session
// that ran spends a node's interval, and a decline names no time.
func TestGiveBackSpendsNoInterval(t *testing.T) {
	fab := newFabric()
	b := newTestNode(t, fab, "b", 50e9, true, func(c *Config) { c.MinInterval = time.Minute })
	a := newTestNode(t, fab, "a", 50e9, true, nil)
	for i := range 3 {
		token := reserveOn(t, b, 10*time.Second)
		if status, body := reserveCall(t, b, http.MethodDelete, "?token="+token, ""); status != http.StatusNoContent {
			t.Fatalf("give-back %d: %d %q", i+1, status, body)
		}
	}
	_, body := a.probe(t, target(b.hostport()), "")
	if v, _ := parse(t, body).value("probe_success"); v != 1 {
		t.Fatalf("a probe after three reservations given back unused: probe_success %g\n%s", v, body)
	}
	// The session that ran does spend it; the decline says so without
	// saying for how long.
	status, d := reserveFrom(t, b, "127.0.0.2", 10*time.Second)
	if status != http.StatusTooManyRequests || d.Reason != ReasonRateLimited {
		t.Fatalf("a reservation inside the interval of a session that ran: %d %+v, want 429 declined_rate_limited", status, d)
	}
	if strings.ContainsAny(d.Detail, "0123456789") {
		t.Errorf("the decline tells the caller the time: %q", d.Detail)
	}
}

// 2. Rotating the source address held the target: each address reserved
// and never joined, and per-host lockout cannot tell one attacker from
// many. Now a node with a token refuses every request without it before
// it takes any lock, and counts it.
func TestUnauthenticatedRequestsTouchNothing(t *testing.T) {
	fab := newFabric()
	b := newTestNode(t, fab, "b", 50e9, true, func(c *Config) { withToken(c); c.MinInterval = time.Minute })
	a := newTestNode(t, fab, "a", 50e9, true, withToken)
	for i := range 6 {
		status, d := reserveFrom(t, b, fmt.Sprintf("127.0.0.%d", i+2), 10*time.Second)
		if status != http.StatusUnauthorized || d.Reason != ReasonUnauthorized {
			t.Errorf("a reservation without the token from 127.0.0.%d: %d %+v, want 401 unauthorized", i+2, status, d)
		}
		if b.gate.isHeld() {
			t.Fatal("a reservation without the token holds the target's GPUs")
		}
	}
	// A wrong token, on the join and on /probe.
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+JoinPath, strings.NewReader("{}"))
	req.Header.Set(TokenHeader, "not-the-token")
	if status, _ := do(t, req); status != http.StatusUnauthorized {
		t.Errorf("a join with a wrong token: %d, want 401", status)
	}
	req, _ = http.NewRequest(http.MethodGet, b.srv.URL+ProbePath+"?target="+a.hostport(), nil)
	if status, _ := do(t, req); status != http.StatusUnauthorized {
		t.Errorf("/probe without the token: %d, want 401", status)
	}
	if runs, _ := b.runner.calls(); len(runs) != 0 {
		t.Errorf("unauthenticated requests started %d children", len(runs))
	}
	for _, tc := range []struct {
		path, reason string
		want         float64
	}{{ReservePath, AuthMissing, 6}, {JoinPath, AuthWrong, 1}, {ProbePath, AuthMissing, 1}} {
		if got := metric(t, b.node, "gpulink_node_probe_unauthenticated_requests_total", "path", tc.path, "reason", tc.reason); got != tc.want {
			t.Errorf("unauthenticated %s (%s) counted %g, want %g", tc.path, tc.reason, got, tc.want)
		}
	}
	if got := metric(t, b.node, "gpulink_node_probe_declines_total", "role", RoleTarget, "reason", ReasonRateLimited); got != 0 {
		t.Errorf("unauthenticated requests counted %g rate-limited declines", got)
	}
	// The ring's own probe, with the token, runs.
	_, body := a.probe(t, target(b.hostport()), "")
	if v, _ := parse(t, body).value("probe_success"); v != 1 {
		t.Fatalf("the ring's probe after six strangers: probe_success %g\n%s\n%s", v, body, b.log.String())
	}
	// A ring member without the token is refused, and says so.
	c := newTestNode(t, fab, "c", 50e9, true, nil)
	b.clock.sleep(context.Background(), time.Minute)
	_, body = c.probe(t, target(b.hostport()), "")
	parse(t, body).failed(t, ReasonUnauthorized, SideTarget)
}

// 3. The prober's own limit was spent by one request a minute: /probe of
// a dead target counted toward its min-interval before any target had
// reserved, and targets Go cannot parse answered 200 unreachable and
// counted too. Now only a session that ran spends it, and a target that
// is not host:port is a 400.
func TestDeadTargetSpendsNoProberInterval(t *testing.T) {
	fab := newFabric()
	a := newTestNode(t, fab, "a", 50e9, true, func(c *Config) { c.MinInterval = time.Minute })
	b := newTestNode(t, fab, "b", 50e9, true, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	_, body := a.probe(t, target(dead), "")
	parse(t, body).failed(t, ReasonUnreachable)
	for _, bad := range []string{"bad host:9849", "exa%zzmple:9849", "b\x00:9849"} {
		status, body := a.probe(t, target(bad), "")
		if status != http.StatusBadRequest || !strings.Contains(body, "Invalid target") {
			t.Errorf("target %q: %d %q, want 400 Invalid target", bad, status, body)
		}
	}
	_, body = a.probe(t, target(b.hostport()), "")
	if v, _ := parse(t, body).value("probe_success"); v != 1 {
		t.Fatalf("a probe after one of a dead target: probe_success %g\n%s", v, body)
	}
	if got := sessions(a.node, RoleProber, ResultFailed); got != 1 {
		t.Errorf("failed probes counted %g, want 1 (the dead target; bad targets are not probes)", got)
	}
}

// 4. An innocent prober was locked out: a client that hung up between
// reserve and join skipped the give-back, the reservation expired, and
// the target declined the prober's host for a minute and more; a slow
// prober (CUDA and NCCL initialisation) was locked out the same way. Now
// a cancelled probe still gives back, within a bound of its own, and a
// join that comes late for its reservation is no expiry.
func TestInnocentProberNotLockedOut(t *testing.T) {
	t.Run("client hangs up", func(t *testing.T) {
		fab := newFabric()
		a := newTestNode(t, fab, "a", 50e9, true, nil)
		b := newTestNode(t, fab, "b", 50e9, true, nil)
		a.runner.delay = 2 * time.Second // the child takes its time to make the id
		ctx, cancel := context.WithCancel(context.Background())
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.srv.URL+ProbePath+"?"+target(b.hostport()).Encode(), nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		waitFor(t, "the reservation", b.gate.isHeld)
		cancel() // Prometheus gives up: the probe's context ends
		<-answered
		waitFor(t, "the reservation to be given back", func() bool {
			return metric(t, b.node, "gpulink_node_probe_reservations_ended_total", "how", EndGivenBack) == 1
		})
		if got := metric(t, b.node, "gpulink_node_probe_reservations_ended_total", "how", EndExpired); got != 0 {
			t.Errorf("expiries %g, want 0", got)
		}
		a.runner.delay = 0
		_, body := a.probe(t, target(b.hostport()), "")
		if v, _ := parse(t, body).value("probe_success"); v != 1 {
			t.Errorf("the prober's next probe: probe_success %g\n%s\n%s", v, body, b.log.String())
		}
	})
	t.Run("slow prober", func(t *testing.T) {
		fab := newFabric()
		a := newTestNode(t, fab, "a", 50e9, true, nil)
		b := newTestNode(t, fab, "b", 50e9, true, nil)
		setReserveHold(b.node, 100*time.Millisecond)
		a.runner.delay = 400 * time.Millisecond // past the hold
		for i := range 2 {
			_, body := a.probe(t, target(b.hostport()), "")
			if v, _ := parse(t, body).value("probe_success"); v != 1 {
				t.Errorf("slow probe %d: probe_success %g\n%s\n%s", i+1, v, body, b.log.String())
			}
		}
		if got := metric(t, b.node, "gpulink_node_probe_declines_total", "role", RoleTarget, "reason", ReasonRateLimited); got != 0 {
			t.Errorf("the slow prober was declined rate-limited %g times", got)
		}
	})
}

// 6. One target flooded the prober's scrape: its round named each
// transport's network as free text, and 50,000 transports made 49,997
// gpulink_node_probe_channels series with probe_success 1. Now a round's
// transports are checked: known networks or a plugin's name, at most
// channels x ranks of them, else bad_response.
func TestTargetCannotFloodChannels(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(r *probes.CollectiveRound)
		ok   bool
	}{
		{"50,000 networks", func(r *probes.CollectiveRound) {
			for i := range 50000 {
				r.Transports = append(r.Transports, probes.Transport{Channel: i % 64, FromRank: 1, ToRank: 0, Kind: probes.TransportNet,
					Network: fmt.Sprintf("net%d", i)})
			}
		}, false},
		{"a network that is no name", func(r *probes.CollectiveRound) { r.Transports[0].Network = "IB\"} evil{" }, false},
		{"a rank outside the session", func(r *probes.CollectiveRound) { r.Transports[0].ToRank = 7 }, false},
		{"an unknown kind", func(r *probes.CollectiveRound) { r.Transports[0].Kind = "warp" }, false},
		{"a plugin's own name", func(r *probes.CollectiveRound) {
			for i := range r.Transports {
				r.Transports[i].Network = "AWS Libfabric"
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fab := newFabric()
			a := newTestNode(t, fab, "a", 50e9, true, nil)
			b := newTestNode(t, fab, "b", 50e9, true, nil)
			bu, _ := url.Parse(b.srv.URL)
			proxy := httputil.NewSingleHostReverseProxy(bu)
			proxy.ModifyResponse = func(resp *http.Response) error {
				if resp.Request.URL.Path != JoinPath || resp.StatusCode != http.StatusOK {
					return nil
				}
				var jr JoinResponse
				if err := json.NewDecoder(resp.Body).Decode(&jr); err != nil {
					return err
				}
				resp.Body.Close()
				tc.edit(jr.Round)
				out, _ := json.Marshal(jr)
				resp.Body = io.NopCloser(bytes.NewReader(out))
				resp.ContentLength = int64(len(out))
				resp.Header.Del("Content-Length")
				return nil
			}
			h := newHostile(t, func(_ *hostile, w http.ResponseWriter, r *http.Request) { proxy.ServeHTTP(w, r) })
			_, body := a.probe(t, target(h.hostport()), "")
			s := parse(t, body)
			if tc.ok {
				if v, _ := s.value("probe_success"); v != 1 {
					t.Errorf("probe_success %g\n%s", v, body)
				}
				return
			}
			s.failed(t, ReasonBadResponse, SideTarget)
			// The prober's own round's connections alone (the fake's IB).
			for _, m := range s["gpulink_node_probe_channels"].GetMetric() {
				if l := labelsOf(m); l["network"] != "IB" || l["transport"] != probes.TransportNet {
					t.Errorf("a channel series from the refused round: %v", l)
				}
			}
		})
	}
}

// 7b. Concurrent /probe answers are bounded: past the bound, a call is
// refused at once rather than held.
func TestConcurrentProbesBounded(t *testing.T) {
	fab := newFabric()
	a := newTestNode(t, fab, "a", 50e9, true, nil)
	b := newTestNode(t, fab, "b", 50e9, true, nil)
	setMaxProbes(a.node, 1)
	a.runner.delay = 500 * time.Millisecond
	done := make(chan string)
	go func() { done <- second(a.probe(t, target(b.hostport()), "")) }()
	waitFor(t, "the first probe's child", func() bool { runs, _ := a.runner.calls(); return len(runs) == 1 })
	status, body := a.probe(t, target(b.hostport()), "")
	if status != http.StatusServiceUnavailable {
		t.Errorf("a second /probe while one runs, bound 1: %d %q, want 503", status, body)
	}
	if v, _ := parse(t, <-done).value("probe_success"); v != 1 {
		t.Error("the first probe failed")
	}
}

// 8. A give-back that hung turned the target's nccl_error into timeout and
// used the whole budget. Now the reason is the target's, and the
// give-back runs on its own bound, not the probe's.
func TestHungGiveBackKeepsReason(t *testing.T) {
	m := DefaultModule()
	m.Timeout = model.Duration(2 * time.Second)
	a := newTestNode(t, newFabric(), "a", 50e9, true, func(c *Config) {
		c.Modules = NewModules(&File{Modules: map[string]Module{DefaultModuleName: m}})
	})
	h := newHostile(t, func(h *hostile, w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch {
		case r.Method == http.MethodPost && r.URL.Path == ReservePath:
			writeJSON(w, http.StatusOK, ReserveResponse{Token: "t"})
		case r.URL.Path == JoinPath:
			writeJSON(w, http.StatusInternalServerError, Decline{Reason: ReasonNCCLError, Detail: "ncclCommInitRank: unhandled system error"})
		default:
			select { // the give-back: never answered
			case <-h.stop:
			case <-r.Context().Done():
			}
		}
	})
	// Not a.probe, which waits for the give-back.
	req, _ := http.NewRequest(http.MethodGet, a.srv.URL+ProbePath+"?"+target(h.hostport()).Encode(), nil)
	_, body := do(t, req)
	parse(t, body).failed(t, ReasonNCCLError, SideTarget)
	// The give-back is still asked for, on its own.
	waitFor(t, "the give-back", func() bool { return h.count("DELETE "+ReservePath) == 1 })
}

package nodeprobe

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The eight ways a client or a target could hold a node hostage (issue
// 28), each reproduced with fake targets or probers on loopback.

// metric is the value of the node's series of name with labels (name,
// value pairs), gathered as /metrics gathers it; 0 when absent.
func metric(t *testing.T, n *Node, name string, labels ...string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(n)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			have := labelsOf(m)
			match := len(have)*2 == len(labels)
			for i := 0; i+1 < len(labels); i += 2 {
				match = match && have[labels[i]] == labels[i+1]
			}
			if match {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// reserveFrom asks tn to reserve itself for a default session with hold
// left of its deadline, from the loopback address local (127.0.0.x: each
// its own remote).
func reserveFrom(t *testing.T, tn *testNode, local string, hold time.Duration) (int, Decline) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}).DialContext}}
	defer client.CloseIdleConnections()
	resp, err := client.Post(tn.srv.URL+ReservePath, "application/json",
		strings.NewReader(reserveJSON(DefaultModuleName, sessionOptions(DefaultModule(), hold))))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d Decline
	if resp.StatusCode != http.StatusOK {
		_ = json.NewDecoder(resp.Body).Decode(&d)
	}
	return resp.StatusCode, d
}

// 1. A reservation left to expire gave the target's rate-limit slot
// back: one client held the node with a reservation every hold. Now its
// remote is locked out after an expiry (doubling with each in a row,
// whatever the min-interval), and reservations and expiries are counted.
// The expiry spends no --node-probe.min-interval of the target's (issue
// 34: only a session that ran does), so another remote still reserves.
func TestReservationExpiryHoldsNoNode(t *testing.T) {
	t.Run("min-interval", func(t *testing.T) {
		b := newTestNode(t, newFabric(), "b", 50e9, true, func(c *Config) { c.MinInterval = time.Minute })
		reserveOn(t, b, 50*time.Millisecond)
		waitFor(t, "the reservation to expire", func() bool { return !b.gate.isHeld() })
		if status, d := reserveFrom(t, b, "127.0.0.2", 50*time.Millisecond); status != http.StatusOK {
			t.Errorf("another remote right after a reservation expired: %d %+v, want a reservation", status, d)
		}
		waitFor(t, "the reservation to expire", func() bool { return !b.gate.isHeld() })
		if got := metric(t, b.node, "gpulink_node_probe_reservations_total"); got != 2 {
			t.Errorf("gpulink_node_probe_reservations_total %g, want 2", got)
		}
		if got := metric(t, b.node, "gpulink_node_probe_reservations_ended_total", "how", "expired"); got != 2 {
			t.Errorf("expiries %g, want 2", got)
		}
		if got := metric(t, b.node, "gpulink_node_probe_declines_total", "role", RoleTarget, "reason", ReasonRateLimited); got != 0 {
			t.Errorf("rate-limited declines %g, want 0", got)
		}
	})
	t.Run("per remote", func(t *testing.T) {
		// No min-interval: the remote whose reservation expired is locked
		// out, another is not.
		b := newTestNode(t, newFabric(), "b", 50e9, true, nil)
		for i, lockout := range []time.Duration{time.Minute, 2 * time.Minute} {
			if status, d := reserveFrom(t, b, "127.0.0.1", 50*time.Millisecond); status != http.StatusOK {
				t.Fatalf("reservation %d: %d %+v", i+1, status, d)
			}
			waitFor(t, "the reservation to expire", func() bool { return !b.gate.isHeld() })
			status, d := reserveFrom(t, b, "127.0.0.1", 50*time.Millisecond)
			if status != http.StatusTooManyRequests || d.Reason != ReasonRateLimited || !strings.Contains(d.Detail, fmt.Sprintf("%d reservation", i+1)) {
				t.Errorf("the same remote after expiry %d: %d %+v, want 429 declined_rate_limited naming the expiries", i+1, status, d)
			}
			// Just before the lockout ends, and after.
			b.clock.sleep(context.Background(), lockout-time.Second)
			if status, _ := reserveFrom(t, b, "127.0.0.1", 50*time.Millisecond); status != http.StatusTooManyRequests {
				t.Errorf("the same remote %s after expiry %d: %d, want 429", lockout-time.Second, i+1, status)
			}
			b.clock.sleep(context.Background(), time.Second)
		}
		if status, d := reserveFrom(t, b, "127.0.0.2", time.Second); status != http.StatusOK {
			t.Errorf("another remote: %d %+v, want a reservation", status, d)
		}
		if got := metric(t, b.node, "gpulink_node_probe_reservations_ended_total", "how", "expired"); got != 2 {
			t.Errorf("expiries %g, want 2", got)
		}
	})
}

// hostile is a fake target: its handler per path and method.
type hostile struct {
	srv  *httptest.Server
	stop chan struct{} // closed at the test's end: every stalled handler returns
	mu   sync.Mutex
	hits map[string]int // "METHOD path"
}

func newHostile(t *testing.T, handle func(h *hostile, w http.ResponseWriter, r *http.Request)) *hostile {
	h := &hostile{stop: make(chan struct{}), hits: map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.hits[r.Method+" "+r.URL.Path]++
		h.mu.Unlock()
		handle(h, w, r)
	}))
	t.Cleanup(h.srv.Close)
	t.Cleanup(func() { close(h.stop) })
	return h
}

func (h *hostile) hostport() string { return strings.TrimPrefix(h.srv.URL, "http://") }

func (h *hostile) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hits[key]
}

// 2. A target that takes the reservation and then hangs the join and the
// give-back made /probe answer past its deadline: the give-back had 5 s
// of its own. Now nothing outlives the deadline: the answer (timeout)
// comes before Prometheus gives up, with the prober's GPUs let go.
func TestProbeAnswersWithinItsDeadline(t *testing.T) {
	a := newTestNode(t, newFabric(), "a", 50e9, true, nil)
	h := newHostile(t, func(h *hostile, w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPost && r.URL.Path == ReservePath {
			writeJSON(w, http.StatusOK, ReserveResponse{Token: "t"})
			return
		}
		<-h.stop // the join and the give-back: never answered
	})
	start := time.Now()
	// Not a.probe, which waits for the give-back (its own 5 s) too.
	req, _ := http.NewRequest(http.MethodGet, a.srv.URL+ProbePath+"?"+target(h.hostport()).Encode(), nil)
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "1.5") // a budget of 1 s
	_, body := do(t, req)
	took := time.Since(start)
	parse(t, body).failed(t, ReasonTimeout)
	if took >= 1500*time.Millisecond {
		t.Errorf("/probe answered after %s; Prometheus' scrape timeout is 1.5 s", took)
	}
	if a.gate.isHeld() {
		t.Error("the prober's GPUs are still held after its answer")
	}
}

// 3. A target that stalls the reservation and then declines held the
// prober's session (and its round lock, its GPUs) while it stalled. Now
// the prober takes its GPUs only once the target has reserved. Its
// decline spends none of the prober's min-interval (issue 34: only a
// session that ran does); who may make the prober call a target is
// /probe's authentication's to say (auth.go).
func TestHostileTargetKeepsProberRateLimit(t *testing.T) {
	a := newTestNode(t, newFabric(), "a", 50e9, true, func(c *Config) { c.MinInterval = time.Minute })
	var heldWhileStalled atomic.Bool
	h := newHostile(t, func(h *hostile, w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(300 * time.Millisecond)
		if a.gate.isHeld() {
			heldWhileStalled.Store(true)
		}
		writeJSON(w, http.StatusConflict, Decline{Reason: ReasonBusy, Detail: "stalled, then busy"})
	})
	_, body := a.probe(t, target(h.hostport()), "")
	parse(t, body).failed(t, ReasonBusy)
	if heldWhileStalled.Load() {
		t.Error("the prober held its GPUs (its probe round lock) while the target stalled")
	}
	_, body = a.probe(t, target(h.hostport()), "")
	parse(t, body).failed(t, ReasonBusy)
	if n := h.count("POST " + ReservePath); n != 2 {
		t.Errorf("the target was asked %d times, want 2: a decline spends no interval", n)
	}
}

// 4. A target that answers 404 to the reservation (an exporter without
// --node-probe.enabled) made every probe start the prober's NCCL child,
// with no rate limit. Now it is declined_disabled and starts none.
func TestTargetWithoutReservationsStartsNoChild(t *testing.T) {
	a := newTestNode(t, newFabric(), "a", 50e9, true, nil)
	h := newHostile(t, func(_ *hostile, w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.NotFound(w, r)
	})
	for range 5 {
		_, body := a.probe(t, target(h.hostport()), "")
		parse(t, body).failed(t, ReasonDisabled)
	}
	if runs, _ := a.runner.calls(); len(runs) != 0 {
		t.Errorf("5 probes of a target without reservations started %d children, want none", len(runs))
	}
	if n := h.count("POST " + JoinPath); n != 0 {
		t.Errorf("the target was asked to join %d times", n)
	}
	if got := metric(t, a.node, "gpulink_node_probe_declines_total", "role", RoleProber, "reason", ReasonDisabled); got != 5 {
		t.Errorf("declined_disabled counted %g times, want 5", got)
	}
}

// 5. /probe followed redirects with the module's credentials: a 307 from
// the target made it POST to another port and path. Now no redirect is
// followed.
func TestProbeFollowsNoRedirect(t *testing.T) {
	elsewhere := newHostile(t, func(_ *hostile, w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		writeJSON(w, http.StatusOK, ReserveResponse{Token: "t"})
	})
	h := newHostile(t, func(_ *hostile, w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Redirect(w, r, elsewhere.srv.URL+"/collect"+r.URL.Path, http.StatusTemporaryRedirect)
	})
	file, err := Parse([]byte("modules:\n  nccl_ring:\n    http_client:\n      basic_auth: {username: prober, password: ring-secret}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := newTestNode(t, newFabric(), "a", 50e9, true, func(c *Config) { c.Modules = NewModules(file) })
	_, body := a.probe(t, target(h.hostport()), "")
	parse(t, body).failed(t, ReasonBadResponse)
	if !strings.Contains(a.log.String(), "307") {
		t.Errorf("the prober's log does not name the redirect:\n%s", a.log.String())
	}
	elsewhere.mu.Lock()
	defer elsewhere.mu.Unlock()
	if len(elsewhere.hits) != 0 {
		t.Errorf("the redirect was followed, with the module's credentials: %v", elsewhere.hits)
	}
}

// 6. A join answered with an error status (a target's 400 or 401, a
// proxy's 502) left the reservation held until it expired: the prober
// gave it back only when no answer came. Now every join answered with
// anything but the target's round gives it back, once the prober has let
// go of its own GPUs.
func TestErrorJoinGivesReservationBack(t *testing.T) {
	for _, tc := range []struct {
		status int
		reason string
	}{
		{http.StatusBadRequest, ReasonBadResponse},
		{http.StatusUnauthorized, ReasonUnauthorized},
		{http.StatusBadGateway, ReasonBadResponse},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			fab := newFabric()
			a := newTestNode(t, fab, "a", 50e9, true, nil)
			b := newTestNode(t, fab, "b", 50e9, true, nil)
			bu, err := url.Parse(b.srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			toB := httputil.NewSingleHostReverseProxy(bu)
			var proberHeld atomic.Bool
			var agent atomic.Value
			// A proxy in front of b that answers every join itself.
			proxy := newHostile(t, func(_ *hostile, w http.ResponseWriter, r *http.Request) {
				switch {
				case r.URL.Path == JoinPath:
					_, _ = io.Copy(io.Discard, r.Body)
					http.Error(w, http.StatusText(tc.status), tc.status)
				case r.Method == http.MethodDelete:
					proberHeld.Store(a.gate.isHeld())
					agent.Store(r.UserAgent())
					toB.ServeHTTP(w, r)
				default:
					toB.ServeHTTP(w, r)
				}
			})
			_, body := a.probe(t, target(proxy.hostport()), "")
			parse(t, body).failed(t, tc.reason)
			if b.gate.isHeld() {
				t.Errorf("the target is still reserved after a join answered %d", tc.status)
			}
			if proxy.count("DELETE "+ReservePath) != 1 {
				t.Errorf("the reservation was given back %d times, want once", proxy.count("DELETE "+ReservePath))
			}
			if proberHeld.Load() {
				t.Error("the prober gave the reservation back while it still held its own GPUs")
			}
			if ua, _ := agent.Load().(string); !strings.HasPrefix(ua, "gpulink_exporter/") {
				t.Errorf("the give-back's User-Agent %q does not name the exporter", ua)
			}
			if got := metric(t, b.node, "gpulink_node_probe_reservations_ended_total", "how", "given_back"); got != 1 {
				t.Errorf("give-backs counted %g, want 1", got)
			}
		})
	}
}

// 7. Request bodies had no read deadline: a caller sending a body slowly
// held a goroutine and a descriptor for as long as it liked. Now reading
// a body past the node's body timeout fails the request.
func TestSlowRequestBodyIsCut(t *testing.T) {
	b := newTestNode(t, newFabric(), "b", 50e9, true, nil)
	setBodyTimeout(b.node, 200*time.Millisecond)
	for _, path := range []string{ReservePath, JoinPath} {
		conn, err := net.Dial("tcp", b.hostport())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		// Headers at once, then one byte of a 1000-byte body, then nothing.
		if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", path); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Errorf("%s: no answer to a stalled body within 3 s: %v", path, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || time.Since(start) > 2*time.Second {
			t.Errorf("%s: %s after %s, want 400 within about the body timeout", path, resp.Status, time.Since(start))
		}
	}
}

// The body's deadline ends with the body: a session that runs longer
// than it is not cut (the server watches the connection once the body is
// read, and a deadline left on it would end the join's context).
func TestBodyDeadlineLiftedForTheSession(t *testing.T) {
	fab := newFabric()
	a := newTestNode(t, fab, "a", 50e9, true, nil)
	b := newTestNode(t, fab, "b", 50e9, true, nil)
	setBodyTimeout(b.node, 50*time.Millisecond)
	b.runner.delay = 300 * time.Millisecond
	_, body := a.probe(t, target(b.hostport()), "")
	if v, _ := parse(t, body).value("probe_success"); v != 1 {
		t.Errorf("a session longer than the body timeout: probe_success %g\n%s\n%s", v, body, b.log.String())
	}
}

// 8. A join was not checked against its reservation: reserving one GPU
// and joining with two ran a 2-GPU round; and a target took any session
// up to the global limits rather than its own module's. Now a join that
// does not match its reservation is refused and ends it, and a join or
// reservation beyond the target's own module is refused.
func TestJoinCheckedAgainstReservation(t *testing.T) {
	two := DefaultModule()
	two.GPUsPerNode = 2
	fab := newFabric()
	b := newTestNode(t, fab, "b", 50e9, true, func(c *Config) {
		c.Modules = NewModules(&File{Modules: map[string]Module{DefaultModuleName: two}})
	})
	joinOf := func(k int, token string) JoinRequest {
		m := DefaultModule()
		m.GPUsPerNode = k
		id, _ := fab.open()
		return JoinRequest{Version: JoinVersion, ID: id, Ranks: 2 * k, FirstRank: k, Module: DefaultModuleName,
			Options: sessionOptions(m, 2*time.Second), Prober: "a", Reservation: token}
	}
	for _, tc := range []struct {
		name string
		edit func(*JoinRequest)
	}{
		{"more GPUs", func(r *JoinRequest) { *r = joinOf(2, r.Reservation) }},
		{"a larger size", func(r *JoinRequest) { r.Options.SizeBytes *= 2 }},
		{"a longer timeout", func(r *JoinRequest) { r.Options.TimeoutSeconds = 20 }},
		// Not only more: other than reserved, which a limit would let by.
		{"fewer iterations", func(r *JoinRequest) { r.Options.Iterations-- }},
		{"the collectives in another order", func(r *JoinRequest) { slices.Reverse(r.Options.Collectives) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token := reserveOn(t, b, 10*time.Second) // one GPU
			req := joinOf(1, token)
			tc.edit(&req)
			status, d := postJoin(t, b, req)
			if status != http.StatusBadRequest || d.Reason != ReasonBadRequest {
				t.Errorf("a join unlike its reservation: %d %+v, want 400 bad_request", status, d)
			}
			if runs, _ := b.runner.calls(); len(runs) != 0 {
				t.Errorf("the target ran %d children for it", len(runs))
			}
			if b.gate.isHeld() {
				t.Error("the reservation the join did not match still holds the target")
			}
		})
	}
	// The target's own module: one GPU, 256 MiB.
	c := newTestNode(t, fab, "c", 50e9, true, nil)
	for _, req := range []JoinRequest{joinOf(2, ""), func() JoinRequest { r := joinOf(1, ""); r.Options.SizeBytes = 1 << 30; return r }()} {
		if status, d := postJoin(t, c, req); status != http.StatusBadRequest || d.Reason != ReasonBadRequest {
			t.Errorf("a join of %d GPUs, %d bytes on a target whose module has 1 and 256 MiB: %d %+v, want 400", req.Options.GPUsPerNode,
				req.Options.SizeBytes, status, d)
		}
	}
	if runs, _ := c.runner.calls(); len(runs) != 0 {
		t.Errorf("the target ran %d children beyond its module", len(runs))
	}
	// And a probe between two nodes of the same module still runs.
	a := newTestNode(t, fab, "a", 50e9, true, nil)
	if v, _ := parse(t, second(a.probe(t, target(c.hostport()), ""))).value("probe_success"); v != 1 {
		t.Errorf("a probe within the target's module: probe_success %g\n%s", v, a.log.String())
	}
}

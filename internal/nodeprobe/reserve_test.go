package nodeprobe

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/probes"
)

// reserveCall sends method to the target's ReservePath with body and returns the
// status and body of the answer.
func reserveCall(t *testing.T, tn *testNode, method, query, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, tn.srv.URL+ReservePath+query, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

func reserveOn(t *testing.T, tn *testNode, hold time.Duration) string {
	t.Helper()
	b, err := json.Marshal(ReserveRequest{Version: JoinVersion, Module: "nccl_ring", Options: sessionOptions(DefaultModule(), hold), Prober: "a"})
	if err != nil {
		t.Fatal(err)
	}
	status, body := reserveCall(t, tn, http.MethodPost, "", string(b))
	var rr ReserveResponse
	if status != http.StatusOK || json.Unmarshal([]byte(body), &rr) != nil || len(rr.Token) != 32 {
		t.Fatalf("reservation: %d %q", status, body)
	}
	return rr.Token
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
	}
}

// A reservation holds the target (its GPUs, its session lock) until its
// hold runs out; unused, it still counts toward the target's rate limit,
// and a join naming it after that enters the session itself, under the
// same limits.
func TestReservationExpires(t *testing.T) {
	b := newTestNode(t, newFabric(), "b", 50e9, true, nil)
	token := reserveOn(t, b, 50*time.Millisecond)
	if !b.gate.isHeld() {
		t.Fatal("a reservation that holds no GPUs")
	}
	if status, d := postJoin(t, b, validJoin()); status != http.StatusConflict || d.Reason != ReasonSession {
		t.Errorf("a join without the token while reserved: %d %+v, want declined_session", status, d)
	}
	waitFor(t, "the reservation to expire", func() bool { return !b.gate.isHeld() })
	waitFor(t, "the expiry to be logged", func() bool { return strings.Contains(b.log.String(), "no join within 50ms") })
	if got := metric(t, b.node, "gpulink_node_probe_reservations_ended_total", "how", EndExpired); got != 1 {
		t.Errorf("expiries counted %g, want 1", got)
	}
	// The stale token is no reservation: the join enters the session
	// itself, from another remote than the one locked out.
	b.node.mu.Lock()
	b.node.remotes = map[string]*lockout{}
	b.node.mu.Unlock()
	req := validJoin()
	req.Reservation = token
	if status, d := postJoin(t, b, req); status != http.StatusOK {
		t.Errorf("a join after the reservation expired: %d %+v, want it to run", status, d)
	}
	if runs, _ := b.runner.calls(); len(runs) != 1 {
		t.Errorf("the target ran %d children for the join, want 1", len(runs))
	}
}

// A prober gives back a reservation it will not use: DELETE with the
// token frees the target at once; an unknown token is 404.
func TestReservationGivenBack(t *testing.T) {
	b := newTestNode(t, newFabric(), "b", 50e9, true, nil)
	token := reserveOn(t, b, 20*time.Second)
	if status, _ := reserveCall(t, b, http.MethodDelete, "?token=not-"+token, ""); status != http.StatusNotFound {
		t.Errorf("giving back another token: %d, want 404", status)
	}
	if !b.gate.isHeld() {
		t.Fatal("a wrong token let the reservation go")
	}
	if status, _ := reserveCall(t, b, http.MethodDelete, "?token="+token, ""); status != http.StatusNoContent {
		t.Errorf("giving back: %d, want 204", status)
	}
	if b.gate.isHeld() {
		t.Error("the target's GPUs are still held")
	}
	if status, _ := reserveCall(t, b, http.MethodDelete, "?token="+token, ""); status != http.StatusNotFound {
		t.Errorf("giving back twice: %d, want 404", status)
	}
	if status, _ := reserveCall(t, b, http.MethodGet, "", ""); status != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", status)
	}
	if got := metric(t, b.node, "gpulink_node_probe_reservations_ended_total", "how", EndGivenBack); got != 1 {
		t.Errorf("give-backs counted %g, want 1", got)
	}
	if got := metric(t, b.node, "gpulink_node_probe_reservations_total"); got != 1 {
		t.Errorf("reservations counted %g, want 1", got)
	}
}

// A prober whose own child fails after the target reserved itself gives
// the reservation back rather than leave the target held until it
// expires.
func TestProberGivesBackWhenItsChildFails(t *testing.T) {
	fab := newFabric()
	a := newTestNode(t, fab, "a", 50e9, true, nil)
	a.runner.failOpen = io.ErrUnexpectedEOF
	b := newTestNode(t, fab, "b", 50e9, true, nil)
	_, body := a.probe(t, target(b.hostport()), "")
	parse(t, body).failed(t, ReasonNCCLError)
	if b.gate.isHeld() {
		t.Error("the target is still held after the prober failed")
	}
	if !strings.Contains(b.log.String(), "given back by the prober") {
		t.Errorf("target's log:\n%s", b.log.String())
	}
	if runs, _ := b.runner.calls(); len(runs) != 0 {
		t.Errorf("the target ran %d children", len(runs))
	}
}

// A reservation the target cannot read, or beyond its own module, is
// refused with the field named.
func TestReservationRefusesBadRequests(t *testing.T) {
	b := newTestNode(t, newFabric(), "b", 50e9, true, nil)
	body := func(f func(*ReserveRequest)) string {
		r := ReserveRequest{Version: JoinVersion, Module: DefaultModuleName, Options: sessionOptions(DefaultModule(), time.Second), Prober: "a"}
		f(&r)
		return string(must(json.Marshal(r)))
	}
	for _, c := range []struct{ body, want string }{
		{strings.Replace(body(func(*ReserveRequest) {}), "{", `{"extra":1,`, 1), `unknown field "extra"`},
		{body(func(r *ReserveRequest) { r.Version = 9 }), "version 9"},
		{body(func(r *ReserveRequest) { r.Options.GPUsPerNode = 0 }), "gpus_per_node: 0"},
		{body(func(r *ReserveRequest) { r.Options.TimeoutSeconds = 0 }), "timeout_seconds 0"},
		{body(func(*ReserveRequest) {}) + "{}", "more than one JSON value"},
		{`not json`, "reading the reservation"},
		// This target's own module: one GPU, 256 MiB, 30 s.
		{body(func(r *ReserveRequest) { r.Module = "other" }), `module "other": this target has no such module`},
		{body(func(r *ReserveRequest) { r.Options.GPUsPerNode = 2 }), "gpus_per_node 2 is over this target's 1"},
		{body(func(r *ReserveRequest) { r.Options.SizeBytes = 1 << 30 }), "size_bytes 1073741824 is over"},
		{body(func(r *ReserveRequest) { r.Options.TimeoutSeconds = 60 }), "timeout_seconds 60 is over this target's 30"},
		{body(func(r *ReserveRequest) { r.Options.Collectives = []probes.Collective{probes.AllToAll} }), "collective all_to_all is not among"},
	} {
		status, body := reserveCall(t, b, http.MethodPost, "", c.body)
		var d Decline
		if status != http.StatusBadRequest || json.Unmarshal([]byte(body), &d) != nil || d.Reason != ReasonBadRequest || !strings.Contains(d.Detail, c.want) {
			t.Errorf("%s: %d %q, want 400 bad_request naming %q", c.body, status, body, c.want)
		}
	}
	if b.gate.isHeld() {
		t.Error("a refused reservation holds the GPUs")
	}
}

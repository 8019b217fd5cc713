package nodeprobe

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/common/version"
)

// A prober reserves the target before it takes its own GPUs and starts
// its NCCL child: POST /node-probe/reserve enters the session on the
// target (its session lock, its rate limit and its GPUs, as a join would)
// and holds it for the join that follows with the reservation's token.
// Without it every try of a prober whose target was busy or in another
// session started a child (a CUDA context on each GPU, NCCL's setup) only
// to cancel it when the join was declined. A target that answers 404 does
// not take part (--node-probe.enabled is off, or it is from before
// reservations, when the join's version was 1 and this one would not be
// read either): declined_disabled, and no child starts.
//
// What a reservation may hold, and how often (only a caller with the
// node's token gets this far: auth.go):
//   - one at a time (the session lock), for at most what was left of the
//     prober's deadline when it asked, and never more than maxReserveHold;
//   - it spends no --node-probe.min-interval of the target's: only the
//     join that runs the session does, so that a reservation given back,
//     declined elsewhere or left to expire spends no one's interval;
//   - a remote (host) whose reservation expired unjoined is declined
//     (declined_rate_limited) for lockoutBase or the min-interval, whichever
//     is longer, doubled for each expiry in a row up to maxLockout; a join
//     of its next reservation clears the record, and so does a join that
//     comes late for the reservation that expired (a prober slow to make
//     its unique id is locked out for nothing it did);
//   - the join must match it: module, collectives, sizes, iterations and
//     GPUs equal, and a timeout no longer than it was reserved for; a join
//     that does not is refused and ends the reservation.

// ReservePath is where a prober reserves a target.
const ReservePath = "/node-probe/reserve"

// Paths are every path node-to-node probes serve.
var Paths = []string{ProbePath, ReservePath, JoinPath}

// maxReserveHold bounds how long a target holds a reservation for its
// join, whatever the prober asks: the prober's child makes its unique id
// in a few seconds; a prober that went away must not hold the target for
// a whole probe timeout.
const maxReserveHold = 30 * time.Second

// reserveTimeout bounds the prober's wait for the target's answer to a
// reservation: a target answers at once (it takes a lock and looks at its
// GPUs), and the prober holds its session lock meanwhile.
const reserveTimeout = 5 * time.Second

// giveBackTimeout bounds a give-back on its own, whatever is left of the
// probe's deadline: a probe whose caller went away (Prometheus' scrape
// timeout) still gives its reservation back rather than leave it to
// expire, which would lock this node out of the target.
const giveBackTimeout = 5 * time.Second

// The lockout of a remote whose reservations expire unjoined, and how
// many remotes are remembered (the least recent first forgotten).
const (
	lockoutBase = time.Minute
	maxLockout  = time.Hour
	maxRemotes  = 1024
)

// defaultBodyTimeout bounds reading a request's body: a real one is under
// 1 KiB and comes with its headers.
const defaultBodyTimeout = 10 * time.Second

// ReserveRequest is the prober's body on POST /node-probe/reserve: the
// session it will join with, which the join must match.
type ReserveRequest struct {
	Version int `json:"version"`
	// Module names the prober's module: the target checks Options against
	// its own module of that name.
	Module string `json:"module"`
	// Options are the session's; TimeoutSeconds is what is left of the
	// prober's deadline, and the reservation's hold (up to
	// maxReserveHold).
	Options SessionOptions `json:"options"`
	// Prober names the prober (its host name).
	Prober string `json:"prober"`
}

// ReserveResponse is a target's answer when it reserved itself: the token
// the join names.
type ReserveResponse struct {
	Token string `json:"token"`
}

// validate checks a reservation as the target reads it.
func (r *ReserveRequest) validate() error {
	if r.Version != JoinVersion {
		return fmt.Errorf("version %d: this exporter speaks %d", r.Version, JoinVersion)
	}
	return r.Options.validate(r.Module)
}

// reservation is a session entered for a prober whose join has not come
// yet.
type reservation struct {
	token   string
	h       *hold
	timer   *time.Timer
	module  string
	options SessionOptions
	remote  string // host
}

// matches says how a join differs from the reservation it names; "" when
// it does not.
func (res *reservation) matches(req *JoinRequest) string {
	if req.Module != res.module {
		return fmt.Sprintf("module %q, reserved for %q", req.Module, res.module)
	}
	if field, got, want := req.Options.beyond(res.options, true); field != "" {
		return fmt.Sprintf("%s %v, reserved for %v", field, got, want)
	}
	return ""
}

// lockout is a remote whose reservations expired unjoined.
type lockout struct {
	expired int       // in a row
	until   time.Time // declined until then
	token   string    // of the latest that expired: its late join clears the record
}

// remoteHost is the host a request came from: the unit of a lockout.
func remoteHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// lockedOut says why remote is declined at now; "" when it is not. The
// answer names no time (the log has it).
func (n *Node) lockedOut(remote string, now time.Time) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.remotes[remote]
	if l == nil || !now.Before(l.until) {
		return ""
	}
	n.logger.Debug("remote locked out after reservations expired unjoined", "remote", remote, "expired", l.expired, "for", l.until.Sub(now))
	return fmt.Sprintf("%d %s from %s expired unjoined in a row; its reservations are declined for a while",
		l.expired, plural(l.expired, "reservation", "reservations"), remote)
}

// lockOut records an expiry of remote's reservation token at now.
// Called with n.mu held.
func (n *Node) lockOut(remote, token string, now time.Time) time.Duration {
	l := n.remotes[remote]
	if l == nil {
		if len(n.remotes) >= maxRemotes {
			n.forgetRemote(now)
		}
		l = &lockout{}
		n.remotes[remote] = l
	}
	l.expired++
	d := max(lockoutBase, n.cfg.MinInterval) << min(l.expired-1, 16)
	d = min(d, maxLockout)
	l.until, l.token = now.Add(d), token
	return d
}

// cameLate clears remote's record where its latest expiry was of the
// reservation token: its join came, only after the hold.
func (n *Node) cameLate(remote, token string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l := n.remotes[remote]; l != nil && token != "" && l.token == token {
		delete(n.remotes, remote)
		return true
	}
	return false
}

// forgetRemote makes room for another remote: every record whose lockout
// ended more than maxLockout ago, or else the one that ends first.
// Called with n.mu held.
func (n *Node) forgetRemote(now time.Time) {
	var first string
	for r, l := range n.remotes {
		if now.Sub(l.until) > maxLockout {
			delete(n.remotes, r)
		} else if first == "" || l.until.Before(n.remotes[first].until) {
			first = r
		}
	}
	if len(n.remotes) >= maxRemotes {
		delete(n.remotes, first)
	}
}

// ReserveHandler answers POST /node-probe/reserve (see ReservePath) with
// a token, or declines as a join does; DELETE
// /node-probe/reserve?token=... gives a reservation back unused. It sits
// behind the exporter's web config like /node-probe/join.
func (n *Node) ReserveHandler() http.Handler { return n.guard(ReservePath, n.serveReserve) }

func (n *Node) serveReserve(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
	case http.MethodDelete:
		if n.dropReservation(r.URL.Query().Get("token"), EndGivenBack, "given back by the prober") {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.Error(w, "No such reservation", http.StatusNotFound)
		return
	default:
		w.Header().Set("Allow", "POST, DELETE")
		http.Error(w, "Method not allowed: POST a reservation, or DELETE one", http.StatusMethodNotAllowed)
		return
	}
	var req ReserveRequest
	if err := n.readStrict(w, r, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, Decline{Reason: ReasonBadRequest, Detail: "reading the reservation: " + err.Error()})
		return
	}
	if err := req.validate(); err != nil {
		writeJSON(w, http.StatusBadRequest, Decline{Reason: ReasonBadRequest, Detail: "reservation: " + err.Error()})
		return
	}
	logger := n.logger.With("prober", req.Prober, "remote", r.RemoteAddr, "module", req.Module)
	if err := n.withinModule(req.Module, req.Options); err != nil {
		logger.Warn("refused a node-to-node reservation", "err", err)
		writeJSON(w, http.StatusBadRequest, Decline{Reason: ReasonBadRequest, Detail: "reservation: " + err.Error()})
		return
	}
	remote := remoteHost(r)
	h, reason, detail := n.enterTarget(req.Options.GPUsPerNode, remote)
	if reason != "" {
		n.count(RoleTarget, ResultDeclined, reason)
		logger.Info("declined a node-to-node session", "reason", reason, "detail", detail)
		writeJSON(w, declineStatus(reason), Decline{Reason: reason, Detail: detail})
		return
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	token := hex.EncodeToString(b[:])
	hold := min(req.Options.timeout(), n.reserveHold)
	n.mu.Lock()
	// The session lock is held: no other reservation can be pending.
	n.reserved = &reservation{token: token, h: h, module: req.Module, options: req.Options, remote: remote}
	n.reserved.timer = time.AfterFunc(hold, func() { n.dropReservation(token, EndExpired, "no join within "+hold.String()) })
	n.mu.Unlock()
	n.reservations.Inc()
	logger.Debug("reserved for a node-to-node session", "hold", hold)
	writeJSON(w, http.StatusOK, ReserveResponse{Token: token})
}

// takeReservation hands the reservation made under token to its join;
// nil when there is none (it expired, or was never made).
func (n *Node) takeReservation(token string) *reservation {
	n.mu.Lock()
	defer n.mu.Unlock()
	res := n.reserved
	if token == "" || res == nil || res.token != token || !res.timer.Stop() {
		return nil
	}
	n.reserved = nil
	return res
}

// dropReservation ends the reservation made under token, which no
// session used, for how (expired, given back); an expiry locks its
// remote out. It spends no interval: no session ran. It says whether
// there was one.
func (n *Node) dropReservation(token, how, why string) bool {
	n.mu.Lock()
	res := n.reserved
	if token == "" || res == nil || res.token != token {
		n.mu.Unlock()
		return false
	}
	res.timer.Stop()
	n.reserved = nil
	var lockedFor time.Duration
	if how == EndExpired {
		lockedFor = n.lockOut(res.remote, res.token, n.now())
	}
	n.mu.Unlock()
	n.endReservation(res, how, why, "locked_out_for", lockedFor)
	return true
}

// endReservation lets go of a reservation no session will use.
func (n *Node) endReservation(res *reservation, how, why string, attrs ...any) {
	res.h.release()
	n.ended.WithLabelValues(how).Inc()
	n.logger.Info("node-to-node reservation left unused", append([]any{"how", how, "why", why, "remote", res.remote}, attrs...)...)
}

// joinedFrom clears remote's record of expiries: its reservation was
// joined.
func (n *Node) joinedFrom(remote string) {
	n.mu.Lock()
	delete(n.remotes, remote)
	n.mu.Unlock()
	n.ended.WithLabelValues(EndJoined).Inc()
}

// withinModule checks a session's options against this node's own module
// of the name: a target runs nothing bigger, longer or on more GPUs than
// its operator configured, whatever the prober's modules say.
func (n *Node) withinModule(name string, o SessionOptions) error {
	m, ok := n.cfg.Modules.Get(name)
	if !ok {
		return fmt.Errorf("module %q: this target has no such module", name)
	}
	if field, got, want := o.beyond(sessionOptions(m, time.Duration(m.Timeout)), false); field != "" {
		verb := "is over"
		if field == "collective" {
			verb = "is not among"
		}
		return fmt.Errorf("module %q: %s %v %s this target's %v", name, field, got, verb, want)
	}
	if len(n.cfg.GPUs) > 0 && o.GPUsPerNode > len(n.cfg.GPUs) {
		return fmt.Errorf("module %q: gpus_per_node %d is over this target's %d GPUs of --node-probe.gpu", name, o.GPUsPerNode, len(n.cfg.GPUs))
	}
	return nil
}

// reserve asks the target at base (scheme://host:port) to reserve itself.
// It returns the token, or the reason and detail the target declined or
// failed with: a 404 is declined_disabled (the target does not take part).
func (n *Node) reserve(ctx context.Context, client *http.Client, base string, req ReserveRequest) (token, reason, detail string) {
	ctx, cancel := context.WithTimeout(ctx, reserveTimeout)
	defer cancel()
	resp, b, reason, detail := n.call(ctx, client, http.MethodPost, base+ReservePath, req)
	if reason != "" {
		return "", reason, detail
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		var rr ReserveResponse
		if err := json.Unmarshal(b, &rr); err != nil || rr.Token == "" {
			return "", ReasonBadResponse, fmt.Sprintf("the target's reservation: %.200q", b)
		}
		return rr.Token, "", ""
	}
	reason, detail = answerFailure(resp, b, ReservePath)
	return "", reason, detail
}

// giveBack returns a reservation the prober will not join, so that the
// target need not wait for it to expire. It runs on its own, within
// giveBackTimeout whatever is left of ctx (the probe's deadline, or its
// caller gone): the probe's outcome is settled before it and does not
// wait for it, so a target that hangs the give-back takes no time from
// the probe's answer, and a cancelled probe still gives back.
func (n *Node) giveBack(ctx context.Context, client *http.Client, base, token string) {
	n.giving.Add(1)
	go func() {
		defer n.giving.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
		defer cancel()
		// The probe closed the client's idle connections when it ended;
		// this one's too, once used.
		defer client.CloseIdleConnections()
		hr, err := n.newRequest(ctx, http.MethodDelete, base+ReservePath+"?token="+url.QueryEscape(token), nil)
		if err != nil {
			return
		}
		resp, err := client.Do(hr)
		if err != nil {
			n.logger.Debug("giving back a node-to-node reservation", "err", err)
			return
		}
		_ = resp.Body.Close()
	}()
}

// newRequest is a request of the prober's to a target, which names the
// exporter and its version as every request of it does, and carries the
// node's token.
func (n *Node) newRequest(ctx context.Context, method, u string, body io.Reader) (*http.Request, error) {
	hr, err := http.NewRequestWithContext(ctx, method, u, body)
	if err == nil {
		hr.Header.Set("User-Agent", "gpulink_exporter/"+version.Version)
		n.setToken(hr)
	}
	return hr, err
}

// call sends v as JSON with method to u and reads the answer, up to
// maxRoundBytes; reason is set when no answer came or it was too long.
func (n *Node) call(ctx context.Context, client *http.Client, method, u string, v any) (resp *http.Response, b []byte, reason, detail string) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, nil, ReasonBadModule, err.Error()
	}
	hr, err := n.newRequest(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, nil, ReasonUnreachable, err.Error()
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err = client.Do(hr)
	if err != nil {
		return nil, nil, transportReason(ctx), err.Error()
	}
	b, err = io.ReadAll(io.LimitReader(resp.Body, maxRoundBytes+1))
	if err != nil {
		resp.Body.Close()
		return nil, nil, transportReason(ctx), "reading the target's answer: " + err.Error()
	}
	if len(b) > maxRoundBytes {
		resp.Body.Close()
		return nil, nil, ReasonBadResponse, fmt.Sprintf("the target's answer is over %d bytes", maxRoundBytes)
	}
	return resp, b, "", ""
}

// answerFailure is why a target's answer other than 200 says it did not
// take part: a 404 is a target that does not (declined_disabled), a 400
// one that refused what it was asked (refused: another version, or beyond
// its own module), and a redirect, which is never followed, an answer no
// exporter sends.
func answerFailure(resp *http.Response, b []byte, path string) (reason, detail string) {
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return ReasonUnauthorized, resp.Status
	case http.StatusNotFound:
		return ReasonDisabled, resp.Status + ": the target does not answer " + path + " (--node-probe.enabled, and an exporter with reservations)"
	}
	var d Decline
	err := json.Unmarshal(b, &d)
	if err == nil && d.Reason == ReasonBadRequest && resp.StatusCode == http.StatusBadRequest {
		return ReasonRefused, "target: " + d.Detail
	}
	if err != nil || !targetReason(d.Reason) {
		return ReasonBadResponse, fmt.Sprintf("%s: %.200q", resp.Status, b)
	}
	return d.Reason, "target: " + d.Detail
}

// readStrict reads one JSON object into v, no unknown field, up to
// maxJoinBytes, within the node's body timeout (a caller that sends its
// body slowly holds a goroutine and a descriptor no longer); it reads the
// body to its end whatever happens. Once the body is read, net/http lifts
// the deadline itself to watch the connection (a caller that hangs up
// ends the request's context), so a session that runs longer is not cut;
// a body not read in time leaves the connection to be closed.
func (n *Node) readStrict(w http.ResponseWriter, r *http.Request, v any) error {
	// Where the connection cannot take a deadline (a test's recorder),
	// the body is read as it comes.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(n.bodyTimeout))
	body := http.MaxBytesReader(w, r.Body, maxJoinBytes)
	defer func() { _, _ = io.Copy(io.Discard, body) }()
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

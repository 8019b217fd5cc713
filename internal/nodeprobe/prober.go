package nodeprobe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	promconfig "github.com/prometheus/common/config"

	"github.com/gpulink/gpulink_exporter/probes"
)

// ProbePath is where Prometheus asks for a node-to-node probe.
const ProbePath = "/probe"

// timeoutOffset is taken off Prometheus' scrape timeout, as
// blackbox_exporter's --timeout-offset default, so that the answer is
// written before Prometheus gives up on it.
const timeoutOffset = 0.5

// defaultScrapeTimeout is the budget of a call without Prometheus' header
// (blackbox_exporter's); the module's timeout is then what bounds it.
const defaultScrapeTimeout = 120.0

// maxRoundBytes bounds a target's answer: a round for 64 GPUs is a few
// hundred KiB.
const maxRoundBytes = 8 << 20

// ProbeHandler answers GET /probe?target=<host:port>&module=<name>: one
// session with the target as the prober, rendered in a registry of its
// own. A bad parameter is an HTTP error, as in blackbox_exporter; a session
// that did not run or failed is probe_success 0 with its reason.
func (n *Node) ProbeHandler() http.Handler { return n.guard(ProbePath, n.serveProbe) }

// maxProbes bounds the /probe calls answered at once: a node runs one
// session at a time, and a call beyond it only waits to try again (a
// ring's two probes of one node, the second replica of an HA pair), so a
// few are enough, and more get 503 at once rather than a goroutine each
// for the length of their budget.
const maxProbes = 4

// writeMargin is how long past its session's deadline an answer may take
// to be written: the server's write timeout is lifted to it for /probe
// and joins, whose answers come only when the session ends.
const writeMargin = 10 * time.Second

func (n *Node) serveProbe(w http.ResponseWriter, r *http.Request) {
	params := r.URL.Query()
	name := params.Get("module")
	if name == "" {
		name = DefaultModuleName
	}
	m, ok := n.cfg.Modules.Get(name)
	if !ok {
		http.Error(w, fmt.Sprintf("Unknown module %q", name), http.StatusBadRequest)
		return
	}
	timeout, err := probeTimeout(r, m)
	if err != nil {
		http.Error(w, fmt.Sprintf("Failed to parse timeout from Prometheus header: %s", err), http.StatusInternalServerError)
		return
	}
	target := params.Get("target")
	if target == "" {
		http.Error(w, "Target parameter is missing", http.StatusBadRequest)
		return
	}
	u, err := targetBase(target, m.TLS())
	if err != nil {
		http.Error(w, fmt.Sprintf("Invalid target %q: %s", target, err), http.StatusBadRequest)
		return
	}
	select {
	case n.probes <- struct{}{}:
		defer func() { <-n.probes }()
	default:
		http.Error(w, fmt.Sprintf("Too many node-to-node probes at once (%d); try again later", cap(n.probes)), http.StatusServiceUnavailable)
		return
	}
	// The answer comes when the session ends: the server's write timeout
	// would cut it.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout + writeMargin))
	// The clock starts before the deadline's: a probe cut at its timeout
	// lasted at least the timeout.
	start := n.now()
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	out := n.probe(ctx, u, target, name, m, timeout, start.Add(timeout))
	out.duration = n.now().Sub(start)
	logger := n.logger.With("module", name, "target", target, "duration_seconds", out.duration.Seconds(), "attempts", out.attempts)
	if out.reason == "" {
		logger.Debug("node-to-node probe succeeded", "results", spreads{out})
	} else {
		logger.Info("node-to-node probe failed", "reason", out.reason, "side", out.side, "detail", out.detail)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(out)
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

// probeTimeout is the session's budget: the module's timeout, or
// Prometheus' scrape timeout less timeoutOffset where that is shorter
// (blackbox_exporter's rule).
func probeTimeout(r *http.Request, m Module) (time.Duration, error) {
	seconds := defaultScrapeTimeout
	if v := r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, err
		}
		if f > 0 {
			seconds = f
		}
	}
	budget := seconds - timeoutOffset
	if mod := time.Duration(m.Timeout).Seconds(); mod < budget || budget <= 0 {
		budget = mod
	}
	return time.Duration(budget * float64(time.Second)), nil
}

// targetBase is the target's scheme://host:port, the base of its
// ReservePath and JoinPath. A target is host:port, or a URL with http or
// https and no path; https when it says so or the module has a
// tls_config.
func targetBase(target string, tls bool) (string, error) {
	scheme, hostport := "http", target
	if u, err := url.Parse(target); err == nil && u.Scheme != "" && u.Host != "" {
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", fmt.Errorf("scheme %q: want http or https", u.Scheme)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return "", errors.New("want host:port, or a URL with a scheme, host and port only")
		}
		scheme, hostport = u.Scheme, u.Host
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", fmt.Errorf("want host:port: %w", err)
	}
	if host == "" {
		return "", errors.New("no host")
	}
	if !validHost(host) {
		return "", fmt.Errorf("host %q: want an IP address or a DNS name", host)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("port %q: want 1 to 65535", port)
	}
	if tls {
		scheme = "https"
	}
	base := (&url.URL{Scheme: scheme, Host: hostport}).String()
	// What the requests to the target will parse: a target that fails
	// here is the caller's error (400), not an unreachable target.
	if _, err := url.Parse(base + ReservePath); err != nil {
		return "", err
	}
	return base, nil
}

// validHost reports whether host is an IP address (an IPv6 one with its
// zone) or a DNS name: dot-separated labels of letters, digits, '-' and
// '_' (as Kubernetes and Prometheus' service discovery give them), 1 to
// 63 long, 253 in all.
func validHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if len(host) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if len(label) == 0 || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// ran is what a child gave.
type ran struct {
	round *probes.CollectiveRound
	err   error
}

// joined is what the target answered; status is its HTTP status, 0 when
// no answer came (the request did not reach it, or the connection
// failed).
type joined struct {
	round          *probes.CollectiveRound
	rates          []float64
	reason, detail string
	status         int
}

// probe runs one session as the prober and says how it went. While
// either node is in another session it tries again after a jittered
// wait (retry.go), as long as what is left of the budget, ending at end,
// holds a session; the sessions counter counts the probe once, by how it
// ended.
func (n *Node) probe(ctx context.Context, u, target, name string, m Module, budget time.Duration, end time.Time) *outcome {
	var out *outcome
	// One client for every try. Never follow a redirect: the target is
	// host:port, and the module's credentials go there and nowhere else.
	hc := m.HTTPClient
	hc.FollowRedirects = false
	client, err := promconfig.NewClientFromConfig(hc, "node_probe")
	if err != nil {
		// Before any try: a module that cannot reach the target takes no
		// session lock and counts nothing toward the rate limit.
		out = &outcome{module: m, attempts: 1}
		out.fail(ReasonBadModule, SideProber, "http_client: "+err.Error())
		n.count(RoleProber, ResultFailed, out.reason)
		return out
	}
	defer client.CloseIdleConnections()
	for tries := 1; ; tries++ {
		start := n.now()
		out = n.try(ctx, client, u, target, name, m)
		out.attempts = tries
		if out.reason == "" {
			n.tookSession(name, n.now().Sub(start))
		}
		if out.reason != ReasonSession {
			break
		}
		wait, ok := n.retryWait(name, tries, budget, end)
		if !ok {
			out.detail += fmt.Sprintf(" (%d %s; too little of the probe's %s left for another session)", tries, plural(tries, "try", "tries"), budget)
			break
		}
		if !n.sleep(ctx, wait) {
			out.detail += fmt.Sprintf(" (%d %s; the probe ended while waiting to try again)", tries, plural(tries, "try", "tries"))
			break
		}
	}
	result := ResultFailed
	switch {
	case out.reason == "":
		result = ResultSuccess
	case isDecline(out.reason):
		result = ResultDeclined
	}
	n.count(RoleProber, result, out.reason)
	return out
}

// try is one try at a session as the prober. It holds this node's
// session lock from the start, so that a ring's probes that meet are
// declined_session on both sides (and try again) rather than reserving
// each other; it takes its GPUs only once the target has reserved
// itself, so that a target slow to answer holds no GPU and no probe round
// back. Whatever this node holds is let go of before a reservation it
// will not use is given back, and the give-back runs on its own
// (giveBack): the outcome is settled without it.
func (n *Node) try(ctx context.Context, client *http.Client, u, target, name string, m Module) *outcome {
	out := &outcome{module: m}
	unlock, reason, detail := n.lockProber()
	if reason != "" {
		out.fail(reason, SideProber, detail)
		return out
	}
	if n.locked != nil {
		n.locked()
	}
	token := n.finish(ctx, out, client, u, target, name, m, unlock)
	if out.reason != "" && !isDecline(out.reason) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// Whatever failed first, the deadline is what ended the session:
		// a child cut off mid-operation, a target that did not answer.
		out.reason = ReasonTimeout
	}
	if token != "" {
		n.giveBack(ctx, client, u, token)
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// finish runs a session whose session lock this node holds (unlock lets
// go of it): the target's reservation, this node's GPUs, both children,
// its own and the target's through the join call. It lets go of all it
// took before it returns, and returns the token of a reservation the
// target still holds for a join that will not come ("" when none).
func (n *Node) finish(ctx context.Context, out *outcome, client *http.Client, u, target, name string, m Module, unlock func()) (giveBack string) {
	defer unlock()
	k := m.GPUsPerNode
	opts := sessionOptions(m, time.Until(deadlineOf(ctx)))
	// The target first, so that no child starts, and no GPU is held, for
	// a target that declines (reserve.go).
	token, reason, detail := n.reserve(ctx, client, u, ReserveRequest{Version: JoinVersion, Module: name,
		Options: opts, Prober: n.cfg.Name})
	if reason != "" {
		out.fail(reason, SideTarget, detail)
		return ""
	}
	gpus, release, reason, detail := n.takeGPUs(k)
	if reason != "" {
		out.fail(reason, SideProber, detail)
		return token
	}
	defer release()
	// Both nodes are in: the session runs, and spends this node's
	// --node-probe.min-interval as prober.
	n.started(RoleProber, n.now())
	out.gpus, out.localRates = gpus, n.nicRates(gpus)
	o := opts.collectiveOptions(busIDs(gpus), 0, "", target)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ids := make(chan string, 1)
	localc := make(chan ran, 1)
	go func() {
		rnd, err := n.cfg.Runner.RunCollectives(sctx, o, ids)
		localc <- ran{rnd, err}
	}()

	var id string
	select {
	case id = <-ids:
	case l := <-localc:
		out.local = l.round
		r, d := childFailure(ctx, l, "this node's child ended before making an NCCL unique id")
		out.fail(r, SideProber, d)
		return token
	case <-ctx.Done():
		cancel()
		out.local = (<-localc).round
		out.fail(ReasonTimeout, SideProber, "no NCCL unique id from this node's child before the deadline")
		return token
	}
	left := time.Until(deadlineOf(ctx))
	req := JoinRequest{Version: JoinVersion, ID: id, Ranks: 2 * k, FirstRank: k, Module: name,
		Options: sessionOptions(m, left), Prober: n.cfg.Name, Reservation: token}
	joinc := make(chan joined, 1)
	go func() { joinc <- n.join(sctx, client, u, req) }()

	// Whichever side fails first ends the other: a declined or failed
	// join cancels this node's child, and a failed child or a result
	// without a value cancels the join, which the target sees as its
	// request ending: it counts the session failed too.
	var j joined
	var l ran
	joinFirst, localFailed := false, ""
	select {
	case j = <-joinc:
		joinFirst = true
		if j.reason != "" || j.round.Error != "" {
			cancel()
		}
		l = <-localc
	case l = <-localc:
		if r, _ := childFailure(ctx, l, ""); r != "" {
			cancel()
		} else if localFailed = roundFailure(l.round); localFailed != "" {
			cancel()
		}
		j = <-joinc
	}
	// A target that answered the join with anything but its round (a
	// decline, a refusal, a proxy's error) may still hold the reservation.
	if j.status != http.StatusOK {
		giveBack = token
	}
	out.local, out.remote, out.remoteRates = l.round, j.round, j.rates
	if isDecline(j.reason) {
		// No session took place: whatever this node's child measured
		// without a peer (the simulated node's model can) is no result
		// of one.
		out.local = nil
	}
	// The side that failed first is the session's reason: the other was
	// cancelled for it.
	switch {
	case joinFirst && j.reason != "":
		out.fail(j.reason, SideTarget, j.detail)
		return giveBack
	case joinFirst && j.round.Error != "":
		out.fail(ReasonNCCLError, SideTarget, "target: "+j.round.Error)
		return giveBack
	}
	if r, d := childFailure(ctx, l, ""); r != "" {
		out.fail(r, SideProber, "this node: "+d)
		return giveBack
	}
	if localFailed != "" {
		out.fail(ReasonNCCLError, SideProber, "this node: "+localFailed)
		return giveBack
	}
	if j.reason != "" {
		out.fail(j.reason, SideTarget, j.detail)
		return giveBack
	}
	if j.round.Error != "" {
		out.fail(ReasonNCCLError, SideTarget, "target: "+j.round.Error)
		return giveBack
	}
	out.check()
	return giveBack
}

// childFailure is why a child's run gave no usable round ("" when it did);
// none says what to say when it ended without a word.
func childFailure(ctx context.Context, l ran, none string) (reason, detail string) {
	reason = ReasonNCCLError
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		reason = ReasonTimeout
	}
	switch {
	case l.err != nil:
		return reason, l.err.Error()
	case l.round == nil:
		return reason, "the child gave no round"
	case l.round.Error != "":
		return reason, l.round.Error
	case none != "":
		return reason, none
	}
	return "", ""
}

func deadlineOf(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Now().Add(MaxTimeout)
	}
	return d
}

// join asks the target at base to join and waits for its round.
func (n *Node) join(ctx context.Context, client *http.Client, base string, req JoinRequest) joined {
	resp, b, reason, detail := n.call(ctx, client, http.MethodPost, base+JoinPath, req)
	if reason != "" {
		return joined{reason: reason, detail: detail}
	}
	defer resp.Body.Close()
	var j joined
	if resp.StatusCode == http.StatusOK {
		j = readRound(b, req)
	} else {
		j.reason, j.detail = answerFailure(resp, b, JoinPath)
	}
	j.status = resp.StatusCode
	return j
}

// transportReason is why a call failed below HTTP: its deadline, or the
// network.
func transportReason(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ReasonTimeout
	}
	return ReasonUnreachable
}

// readRound reads a target's answer and checks it is the session's.
func readRound(b []byte, req JoinRequest) joined {
	var resp JoinResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		return joined{reason: ReasonBadResponse, detail: "the target's answer: " + err.Error()}
	}
	r, k := resp.Round, req.Options.GPUsPerNode
	if r == nil {
		return joined{reason: ReasonBadResponse, detail: "the target's answer has no round"}
	}
	if r.Version != probes.CollectiveContractVersion || r.Ranks != req.Ranks || r.FirstRank != req.FirstRank || len(r.GPUs) != k {
		return joined{reason: ReasonBadResponse, detail: fmt.Sprintf(
			"the target's round is version %d with ranks %d from %d on %d GPUs; want version %d, ranks %d from %d on %d GPUs",
			r.Version, r.Ranks, r.FirstRank, len(r.GPUs), probes.CollectiveContractVersion, req.Ranks, req.FirstRank, k)}
	}
	if why := checkTransports(r.Transports, req.Ranks); why != "" {
		return joined{reason: ReasonBadResponse, detail: "the target's round: " + why}
	}
	if len(resp.NICBytesPerSecond) != k {
		return joined{reason: ReasonBadResponse, detail: fmt.Sprintf("the target's answer has %d NIC rates for %d GPUs", len(resp.NICBytesPerSecond), k)}
	}
	for _, v := range resp.NICBytesPerSecond {
		if v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return joined{reason: ReasonBadResponse, detail: fmt.Sprintf("the target's NIC rate %g", v)}
		}
	}
	return joined{round: r, rates: resp.NICBytesPerSecond}
}

// targetReason reports whether a target may give reason for not joining
// or failing.
func targetReason(reason string) bool {
	switch reason {
	case ReasonBusy, ReasonSession, ReasonRateLimited, ReasonUnavailable, ReasonNCCLError, ReasonTimeout:
		return true
	}
	return false
}

// isDecline reports whether reason is a node declining (either one),
// rather than a session failing.
func isDecline(reason string) bool { return slices.Contains(declineReasons, reason) }

// Package nodeprobe runs node-to-node probes paired by Prometheus, in
// blackbox_exporter's multi-target style. GET /probe?target=&module= makes
// this exporter the prober: its NCCL child makes a unique id, the target
// exporter is asked over HTTP(S) to join with it on POST
// /node-probe/join, both children run the module's collectives across the
// two nodes, and the answer is one registry's worth of metrics
// (probe_success, probe_duration_seconds, gpulink_node_probe_*). A node
// takes part in one session at a time, never while its own probe round
// runs, only with GPUs its probe policy finds idle, and at most once per
// --node-probe.min-interval in each role.
package nodeprobe

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// Gate gives a session this node's GPUs, or says why not. The probe
// scheduler is the real one: a session holds its round lock, so it never
// overlaps a probe round, and takes only GPUs its policy finds idle.
type Gate interface {
	// TryAcquire picks the first n GPUs in PCI address order, among only
	// (PCI addresses; empty: all), that are idle, without waiting. On
	// success release gives them back; on failure reason says why (one of
	// probes' skip or Session* reasons).
	TryAcquire(n int, only []string) (gpus []schedule.SessionGPU, release func(), reason string)
}

// Roles a node takes in a session: gpulink_node_probe_sessions_total's
// role label.
const (
	RoleProber = "prober"
	RoleTarget = "target"
)

// Session results: gpulink_node_probe_sessions_total's result label.
const (
	ResultSuccess  = "success"
	ResultFailed   = "failed"
	ResultDeclined = "declined"
)

// Config is what a Node runs with.
type Config struct {
	// Modules are the modules /probe may name.
	Modules *Modules
	// Runner runs this node's part of a session: the NCCL child, or the
	// simulated node's model. Nil: the node declines every session
	// (declined_unavailable), as a node without NCCL would.
	Runner probes.CollectiveRunner
	// Gate gives sessions their GPUs; nil declines every session.
	Gate Gate
	// GPUs are the PCI addresses sessions may use (--node-probe.gpu);
	// empty: every GPU. Two exporters sharing a host each own some.
	GPUs []string
	// MinInterval is the least time between the starts of two sessions
	// in one role; 0 is no limit.
	MinInterval time.Duration
	// Name names this node to the target (its round's peer).
	Name string
	// NICRate is what the NIC nearest a GPU (by PCI address) carries, one
	// direction, in bytes per second; 0 when unknown. Nil: unknown.
	NICRate func(gpu string) float64
	// Token is the ring's shared token (auth.go): every request to
	// /probe, ReservePath and JoinPath must carry it, and this node sends
	// it to its targets. Empty: no authentication beyond the web config.
	Token string
	// WebBasicAuth says the web config checks basic auth: a /probe call
	// that carries it passed that check (auth.go).
	WebBasicAuth bool
	Logger       *slog.Logger
}

// Node is this exporter's side of node-to-node probes: the prober of
// /probe and the target of /node-probe/join, sharing one session lock and
// one gate. It counts its sessions, reservations and declines as a
// prometheus.Collector.
type Node struct {
	cfg    Config
	logger *slog.Logger

	// session is held through a session in either role: one at a time.
	session sync.Mutex

	mu   sync.Mutex
	last map[string]time.Time     // start of the latest session, by role
	took map[string]time.Duration // the latest successful session as prober, by module
	// reserved is the session entered for a prober's join to come
	// (reserve.go); nil when none is.
	reserved *reservation
	// remotes are the remotes whose reservations expired unjoined, by
	// host: each is declined until its lockout ends (reserve.go).
	remotes map[string]*lockout

	sessions     *prometheus.CounterVec
	declines     *prometheus.CounterVec
	reservations prometheus.Counter
	ended        *prometheus.CounterVec
	// unauthenticated counts requests refused for want of the token.
	unauthenticated *prometheus.CounterVec

	// bodyTimeout bounds reading a request's body (readStrict).
	bodyTimeout time.Duration
	// reserveHold bounds a reservation's hold (maxReserveHold).
	reserveHold time.Duration
	// probes holds a slot for each /probe being answered (maxProbes).
	probes chan struct{}
	// giving counts give-backs still under way (giveBack), for the tests.
	giving sync.WaitGroup

	// Seams for the tests.
	now   func() time.Time
	rand  func() float64 // in [0, 1)
	sleep func(ctx context.Context, d time.Duration) bool
	// locked, when set, is called as a prober has taken its session lock
	// and before it asks the target; unlocking before it lets go of it.
	locked, unlocking func()
}

// The declined_* reasons: a node declining (isDecline), rather than a
// session failing. Declines are counted by them, every series from the
// start.
var declineReasons = []string{ReasonBusy, ReasonSession, ReasonRateLimited, ReasonUnavailable, ReasonDisabled}

// How a reservation ends: gpulink_node_probe_reservations_ended_total's
// how label.
const (
	EndJoined    = "joined"     // its join came and the session ran
	EndExpired   = "expired"    // no join within its hold
	EndGivenBack = "given_back" // the prober gave it back unused
	EndRefused   = "refused"    // its join did not match it, and was refused
)

// New makes the node's side of node-to-node probes.
func New(cfg Config) *Node {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Modules == nil {
		cfg.Modules = NewModules(DefaultFile())
	}
	n := &Node{
		cfg:     cfg,
		logger:  cfg.Logger.With("source", "node-probe"),
		last:    map[string]time.Time{},
		took:    map[string]time.Duration{},
		remotes: map[string]*lockout{},
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpulink_node_probe_sessions_total",
			Help: "Node-to-node probe sessions this exporter took part in, by role (prober: it answered /probe; target: it was " +
				"asked to reserve itself or join) and result (success; failed: a child failed, timed out or gave a result without a " +
				"value; declined: a node was busy, in another session, rate limited or unable to take part).",
		}, []string{"role", "result"}),
		declines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpulink_node_probe_declines_total",
			Help: "Node-to-node sessions declined, by role (prober: a probe of this node's ended declined, by its own node or the " +
				"target; target: this node declined a reservation or join) and reason.",
		}, []string{"role", "reason"}),
		reservations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpulink_node_probe_reservations_total",
			Help: "Reservations this node made as target: its session, GPUs and round lock held for a prober's join.",
		}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpulink_node_probe_reservations_ended_total",
			Help: "Reservations this node made as target, by how they ended (joined; expired: no join within the hold; " +
				"given_back: the prober gave it back unused; refused: its join did not match it).",
		}, []string{"how"}),
		unauthenticated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpulink_node_probe_unauthenticated_requests_total",
			Help: "Requests to /probe, /node-probe/reserve and /node-probe/join refused (401) before anything else because they " +
				"lacked the node-to-node token (--node-probe.token-file), by path and reason (missing, wrong).",
		}, []string{"path", "reason"}),
		bodyTimeout: defaultBodyTimeout,
		reserveHold: maxReserveHold,
		probes:      make(chan struct{}, maxProbes),
		now:         time.Now,
		rand:        rand.Float64,
		sleep:       schedule.SleepUnlessDone,
	}
	// Every series from the start, so the first of each is an increase.
	for _, role := range []string{RoleProber, RoleTarget} {
		for _, result := range []string{ResultSuccess, ResultFailed, ResultDeclined} {
			n.sessions.WithLabelValues(role, result)
		}
		for _, reason := range declineReasons {
			n.declines.WithLabelValues(role, reason)
		}
	}
	for _, how := range []string{EndJoined, EndExpired, EndGivenBack, EndRefused} {
		n.ended.WithLabelValues(how)
	}
	if cfg.Token != "" {
		for _, path := range Paths {
			for _, why := range []string{AuthMissing, AuthWrong} {
				n.unauthenticated.WithLabelValues(path, why)
			}
		}
	}
	return n
}

func (n *Node) collectors() []prometheus.Collector {
	return []prometheus.Collector{n.sessions, n.declines, n.reservations, n.ended, n.unauthenticated}
}

// Describe implements prometheus.Collector.
func (n *Node) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range n.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (n *Node) Collect(ch chan<- prometheus.Metric) {
	for _, c := range n.collectors() {
		c.Collect(ch)
	}
}

// count counts a session's result in role; a decline also by its reason.
func (n *Node) count(role, result, reason string) {
	n.sessions.WithLabelValues(role, result).Inc()
	if result == ResultDeclined {
		n.declines.WithLabelValues(role, reason).Inc()
	}
}

// hold is a session this node has entered: its GPUs and how to leave.
type hold struct {
	gpus    []schedule.SessionGPU
	release func()
}

// rateLimited says why a session in role starting now is declined by
// --node-probe.min-interval; "" when it is not. The answer names no time:
// when the node is free again is no caller's business, and the log has
// it.
func (n *Node) rateLimited(role string, now time.Time) string {
	n.mu.Lock()
	last := n.last[role]
	n.mu.Unlock()
	if n.cfg.MinInterval <= 0 || last.IsZero() || now.Sub(last) >= n.cfg.MinInterval {
		return ""
	}
	n.logger.Debug("node-to-node session inside --node-probe.min-interval", "role", role, "last_started_ago", now.Sub(last),
		"min_interval", n.cfg.MinInterval)
	return "this node's last session as " + role + " ran less than --node-probe.min-interval ago"
}

// started records that a session in role ran from at: only a session
// that ran spends a node's --node-probe.min-interval, so that a decline,
// a give-back, an expiry or an unreachable target spends nobody's.
func (n *Node) started(role string, at time.Time) {
	n.mu.Lock()
	n.last[role] = at
	n.mu.Unlock()
}

// lockProber takes the session lock for a try of a probe, unless this
// node's last session as prober is inside --node-probe.min-interval. The
// probe spends the interval only once it runs (finish). On failure
// nothing is held.
func (n *Node) lockProber() (unlock func(), reason, detail string) {
	if !n.session.TryLock() {
		return nil, ReasonSession, "this node is already in a node-to-node session"
	}
	if why := n.rateLimited(RoleProber, n.now()); why != "" {
		n.session.Unlock()
		return nil, ReasonRateLimited, why
	}
	return func() {
		if n.unlocking != nil {
			n.unlocking()
		}
		n.session.Unlock()
	}, "", ""
}

// takeGPUs takes k GPUs through the gate; on failure reason is one of the
// declined_* reasons and detail says more.
func (n *Node) takeGPUs(k int) (gpus []schedule.SessionGPU, release func(), reason, detail string) {
	switch {
	case n.cfg.Runner == nil:
		return nil, nil, ReasonUnavailable, "this exporter has no collective runner"
	case n.cfg.Gate == nil:
		return nil, nil, ReasonUnavailable, "this exporter does not probe its GPUs (no NVML, or --probe.policy=off)"
	}
	gpus, release, why := n.cfg.Gate.TryAcquire(k, n.cfg.GPUs)
	if why != "" {
		return nil, nil, gateReason(why), "GPUs: " + why
	}
	return gpus, release, "", ""
}

// enterTarget takes the session lock, the target's rate limit (and
// remote's lockout) and k GPUs, in that order, for a reservation or a
// join from remote; on failure reason is one of the declined_* reasons,
// detail says more, and nothing is held. It spends nothing: the join
// that runs the session does (startTarget).
func (n *Node) enterTarget(k int, remote string) (h *hold, reason, detail string) {
	if !n.session.TryLock() {
		return nil, ReasonSession, "this node is already in a node-to-node session"
	}
	now := n.now()
	why := n.rateLimited(RoleTarget, now)
	if why == "" {
		why = n.lockedOut(remote, now)
	}
	if why != "" {
		n.session.Unlock()
		return nil, ReasonRateLimited, why
	}
	gpus, release, reason, detail := n.takeGPUs(k)
	if reason != "" {
		n.session.Unlock()
		return nil, reason, detail
	}
	return &hold{gpus: gpus, release: sync.OnceFunc(func() { release(); n.session.Unlock() })}, "", ""
}

// gateReason sorts the gate's reason: the GPUs are busy (try again
// later), or the node cannot take part as it is.
func gateReason(why string) string {
	switch why {
	case schedule.SkipBusyProcess, schedule.SkipBusyUtilization, schedule.SessionRoundRunning:
		return ReasonBusy
	}
	return ReasonUnavailable
}

func busIDs(gpus []schedule.SessionGPU) []string {
	out := make([]string, len(gpus))
	for i, g := range gpus {
		out[i] = g.PCIBusID
	}
	return out
}

// nicRates are what the NIC nearest each of gpus carries (0 unknown),
// in their order: this node's side of every path of a session.
func (n *Node) nicRates(gpus []schedule.SessionGPU) []float64 {
	out := make([]float64, len(gpus))
	if n.cfg.NICRate == nil {
		return out
	}
	for i, g := range gpus {
		out[i] = n.cfg.NICRate(g.PCIBusID)
	}
	return out
}

// slowest is the lowest of rates; 0 when any is unknown or there are none.
func slowest(rates ...float64) float64 {
	out := 0.0
	for i, r := range rates {
		if r <= 0 {
			return 0
		}
		if i == 0 || r < out {
			out = r
		}
	}
	return out
}

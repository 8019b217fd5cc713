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
	Logger  *slog.Logger
}

// Node is this exporter's side of node-to-node probes: the prober of
// /probe and the target of /node-probe/join, sharing one session lock and
// one gate. It counts its sessions as a prometheus.Collector.
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

	sessions *prometheus.CounterVec

	// Seams for the tests.
	now   func() time.Time
	rand  func() float64 // in [0, 1)
	sleep func(ctx context.Context, d time.Duration) bool
}

// New makes the node's side of node-to-node probes.
func New(cfg Config) *Node {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Modules == nil {
		cfg.Modules = NewModules(DefaultFile())
	}
	n := &Node{
		cfg:    cfg,
		logger: cfg.Logger.With("source", "node-probe"),
		last:   map[string]time.Time{},
		took:   map[string]time.Duration{},
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpulink_node_probe_sessions_total",
			Help: "Node-to-node probe sessions this exporter took part in, by role (prober: it answered /probe; target: it was " +
				"asked to join) and result (success; failed: a child failed, timed out or gave a result without a value; " +
				"declined: a node was busy, in another session, rate limited or unable to take part).",
		}, []string{"role", "result"}),
		now:   time.Now,
		rand:  rand.Float64,
		sleep: schedule.SleepUnlessDone,
	}
	// Every series from the start, so the first of each is an increase.
	for _, role := range []string{RoleProber, RoleTarget} {
		for _, result := range []string{ResultSuccess, ResultFailed, ResultDeclined} {
			n.sessions.WithLabelValues(role, result)
		}
	}
	return n
}

// Describe implements prometheus.Collector.
func (n *Node) Describe(ch chan<- *prometheus.Desc) { n.sessions.Describe(ch) }

// Collect implements prometheus.Collector.
func (n *Node) Collect(ch chan<- prometheus.Metric) { n.sessions.Collect(ch) }

func (n *Node) count(role, result string) { n.sessions.WithLabelValues(role, result).Inc() }

// hold is a session this node has entered: its GPUs and how to leave.
type hold struct {
	gpus    []schedule.SessionGPU
	release func()
	// forget takes the session's start back from its role's rate limit,
	// for a session that never took place (the target declined): a
	// prober is not held back by a try that was declined.
	forget func()
}

// enter takes the session lock, the role's rate limit and k GPUs, in that
// order; on failure reason is one of the declined_* reasons, detail says
// more, and nothing is held.
func (n *Node) enter(role string, k int) (h *hold, reason, detail string) {
	if !n.session.TryLock() {
		return nil, ReasonSession, "this node is already in a node-to-node session"
	}
	entered := false
	defer func() {
		if !entered {
			n.session.Unlock()
		}
	}()
	now := n.now()
	n.mu.Lock()
	last := n.last[role]
	n.mu.Unlock()
	if n.cfg.MinInterval > 0 && !last.IsZero() && now.Sub(last) < n.cfg.MinInterval {
		return nil, ReasonRateLimited, "the last session as " + role + " started " + now.Sub(last).Round(time.Millisecond).String() +
			" ago; --node-probe.min-interval is " + n.cfg.MinInterval.String()
	}
	switch {
	case n.cfg.Runner == nil:
		return nil, ReasonUnavailable, "this exporter has no collective runner"
	case n.cfg.Gate == nil:
		return nil, ReasonUnavailable, "this exporter does not probe its GPUs (no NVML, or --probe.policy=off)"
	}
	gpus, release, why := n.cfg.Gate.TryAcquire(k, n.cfg.GPUs)
	if why != "" {
		return nil, gateReason(why), "GPUs: " + why
	}
	n.mu.Lock()
	n.last[role] = now
	n.mu.Unlock()
	entered = true
	forget := func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		// Unless another session in the role has started since.
		if n.last[role].Equal(now) {
			n.last[role] = last
		}
	}
	return &hold{gpus: gpus, release: func() { release(); n.session.Unlock() }, forget: forget}, "", ""
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

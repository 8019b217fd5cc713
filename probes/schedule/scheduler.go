package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/probes"
)

// Policies say which GPUs a round may probe.
const (
	// PolicyIdle probes a GPU only when no other compute process holds it
	// and NVML reports it (nearly) unused: a probe moves tens of GB and
	// would slow, and be slowed by, real work.
	PolicyIdle = "idle"
	// PolicyAlways probes busy GPUs too, for nodes drained for a health
	// check. Compute modes that would refuse the probe's context, and MIG,
	// are still skipped.
	PolicyAlways = "always"
	PolicyOff    = "off"
)

// Policies lists the valid policies, the default first.
var Policies = []string{PolicyIdle, PolicyAlways, PolicyOff}

// SchedulerConfig configures a Scheduler. A zero Policy, Interval or
// Timeout means its default; Jitter, MaxDuty, UtilizationThreshold and
// Options have none, 0 being a setting of its own or invalid (the daemon's
// flags default to DefaultJitter, DefaultMaxDuty and
// DefaultUtilizationThreshold).
type SchedulerConfig struct {
	Policy string // default idle
	// Interval is the time between rounds, jittered by Jitter either way
	// (default 10m).
	Interval time.Duration
	// Jitter is the fraction of Interval and FirstDelay added or taken
	// at random (0 to 0.5), so that a fleet restarted at once does not
	// probe in step. 0 is none: rounds exactly every Interval, for one
	// node or a bench that must know when its rounds come.
	Jitter float64
	// FirstDelay is the wait before the first round (jittered; zero is
	// none). The daemon's flag defaults to 1m: the NVML and process
	// samples a round decides on need to exist, and a daemon in a crash
	// loop should not probe on every start.
	FirstDelay time.Duration
	// Timeout bounds one child run (default 60s).
	Timeout time.Duration
	// Options is the template of every run: Probes, SizeBytes, Samples,
	// which must be valid (Options.Validate; zero is not a default). GPU,
	// Peers and HostNodes are filled per GPU.
	Options probes.Options
	// UtilizationThreshold is the NVML utilization (0..1) above which the
	// idle policy leaves a GPU alone and a round counts as contended: 0
	// makes any utilisation busy, 1 none.
	UtilizationThreshold float64

	Runner probes.RoundRunner
	// GPUs returns the latest NVML sample; nil when there is none.
	GPUs func() *nvml.Snapshot
	// Ready, when set, is what else the first round waits for besides an
	// NVML sample with a GPU: the topology's first sample, say, without
	// which host buffers would go unbound.
	Ready func() bool
	// GPUsTaken, if set, is when the sample GPUs returns was taken. NVML's
	// utilisation is an average over up to a second before it is read, so
	// a sample taken while a GPU's own probes ran, or just after, counts
	// their kernels; with GPUsTaken such a sample's utilisation is not
	// taken for another's work. Without it every sample's is.
	GPUsTaken func() time.Time
	// Processes lists the compute processes on every GPU now. It is
	// asked right before each GPU is probed (under the idle policy, to
	// leave a busy GPU alone: a sample minutes old would miss a job that
	// just started), every 250 ms while the probe child runs and once
	// after, to tell whether another process shared the GPU or a peer
	// with the probes (a contended round). Each listing may take 2 s at
	// most; one that hangs counts as failed and holds nothing up. Required
	// under the idle policy; without it, contention is judged from
	// utilisation and the samples' spread alone.
	Processes func() ([]nvml.Process, error)
	// HostNodes returns the NUMA nodes to bind the host buffer to in turn,
	// the GPU's own node first; nil (or a nil func) means unbound.
	HostNodes func(gpuBusID string) []int
	// Annotate fills in what each result should give; may be nil.
	Annotate func(*probes.GPURound)
	Logger   *slog.Logger
	// MaxDuty bounds the share of a GPU's time the probes take, more than
	// 0 and at most 1 (no bound): when a round's most loaded GPU spent L
	// GPU seconds on probes, the next round waits at least L / MaxDuty.
	MaxDuty float64

	// CollectiveRunner runs the node's collective rounds (NCCL over every
	// usable GPU, after a pass); nil turns them off.
	CollectiveRunner probes.CollectiveRunner
	// CollectiveInterval is the least time between collective rounds
	// (default 1h), jittered like Interval and stretched by MaxDuty alike.
	CollectiveInterval time.Duration
	// CollectiveTimeout bounds one collective run (default 5m).
	CollectiveTimeout time.Duration
	// CollectiveOptions is the template of every collective round: sizes,
	// warm-up, iterations, samples and collectives. GPUs, Ranks,
	// FirstRank, UniqueID and Peer are filled per round.
	CollectiveOptions probes.CollectiveOptions
	// CollectiveAnnotate fills in what each result of a collective round
	// should give (ExpectedBusBytesPerSecond) and says which transport
	// each ordered pair of its GPUs should use; may be nil.
	CollectiveAnnotate func(*probes.CollectiveRound) []probes.PairTransport
}

// Scheduler decides when and which GPUs to probe, runs the probes one GPU
// at a time, and keeps their results and its counters.
type Scheduler struct {
	cfg    SchedulerConfig
	logger *slog.Logger

	// Seams for the tests.
	now       func() time.Time
	rand      func() float64 // in [0, 1)
	sleep     func(ctx context.Context, d time.Duration) bool
	pollEvery time.Duration // how often the process list is read during a run

	// lister makes the process listings, one at a time, each bounded;
	// nil without cfg.Processes.
	lister *probes.ProcessLister

	// roundMu is held through a round: two rounds at once would run two
	// children at once, and probes sharing an uplink would measure each
	// other.
	roundMu sync.Mutex

	mu   sync.Mutex
	gpus map[string]*gpuEntry // by gpuKey
	// probedUntil is when the latest run that measured on each GPU, as
	// the GPU probed or as a peer, ended (by gpuKey): NVML utilisation
	// read until a second after it may show the probes' own work.
	probedUntil  map[string]time.Time
	ran          bool // something was run or skipped
	errors       uint64
	maxLoad      float64 // the latest round's most loaded GPU, GPU seconds
	lastSuccess  time.Time
	lastDuration time.Duration

	// coll is the collective rounds' state (under mu); nil when they are
	// off.
	coll *collectiveState

	latest  atomic.Pointer[sampler.Snapshot[*Status]]
	version atomic.Uint64
	// published are called after each new status, under mu to add.
	published []func()
}

type gpuEntry struct {
	st GPUStatus
	// down is true when the GPU's latest run timed out or crashed.
	down bool
}

// NewScheduler fills in cfg's defaults and checks it (Validate, then the
// wiring). An error names what is wrong: for a value, the daemon's flag
// and what it takes.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Policy != PolicyOff {
		switch {
		case cfg.Runner == nil:
			return nil, errors.New("probe scheduler has no runner")
		case cfg.GPUs == nil:
			return nil, errors.New("probe scheduler has no NVML sample to decide on")
		case cfg.Policy == PolicyIdle && cfg.Processes == nil:
			return nil, errors.New("probe policy idle needs the GPU process list")
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Scheduler{
		cfg:       cfg,
		logger:    cfg.Logger.With("source", "probe"),
		now:       time.Now,
		rand:      rand.Float64,
		sleep:     SleepUnlessDone,
		pollEvery: probes.ProcessPoll,
		gpus:      map[string]*gpuEntry{},

		probedUntil: map[string]time.Time{},
	}
	if cfg.Processes != nil {
		s.lister = probes.NewProcessLister(cfg.Processes, probes.ProcessListLimit)
	}
	if cfg.CollectiveRunner != nil {
		s.coll = newCollectiveState()
	}
	s.publish() // the policy is known before any round
	return s, nil
}

// SleepUnlessDone waits d, or less when ctx ends first: then it returns
// false. The scheduler's waits and the node-to-node prober's retries use
// it, each as a seam their tests swap.
func SleepUnlessDone(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Policy is the policy in force.
func (s *Scheduler) Policy() string { return s.cfg.Policy }

// Run runs rounds until ctx ends: the first after FirstDelay and once
// the first NVML sample is there, then one every Interval, both jittered.
// Under policy off it returns at once.
func (s *Scheduler) Run(ctx context.Context) {
	if s.cfg.Policy == PolicyOff {
		return
	}
	if !s.sleep(ctx, s.jittered(s.cfg.FirstDelay)) {
		return
	}
	if !s.waitForGPUs(ctx) {
		return
	}
	for {
		s.RunRound(ctx)
		if !s.sleep(ctx, s.nextDelay()) {
			return
		}
	}
}

// How often the first round looks for the first NVML sample: soon after
// start, since the sampler takes its first at once, then less often, for
// a driver that is not loaded yet.
const (
	firstSamplePoll    = 50 * time.Millisecond
	firstSampleMaxPoll = time.Second
)

// waitForGPUs waits until the NVML sample has a GPU (and Ready, if set,
// says the rest is there), so that a round
// started before the first sample (a zero first delay) is not a round that
// probes nothing followed by a whole interval's wait. It polls: GPUs is
// any func returning the latest sample (the sampler's LatestData), which
// has nothing to wait on, and each look is one atomic load, at most once a
// second; the round starts at most firstSampleMaxPoll after the sample.
// It returns false when ctx ends first.
func (s *Scheduler) waitForGPUs(ctx context.Context) bool {
	d := firstSamplePoll
	for {
		if snap := s.cfg.GPUs(); snap != nil && len(snap.GPUs) > 0 && (s.cfg.Ready == nil || s.cfg.Ready()) {
			return true
		}
		if d == firstSamplePoll {
			s.logger.Debug("waiting for the first NVML sample with a GPU before the first round")
		}
		if !s.sleep(ctx, d) {
			return false
		}
		d = min(2*d, firstSampleMaxPoll)
	}
}

// nextDelay is the jittered interval, stretched where the last round's
// most loaded GPU would otherwise spend more than MaxDuty of its time on
// probes: a machine with many GPUs and peers costs each GPU more per round,
// so its rounds come less often.
func (s *Scheduler) nextDelay() time.Duration {
	d := s.jittered(s.cfg.Interval)
	s.mu.Lock()
	load := s.maxLoad
	s.mu.Unlock()
	if floor := time.Duration(load / s.cfg.MaxDuty * float64(time.Second)); floor > d {
		s.logger.Debug("probe interval stretched to keep the duty cycle", "interval", floor, "gpu_seconds", load, "max_duty", s.cfg.MaxDuty)
		return s.jittered(floor)
	}
	return d
}

// jittered is d moved by up to Jitter of itself either way.
func (s *Scheduler) jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 + s.cfg.Jitter*(2*s.rand()-1)))
}

// roundPass is what one pass over the GPUs carries from GPU to GPU.
type roundPass struct {
	// load is the GPU time each GPU spent on probes this round, by PCI
	// address: its own, and other GPUs' peer probes against it.
	load map[string]float64
	// snap is taken once, at the start: later samples could show this
	// round's own probes as utilization.
	snap   *nvml.Snapshot
	failed bool // a run timed out, crashed or errored
	// What the pass's one INFO line says (per GPU detail is at DEBUG):
	// GPUs probed, skipped by reason, and those whose results shared the
	// GPU with other work or whose run failed, by index.
	probed          int
	skipped         map[string]int
	contended, fail []int
}

// logSummary is the pass's one line at INFO: a node probed every 10
// minutes with jobs on its GPUs would otherwise log a line per GPU per
// pass (issue 38). A failed run is also logged on its own, at WARN.
func (s *Scheduler) logSummary(rd *roundPass, took time.Duration) {
	args := []any{"gpus", len(rd.snap.GPUs), "probed", rd.probed, "took", took.Round(time.Millisecond)}
	if len(rd.skipped) > 0 {
		args = append(args, "skipped", rd.skipped)
	}
	if len(rd.contended) > 0 {
		args = append(args, "contended_gpus", rd.contended)
	}
	if len(rd.fail) > 0 {
		args = append(args, "failed_gpus", rd.fail)
	}
	s.logger.Info("probe round", args...)
}

// RunRound runs one pass: every GPU in the NVML sample's order, one at a
// time, each probed or skipped by the policy. The status is published
// after each GPU.
func (s *Scheduler) RunRound(ctx context.Context) {
	if s.cfg.Policy == PolicyOff {
		return
	}
	s.roundMu.Lock()
	defer s.roundMu.Unlock()
	snap := s.cfg.GPUs()
	if snap == nil || len(snap.GPUs) == 0 {
		s.logger.Debug("no NVML sample yet, nothing to probe")
		return
	}
	start := s.now()
	rd := &roundPass{snap: snap, load: map[string]float64{}, skipped: map[string]int{}}
	s.skipMissing(snap)
	for i := range snap.GPUs {
		if ctx.Err() != nil {
			return
		}
		s.visit(ctx, rd, &snap.GPUs[i])
		s.publish()
	}
	s.logSummary(rd, s.now().Sub(start))
	// The collective round, when due, follows the pass under the same
	// lock: no probe child runs beside it.
	if s.coll != nil && ctx.Err() == nil && s.collectiveDue() && s.collectiveRound(ctx, snap) {
		rd.failed = true
	}
	s.mu.Lock()
	s.maxLoad = 0
	for _, l := range rd.load {
		s.maxLoad = max(s.maxLoad, l)
	}
	s.lastDuration = s.now().Sub(start)
	if !rd.failed {
		s.lastSuccess = start
	}
	s.mu.Unlock()
	s.publish()
}

// skipMissing counts GPUs seen in earlier samples and gone from this one
// as lost: NVML drops a GPU that fell off the bus after a driver reload.
func (s *Scheduler) skipMissing(snap *nvml.Snapshot) {
	present := map[string]bool{}
	for i := range snap.GPUs {
		present[gpuKey(&snap.GPUs[i])] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.gpus {
		if !present[k] {
			e.st.Skips[SkipLost]++
			s.ran = true
		}
	}
}

// visit probes one GPU or records why not.
func (s *Scheduler) visit(ctx context.Context, rd *roundPass, g *nvml.GPUState) {
	if reason := staticSkip(g); reason != "" {
		rd.skipped[reason]++
		s.skip(g, reason)
		return
	}
	var procs []nvml.Process
	var procsErr error
	if s.lister != nil {
		if procs, procsErr = s.lister.Call(); procsErr != nil {
			if s.cfg.Policy == PolicyIdle {
				// Not knowing who holds the GPU is not knowing it is idle.
				s.logger.Warn("cannot list GPU processes; treating the GPU as busy", "gpu", g.Index, "err", procsErr)
			} else {
				s.logger.Warn("cannot list GPU processes before probing; contention is judged without this listing", "gpu", g.Index, "err", procsErr)
			}
		}
	}
	procsOK := procsErr == nil
	if reason := s.busy(g, procs, procsOK); reason != "" {
		rd.skipped[reason]++
		s.skip(g, reason)
		return
	}

	o := s.cfg.Options
	o.GPU = g.PCIBusID
	o.Probes = slices.Clone(o.Probes)
	o.Peers, o.HostNodes = nil, nil
	peerSkips := map[string]uint64{}
	watched := []*nvml.GPUState{g}
	for j := range rd.snap.GPUs {
		p := &rd.snap.GPUs[j]
		if p == g || !probes.PeerReachable(rd.snap, g.Index, p.Index) {
			continue
		}
		reason := staticSkip(p)
		if reason == "" {
			reason = s.busy(p, procs, procsOK)
		}
		if reason != "" {
			peerSkips["peer_"+reason]++
			continue
		}
		o.Peers = append(o.Peers, p.PCIBusID)
		watched = append(watched, p)
	}
	if s.cfg.HostNodes != nil {
		o.HostNodes = slices.Clone(s.cfg.HostNodes(g.PCIBusID))
	}

	// What shares the GPU and its peers while the child measures: the
	// utilisation right before, and the processes before, during and
	// after.
	busyUtil := s.busyUtilization(watched)
	watch := probes.WatchRun(watched, s.lister, s.pollEvery, procs, procsErr)

	rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	start := s.now()
	rnd, err := s.cfg.Runner.Run(rctx, o)
	took := s.now().Sub(start)
	cancel()
	watch.Finish(s.lister, ctx.Err() == nil)
	if ctx.Err() != nil {
		return // shutting down: says nothing of the GPU
	}

	result, gr, why := classifyRun(rnd, err, g.PCIBusID)
	if gr != nil && s.cfg.Annotate != nil {
		s.cfg.Annotate(gr)
	}
	if gr != nil {
		own := 0
		if rnd != nil {
			own = rnd.PID
		}
		gr.Contention = probes.JudgeRound(gr, o.Peers, watch, own, busyUtil)
		if c := gr.Contention; c.Contended() {
			rd.contended = append(rd.contended, g.Index)
			s.logger.Debug("probe round shared the GPU with other work; its results are marked contended",
				"gpu", g.Index, "pci_bus_id", g.PCIBusID, "reasons", c.Reasons, "peers", c.Peers, "processes", c.Processes)
		}
	}
	rd.probed++
	switch result {
	case probes.RunSuccess:
		s.logger.Debug("probed GPU", "gpu", g.Index, "peers", len(o.Peers), "took", took)
	default:
		rd.fail = append(rd.fail, g.Index)
		s.logger.Warn("probe run failed", "gpu", g.Index, "pci_bus_id", g.PCIBusID, "result", result, "err", why)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(g)
	ended := s.now()
	for _, w := range watched {
		s.probedUntil[gpuKey(w)] = ended
	}
	for r, n := range peerSkips {
		e.st.Skips[r] += n
	}
	e.st.Runs[result]++
	e.st.LastRound = start
	e.st.LastDuration = took.Seconds()
	if result == probes.RunSuccess {
		e.st.LastSuccess = start
	}
	if gr != nil {
		rd.load[g.PCIBusID] += gr.BusySeconds
		for peer, b := range gr.PeerBusySeconds {
			rd.load[peer] += b
		}
		e.st.BusySeconds += gr.BusySeconds
		e.st.ContextSeconds += gr.ContextSeconds
		if len(gr.Results) > 0 {
			e.st.Last = gr
			if r := gr.Contention.First(); r != "" {
				e.st.Contended[r]++
			}
		}
	}
	e.down = result == probes.RunTimeout || result == probes.RunCrash
	if result == probes.RunTimeout || result == probes.RunCrash || result == probes.RunError {
		s.errors++
		rd.failed = true
	}
	s.ran = true
}

// utilizationWindow is the longest NVML averages utilisation over (a
// sixth of a second to a second, by product).
const utilizationWindow = time.Second

// busyUtilization is, by address, which of the GPUs NVML's latest sample
// shows busier than the idle threshold: work of others, unless the sample
// may have been taken while probes measured on that GPU (its own round, or
// another's with it as the peer) or within utilizationWindow after.
func (s *Scheduler) busyUtilization(gpus []*nvml.GPUState) map[string]bool {
	snap := s.cfg.GPUs()
	if snap == nil {
		return nil
	}
	var taken time.Time
	if s.cfg.GPUsTaken != nil {
		taken = s.cfg.GPUsTaken()
	}
	out := map[string]bool{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range gpus {
		for i := range snap.GPUs {
			cur := &snap.GPUs[i]
			if gpuKey(cur) != gpuKey(w) || !cur.Utilization.Valid || cur.Utilization.V <= s.cfg.UtilizationThreshold {
				continue
			}
			if until, ok := s.probedUntil[gpuKey(w)]; ok && !taken.IsZero() && taken.Before(until.Add(utilizationWindow)) {
				continue // the probes' own work may be in it
			}
			out[pciaddr.Normalize(w.PCIBusID)] = true
		}
	}
	return out
}

// staticSkip is why a GPU cannot be probed whatever the policy: it is
// gone, split into MIG instances, or its compute mode would refuse the
// probe's context (or, in exclusive mode, lock out its owner's next one
// while the probe holds it).
func staticSkip(g *nvml.GPUState) string {
	switch {
	case g.Lost || g.PCIBusID == "":
		return SkipLost
	case g.MIGEnabled.Valid && g.MIGEnabled.V:
		return SkipMIG
	case !g.ComputeMode.Valid:
		return ""
	}
	switch g.ComputeMode.V {
	case "prohibited":
		return SkipProhibited
	case "exclusive_process", "exclusive_thread":
		return SkipExclusiveProcess
	}
	return ""
}

// busy is why the idle policy leaves a GPU alone, "" if it does not.
func (s *Scheduler) busy(g *nvml.GPUState, procs []nvml.Process, procsOK bool) string {
	if s.cfg.Policy != PolicyIdle {
		return ""
	}
	if !procsOK {
		return SkipBusyProcess
	}
	for _, p := range procs {
		if probes.OnGPU(p, g) {
			return SkipBusyProcess
		}
	}
	if g.Utilization.Valid && g.Utilization.V > s.cfg.UtilizationThreshold {
		return SkipBusyUtilization
	}
	return ""
}

// classifyRun sorts a run into one of the Run* results, and picks out the
// GPU's part of the round (a private copy, so Annotate and the published
// status never share memory with the runner) and what went wrong.
func classifyRun(rnd *probes.Round, err error, busID string) (string, *probes.GPURound, error) {
	var gr *probes.GPURound
	if rnd != nil {
		for i := range rnd.GPUs {
			if strings.EqualFold(rnd.GPUs[i].PCIBusID, busID) {
				gr = cloneGPURound(&rnd.GPUs[i])
				break
			}
		}
	}
	if err != nil {
		return failedRun(err), gr, err
	}
	switch {
	case gr == nil:
		return probes.RunError, nil, fmt.Errorf("the round has no result for GPU %s", busID)
	case gr.Error != "":
		return probes.RunError, gr, fmt.Errorf("GPU could not be probed: %s", gr.Error)
	}
	result, err := completedRun(gr.Results, "probes", func(r probes.Result) string {
		if r.Error == "" {
			return ""
		}
		return fmt.Sprintf("%s %s: %s", r.Probe, cmp.Or(r.Peer, r.Direction), r.Error)
	})
	return result, gr, err
}

// failedRun is the result of a run that returned err: the one a
// *RunFailure names, else RunError.
func failedRun(err error) string {
	var rf *probes.RunFailure
	if errors.As(err, &rf) {
		return rf.Result
	}
	return probes.RunError
}

// completedRun is the result of a run that returned its results: success,
// or partial when some of them (what they are: probes, collectives)
// failed, the error naming how many and the first. failure says how a
// result failed, "" when it did not. Probe rounds and collective rounds
// are sorted alike.
func completedRun[R any](results []R, what string, failure func(R) string) (string, error) {
	failed, first := 0, ""
	for _, r := range results {
		if f := failure(r); f != "" {
			if failed == 0 {
				first = f
			}
			failed++
		}
	}
	if failed > 0 {
		return probes.RunPartial, fmt.Errorf("%d of %d %s failed, first: %s", failed, len(results), what, first)
	}
	return probes.RunSuccess, nil
}

func cloneGPURound(g *probes.GPURound) *probes.GPURound {
	c := *g
	c.Results = slices.Clone(g.Results)
	for i := range c.Results {
		if n := c.Results[i].HostNUMANode; n != nil {
			v := *n
			c.Results[i].HostNUMANode = &v
		}
	}
	if g.LinkUnderLoad != nil {
		l := *g.LinkUnderLoad
		c.LinkUnderLoad = &l
	}
	return &c
}

func (s *Scheduler) skip(g *nvml.GPUState, reason string) {
	s.logger.Debug("not probing GPU", "gpu", g.Index, "reason", reason)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entry(g).st.Skips[reason]++
	s.ran = true
}

// gpuKey identifies a GPU across samples: its PCI address, which unlike
// the index survives a GPU dropping out.
func gpuKey(g *nvml.GPUState) string {
	if g.PCIBusID == "" {
		return "index:" + strconv.Itoa(g.Index)
	}
	return strings.ToLower(g.PCIBusID)
}

// entry is g's record, created on first sight. s.mu must be held.
func (s *Scheduler) entry(g *nvml.GPUState) *gpuEntry {
	k := gpuKey(g)
	e := s.gpus[k]
	if e == nil {
		// Every run result and own skip reason starts at zero, so the
		// first of each is an increase a rate() can see.
		e = &gpuEntry{st: GPUStatus{Runs: map[string]uint64{}, Skips: map[string]uint64{}, Contended: map[string]uint64{}}}
		for _, r := range []string{probes.RunSuccess, probes.RunPartial, probes.RunError, probes.RunTimeout, probes.RunCrash} {
			e.st.Runs[r] = 0
		}
		for _, r := range []string{SkipLost, SkipMIG, SkipExclusiveProcess, SkipProhibited, SkipBusyProcess, SkipBusyUtilization} {
			e.st.Skips[r] = 0
		}
		s.gpus[k] = e
	}
	e.st.Index, e.st.UUID, e.st.PCIBusID = g.Index, g.UUID, g.PCIBusID
	return e
}

// publish stores a copy of the status for the collector, then calls the
// OnPublish functions. Last is shared between copies: it is replaced,
// never changed.
func (s *Scheduler) publish() {
	s.mu.Lock()
	st := &Status{Policy: s.cfg.Policy, GPUs: make([]GPUStatus, 0, len(s.gpus))}
	for _, e := range s.gpus {
		g := e.st
		g.Runs, g.Skips, g.Contended = maps.Clone(g.Runs), maps.Clone(g.Skips), maps.Clone(g.Contended)
		st.GPUs = append(st.GPUs, g)
	}
	slices.SortFunc(st.GPUs, func(a, b GPUStatus) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), strings.Compare(a.PCIBusID, b.PCIBusID))
	})
	if s.coll != nil {
		st.Collective = s.coll.status()
	}
	s.latest.Store(&sampler.Snapshot[*Status]{Data: st, Taken: s.now()})
	s.version.Add(1)
	published := s.published
	s.mu.Unlock()
	for _, f := range published {
		f()
	}
}

// OnPublish has f called after every new status, on the goroutine that
// made it (the round's): as a sampler's, for the collector to render the
// status then rather than on the next scrape.
func (s *Scheduler) OnPublish(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.published = append(s.published, f)
}

// Latest is the newest status; never nil. Treat it as read-only.
func (s *Scheduler) Latest() *sampler.Snapshot[*Status] { return s.latest.Load() }

// Version changes whenever Latest or Status may have.
func (s *Scheduler) Version() uint64 { return s.version.Load() }

// Status reports the scheduler as a source. It is up once a round has
// probed or skipped something, and while no GPU's latest run, nor the
// latest collective run, timed out or crashed. LastSuccess and LastDuration are of whole rounds: a round
// succeeds when none of its runs timed out, crashed or errored (skips are
// the policy working, not failures).
func (s *Scheduler) Status() sampler.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	up := s.ran
	for _, e := range s.gpus {
		if e.down {
			up = false
		}
	}
	if s.coll != nil && s.coll.down {
		up = false
	}
	return sampler.Status{Name: "probe", Up: up, LastSuccess: s.lastSuccess, LastDuration: s.lastDuration, Errors: s.errors}
}

package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/probes"
)

// The node's collective round: after a pass over the GPUs, at most every
// CollectiveInterval, one NCCL communicator over every usable GPU, and
// only when every one of them is idle under the policy at that moment. A
// collective takes all its GPUs at once, so one busy GPU skips the round:
// measuring beside a job would slow the job and measure the job.

// Defaults of the collective schedule: a round of the default options on
// the simulated DGX H100 costs each GPU about 1.6 s of GPU time, 1600 s at
// MaxDuty's default, so the interval, not the duty, sets the pace.
const (
	DefaultCollectiveInterval = time.Hour
	DefaultCollectiveTimeout  = 5 * time.Minute
)

// collectiveRunResults are the run results every collective counter starts
// with at 0, so that rate() sees the first of each.
var collectiveRunResults = []string{probes.RunSuccess, probes.RunPartial, probes.RunError, probes.RunTimeout, probes.RunCrash}

// collectiveState is the scheduler's record of its collective rounds.
type collectiveState struct {
	st CollectiveStatus
	// busy is CollectiveStatus.GPUs by address.
	busy map[string]*CollectiveGPU
	// next is when the next round is due; zero: after the first pass.
	next time.Time
	// down is true when the latest run timed out or crashed.
	down bool
}

func newCollectiveState() *collectiveState {
	c := &collectiveState{busy: map[string]*CollectiveGPU{},
		st: CollectiveStatus{Runs: map[string]uint64{}, Skips: map[string]uint64{}, Contended: map[string]uint64{}}}
	for _, r := range collectiveRunResults {
		c.st.Runs[r] = 0
	}
	return c
}

// status is a copy for publishing. Last and ExpectedTransports are shared:
// they are replaced, never changed.
func (c *collectiveState) status() *CollectiveStatus {
	st := c.st
	st.Runs, st.Skips, st.Contended = maps.Clone(c.st.Runs), maps.Clone(c.st.Skips), maps.Clone(c.st.Contended)
	st.GPUs = make([]CollectiveGPU, 0, len(c.busy))
	for _, g := range c.busy {
		st.GPUs = append(st.GPUs, *g)
	}
	slices.SortFunc(st.GPUs, func(a, b CollectiveGPU) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), strings.Compare(a.PCIBusID, b.PCIBusID))
	})
	return &st
}

// RunCollectiveRound runs the node's collective round now, as RunRound
// runs a pass now: under the round lock, over the GPUs the policy allows
// at this moment, whatever CollectiveInterval says; it is counted, and
// sets the next one's time, as one that came due after a pass. Nothing
// happens while collective rounds or the probes are off, or before the
// first NVML sample.
func (s *Scheduler) RunCollectiveRound(ctx context.Context) {
	if s.coll == nil || s.cfg.Policy == PolicyOff {
		return
	}
	s.roundMu.Lock()
	defer s.roundMu.Unlock()
	snap := s.cfg.GPUs()
	if snap == nil || len(snap.GPUs) == 0 {
		return
	}
	s.collectiveRound(ctx, snap)
	s.publish()
}

// collectiveDue reports whether the next collective round's time has come.
func (s *Scheduler) collectiveDue() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.now().Before(s.coll.next)
}

// collectiveRound runs the collective round, or counts why not, and
// reports whether it failed (timed out, crashed or errored). It decides
// on a fresh NVML sample, else on the pass's, snap. roundMu is held.
func (s *Scheduler) collectiveRound(ctx context.Context, snap *nvml.Snapshot) (failed bool) {
	if fresh := s.cfg.GPUs(); fresh != nil {
		snap = fresh
	}
	gpus, listing, reason := s.collectiveGPUs(snap)
	if reason != "" {
		s.collectiveSkip(reason, len(gpus))
		return false
	}

	o := s.cfg.CollectiveOptions
	o.Collectives = slices.Clone(o.Collectives)
	o.GPUs = make([]string, len(gpus))
	for i, g := range gpus {
		o.GPUs[i] = g.PCIBusID
	}
	o.Ranks, o.FirstRank, o.UniqueID, o.Peer = len(gpus), 0, "", ""

	// Watched as a probe round is: the utilisation right before, and the
	// processes before (the listing the round was decided on, as visit
	// does), during and after. A job that starts on any of the GPUs
	// meanwhile makes every result contended, not low.
	busyUtil := s.busyUtilization(gpus)
	watch := probes.WatchRun(gpus, s.lister, s.pollEvery, listing.procs, listing.err)

	rctx, cancel := context.WithTimeout(ctx, s.cfg.CollectiveTimeout)
	start := s.now()
	round, err := s.cfg.CollectiveRunner.RunCollectives(rctx, o, nil)
	took := s.now().Sub(start)
	cancel()
	watch.Finish(s.lister, ctx.Err() == nil)
	if ctx.Err() != nil {
		return false // shutting down: says nothing of the GPUs
	}

	result, r, why := classifyCollectiveRun(round, err)
	if r != nil {
		r.Contention = probes.JudgeSharing(o.GPUs, nil, watch, r.PID, busyUtil)
		if c := r.Contention; c.Contended() {
			s.logger.Debug("collective round shared its GPUs with other work; its results are marked contended",
				"gpus", len(gpus), "reasons", c.Reasons, "processes", c.Processes)
		}
	}
	// A node without NCCL is not a broken node: no_library, not an error.
	noLibrary := r != nil && errors.Is(r.Err(), probes.ErrNoLibrary)
	var expected []probes.PairTransport
	if r != nil && len(r.Results) > 0 && s.cfg.CollectiveAnnotate != nil {
		expected = s.cfg.CollectiveAnnotate(r)
	}
	switch {
	case noLibrary:
		s.logger.Warn("no collective probes: the NCCL library cannot be loaded", "err", r.Error)
	case result == probes.RunSuccess:
		// The round's one line at INFO, as a probe pass's.
		args := []any{"gpus", len(gpus), "took", took.Round(time.Millisecond)}
		if r != nil && r.Contention.Contended() {
			args = append(args, "contended", r.Contention.Reasons)
		}
		s.logger.Info("collective round", args...)
	default:
		s.logger.Warn("collective round failed", "gpus", len(gpus), "result", result, "err", why)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.coll
	ended := s.now()
	for _, g := range gpus {
		// Its kernels may be in utilisation read until a second after.
		s.probedUntil[gpuKey(g)] = ended
	}
	s.ran = true
	busy := 0.0
	if r != nil {
		busy = r.BusySeconds
	}
	c.next = start.Add(s.collectiveDelay(busy))
	if noLibrary {
		c.st.Skips[SkipNoLibrary]++
		return false
	}
	c.st.Runs[result]++
	for _, g := range gpus {
		k := gpuKey(g)
		if c.busy[k] == nil {
			c.busy[k] = &CollectiveGPU{}
		}
		c.busy[k].Index, c.busy[k].PCIBusID = g.Index, g.PCIBusID
		c.busy[k].BusySeconds += busy
	}
	if r != nil && len(r.Results) > 0 {
		c.st.Last, c.st.LastStarted, c.st.ExpectedTransports = r, start, expected
		c.st.SizeBytes, c.st.SmallBytes = o.SizeBytes, o.SmallBytes
		if reason := r.Contention.First(); reason != "" {
			c.st.Contended[reason]++
		}
	}
	c.down = result == probes.RunTimeout || result == probes.RunCrash
	if result == probes.RunTimeout || result == probes.RunCrash || result == probes.RunError {
		s.errors++
		return true
	}
	return false
}

// collectiveGPUs are the GPUs a collective round would use now, in the
// sample's order: every GPU the probes could use whatever the policy
// (staticSkip). The round needs two of them, and every one idle under the
// policy; otherwise the reason it is skipped: a GPU's own reason where
// that left fewer than two (all in MIG mode, say), fewer_than_two_gpus
// where the node has no more, or the first busy GPU's. With two or more
// usable GPUs it lists the processes (when it can), and returns that
// listing for the round's watch.
func (s *Scheduler) collectiveGPUs(snap *nvml.Snapshot) ([]*nvml.GPUState, processListing, string) {
	var usable []*nvml.GPUState
	static := ""
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		if r := staticSkip(g); r != "" {
			if static == "" && r != SkipLost {
				static = r
			}
			continue
		}
		usable = append(usable, g)
	}
	if len(usable) < 2 {
		return usable, processListing{}, cmp.Or(static, SkipFewerThanTwo)
	}
	var l processListing
	if s.lister != nil {
		if l.procs, l.err = s.lister.Call(); l.err != nil && s.cfg.Policy == PolicyIdle {
			s.logger.Warn("cannot list GPU processes; treating the GPUs as busy", "err", l.err)
		}
	}
	var taken time.Time
	if s.cfg.GPUsTaken != nil {
		taken = s.cfg.GPUsTaken()
	}
	for _, g := range usable {
		if r := s.busy(s.withoutOwnUtilization(g, taken), l.procs, l.err == nil); r != "" {
			return usable, l, r
		}
	}
	return usable, l, ""
}

// processListing is one answer of the process lister.
type processListing struct {
	procs []nvml.Process
	err   error
}

// withoutOwnUtilization is g, without its utilisation where the sample
// (taken at taken) may have been read while probes measured on it or
// within utilizationWindow after: the pass that has just ended ran there,
// and its kernels are not another's work. A zero taken cannot tell, and
// every sample's utilisation counts, as in busyUtilization.
func (s *Scheduler) withoutOwnUtilization(g *nvml.GPUState, taken time.Time) *nvml.GPUState {
	if taken.IsZero() {
		return g
	}
	s.mu.Lock()
	until, ok := s.probedUntil[gpuKey(g)]
	s.mu.Unlock()
	if !ok || !taken.Before(until.Add(utilizationWindow)) {
		return g
	}
	c := *g
	c.Utilization.Valid = false
	return &c
}

// collectiveSkip counts a collective round not run. The round stays due:
// the next pass tries again.
func (s *Scheduler) collectiveSkip(reason string, usable int) {
	s.logger.Debug("no collective round", "reason", reason, "usable_gpus", usable)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.coll.st.Skips[reason]++
	s.ran = true
}

// collectiveDelay is the time from one collective round's start to the
// next: the jittered interval, stretched as the passes are (nextDelay)
// where the round's GPU time busy would otherwise take more than MaxDuty
// of each GPU's. s.mu is held.
func (s *Scheduler) collectiveDelay(busy float64) time.Duration {
	d := s.jittered(s.cfg.CollectiveInterval)
	if floor := time.Duration(busy / s.cfg.MaxDuty * float64(time.Second)); floor > d {
		return s.jittered(floor)
	}
	return d
}

// classifyCollectiveRun sorts a collective run into one of the Run*
// results as classifyRun sorts a probe run, and returns a private copy of
// the round (Annotate and the published status never share memory with
// the runner) and what went wrong.
func classifyCollectiveRun(round *probes.CollectiveRound, err error) (string, *probes.CollectiveRound, error) {
	var r *probes.CollectiveRound
	if round != nil {
		c := *round
		c.GPUs, c.Results, c.Transports = slices.Clone(round.GPUs), slices.Clone(round.Results), slices.Clone(round.Transports)
		r = &c
	}
	if err != nil {
		return failedRun(err), r, err
	}
	switch {
	case r == nil:
		return probes.RunError, nil, errors.New("the collective runner returned no round")
	case r.Error != "":
		return probes.RunError, r, fmt.Errorf("no communicator: %s", r.Error)
	}
	result, err := completedRun(r.Results, "collectives", func(res probes.CollectiveResult) string {
		if res.Error == "" {
			return ""
		}
		return fmt.Sprintf("%s at %d bytes: %s", res.Collective, res.SizeBytes, res.Error)
	})
	return result, r, err
}

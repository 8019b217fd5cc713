package probes

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
)

// What shared a GPU while it was measured, as the daemon's rounds and the
// probe and collectives commands judge it: one piece of code for all of
// them, so a result a person reads as contended is one the daemon would
// have exported as contended.

// How a run is watched: the process list is read often enough to see a
// job that starts and ends within a round of a few seconds, at the cost
// of one driver call that answers from the driver's own process table per
// GPU. One listing may take at most ProcessListLimit; NVML can hang on a
// failing GPU, and a hung listing must not stall the rounds.
const (
	ProcessPoll      = 250 * time.Millisecond
	ProcessListLimit = 2 * time.Second
)

var (
	errProcessListStuck = errors.New("an earlier GPU process listing has not returned")
	errProcessListSlow  = errors.New("GPU process listing did not return in time")
)

// ProcessLister makes the listings one at a time, each in a goroutine of
// its own that the caller waits for at most limit. A listing that hangs
// keeps the one slot: later calls wait limit for it and fail, so at most
// one goroutine is ever stuck in NVML.
type ProcessLister struct {
	list  func() ([]nvml.Process, error)
	limit time.Duration
	slot  chan struct{}
}

// NewProcessLister bounds each call of list by limit.
func NewProcessLister(list func() ([]nvml.Process, error), limit time.Duration) *ProcessLister {
	return &ProcessLister{list: list, limit: limit, slot: make(chan struct{}, 1)}
}

// Call is one listing, or why there is none.
func (l *ProcessLister) Call() ([]nvml.Process, error) {
	t := time.NewTimer(l.limit)
	defer t.Stop()
	select {
	case l.slot <- struct{}{}:
	case <-t.C:
		return nil, errProcessListStuck
	}
	type answer struct {
		ps  []nvml.Process
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		defer func() { <-l.slot }()
		ps, err := l.list()
		ch <- answer{ps, err}
	}()
	select {
	case a := <-ch:
		return a.ps, a.err
	case <-t.C:
		return nil, errProcessListSlow
	}
}

// RunWatch gathers the compute processes seen on a run's GPUs (the ones
// measured and the peers measured against) before, during and after the
// run.
type RunWatch struct {
	gpus []*nvml.GPUState

	mu       sync.Mutex
	seen     map[string]map[int]bool // PIDs by GPU address
	checks   int
	failures int

	done     chan struct{} // closed to stop the poll
	stopOnce sync.Once
}

// NewRunWatch watches gpus; nothing is read until Note or Poll.
func NewRunWatch(gpus []*nvml.GPUState) *RunWatch {
	return &RunWatch{gpus: gpus, seen: map[string]map[int]bool{}, done: make(chan struct{})}
}

// Note records one listing. A listing of the poll that returns after
// Stop is still recorded: it was asked while the run ran.
func (w *RunWatch) Note(ps []nvml.Process, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failures++
		return
	}
	w.checks++
	for _, p := range ps {
		for _, g := range w.gpus {
			if OnGPU(p, g) {
				if w.seen[g.PCIBusID] == nil {
					w.seen[g.PCIBusID] = map[int]bool{}
				}
				w.seen[g.PCIBusID][p.PID] = true
			}
		}
	}
}

// Poll lists the processes every interval until Stop. It never holds the
// caller up: Stop returns at once, and a listing still running then ends
// within the lister's limit.
func (w *RunWatch) Poll(l *ProcessLister, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
			w.Note(l.Call())
		}
	}
}

// Stop ends Poll.
func (w *RunWatch) Stop() { w.stopOnce.Do(func() { close(w.done) }) }

// WatchRun starts watching a run on gpus: first is the listing taken
// right before it (the one its GPUs were judged idle on, where there was
// one), then l lists every interval until Finish. Nil, watching nothing,
// without a lister.
func WatchRun(gpus []*nvml.GPUState, l *ProcessLister, every time.Duration, first []nvml.Process, firstErr error) *RunWatch {
	if l == nil {
		return nil
	}
	w := NewRunWatch(gpus)
	w.Note(first, firstErr)
	go w.Poll(l, every)
	return w
}

// Finish ends the poll and, with listAgain, lists the processes once
// more: a job still there after the run is seen even when the run was too
// short for a poll. (Not when shutting down: the listing would say
// nothing that is kept.) A nil watch does nothing.
func (w *RunWatch) Finish(l *ProcessLister, listAgain bool) {
	if w == nil {
		return
	}
	w.Stop()
	if listAgain {
		w.Note(l.Call())
	}
}

// others are the PIDs seen on each watched GPU other than own (0 for
// unknown), by address, and how many listings were read and failed.
func (w *RunWatch) others(own int) (map[string][]int, int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out map[string][]int
	for _, g := range w.gpus {
		var pids []int
		for pid := range w.seen[g.PCIBusID] {
			if pid != own || own == 0 {
				pids = append(pids, pid)
			}
		}
		if len(pids) > 0 {
			slices.Sort(pids)
			if out == nil {
				out = map[string][]int{}
			}
			out[pciaddr.Normalize(g.PCIBusID)] = pids
		}
	}
	return out, w.checks, w.failures
}

// OnGPU reports whether the process p is on the GPU g.
func OnGPU(p nvml.Process, g *nvml.GPUState) bool {
	return (p.PCIBusID != "" && strings.EqualFold(p.PCIBusID, g.PCIBusID)) || (p.UUID != "" && p.UUID == g.UUID)
}

// JudgeSharing is a run's contention from what shares its GPUs: the
// processes w saw other than the run's own (own, its PID; w may be nil:
// not watched), and the GPUs whose utilisation was above the idle
// threshold right before the run (busyUtil, by address). A GPU in self
// disturbs every result of the run (Reasons); any other watched GPU, the
// results against it (Peers). Only the watched GPUs in self or in peers
// count, so one watch may serve several runs.
func JudgeSharing(self, peers []string, w *RunWatch, own int, busyUtil map[string]bool) *Contention {
	c := &Contention{}
	norm := func(addrs []string) map[string]bool {
		m := map[string]bool{}
		for _, a := range addrs {
			m[pciaddr.Normalize(a)] = true
		}
		return m
	}
	selves, others := norm(self), norm(peers)
	if w != nil {
		var procs map[string][]int
		procs, c.ProcessChecks, c.ProcessCheckFailures = w.others(own)
		for addr, pids := range procs {
			if selves[addr] || others[addr] {
				if c.Processes == nil {
					c.Processes = map[string][]int{}
				}
				c.Processes[addr] = pids
			}
		}
	}
	for _, addr := range slices.Sorted(maps.Keys(c.Processes)) {
		c.mark(selves, addr, ContendedOtherProcess)
	}
	for _, addr := range slices.Sorted(maps.Keys(busyUtil)) {
		a := pciaddr.Normalize(addr)
		if busyUtil[addr] && (selves[a] || others[a]) {
			c.mark(selves, a, ContendedUtilization)
		}
	}
	return c
}

// mark adds reason for the GPU at addr: to Reasons where it is one of
// selves, else to the results against it.
func (c *Contention) mark(selves map[string]bool, addr, reason string) {
	addr = pciaddr.Normalize(addr)
	if selves[addr] {
		c.Reasons = AddReason(c.Reasons, reason)
		return
	}
	if c.Peers == nil {
		c.Peers = map[string][]string{}
	}
	c.Peers[addr] = AddReason(c.Peers[addr], reason)
}

// JudgeRound is a probe round's contention: JudgeSharing over its GPU and
// peers (the GPUs its options measured against), and the spread of each
// result's samples.
func JudgeRound(gr *GPURound, peers []string, w *RunWatch, own int, busyUtil map[string]bool) *Contention {
	self := pciaddr.Normalize(gr.PCIBusID)
	c := JudgeSharing([]string{self}, peers, w, own, busyUtil)
	selves := map[string]bool{self: true}
	for i := range gr.Results {
		if r := &gr.Results[i]; r.Noisy() {
			c.mark(selves, cmp.Or(r.Peer, self), ContendedSampleSpread)
		}
	}
	return c
}

// SharingCheck is how the probe and collectives commands see what shares
// their GPUs: the daemon's signals (other compute processes before,
// during and after the run; utilisation above the idle threshold right
// before it) through the same code, JudgeSharing and JudgeRound.
type SharingCheck struct {
	// Snapshot is an NVML sample taken before the run, for the GPUs'
	// UUIDs and utilisation; nil when there is none.
	Snapshot *nvml.Snapshot
	// Processes lists the compute processes on every GPU (NVML).
	Processes func() ([]nvml.Process, error)
	// Threshold is the utilisation above which a GPU counts as busy, as
	// the daemon's SchedulerConfig.UtilizationThreshold (the same flag):
	// 0 makes any utilisation busy.
	Threshold float64
	// Comm names a process (its /proc/<pid>/comm); nil or "" unknown.
	Comm func(pid int) string
	// Every is how often the processes are listed during the run;
	// ProcessPoll when 0.
	Every time.Duration
}

// StartSharingCheck is a command's start: s.Start(addrs), or, without
// s, nil and a line on stderr saying that sharing could not be checked
// and why (unavailable; no NVML when nil).
func StartSharingCheck(s *SharingCheck, unavailable error, addrs []string, stderr io.Writer) *CommandWatch {
	if s == nil {
		if unavailable == nil {
			unavailable = errors.New("no NVML")
		}
		fmt.Fprintf(stderr, "could not check whether other processes shared the GPUs: %v\n", unavailable)
		return nil
	}
	return s.Start(addrs)
}

// CommandWatch is one command's watch over its GPUs; a nil one watched
// nothing, and judges nothing.
type CommandWatch struct {
	check    *SharingCheck
	watch    *RunWatch
	lister   *ProcessLister
	busyUtil map[string]bool
}

// Start lists the processes on the GPUs at addrs (sysfs or NVML form),
// notes which were busy in the snapshot, and polls until Stop. Nil when
// s cannot list processes (no NVML).
func (s *SharingCheck) Start(addrs []string) *CommandWatch {
	if s == nil || s.Processes == nil {
		return nil
	}
	cw := &CommandWatch{check: s, lister: NewProcessLister(s.Processes, ProcessListLimit), busyUtil: map[string]bool{}}
	var gpus []*nvml.GPUState
	for _, a := range addrs {
		addr := pciaddr.Normalize(a)
		g := &nvml.GPUState{Identity: nvml.Identity{PCIBusID: addr}}
		if s.Snapshot != nil {
			for i := range s.Snapshot.GPUs {
				if cur := &s.Snapshot.GPUs[i]; pciaddr.Normalize(cur.PCIBusID) == addr {
					g = cur
					if cur.Utilization.Valid && cur.Utilization.V > s.Threshold {
						cw.busyUtil[addr] = true
					}
				}
			}
		}
		gpus = append(gpus, g)
	}
	first, err := cw.lister.Call()
	cw.watch = WatchRun(gpus, cw.lister, cmp.Or(s.Every, ProcessPoll), first, err)
	return cw
}

// Stop ends the poll and lists the processes once more (RunWatch.Finish).
func (cw *CommandWatch) Stop() {
	if cw == nil {
		return
	}
	cw.watch.Finish(cw.lister, true)
}

// Round is a probe round's contention (JudgeRound), with the processes
// named. own is this process's PID.
func (cw *CommandWatch) Round(gr *GPURound, peers []string, own int) *Contention {
	if cw == nil {
		return nil
	}
	return cw.named(JudgeRound(gr, peers, cw.watch, own, cw.busyUtil))
}

// Collective is a collective round's contention over its GPUs, all of
// which take part in every result.
func (cw *CommandWatch) Collective(gpus []string, own int) *Contention {
	if cw == nil {
		return nil
	}
	return cw.named(JudgeSharing(gpus, nil, cw.watch, own, cw.busyUtil))
}

func (cw *CommandWatch) named(c *Contention) *Contention {
	if cw.check.Comm == nil {
		return c
	}
	for _, pids := range c.Processes {
		for _, pid := range pids {
			if n := cw.check.Comm(pid); n != "" {
				if c.ProcessNames == nil {
					c.ProcessNames = map[int]string{}
				}
				c.ProcessNames[pid] = n
			}
		}
	}
	return c
}

// Report writes headline to w, with why the results are marked (For
// ""), then Describe's lines indented: what a command tells a person on
// stderr when its run was shared. Nothing when it was not.
func (c *Contention) Report(w io.Writer, headline string) {
	lines := c.Describe()
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "%s (%s):\n", headline, strings.Join(c.For(""), ", "))
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

// Describe is the contention for a person, one line per shared GPU
// ("GPU 0000:18:00.0: other compute processes: pid 4242 (python3)",
// "GPU 0000:18:00.0: utilisation above the idle threshold right before the
// run") and one per peer whose results are contended for another reason;
// nil when nothing shared the run.
func (c *Contention) Describe() []string {
	if !c.Contended() {
		return nil
	}
	var out []string
	described := map[string]bool{}
	for _, addr := range slices.Sorted(maps.Keys(c.Processes)) {
		var ps []string
		for _, pid := range c.Processes[addr] {
			p := "pid " + strconv.Itoa(pid)
			if n := c.ProcessNames[pid]; n != "" {
				p += " (" + n + ")"
			}
			ps = append(ps, p)
		}
		out = append(out, "GPU "+addr+": other compute processes: "+strings.Join(ps, ", "))
		described[addr] = true
	}
	if slices.Contains(c.Reasons, ContendedUtilization) {
		out = append(out, "utilisation above the idle threshold right before the run")
	}
	if slices.Contains(c.Reasons, ContendedSampleSpread) {
		out = append(out, "samples spread over "+strconv.Itoa(int(NoisySpread*100))+"% of their median")
	}
	for _, peer := range slices.Sorted(maps.Keys(c.Peers)) {
		var why []string
		for _, r := range c.Peers[peer] {
			if r != ContendedOtherProcess || !described[peer] {
				why = append(why, r)
			}
		}
		if len(why) > 0 {
			out = append(out, "results against "+peer+": "+strings.Join(why, ", "))
		}
	}
	return out
}

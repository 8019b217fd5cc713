package probes

import (
	"cmp"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
)

// A probe measures a path only when nothing else uses it. Two processes
// on one GPU time-slice it: with policy always, one GPU's host-to-device
// probe read 0.878 of expected in one round and 0.398 a minute later while
// a pinned copy loop ran in another process (issue 12). A low reading
// from a job's own traffic is not a degraded link, so the scheduler
// records what shared the GPU while a round measured, and such results
// are exported as contended and kept out of the alerts.

// Contention reasons, in the order a round is counted under the first of
// them.
const (
	// ContendedOtherProcess: another compute process was on the GPU (or
	// on the peer) before, during or after the run.
	ContendedOtherProcess = "other_process"
	// ContendedUtilization: NVML reported the GPU (or the peer) busier
	// than the idle threshold right before the run.
	ContendedUtilization = "utilization"
	// ContendedSampleSpread: a result's samples spread wider than
	// NoisySpread.
	ContendedSampleSpread = "sample_spread"
)

// ContentionReasons lists the reasons in order.
var ContentionReasons = []string{ContendedOtherProcess, ContendedUtilization, ContendedSampleSpread}

// Contention is what shared a GPU with one round, as the daemon saw it.
type Contention struct {
	// Reasons the GPU itself was shared, in ContentionReasons order:
	// every result of the round is disturbed. Empty when it was not.
	Reasons []string `json:"reasons,omitempty"`
	// Peers holds, by peer address, why the results against that peer
	// were disturbed besides Reasons: the peer was shared, or those
	// results' samples spread wide.
	Peers map[string][]string `json:"peers,omitempty"`
	// Processes are the PIDs of other compute processes seen, by GPU
	// address (the GPU's own and its peers').
	Processes map[string][]int `json:"processes,omitempty"`
	// ProcessChecks is how many process listings were read before, during
	// and after the run; ProcessCheckFailures how many could not be (an
	// error, or NVML too slow to answer). With none read, only
	// utilisation and the samples say anything.
	ProcessChecks        int `json:"process_checks"`
	ProcessCheckFailures int `json:"process_check_failures,omitempty"`
}

// Contended reports whether any result of the round was disturbed.
func (c *Contention) Contended() bool {
	return c != nil && (len(c.Reasons) > 0 || len(c.Peers) > 0)
}

// For is why the results against peer ("" for results with no peer) were
// disturbed; empty when they were not.
func (c *Contention) For(peer string) []string {
	if c == nil {
		return nil
	}
	p := c.Peers[nvml.NormalizeBusID(peer)]
	if peer == "" || len(p) == 0 {
		return c.Reasons
	}
	return mergeReasons(c.Reasons, p)
}

// First is the reason a contended round is counted under: the GPU's own
// before any peer's, each in ContentionReasons order. "" when the round
// was not contended.
func (c *Contention) First() string {
	if c == nil {
		return ""
	}
	if len(c.Reasons) > 0 {
		return c.Reasons[0]
	}
	var all []string
	for _, r := range c.Peers {
		all = mergeReasons(all, r)
	}
	if len(all) == 0 {
		return ""
	}
	return all[0]
}

// mergeReasons is the union of a and b in ContentionReasons order.
func mergeReasons(a, b []string) []string {
	var out []string
	for _, r := range ContentionReasons {
		if slices.Contains(a, r) || slices.Contains(b, r) {
			out = append(out, r)
		}
	}
	return out
}

func addReason(list []string, r string) []string {
	if slices.Contains(list, r) {
		return list
	}
	return mergeReasons(list, []string{r})
}

// NoisySpread is the widest spread, (max - min) / median, of a result's
// samples that a link to itself gives. Healthy copies agree to well under
// 1%: samples of one copy move less than 0.7% (bench/RESULTS.md,
// 2026-11-22) and the 56 NVLink pairs of an 8x H100 agree to 0.05%. A job
// time-slicing the GPU beside the probe moves a copy by far more (0.878
// and 0.398 of expected in two rounds of one GPU). 10% is more than ten
// times the healthy movement and well inside what sharing does.
const NoisySpread = 0.10

// Spread is (max - min) / median of the result's samples; 0 when the
// samples are not known.
func (r *Result) Spread() float64 {
	v := r.BytesPerSecond
	if v == 0 {
		v = r.Seconds
	}
	if v <= 0 || r.SampleMin <= 0 || r.SampleMax < r.SampleMin {
		return 0
	}
	return (r.SampleMax - r.SampleMin) / v
}

// Noisy reports whether the samples spread wider than NoisySpread, for
// the probes whose samples agree on healthy hardware: one-direction host
// copies, local copies, and peer copies. Not judged: host_bidirectional,
// whose host-to-device direction moved 40.7-49.8 GB/s within one command
// of the reference on an idle H100, and the latencies (launch latency
// moved 9-14% between the reference's own runs; single host chase runs
// 7%).
func (r *Result) Noisy() bool {
	if r.Error != "" || r.BytesPerSecond <= 0 {
		return false
	}
	switch r.Probe {
	case HostToDevice, DeviceToHost, DeviceLocalCopy, PeerCopy, PeerBidirectional:
		return r.Spread() > NoisySpread
	}
	return false
}

// How the scheduler watches the process list while a child runs: often
// enough to see a job that starts and ends within a round of a few
// seconds, at the cost of one driver call that answers from the driver's
// own process table per GPU. One listing may take at most
// processListLimit; NVML can hang on a failing GPU, and a hung listing
// must not stall the rounds.
const (
	processPoll      = 250 * time.Millisecond
	processListLimit = 2 * time.Second
)

var (
	errProcessListStuck = errors.New("an earlier GPU process listing has not returned")
	errProcessListSlow  = errors.New("GPU process listing did not return in time")
)

// processLister makes the listings one at a time, each in a goroutine of
// its own that the caller waits for at most limit. A listing that hangs
// keeps the one slot: later calls wait limit for it and fail, so at most
// one goroutine is ever stuck in NVML.
type processLister struct {
	list  func() ([]nvml.Process, error)
	limit time.Duration
	slot  chan struct{}
}

func newProcessLister(list func() ([]nvml.Process, error), limit time.Duration) *processLister {
	return &processLister{list: list, limit: limit, slot: make(chan struct{}, 1)}
}

func (l *processLister) call() ([]nvml.Process, error) {
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

// runWatch gathers the compute processes seen on a run's GPUs (the one
// probed and the peers it measures against) before, during and after the
// run.
type runWatch struct {
	gpus []*nvml.GPUState

	mu       sync.Mutex
	seen     map[string]map[int]bool // PIDs by GPU address
	checks   int
	failures int

	done     chan struct{} // closed to stop the poll
	stopOnce sync.Once
}

func newRunWatch(gpus []*nvml.GPUState) *runWatch {
	return &runWatch{gpus: gpus, seen: map[string]map[int]bool{}, done: make(chan struct{})}
}

// note records one listing. A listing of the poll that returns after
// stop is still recorded: it was asked while the child ran.
func (w *runWatch) note(ps []nvml.Process, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failures++
		return
	}
	w.checks++
	for _, p := range ps {
		for _, g := range w.gpus {
			if onGPU(p, g) {
				if w.seen[g.PCIBusID] == nil {
					w.seen[g.PCIBusID] = map[int]bool{}
				}
				w.seen[g.PCIBusID][p.PID] = true
			}
		}
	}
}

// poll lists the processes every interval until stop. It never holds the
// caller up: stop returns at once, and a listing still running then ends
// within the lister's limit.
func (w *runWatch) poll(l *processLister, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
			w.note(l.call())
		}
	}
}

func (w *runWatch) stop() { w.stopOnce.Do(func() { close(w.done) }) }

// others are the PIDs seen on each watched GPU other than own (0 for
// unknown), by address, and how many listings were read and failed.
func (w *runWatch) others(own int) (map[string][]int, int, int) {
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
			out[nvml.NormalizeBusID(g.PCIBusID)] = pids
		}
	}
	return out, w.checks, w.failures
}

// onGPU reports whether the process p is on the GPU g.
func onGPU(p nvml.Process, g *nvml.GPUState) bool {
	return (p.PCIBusID != "" && strings.EqualFold(p.PCIBusID, g.PCIBusID)) || (p.UUID != "" && p.UUID == g.UUID)
}

// judge is the round's contention: the processes the watch saw other
// than the child's own, the utilisation found busy before the run (by
// GPU address), and the spread of each result's samples.
func judge(gr *GPURound, w *runWatch, own int, busyUtil map[string]bool) *Contention {
	c := &Contention{}
	if w != nil {
		c.Processes, c.ProcessChecks, c.ProcessCheckFailures = w.others(own)
	}
	self := nvml.NormalizeBusID(gr.PCIBusID)
	mark := func(addr, reason string) {
		addr = nvml.NormalizeBusID(addr)
		if addr == self {
			c.Reasons = addReason(c.Reasons, reason)
			return
		}
		if c.Peers == nil {
			c.Peers = map[string][]string{}
		}
		c.Peers[addr] = addReason(c.Peers[addr], reason)
	}
	for _, addr := range slices.Sorted(maps.Keys(c.Processes)) {
		mark(addr, ContendedOtherProcess)
	}
	for _, addr := range slices.Sorted(maps.Keys(busyUtil)) {
		if busyUtil[addr] {
			mark(addr, ContendedUtilization)
		}
	}
	for i := range gr.Results {
		if r := &gr.Results[i]; r.Noisy() {
			mark(cmp.Or(r.Peer, self), ContendedSampleSpread)
		}
	}
	return c
}

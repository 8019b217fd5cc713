package schedule

import (
	"cmp"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/probes"
)

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
func judge(gr *probes.GPURound, w *runWatch, own int, busyUtil map[string]bool) *probes.Contention {
	c := &probes.Contention{}
	if w != nil {
		c.Processes, c.ProcessChecks, c.ProcessCheckFailures = w.others(own)
	}
	self := nvml.NormalizeBusID(gr.PCIBusID)
	mark := func(addr, reason string) {
		addr = nvml.NormalizeBusID(addr)
		if addr == self {
			c.Reasons = probes.AddReason(c.Reasons, reason)
			return
		}
		if c.Peers == nil {
			c.Peers = map[string][]string{}
		}
		c.Peers[addr] = probes.AddReason(c.Peers[addr], reason)
	}
	for _, addr := range slices.Sorted(maps.Keys(c.Processes)) {
		mark(addr, probes.ContendedOtherProcess)
	}
	for _, addr := range slices.Sorted(maps.Keys(busyUtil)) {
		if busyUtil[addr] {
			mark(addr, probes.ContendedUtilization)
		}
	}
	for i := range gr.Results {
		if r := &gr.Results[i]; r.Noisy() {
			mark(cmp.Or(r.Peer, self), probes.ContendedSampleSpread)
		}
	}
	return c
}

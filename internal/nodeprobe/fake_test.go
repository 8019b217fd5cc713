package nodeprobe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// fabric joins fake collective runners through the NCCL unique id, as
// NCCL's bootstrap joins processes: the process that makes the id hands
// it out and waits for the others to come with it.
type fabric struct {
	mu    sync.Mutex
	next  int
	comms map[string]chan struct{} // closed when the joining process arrives
}

func newFabric() *fabric { return &fabric{comms: map[string]chan struct{}{}} }

// open registers a new id.
func (f *fabric) open() (string, chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	id := fmt.Sprintf("%0256x", f.next) // NCCL's id is 128 bytes
	ch := make(chan struct{})
	f.comms[id] = ch
	return id, ch
}

// join arrives at id's communicator.
func (f *fabric) join(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ok := f.comms[id]
	if !ok {
		return fmt.Errorf("ncclCommInitRank: invalid argument: unknown unique id %.16s...", id)
	}
	delete(f.comms, id)
	close(ch)
	return nil
}

// fakeRunner is one node's collective runner: the real round structure
// (probes.MeasureCollectiveRound) over a communicator that meets its peer
// on the fabric and times each operation from a modelled network: latency
// plus the bytes each rank's link carries over busBW.
type fakeRunner struct {
	fab       *fabric
	busBW     float64 // bytes per second
	latency   float64 // seconds
	spread    float64 // a result's fastest and slowest samples: the median times 1-spread and 1+spread
	transport string  // kind of the connections to the other node

	failOpen error             // OpenComm fails (no libnccl.so.2)
	failOn   probes.Collective // this collective fails
	// block, when set, holds every operation until ctx ends: a hung
	// communicator.
	block bool
	// solo measures without waiting for the other node, as the simulated
	// node's model does: it has results even when the target declined.
	solo bool
	// delay is how long opening the communicator takes.
	delay time.Duration
	// linger is how long the process stays after its round, unless its
	// context ends: a target whose answer comes after the prober's round.
	linger time.Duration

	mu        sync.Mutex
	runs      []probes.CollectiveOptions
	cancelled int      // runs that ended because their context did
	sendRecvs []string // "from->to/size" of every send/recv it took part in
}

func (r *fakeRunner) RunCollectives(ctx context.Context, o probes.CollectiveOptions, ids chan<- string) (*probes.CollectiveRound, error) {
	r.mu.Lock()
	r.runs = append(r.runs, o)
	r.mu.Unlock()
	round := probes.MeasureCollectiveRound(ctx, fakeMeasurer{r}, o, ids)
	schedule.SleepUnlessDone(ctx, r.linger)
	if ctx.Err() != nil {
		r.mu.Lock()
		r.cancelled++
		r.mu.Unlock()
	}
	return round, nil
}

func (r *fakeRunner) calls() (runs []probes.CollectiveOptions, cancelled int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs), r.cancelled
}

type fakeMeasurer struct{ r *fakeRunner }

func (m fakeMeasurer) NCCLVersion() int { return 22703 }

func (m fakeMeasurer) OpenComm(ctx context.Context, o probes.CollectiveOptions, ids chan<- string) (probes.Communicator, error) {
	if m.r.failOpen != nil {
		return nil, m.r.failOpen
	}
	if !schedule.SleepUnlessDone(ctx, m.r.delay) {
		return nil, ctx.Err()
	}
	if o.UniqueID == "" {
		id, joined := m.r.fab.open()
		ids <- id
		if m.r.solo {
			return &fakeComm{r: m.r, o: o, ctx: ctx}, nil
		}
		select {
		case <-joined:
		case <-ctx.Done():
			return nil, fmt.Errorf("ncclCommInitRank: the other ranks never joined: %w", ctx.Err())
		}
	} else if err := m.r.fab.join(o.UniqueID); err != nil {
		return nil, err
	}
	return &fakeComm{r: m.r, o: o, ctx: ctx}, nil
}

type fakeComm struct {
	r   *fakeRunner
	o   probes.CollectiveOptions
	ctx context.Context
}

func (c *fakeComm) time(bytes float64) (probes.Measured, error) {
	if c.r.block {
		<-c.ctx.Done()
		return probes.Measured{}, errors.New("ncclCommAbort: the communicator was aborted at the deadline")
	}
	t := c.r.latency + bytes/c.r.busBW
	return probes.Measured{Median: t, Min: t * (1 - c.r.spread), Max: t * (1 + c.r.spread)}, nil
}

func (c *fakeComm) Collective(op probes.Collective, size int64) (probes.Measured, error) {
	if op == c.r.failOn {
		return probes.Measured{}, errors.New("ncclAllReduce: remote process exited or there was a network error")
	}
	return c.time(float64(size) * probes.BusFactor(op, c.o.Ranks))
}

func (c *fakeComm) SendRecv(from, to int, size int64) (probes.Measured, error) {
	c.r.mu.Lock()
	c.r.sendRecvs = append(c.r.sendRecvs, fmt.Sprintf("%d->%d/%d", from, to, size))
	c.r.mu.Unlock()
	return c.time(float64(size))
}

// Transports are two channels from each local rank to the rank of the
// same place on the other node.
func (c *fakeComm) Transports() []probes.Transport {
	k := c.o.Ranks / 2
	var out []probes.Transport
	for i := range c.o.GPUs {
		from := c.o.FirstRank + i
		to := (from + k) % c.o.Ranks
		for ch := range 2 {
			out = append(out, probes.Transport{Channel: ch, FromRank: from, ToRank: to, Kind: c.r.transport, Detail: "NET/IB/0/GDRDMA",
				Network: "IB", GDR: true})
		}
	}
	return out
}

func (c *fakeComm) Cost() probes.Cost {
	return probes.Cost{BusySeconds: 0.1, DeviceMemoryBytes: 2 * c.o.SizeBytes}
}
func (c *fakeComm) Close() float64 { return 0.2 }

// fakeGate hands out its GPUs to one session at a time, or refuses with
// reason.
type fakeGate struct {
	gpus []schedule.SessionGPU

	mu     sync.Mutex
	reason string
	held   bool
}

func (g *fakeGate) TryAcquire(n int, _ []string) ([]schedule.SessionGPU, func(), string) {
	g.mu.Lock()
	switch {
	case g.reason != "":
		g.mu.Unlock()
		return nil, nil, g.reason
	case g.held:
		g.mu.Unlock()
		return nil, nil, schedule.SessionRoundRunning
	case n > len(g.gpus):
		g.mu.Unlock()
		return nil, nil, schedule.SessionTooFewGPUs
	}
	g.held = true
	g.mu.Unlock()
	return slices.Clone(g.gpus[:n]), sync.OnceFunc(func() {
		g.mu.Lock()
		g.held = false
		g.mu.Unlock()
	}), ""
}

func (g *fakeGate) refuse(reason string) {
	g.mu.Lock()
	g.reason = reason
	g.mu.Unlock()
}

func (g *fakeGate) isHeld() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// virtualClock is real time plus what the node has slept: its waits
// between tries pass at once, and its clock says they passed. onSleep,
// when set, is called with the count of sleeps so far after each.
type virtualClock struct {
	mu      sync.Mutex
	slept   time.Duration
	sleeps  []time.Duration
	onSleep func(n int)
}

func (c *virtualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.slept)
}

func (c *virtualClock) sleep(ctx context.Context, d time.Duration) bool {
	c.mu.Lock()
	c.slept += d
	c.sleeps = append(c.sleeps, d)
	n, on := len(c.sleeps), c.onSleep
	c.mu.Unlock()
	if on != nil {
		on(n)
	}
	return ctx.Err() == nil
}

func (c *virtualClock) waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sleeps)
}

// meeting is a barrier for n nodes, each of which calls its func once:
// each waits there until all n have come.
func meeting(n int) func() func() {
	var wg sync.WaitGroup
	wg.Add(n)
	return func() func() {
		return sync.OnceFunc(func() {
			wg.Done()
			wg.Wait()
		})
	}
}

// fakeReservations serves ReservePath on mux as a target from this
// version does, holding nothing: for fake targets whose join is the test.
func fakeReservations(mux *http.ServeMux) {
	mux.HandleFunc(ReservePath, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, http.StatusOK, ReserveResponse{Token: "fake"})
	})
}

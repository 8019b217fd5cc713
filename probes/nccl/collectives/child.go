package collectives

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda"
	"github.com/gpulink/gpulink_exporter/probes/nccl"
)

// ncclMeasurer is the CollectiveMeasurer of the collectives child: NCCL
// over the CUDA driver, both loaded at run time.
type ncclMeasurer struct {
	drv *cuda.Driver
	lib *nccl.Library
	// log is NCCL's debug file (setNCCLEnvironment), read for the
	// transports.
	log string
}

func (m *ncclMeasurer) NCCLVersion() int {
	v, _ := m.lib.Version() // 0, unknown, when it fails
	return v
}

// Bounds on the communicator's waits. The communicators are blocking (see
// package nccl: a non-blocking one costs every small operation the wait
// for NCCL's launch thread), so the thread is in a call most of the time:
// a synchronisation on a sample's end event, a group's end, the init.
// Meanwhile run polls every local rank's asynchronous error each
// watchInterval: a sample whose peer failed never completes, and only the
// error says so. At such an error or the deadline the communicator is
// aborted from off the thread, which ends a wait on work NCCL has queued;
// a call that has not returned stuckGrace after the abort (a blocking
// init, which has nothing to abort yet, or NCCL stuck connecting) is taken
// for hung, and an abort that has not returned in abortGrace too. The
// round is then reported with the cause and the process exits, taking the
// thread and NCCL's own with it. Both graces fit in the margin ChildRunner
// leaves between the child's deadline and its kill (childDeadline).
const (
	watchInterval = 5 * time.Millisecond
	stuckGrace    = 500 * time.Millisecond
	abortGrace    = 2 * time.Second
)

// ncclComm is this process's ranks of one communicator: one GPU each, all
// driven from one locked thread.
type ncclComm struct {
	ctx    context.Context
	lib    *nccl.Library
	log    string
	o      probes.CollectiveOptions
	thread *lockedThread
	gpus   []*commGPU
	// comms are the local ranks' communicators once made, for the
	// watch and the abort, which run off the thread.
	comms []*nccl.Comm
	// bufBytes is the size of each GPU's send and receive buffers: the
	// largest operation's.
	bufBytes int64
	// since is when the first context was retained.
	since time.Time

	// failed is the first failure; the communicator was aborted for it,
	// and every later call says so. stuck: a call never returned from
	// NCCL or CUDA, and the thread is lost to it.
	failed error
	stuck  bool
	closed bool
}

// commGPU is one local rank.
type commGPU struct {
	addr       string
	rank       int
	ctx        *cuda.Context
	stream     *cuda.Stream
	start, end *cuda.Event
	send, recv cuda.DevicePtr
	comm       *nccl.Comm
	// busy is the event-timed GPU time of everything run so far.
	busy time.Duration
}

// OpenComm retains each GPU's primary context, allocates its buffers,
// stream and events, and joins the communicator: with the id o gives, or
// a new one, handed out on ids first when other processes hold ranks.
func (m *ncclMeasurer) OpenComm(ctx context.Context, o probes.CollectiveOptions, ids chan<- string) (probes.Communicator, error) {
	c := &ncclComm{ctx: ctx, lib: m.lib, log: m.log, o: o, thread: startLockedThread(),
		bufBytes: max(o.SizeBytes, o.SmallBytes) / 4 * 4}
	if err := c.run("opening the GPUs", func() error { return c.openGPUs(m.drv) }); err != nil {
		c.Close()
		return nil, err
	}
	id, err := m.uniqueID(ctx, o, ids)
	if err != nil {
		c.Close()
		return nil, err
	}
	var comms []*nccl.Comm
	err = c.run("initialising the communicator", func() (err error) {
		comms, err = m.lib.InitRanks(ctx, id, o.Ranks, o.FirstRank, len(c.gpus), func(i int) error { return c.gpus[i].ctx.SetCurrent() })
		return err
	})
	if err != nil {
		if c.stuck {
			err = fmt.Errorf("%w; NCCL's init of ranks %d..%d of %d never returned (a rank that never joined, or NCCL stuck connecting): "+
				"a blocking init cannot be aborted, so this child gives it up and exits, and NCCL's threads end with it",
				err, o.FirstRank, o.FirstRank+len(c.gpus)-1, o.Ranks)
		}
		c.Close()
		return nil, err
	}
	for i, comm := range comms {
		c.gpus[i].comm = comm
	}
	c.comms = comms
	return c, nil
}

// uniqueID is the id o names, or a new one, sent on ids when another
// process needs it.
func (m *ncclMeasurer) uniqueID(ctx context.Context, o probes.CollectiveOptions, ids chan<- string) (nccl.UniqueID, error) {
	if o.UniqueID != "" {
		id, err := probes.ParseUniqueID(o.UniqueID)
		return nccl.UniqueID(id), err
	}
	id, err := m.lib.NewUniqueID()
	if err != nil || o.Ranks == len(o.GPUs) {
		return id, err
	}
	if ids == nil {
		return id, fmt.Errorf("%d of %d ranks are in other processes, and there is no one to hand them the unique id", o.Ranks-len(o.GPUs), o.Ranks)
	}
	select {
	case ids <- probes.UniqueID(id).String():
		return id, nil
	case <-ctx.Done():
		return id, fmt.Errorf("handing out the unique id: %w", context.Cause(ctx))
	}
}

// openGPUs readies each GPU; it runs on the thread. A GPU set up in part
// is kept in c.gpus for Close to undo.
func (c *ncclComm) openGPUs(drv *cuda.Driver) error {
	for i, addr := range c.o.GPUs {
		dev, err := drv.DeviceByPCIBusID(addr)
		if err != nil {
			return err
		}
		cc, err := dev.RetainPrimaryContext()
		if err != nil {
			return fmt.Errorf("GPU %s: %w", addr, err)
		}
		if c.since.IsZero() {
			c.since = time.Now()
		}
		g := &commGPU{addr: pciaddr.Normalize(addr), rank: c.o.FirstRank + i, ctx: cc}
		c.gpus = append(c.gpus, g)
		if err := g.open(c.bufBytes); err != nil {
			return fmt.Errorf("GPU %s: %w", g.addr, err)
		}
	}
	return nil
}

func (g *commGPU) open(n int64) (err error) {
	if err := g.ctx.SetCurrent(); err != nil {
		return err
	}
	if g.stream, err = g.ctx.NewStream(); err != nil {
		return err
	}
	if g.start, err = g.ctx.NewEvent(); err != nil {
		return err
	}
	if g.end, err = g.ctx.NewEvent(); err != nil {
		return err
	}
	for _, p := range []*cuda.DevicePtr{&g.send, &g.recv} {
		if *p, err = g.ctx.Alloc(n); err != nil {
			return err
		}
		// Zeros, not whatever the last user left: the sums stay finite.
		if err := g.ctx.Memset(*p, 0, n); err != nil {
			return err
		}
	}
	return nil
}

// close frees what open made; it runs on the thread. Errors are of no
// use here: the process ends with the round.
func (g *commGPU) close() {
	if g.ctx.SetCurrent() != nil {
		return
	}
	for _, p := range []cuda.DevicePtr{g.send, g.recv} {
		if p != 0 {
			_ = g.ctx.Free(p)
		}
	}
	for _, e := range []*cuda.Event{g.start, g.end} {
		if e != nil {
			_ = e.Destroy()
		}
	}
	if g.stream != nil {
		_ = g.stream.Destroy()
	}
}

// run runs f on the thread, watching the communicator meanwhile: at a
// local rank's asynchronous error or the context's end it is aborted,
// which frees the thread from a wait on a sample that will never
// complete, and the error says why. Any failure aborts it (fail). f must
// keep what it makes to itself until it returns: once stuck, it may
// still run while the caller moves on.
func (c *ncclComm) run(what string, f func() error) error {
	if c.failed != nil {
		return fmt.Errorf("not run: %w", c.failed)
	}
	done := c.thread.start(f)
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	var cause error
	for cause == nil {
		select {
		case err := <-done:
			if err != nil {
				return c.fail(fmt.Errorf("%s: %w", what, err))
			}
			return nil
		case <-tick.C:
			cause = c.asyncError()
		case <-c.ctx.Done():
			cause = fmt.Errorf("not done by the deadline (%v)", context.Cause(c.ctx))
		}
	}
	err := c.fail(fmt.Errorf("%s: %w", what, cause))
	t := time.NewTimer(stuckGrace)
	defer t.Stop()
	select {
	case <-done: //nolint:errcheck // what f says after the abort (its wait ended) adds nothing to the cause
	case <-t.C:
		c.stuck = true
	}
	return err
}

// asyncError is the first local rank's asynchronous error; in progress is
// none.
func (c *ncclComm) asyncError() error {
	for _, comm := range c.comms {
		if err := comm.AsyncError(); err != nil && !errors.Is(err, nccl.ErrInProgress) {
			return fmt.Errorf("rank %d: %w", comm.Rank(), err)
		}
	}
	return nil
}

// fail records the communicator's first failure and aborts it: a rank
// whose operation failed leaves the others waiting for it, here and in
// every other process of the communicator, and only an abort frees them.
// It returns err.
func (c *ncclComm) fail(err error) error {
	if c.failed != nil {
		return err
	}
	c.failed = err
	if len(c.comms) == 0 {
		return err
	}
	done := make(chan struct{})
	// Off the thread, which may be waiting on the communicator's work:
	// ncclCommAbort is how another thread ends that wait.
	go func() {
		defer close(done)
		for _, comm := range c.comms {
			_ = comm.Abort() // what it could not free goes with the process
		}
	}()
	t := time.NewTimer(abortGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.stuck = true
	}
	return err
}

// Collective times op at size bytes over every rank, with nccl-tests'
// meaning of size: the buffer of an all-reduce; the gathered buffer of an
// all-gather and the scattered one of a reduce-scatter (each rank has
// size/n); each rank's whole send buffer of an all-to-all (size/n to each
// rank, itself included, grouped sends and receives as nccl-tests'
// alltoall). The data are float32. size is rounded down to a multiple of
// 4n bytes so that every rank's part is whole floats; the result keeps
// the size asked for, which is less than 4n bytes more than what moved:
// at most 3e-5 of the smallest bandwidth size (1 MiB) at 8 ranks, 0 at
// any power-of-two size and rank count. (The small size only gives a
// time.)
func (c *ncclComm) Collective(op probes.Collective, size int64) (probes.Measured, error) {
	n := int64(c.o.Ranks)
	bytes := size / (4 * n) * (4 * n)
	elems := uint64(bytes / 4)
	per := uint64(bytes / 4 / n) // one rank's part, in floats
	var enqueue func(g *commGPU) error
	switch op {
	case probes.AllReduce:
		enqueue = func(g *commGPU) error { return g.comm.AllReduce(g.send, g.recv, elems, g.stream) }
	case probes.AllGather:
		enqueue = func(g *commGPU) error { return g.comm.AllGather(g.send, g.recv, per, g.stream) }
	case probes.ReduceScatter:
		enqueue = func(g *commGPU) error { return g.comm.ReduceScatter(g.send, g.recv, per, g.stream) }
	case probes.AllToAll:
		chunk := cuda.DevicePtr(bytes / n)
		enqueue = func(g *commGPU) error {
			for r := range c.o.Ranks {
				off := cuda.DevicePtr(r) * chunk
				if err := g.comm.Send(g.send+off, per, r, g.stream); err != nil {
					return err
				}
				if err := g.comm.Recv(g.recv+off, per, r, g.stream); err != nil {
					return err
				}
			}
			return nil
		}
	default:
		return probes.Measured{}, fmt.Errorf("%s is not a collective this probe runs", op)
	}
	// Every rank takes part, so one float all-reduced is a barrier.
	barrier := func(g *commGPU) error { return g.comm.AllReduce(g.send, g.recv, 1, g.stream) }
	return c.timed(string(op), c.gpus, enqueue, barrier)
}

// SendRecv times rank from sending size bytes (rounded down to whole
// floats) to rank to. Only the local side is run: the send, the receive,
// or both in one group when both ranks are here. With neither here it
// returns at once, with no time: MeasureCollectiveRound reports a pair
// from the processes holding its ranks.
func (c *ncclComm) SendRecv(from, to int, size int64) (probes.Measured, error) {
	src, dst := c.local(from), c.local(to)
	if src == nil && dst == nil {
		return probes.Measured{}, nil
	}
	var gpus []*commGPU
	for _, g := range []*commGPU{src, dst} {
		if g != nil {
			gpus = append(gpus, g)
		}
	}
	elems := uint64(size / 4)
	// The two ranks swap one float: a barrier between just them.
	barrier := func(g *commGPU) error {
		peer := from
		if g == src {
			peer = to
		}
		if err := g.comm.Send(g.send, 1, peer, g.stream); err != nil {
			return err
		}
		return g.comm.Recv(g.recv, 1, peer, g.stream)
	}
	return c.timed(fmt.Sprintf("send/recv %d->%d", from, to), gpus, func(g *commGPU) error {
		if g == src {
			return g.comm.Send(g.send, elems, to, g.stream)
		}
		return g.comm.Recv(g.recv, elems, from, g.stream)
	}, barrier)
}

func (c *ncclComm) local(rank int) *commGPU {
	if i, ok := c.o.Local(rank); ok {
		return c.gpus[i] // an open communicator has every GPU of o
	}
	return nil
}

// timed runs o.Warmup operations and then o.Samples samples of
// o.Iterations operations on gpus, each operation one group over them,
// as nccl-tests does. A sample's time is the slowest GPU's, between an
// event before its operations and one after; an operation's is that over
// Iterations. The warm-up is timed too, for the GPU time.
//
// When other processes hold ranks (two nodes), each sample starts after
// barrier, one tiny operation every rank of the sample takes part in,
// has completed: as nccl-tests starts its timer after a barrier. Without
// it the side that starts first times its wait for the other (on two
// H100s over sockets the exporter's send/recv read 10-17% under the
// reference in one run).
func (c *ncclComm) timed(what string, gpus []*commGPU, enqueue, barrier func(*commGPU) error) (probes.Measured, error) {
	busy := make([]time.Duration, len(gpus))
	var secs []float64
	sync := func() error { return nil }
	if c.o.Ranks > len(c.gpus) {
		sync = func() error {
			if err := c.group(gpus, barrier); err != nil {
				return fmt.Errorf("barrier: %w", err)
			}
			for _, g := range gpus {
				if err := g.record(g.end); err != nil {
					return err
				}
			}
			return c.wait(gpus)
		}
	}
	err := c.run(what, func() error {
		if c.o.Warmup > 0 {
			if err := sync(); err != nil {
				return err
			}
			if _, err := c.sample(gpus, c.o.Warmup, enqueue, busy); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
		for range c.o.Samples {
			if err := sync(); err != nil {
				return err
			}
			d, err := c.sample(gpus, c.o.Iterations, enqueue, busy)
			if err != nil {
				return err
			}
			secs = append(secs, d.Seconds()/float64(c.o.Iterations))
		}
		return nil
	})
	if c.stuck {
		return probes.Measured{}, err // f may still write busy
	}
	for i, g := range gpus {
		g.busy += busy[i]
	}
	if err != nil {
		return probes.Measured{}, err
	}
	return probes.Sampled(secs), nil
}

// sample queues ops operations between each GPU's two events, waits for
// them, and returns the slowest GPU's time; each GPU's is added to busy.
// It runs on the thread.
func (c *ncclComm) sample(gpus []*commGPU, ops int, enqueue func(*commGPU) error, busy []time.Duration) (time.Duration, error) {
	for _, g := range gpus {
		if err := g.record(g.start); err != nil {
			return 0, err
		}
	}
	for range ops {
		if err := c.group(gpus, enqueue); err != nil {
			return 0, err
		}
	}
	for _, g := range gpus {
		if err := g.record(g.end); err != nil {
			return 0, err
		}
	}
	if err := c.wait(gpus); err != nil {
		return 0, err
	}
	var slowest time.Duration
	for i, g := range gpus {
		d, err := g.end.Since(g.start)
		if err != nil {
			return 0, err
		}
		busy[i] += d
		slowest = max(slowest, d)
	}
	return slowest, nil
}

func (g *commGPU) record(e *cuda.Event) error {
	if err := g.ctx.SetCurrent(); err != nil {
		return err
	}
	return e.Record(g.stream)
}

// group queues one operation on each GPU as one NCCL group, each with its
// context current.
func (c *ncclComm) group(gpus []*commGPU, enqueue func(*commGPU) error) error {
	if err := c.lib.GroupStart(); err != nil {
		return err
	}
	for _, g := range gpus {
		err := g.ctx.SetCurrent()
		if err == nil {
			err = enqueue(g)
		}
		if err != nil && !errors.Is(err, nccl.ErrInProgress) {
			_ = c.lib.GroupEnd() // the group must close; the abort follows
			return fmt.Errorf("rank %d: %w", g.rank, err)
		}
	}
	err := c.lib.GroupEnd()
	if errors.Is(err, nccl.ErrInProgress) {
		// Made non-blocking by the operator's NCCL_COMM_BLOCKING=0, and
		// still connecting or launching: NCCL takes no other call on these
		// communicators until they say they are done.
		comms := make([]*nccl.Comm, len(gpus))
		for i, g := range gpus {
			comms[i] = g.comm
		}
		err = nccl.WaitReady(c.ctx, comms...)
	}
	return err
}

// wait waits for every GPU's end event. A sample that will never complete
// is ended by run's abort.
func (c *ncclComm) wait(gpus []*commGPU) error {
	for _, g := range gpus {
		if err := g.end.Synchronize(); err != nil {
			return fmt.Errorf("rank %d: %w", g.rank, err)
		}
	}
	return nil
}

// Transports reads NCCL's log again: connections are made on first use.
func (c *ncclComm) Transports() []probes.Transport {
	f, err := os.Open(c.log)
	if err != nil {
		return nil
	}
	defer f.Close()
	return probes.TransportsOf(f)
}

// Cost is per GPU: they all work at once, so the busiest one's GPU time,
// and the two buffers each holds.
func (c *ncclComm) Cost() probes.Cost {
	var busy time.Duration
	for _, g := range c.gpus {
		busy = max(busy, g.busy)
	}
	return probes.Cost{BusySeconds: busy.Seconds(), DeviceMemoryBytes: 2 * c.bufBytes}
}

// Close destroys the communicator (aborted already if anything failed),
// frees the buffers and releases the contexts. A thread stuck in a call
// keeps all of it: the process ends soon after, and takes it along.
func (c *ncclComm) Close() float64 {
	if c.closed {
		return 0
	}
	c.closed = true
	held := func() float64 {
		if c.since.IsZero() {
			return 0
		}
		return time.Since(c.since).Seconds()
	}
	if c.stuck {
		return held()
	}
	done := c.thread.start(func() error {
		for _, comm := range c.comms {
			_ = comm.Destroy() // aborts what it cannot finalize; a no-op after an abort
		}
		for _, g := range c.gpus {
			g.close()
			_ = g.ctx.Release()
		}
		return nil
	})
	// A blocking communicator's finalize waits for whatever it has in
	// flight and cannot be bounded from inside: one that has not returned
	// in abortGrace is left to the process's end, and the round, measured
	// already, is still printed.
	t := time.NewTimer(abortGrace)
	defer t.Stop()
	select {
	case <-done: //nolint:errcheck // the job reports nothing
		c.thread.stop()
	case <-t.C:
		c.stuck = true
	}
	return held()
}

package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// Comm is one rank of a communicator, held by this process.
type Comm struct {
	l    *Library
	h    atomic.Pointer[handle] // nil once aborted or destroyed
	rank int
}

type handle struct{ c C.gn_comm }

// errGone is what a call on an aborted or destroyed communicator returns.
var errGone = errors.New("NCCL communicator already aborted or destroyed")

// InitRanks makes local ranks firstRank..firstRank+local-1 of an nranks
// communicator joined by id, in one NCCL group, calling makeCurrent(i)
// before the i-th rank's init so that GPU i's CUDA context is current on
// the calling OS thread (the caller has locked its goroutine to it). It
// returns once every one is ready: NCCL has connected all nranks, in
// whichever processes. The communicators are blocking, so the group's end
// waits for that, and ctx cannot cut it short: a rank that never joins
// keeps the thread for ever, and the caller must give it up at its
// deadline (see the package comment). Where NCCL_COMM_BLOCKING=0 made
// them non-blocking, InitRanks polls them until ready or ctx ends, when it
// aborts them and returns an error saying init did not finish and why ctx
// ended (context.Cause). On any error no communicator is left.
func (l *Library) InitRanks(ctx context.Context, id UniqueID, nranks, firstRank, local int, makeCurrent func(i int) error) ([]*Comm, error) {
	switch {
	case nranks < 1:
		return nil, fmt.Errorf("NCCL init: %d ranks", nranks)
	case local < 1 || firstRank < 0 || firstRank+local > nranks:
		return nil, fmt.Errorf("NCCL init: local ranks %d..%d do not fit in %d ranks", firstRank, firstRank+local-1, nranks)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("NCCL init not started: %w", context.Cause(ctx))
	}
	comms, err := l.initGroup(id, nranks, firstRank, local, makeCurrent)
	if err != nil {
		abortAll(comms)
		return nil, err
	}
	if err := WaitReady(ctx, comms...); err != nil {
		abortAll(comms)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("NCCL init of ranks %d..%d of %d did not finish: %w", firstRank, firstRank+local-1, nranks, err)
		}
		return nil, fmt.Errorf("NCCL init of ranks %d..%d of %d: %w", firstRank, firstRank+local-1, nranks, err)
	}
	return comms, nil
}

// initGroup starts every local rank's init inside one group: NCCL needs
// the group to make several ranks from one thread without each waiting
// for the others. Each GPU is made current once before the group: a
// failure inside it is one NCCL does not know of, and the group's end
// would wait for ever, the communicators being blocking, for the rank
// that was never made.
func (l *Library) initGroup(id UniqueID, nranks, firstRank, local int, makeCurrent func(i int) error) ([]*Comm, error) {
	for i := range local {
		if makeCurrent == nil {
			break
		}
		if err := makeCurrent(i); err != nil {
			return nil, fmt.Errorf("NCCL init of rank %d: making its GPU current: %w", firstRank+i, err)
		}
	}
	if err := l.GroupStart(); err != nil {
		return nil, err
	}
	var comms []*Comm
	for i := range local {
		if makeCurrent != nil {
			if err := makeCurrent(i); err != nil {
				_ = l.GroupEnd()
				return comms, fmt.Errorf("NCCL init of rank %d: making its GPU current: %w", firstRank+i, err)
			}
		}
		var h C.gn_comm
		r := C.gn_init_rank(l.api, &h, C.int(nranks), id.c(), C.int(firstRank+i))
		if h != nil {
			c := &Comm{l: l, rank: firstRank + i}
			c.h.Store(&handle{h})
			comms = append(comms, c)
		}
		if err := l.check("ncclCommInitRankConfig", r); err != nil && !errors.Is(err, ErrInProgress) {
			_ = l.GroupEnd() // NCCL knows of the failure: the group's end launches nothing
			return comms, fmt.Errorf("NCCL init of rank %d: %w", firstRank+i, err)
		}
	}
	if err := l.GroupEnd(); err != nil && !errors.Is(err, ErrInProgress) {
		return comms, err
	}
	return comms, nil
}

func abortAll(comms []*Comm) {
	for _, c := range comms {
		_ = c.Abort()
	}
}

// How WaitReady asks NCCL: without sleeping for the first spinFor, then
// with sleeps from firstPoll doubling to maxPoll while ranks in other
// processes are waited for. A non-blocking communicator (under
// NCCL_COMM_BLOCKING=0) answers ncclInProgress to the GroupEnd of every
// timed operation until NCCL's launch thread has queued it, which takes
// tens of microseconds: a sleep
// there left the GPU idle between operations (on two H100s every
// collective read about 1.1 ms an operation, a quarter to a half of its
// bandwidth), so the launch is waited for by spinning.
const (
	spinFor   = 2 * time.Millisecond
	firstPoll = 50 * time.Microsecond
	maxPoll   = 5 * time.Millisecond
)

// WaitReady polls each communicator's AsyncError until none is in
// progress: after a non-blocking init, after GroupEnd (or an operation
// outside a group) returned ErrInProgress, after a finalize. It returns
// the first error a communicator reports or, when ctx ends first, an
// error carrying context.Cause and how many were still in progress. It
// aborts nothing.
func WaitReady(ctx context.Context, comms ...*Comm) error {
	pending := append([]*Comm(nil), comms...)
	wait := firstPoll
	spinUntil := time.Now().Add(spinFor)
	for {
		rest := pending[:0]
		for _, c := range pending {
			switch err := c.AsyncError(); {
			case errors.Is(err, ErrInProgress):
				rest = append(rest, c)
			case err != nil:
				return fmt.Errorf("rank %d: %w", c.rank, err)
			}
		}
		pending = rest
		if len(pending) == 0 {
			return nil
		}
		if time.Now().Before(spinUntil) {
			if err := context.Cause(ctx); err != nil {
				return fmt.Errorf("%d of %d communicators still in progress: %w", len(pending), len(comms), err)
			}
			runtime.Gosched()
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%d of %d communicators still in progress: %w", len(pending), len(comms), context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, maxPoll)
	}
}

// Rank is the rank c was made as.
func (c *Comm) Rank() int { return c.rank }

// AsyncError is ncclCommGetAsyncError: nil once c is ready and has not
// failed, ErrInProgress while an init, a group's operations or a finalize
// are still under way, or the error that broke c (a peer that went away,
// ncclRemoteError). A broken communicator can only be aborted.
func (c *Comm) AsyncError() error {
	h := c.h.Load()
	if h == nil {
		return errGone
	}
	var r C.gn_result
	if err := c.l.check("ncclCommGetAsyncError", C.gn_async_error(c.l.api, h.c, &r)); err != nil {
		return err
	}
	return c.l.check("ncclCommGetAsyncError", r)
}

// Abort is ncclCommAbort: it ends whatever c has in flight, hung or not,
// and frees it. It may be called from any goroutine, including while
// another waits on a stream c's operations are on (that wait then ends);
// not while another goroutine is inside a call on c. A second Abort, or
// one after Destroy, does nothing.
func (c *Comm) Abort() error {
	h := c.h.Swap(nil)
	if h == nil {
		return nil
	}
	return c.l.check("ncclCommAbort", C.gn_abort(c.l.api, h.c))
}

// finalizeWait bounds how long Destroy polls a non-blocking
// communicator's finalize before it aborts instead.
var finalizeWait = 10 * time.Second

// Destroy frees c the orderly way: ncclCommFinalize (where the library
// has it) flushes what c has in flight, then ncclCommDestroy. On a
// blocking communicator (the default) the finalize returns when done and
// a hung one does not return: the caller bounds it from outside (as the
// collectives child's Close does). On a non-blocking one (the operator's
// NCCL_COMM_BLOCKING=0) it is polled for at most finalizeWait. A finalize
// that fails or runs out of that time is followed by an abort, and its
// error returned. Use Abort on a communicator that has failed or timed
// out.
func (c *Comm) Destroy() error {
	h := c.h.Load()
	if h == nil {
		return nil
	}
	if C.gn_has_finalize(c.l.api) != 0 {
		err := c.l.check("ncclCommFinalize", C.gn_finalize(c.l.api, h.c))
		if errors.Is(err, ErrInProgress) {
			ctx, cancel := context.WithTimeoutCause(context.Background(), finalizeWait,
				fmt.Errorf("finalize took longer than %v", finalizeWait))
			err = WaitReady(ctx, c)
			cancel()
		}
		if err != nil {
			_ = c.Abort()
			return fmt.Errorf("NCCL finalize of rank %d, aborted instead: %w", c.rank, err)
		}
	}
	if c.h.Swap(nil) == nil { // aborted meanwhile
		return nil
	}
	return c.l.check("ncclCommDestroy", C.gn_destroy(c.l.api, h.c))
}

package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"

	"github.com/gpulink/gpulink_exporter/probes/cuda"
)

// The operations queue work on a CUDA stream of the rank's GPU, on float32
// data, summing where they reduce; buffers are device pointers in the
// rank's context. Counts are elements, as NCCL counts them, not bytes.
//
// Inside a group (GroupStart ... GroupEnd) an operation only records what
// to do and returns nil; GroupEnd launches the lot. Outside a group an
// operation is its own group. A blocking communicator's GroupEnd returns
// once the work is queued (connecting the ranks first where it must); one
// made non-blocking by NCCL_COMM_BLOCKING=0 may answer ErrInProgress
// instead (NCCL is still connecting the ranks, or launching): the work is
// accepted, and the caller polls AsyncError of every communicator involved
// (WaitReady) before the next NCCL call on them. The stream then completes
// when every rank has taken part; a rank that never does leaves the
// stream in progress for ever, which Abort, from another goroutine, ends.

// AllReduce sums count elements of every rank's send into every rank's
// recv (which may be send).
func (c *Comm) AllReduce(send, recv cuda.DevicePtr, count uint64, s *cuda.Stream) error {
	return c.op("ncclAllReduce", s, func(h C.gn_comm, st C.gn_stream) C.gn_result {
		return C.gn_all_reduce(c.l.api, C.ulonglong(send), C.ulonglong(recv), C.size_t(count), h, st)
	})
}

// AllGather gathers sendCount elements from every rank into recv, which
// holds sendCount times the number of ranks, in rank order.
func (c *Comm) AllGather(send, recv cuda.DevicePtr, sendCount uint64, s *cuda.Stream) error {
	return c.op("ncclAllGather", s, func(h C.gn_comm, st C.gn_stream) C.gn_result {
		return C.gn_all_gather(c.l.api, C.ulonglong(send), C.ulonglong(recv), C.size_t(sendCount), h, st)
	})
}

// ReduceScatter sums every rank's send (recvCount times the number of
// ranks) and leaves rank r's recvCount-element block of the sum in rank
// r's recv.
func (c *Comm) ReduceScatter(send, recv cuda.DevicePtr, recvCount uint64, s *cuda.Stream) error {
	return c.op("ncclReduceScatter", s, func(h C.gn_comm, st C.gn_stream) C.gn_result {
		return C.gn_reduce_scatter(c.l.api, C.ulonglong(send), C.ulonglong(recv), C.size_t(recvCount), h, st)
	})
}

// Send sends count elements of buf to rank peer, which must post a
// matching Recv; pairs that depend on each other go in one group.
func (c *Comm) Send(buf cuda.DevicePtr, count uint64, peer int, s *cuda.Stream) error {
	return c.op("ncclSend", s, func(h C.gn_comm, st C.gn_stream) C.gn_result {
		return C.gn_send(c.l.api, C.ulonglong(buf), C.size_t(count), C.int(peer), h, st)
	})
}

// Recv receives count elements from rank peer into buf.
func (c *Comm) Recv(buf cuda.DevicePtr, count uint64, peer int, s *cuda.Stream) error {
	return c.op("ncclRecv", s, func(h C.gn_comm, st C.gn_stream) C.gn_result {
		return C.gn_recv(c.l.api, C.ulonglong(buf), C.size_t(count), C.int(peer), h, st)
	})
}

func (c *Comm) op(call string, s *cuda.Stream, f func(C.gn_comm, C.gn_stream) C.gn_result) error {
	if s == nil {
		return fmt.Errorf("%s on rank %d: no stream", call, c.rank)
	}
	h := c.h.Load()
	if h == nil {
		return fmt.Errorf("%s on rank %d: %w", call, c.rank, errGone)
	}
	err := c.l.check(call, f(h.c, C.gn_stream(s.Handle())))
	if err != nil && !errors.Is(err, ErrInProgress) {
		return fmt.Errorf("rank %d: %w", c.rank, err)
	}
	return err
}

// GroupStart opens a group on the calling thread: operations (and inits)
// until the matching GroupEnd are launched together, so one thread can
// drive several ranks, and the send/recv pairs of an all-to-all do not
// wait on each other.
func (l *Library) GroupStart() error {
	return l.check("ncclGroupStart", C.gn_group_start(l.api))
}

// GroupEnd closes the group and launches what it holds. With non-blocking
// communicators (NCCL_COMM_BLOCKING=0) it may return ErrInProgress while
// NCCL is still at it: the
// caller must then poll AsyncError of every communicator the group used
// (WaitReady) until none is in progress before using them again. Any
// other error means the group's work was not launched.
func (l *Library) GroupEnd() error {
	return l.check("ncclGroupEnd", C.gn_group_end(l.api))
}

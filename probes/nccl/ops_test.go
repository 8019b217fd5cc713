package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/probes/cuda"
)

const (
	testElems = 1 << 20 // float32 elements in a test buffer
	testBytes = 4 * testElems
)

// buffers are a send and a receive buffer of testBytes on each GPU.
func buffers(t *testing.T, r *rig) (send, recv []cuda.DevicePtr) {
	t.Helper()
	for i := range r.ctx {
		send = append(send, r.alloc(t, i, testBytes))
		recv = append(recv, r.alloc(t, i, testBytes))
	}
	return send, recv
}

// Collectives in one group, timed with CUDA events: each stream is busy
// for what the model says, so nccl-tests' bus bandwidth comes out as the
// link's rate.
func TestCollectivesAreTimedOnTheirStreams(t *testing.T) {
	r := newRig(t, 2)
	comms := r.init(t)
	send, recv := buffers(t, r)
	times := r.timed(t, func() {
		group(t, r.lib, comms, func() error {
			for i, c := range comms {
				if err := c.AllReduce(send[i], recv[i], testElems, r.streams[i]); err != nil {
					return err
				}
				if err := c.AllGather(send[i], recv[i], testElems/2, r.streams[i]); err != nil {
					return err
				}
				if err := c.ReduceScatter(send[i], recv[i], testElems/2, r.streams[i]); err != nil {
					return err
				}
			}
			return nil
		})
	})
	// nccl-tests' sizes: the all-reduce's buffer, the gathered buffer, the
	// scattered one; bus factors 2(n-1)/n and (n-1)/n with n = 2.
	want := modelNs(testBytes, 1, defaultP2PGBs) + 2*modelNs(testBytes, 0.5, defaultP2PGBs)
	for i, d := range times {
		within1pc(t, fmt.Sprintf("the group on GPU %d", i), d, want)
	}
}

// Send/recv pairs in a group run at once: one transfer's time on both
// streams, and an all-to-all (each rank sending size/n to every rank)
// moves (n-1)/n of its buffer over the link.
func TestSendRecvAndAllToAll(t *testing.T) {
	r := newRig(t, 2)
	comms := r.init(t)
	send, recv := buffers(t, r)
	times := r.timed(t, func() {
		group(t, r.lib, comms, func() error {
			if err := comms[0].Send(send[0], testElems, 1, r.streams[0]); err != nil {
				return err
			}
			return comms[1].Recv(recv[1], testElems, 0, r.streams[1])
		})
	})
	for i, d := range times {
		within1pc(t, fmt.Sprintf("send/recv on GPU %d", i), d, modelNs(testBytes, 1, defaultP2PGBs))
	}

	times = r.timed(t, func() {
		group(t, r.lib, comms, func() error {
			for i, c := range comms {
				for peer := range comms {
					off := cuda.DevicePtr(peer * testBytes / 2)
					if err := c.Send(send[i]+off, testElems/2, peer, r.streams[i]); err != nil {
						return err
					}
					if err := c.Recv(recv[i]+off, testElems/2, peer, r.streams[i]); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
	for i, d := range times {
		within1pc(t, fmt.Sprintf("all-to-all on GPU %d", i), d, modelNs(testBytes, 0.5, defaultP2PGBs))
	}
}

// The transport follows NCCL's environment as real NCCL does: P2P off
// gives shared memory, both off the network; the rate and the log lines
// say which.
func TestTransportFollowsNCCLEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name, p2p, shm string
		gbps           float64
		lines          []string
	}{
		{"p2p", "0", "0", defaultP2PGBs, []string{"Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer", "Channel 01/0 : 1[1] -> 0[0] via P2P/direct pointer"}},
		{"shm", "1", "0", defaultSHMGBs, []string{"Channel 00 : 0[0] -> 1[1] via SHM/direct/direct", "Channel 01 : 1[1] -> 0[0] via SHM/direct/direct"}},
		{"net", "1", "1", defaultNetGBs, []string{
			"Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0", "Channel 00/0 : 0[0] -> 1[1] [receive] via NET/Socket/0",
			"Channel 01/0 : 1[1] -> 0[0] [send] via NET/Socket/0", "Channel 01/0 : 1[1] -> 0[0] [receive] via NET/Socket/0",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := t.TempDir()
			t.Setenv("NCCL_P2P_DISABLE", tc.p2p)
			t.Setenv("NCCL_SHM_DISABLE", tc.shm)
			t.Setenv("NCCL_DEBUG", "INFO")
			t.Setenv("NCCL_DEBUG_FILE", filepath.Join(logs, "nccl.%h.%p.log"))
			t.Setenv("FAKE_NCCL_HOSTNAME", "gpu-node-7")
			r := newRig(t, 2)
			comms := r.init(t)
			send, recv := buffers(t, r)
			times := r.timed(t, func() {
				group(t, r.lib, comms, func() error {
					for i, c := range comms {
						if err := c.AllReduce(send[i], recv[i], testElems, r.streams[i]); err != nil {
							return err
						}
					}
					return nil
				})
			})
			within1pc(t, "all-reduce", times[0], modelNs(testBytes, 1, tc.gbps))
			log := readLog(t, filepath.Join(logs, fmt.Sprintf("nccl.gpu-node-7.%d.log", os.Getpid())))
			for _, l := range append(tc.lines, "gpu-node-7:", "NCCL INFO Connected all rings") {
				if !strings.Contains(log, l) {
					t.Errorf("log has no %q:\n%s", l, log)
				}
			}
		})
	}
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("NCCL's log: %v", err)
	}
	return string(data)
}

// Send/recv connections are made at the first send/recv between two
// ranks, on connection index 1, and logged then, not before; over the
// network they share their buffers ("/Shared"), as NCCL 2.28 logs them.
func TestSendRecvConnectionsAreMadeAtFirstUse(t *testing.T) {
	for _, tc := range []struct {
		name, disable string
		lines         []string
	}{
		{"p2p", "0", []string{"Channel 00/1 : 0[0] -> 1[1] via P2P/direct pointer"}},
		{"net", "1", []string{"Channel 00/1 : 0[0] -> 1[1] [send] via NET/Socket/0/Shared", "Channel 00/1 : 0[0] -> 1[1] [receive] via NET/Socket/0/Shared"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := t.TempDir()
			t.Setenv("NCCL_DEBUG", "INFO")
			t.Setenv("NCCL_DEBUG_FILE", filepath.Join(logs, "nccl.log"))
			t.Setenv("NCCL_P2P_DISABLE", tc.disable)
			t.Setenv("NCCL_SHM_DISABLE", tc.disable)
			r := newRig(t, 2)
			comms := r.init(t)
			if log := readLog(t, filepath.Join(logs, "nccl.log")); strings.Contains(log, " via ") {
				t.Fatalf("connections logged before any operation:\n%s", log)
			}
			send, recv := buffers(t, r)
			group(t, r.lib, comms, func() error {
				if err := comms[0].Send(send[0], testElems, 1, r.streams[0]); err != nil {
					return err
				}
				return comms[1].Recv(recv[1], testElems, 0, r.streams[1])
			})
			log := readLog(t, filepath.Join(logs, "nccl.log"))
			for _, l := range tc.lines {
				if !strings.Contains(log, l) {
					t.Errorf("log has no %q:\n%s", l, log)
				}
			}
			if strings.Contains(log, "Connected all rings") || strings.Contains(log, "/0 : ") {
				t.Errorf("a send/recv connected the rings:\n%s", log)
			}
		})
	}
}

// A communicator made non-blocking (NCCL_COMM_BLOCKING=0, the operator's
// to set) still connecting refuses work: the caller must poll AsyncError
// after GroupEnd says ErrInProgress.
func TestOperationsWaitForInProgress(t *testing.T) {
	t.Setenv("NCCL_COMM_BLOCKING", "0")
	r := newRig(t, 2)
	comms := r.init(t)
	send, recv := buffers(t, r)
	openAllReduce(t, r, comms, send, recv)
	if err := r.lib.GroupEnd(); !errors.Is(err, ErrInProgress) {
		t.Fatalf("GroupEnd of the first collective (connecting the ring) = %v, want ErrInProgress", err)
	}
	err := comms[0].AllReduce(send[0], recv[0], testElems, r.streams[0])
	var ne *Error
	if !errors.As(err, &ne) || ne.Name != "ncclInvalidUsage" || !strings.Contains(ne.Last, "still in progress") {
		t.Fatalf("AllReduce before polling AsyncError: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := WaitReady(ctx, comms...); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
}

// An operation failing mid-run carries NCCL's text for its code and its
// last error.
func TestOperationFailureCarriesNCCLText(t *testing.T) {
	t.Setenv("FAKE_NCCL_FAIL", "ncclAllReduce:2:3")
	t.Setenv("NCCL_DEBUG", "WARN")
	t.Setenv("NCCL_DEBUG_FILE", filepath.Join(t.TempDir(), "nccl.log"))
	r := newRig(t, 2)
	comms := r.init(t)
	send, recv := buffers(t, r)
	allReduce := func() error {
		if err := r.lib.GroupStart(); err != nil {
			return err
		}
		var opErr error
		for i, c := range comms {
			if err := c.AllReduce(send[i], recv[i], testElems, r.streams[i]); err != nil && opErr == nil {
				opErr = err
			}
		}
		err := r.lib.GroupEnd()
		if errors.Is(err, ErrInProgress) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = WaitReady(ctx, comms...)
		}
		return errors.Join(opErr, err)
	}
	if err := allReduce(); err != nil {
		t.Fatalf("first all-reduce: %v", err)
	}
	err := allReduce() // rank 0's call is the 3rd
	var ne *Error
	if !errors.As(err, &ne) || ne.Call != "ncclAllReduce" || ne.Code != 2 || ne.Name != "ncclSystemError" {
		t.Fatalf("second all-reduce: %v, want rank 0's ncclAllReduce failing with ncclSystemError", err)
	}
	for _, want := range []string{"rank 0", "unhandled system error", "last NCCL error: FAKE_NCCL_FAIL: ncclAllReduce call 3 fails with 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// InitRanks makes blocking communicators: the group's end waits for the
// connections NCCL makes at the first collective, and never answers
// ErrInProgress, so nothing is polled between operations.
func TestCommunicatorsAreBlocking(t *testing.T) {
	t.Setenv("FAKE_NCCL_REQUIRE_BLOCKING", "1")
	t.Setenv("FAKE_NCCL_CONNECT_POLLS", "5")
	r := newRig(t, 2)
	comms := r.init(t)
	send, recv := buffers(t, r)
	for range 2 {
		openAllReduce(t, r, comms, send, recv)
		if err := r.lib.GroupEnd(); err != nil {
			t.Fatalf("GroupEnd = %v, want nil from a blocking communicator", err)
		}
	}
}

// The fake's check bites: under the operator's NCCL_COMM_BLOCKING=0 the
// same operation is refused, so the test above would fail on
// non-blocking communicators.
func TestRequireBlockingRefusesNonBlocking(t *testing.T) {
	t.Setenv("FAKE_NCCL_REQUIRE_BLOCKING", "1")
	t.Setenv("NCCL_COMM_BLOCKING", "0")
	r := newRig(t, 2)
	comms := r.init(t)
	send, recv := buffers(t, r)
	err := comms[0].AllReduce(send[0], recv[0], testElems, r.streams[0])
	var ne *Error
	if !errors.As(err, &ne) || !strings.Contains(ne.Last, "non-blocking") {
		t.Fatalf("AllReduce on a non-blocking communicator with FAKE_NCCL_REQUIRE_BLOCKING: %v", err)
	}
}

// A hung operation on a blocking communicator: the group's end does not
// return (NCCL stuck in the operation), nor would its stream complete,
// until Abort from another goroutine lets both go.
func TestHungOperationOnABlockingCommunicatorIsEndedByAbort(t *testing.T) {
	t.Setenv("FAKE_NCCL_HANG", "ncclAllReduce")
	r := newRig(t, 2)
	comms := r.init(t)
	send, recv := buffers(t, r)
	openAllReduce(t, r, comms, send, recv)
	const abortAfter = 200 * time.Millisecond
	start := time.Now()
	time.AfterFunc(abortAfter, func() {
		for _, c := range comms {
			_ = c.Abort()
		}
	})
	if err := r.lib.GroupEnd(); err != nil { // on this locked thread, as the child calls it
		t.Fatalf("GroupEnd after the abort: %v", err)
	}
	if d := time.Since(start); d < abortAfter {
		t.Errorf("GroupEnd of a hung all-reduce returned after %v, before the abort", d)
	}
	if err := r.streams[0].Synchronize(); err != nil {
		t.Fatalf("Synchronize after abort: %v", err)
	}
}

// A hung operation on a non-blocking communicator: its stream never
// completes and its communicator stays in progress, until Abort (from
// another goroutine) lets both go.
func TestHungOperationIsEndedByAbort(t *testing.T) {
	t.Setenv("NCCL_COMM_BLOCKING", "0")
	t.Setenv("FAKE_NCCL_HANG", "ncclAllReduce")
	r := newRig(t, 2)
	comms := r.init(t)
	send, recv := buffers(t, r)
	openAllReduce(t, r, comms, send, recv)
	if err := r.lib.GroupEnd(); !errors.Is(err, ErrInProgress) {
		t.Fatalf("GroupEnd of a hung all-reduce = %v, want ErrInProgress", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := WaitReady(ctx, comms...); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady on a hung all-reduce = %v", err)
	}
	const abortAfter = 200 * time.Millisecond
	start := time.Now()
	time.AfterFunc(abortAfter, func() {
		for _, c := range comms {
			_ = c.Abort()
		}
	})
	done := make(chan error, 1)
	go func() { done <- r.streams[0].Synchronize() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Synchronize after abort: %v", err)
		}
		if d := time.Since(start); d < abortAfter {
			t.Errorf("the hung stream completed after %v, before the abort", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stream of a hung operation did not complete after Abort")
	}
}

// Destroy finalizes; a finalize that cannot finish (a hung operation) ends
// in an abort instead of a hang.
func TestDestroyOfAHungCommunicatorAborts(t *testing.T) {
	defer func(w time.Duration) { finalizeWait = w }(finalizeWait)
	finalizeWait = 100 * time.Millisecond
	t.Setenv("NCCL_COMM_BLOCKING", "0") // a blocking finalize cannot be waited for with a limit
	t.Setenv("FAKE_NCCL_HANG", "ncclSend")
	r := newRig(t, 2)
	comms := r.init(t)
	send, recv := buffers(t, r)
	if err := r.lib.GroupStart(); err != nil {
		t.Fatal(err)
	}
	if err := comms[0].Send(send[0], testElems, 1, r.streams[0]); err != nil {
		t.Fatal(err)
	}
	if err := comms[1].Recv(recv[1], testElems, 0, r.streams[1]); err != nil {
		t.Fatal(err)
	}
	if err := r.lib.GroupEnd(); !errors.Is(err, ErrInProgress) {
		t.Fatalf("GroupEnd = %v", err)
	}
	err := comms[0].Destroy()
	if err == nil || !strings.Contains(err.Error(), "aborted instead") || !strings.Contains(err.Error(), "finalize took longer than 100ms") {
		t.Fatalf("Destroy of a hung communicator: %v", err)
	}
	if err := r.streams[0].Synchronize(); err != nil {
		t.Errorf("the hung send's stream after the abort: %v", err)
	}
	if err := comms[1].Destroy(); err != nil {
		t.Errorf("Destroy of the healthy rank: %v", err)
	}
}

func TestOperationOnAGoneCommunicator(t *testing.T) {
	r := newRig(t, 1)
	comms := r.init(t)
	p := r.alloc(t, 0, testBytes)
	if err := comms[0].Abort(); err != nil {
		t.Fatal(err)
	}
	if err := comms[0].AllReduce(p, p, testElems, r.streams[0]); !errors.Is(err, errGone) {
		t.Errorf("AllReduce after Abort: %v", err)
	}
	if err := comms[0].Send(p, testElems, 0, nil); err == nil || !strings.Contains(err.Error(), "no stream") {
		t.Errorf("Send without a stream: %v", err)
	}
}

// The fake checks buffers as a GPU would fault on them: an all-gather's
// receive buffer must hold every rank's part.
func TestBufferTooSmallIsRefused(t *testing.T) {
	r := newRig(t, 2)
	comms := r.init(t)
	send, recv := buffers(t, r)
	err := comms[0].AllGather(send[0], recv[0], testElems, r.streams[0]) // recv holds testElems, not 2*testElems
	var ne *Error
	if !errors.As(err, &ne) || ne.Name != "ncclInvalidArgument" || !strings.Contains(ne.Last, "receive buffer") {
		t.Fatalf("AllGather into a buffer half the size: %v", err)
	}
}

// NCCL from 2.22 connects the rings at the first collective; with
// NCCL_RUNTIME_CONNECT=0 (and before 2.22) at init, where a later
// collective has nothing left to connect.
func TestRingsConnectAtInitWithoutRuntimeConnect(t *testing.T) {
	logs := t.TempDir()
	t.Setenv("NCCL_DEBUG", "INFO")
	t.Setenv("NCCL_DEBUG_FILE", filepath.Join(logs, "nccl.log"))
	t.Setenv("NCCL_RUNTIME_CONNECT", "0")
	r := newRig(t, 2)
	comms := r.init(t)
	if log := readLog(t, filepath.Join(logs, "nccl.log")); !strings.Contains(log, "Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer") {
		t.Fatalf("no ring connection logged at init:\n%s", log)
	}
	send, recv := buffers(t, r)
	openAllReduce(t, r, comms, send, recv)
	if err := r.lib.GroupEnd(); err != nil {
		t.Errorf("GroupEnd with the rings already connected = %v, want nil", err)
	}
}

// openAllReduce opens a group and queues an all-reduce on every rank in
// it; the caller ends the group.
func openAllReduce(t *testing.T, r *rig, comms []*Comm, send, recv []cuda.DevicePtr) {
	t.Helper()
	if err := r.lib.GroupStart(); err != nil {
		t.Fatal(err)
	}
	for i, c := range comms {
		if err := c.AllReduce(send[i], recv[i], testElems, r.streams[i]); err != nil {
			t.Fatalf("AllReduce on rank %d: %v", i, err)
		}
	}
}

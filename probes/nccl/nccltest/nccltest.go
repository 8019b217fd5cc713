// Package nccltest builds a fake libnccl.so.2 from C for tests on machines
// without a GPU. It works over the fake libcuda of probes/cuda/cudatest,
// which must be loaded in the same process: operations queue their
// modelled time on that library's streams. The fake's behaviour is set
// through FAKE_NCCL_* variables (and NCCL's own NCCL_* ones) in the
// environment of the process that loads it; see c/fakenccl.c.
//
// What a caller must do with it is what it must do with NCCL: ranks join
// through a unique id (any processes on the machine; FAKE_NCCL_HOSTNAME
// makes one process play another node); a blocking communicator's init
// and group end wait for every rank to join, and a group holding a hung
// operation (FAKE_NCCL_HANG) does not return, until ncclCommAbort from
// another thread; non-blocking ones (config.blocking 0, or
// NCCL_COMM_BLOCKING=0) answer ncclInProgress instead, until every rank
// has joined and after a group that had to connect ranks. A hung operation
// keeps its stream from completing, so a stream or event synchronisation
// waits, until ncclCommAbort. Event queries do not advance the fake libcuda's clock:
// time the work with a synchronisation on the end event.
package nccltest

import (
	_ "embed"

	"github.com/gpulink/gpulink_exporter/probes/cuda/cudatest"
)

//go:embed c/fakenccl.c
var source []byte

// TB is the part of testing.TB Build needs.
type TB = cudatest.TB

// Build returns the path of a fresh copy of the fake libnccl.so.2 (see
// cudatest.Compile). Each define (e.g. "OMIT_ncclCommInitRankConfig") is
// passed as -D.
func Build(tb TB, defines ...string) string {
	tb.Helper()
	return cudatest.Compile(tb, "fakenccl.c", "libnccl.so.2", source, []string{"pthread", "dl"}, defines...)
}

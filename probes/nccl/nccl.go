// Package nccl reaches NCCL at run time: libnccl.so.2 is opened with dlopen
// and called through looked-up function pointers, so the exporter builds
// without NCCL and runs where there is none. It wraps only what the
// collective probes use: a unique id, blocking communicators over this
// process's GPUs, all-reduce, all-gather, reduce-scatter and send/recv on
// float32 data, and groups.
//
// Communicators are blocking (config.blocking = 1, NCCL 2.14's
// ncclCommInitRankConfig): each group's GroupEnd launches its operations
// on the calling thread and returns, as nccl-tests' do. A non-blocking
// communicator answers every GroupEnd with ncclInProgress and launches
// from a thread of NCCL's own, which the caller must poll until it is done
// before the next call: on two H200s that put 8 KiB collectives at 61-97
// us an operation where nccl-tests (and the same child with
// NCCL_COMM_BLOCKING=1) read 13-17 us, while 256 MiB ones did not move.
//
// What a blocking communicator gives up is ending a call from inside: a
// hung operation is ended from another goroutine with Abort (NCCL's
// ncclCommAbort ends the work a communicator has on its streams, which is
// what PyTorch's and XLA's watchdog threads do with blocking
// communicators), but NCCL's user guide ("Fault Tolerance") ties an abort
// at any point, a hung init or a call stuck connecting included, to
// non-blocking communicators (RCCL's fault-tolerance page says the same).
// So a caller watches from another
// goroutine, aborts at its deadline, and gives the thread up for lost if
// the call has not returned soon after: the collectives child then
// reports the round and exits, and NCCL's threads end with the process.
//
// An operator's NCCL_COMM_BLOCKING=0 overrides the config and makes them
// non-blocking again; everything here still works then (each
// ErrInProgress is polled with WaitReady, and an init is aborted at its
// deadline), only small operations read the launch thread's cost. NCCL
// finds each rank's GPU from the CUDA context current on the calling
// thread: callers lock their goroutine to its thread
// (runtime.LockOSThread) around InitRanks and operations.
package nccl

/*
#cgo CFLAGS: -I${SRCDIR}/../internal/dltable
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// DefaultLibrary is NCCL's soname.
const DefaultLibrary = "libnccl.so.2"

// ncclResult_t codes from nccl.h.
const (
	successCode    = 0
	inProgressCode = 7
)

var resultNames = map[int]string{
	0: "ncclSuccess",
	1: "ncclUnhandledCudaError",
	2: "ncclSystemError",
	3: "ncclInternalError",
	4: "ncclInvalidArgument",
	5: "ncclInvalidUsage",
	6: "ncclRemoteError",
	7: "ncclInProgress",
	8: "ncclTimeout",
}

// ErrInProgress is ncclInProgress: a communicator made non-blocking (by
// NCCL_COMM_BLOCKING=0) has not
// finished what it was asked yet (its init, a group's operations, a
// finalize). The caller polls the communicator's AsyncError until it is
// something else, and aborts it if that takes too long.
var ErrInProgress = errors.New("ncclInProgress: NCCL operation in progress")

// Error is a failed NCCL call.
type Error struct {
	Call string // the entry point, as looked up
	Code int
	Name string // ncclSystemError
	Text string // ncclGetErrorString: "unhandled system error (run with NCCL_DEBUG=INFO for details)"
	// Last is ncclGetLastError: NCCL's own account of the latest failure
	// in the process ("socketProgress: Connection closed by remote peer"),
	// which may be about an earlier call; "" when NCCL kept none.
	Last string
}

func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = "NCCL error"
	}
	msg := fmt.Sprintf("%s: %s (%d)", e.Call, name, e.Code)
	if e.Text != "" {
		msg += ": " + e.Text
	}
	if e.Last != "" {
		msg += "; last NCCL error: " + e.Last
	}
	return msg
}

// ErrLoad is why Open failed: the library is not there, is not NCCL, or
// is older than 2.14. The collectives child marks it probes.NoLibrary, and
// the daemon counts that round as skipped for want of the library
// (no_library), not as failed.
var ErrLoad = errors.New("loading NCCL")

// Library is a loaded libnccl.
type Library struct {
	api *C.gn_api
}

// Open loads the library at path (a soname or a file) and looks up every
// entry point the probes use; it calls nothing in it. A library that
// lacks one is refused naming the symbol, and one older than NCCL 2.14
// (no ncclCommInitRankConfig) is refused saying so.
func Open(path string) (*Library, error) {
	api := (*C.gn_api)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gn_api{}))))
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	if C.gn_open(cpath, api, &msg[0], C.size_t(len(msg))) != 0 {
		C.free(unsafe.Pointer(api))
		return nil, fmt.Errorf("%w: %s", ErrLoad, C.GoString(&msg[0]))
	}
	return &Library{api: api}, nil
}

// Close forgets the library; nothing may be called on l or its
// communicators afterwards. The library stays mapped: NCCL leaves threads
// of its own running (its RAS thread lives as long as the process), and
// unmapping the code a thread runs would crash the process.
func (l *Library) Close() {
	if l.api != nil {
		C.free(unsafe.Pointer(l.api))
		l.api = nil
	}
}

// check turns a result code into nil, ErrInProgress or an *Error.
func (l *Library) check(call string, r C.gn_result) error {
	switch r {
	case successCode:
		return nil
	case inProgressCode:
		return ErrInProgress
	}
	return l.newError(call, r)
}

func (l *Library) newError(call string, r C.gn_result) *Error {
	var text, last [1024]C.char
	C.gn_error_text(l.api, r, &text[0], C.size_t(len(text)), &last[0], C.size_t(len(last)))
	return &Error{Call: call, Code: int(r), Name: resultNames[int(r)],
		Text: C.GoString(&text[0]), Last: C.GoString(&last[0])}
}

// Version is ncclGetVersion's code: 22703 for 2.27.3.
func (l *Library) Version() (int, error) {
	var v C.int
	err := l.check("ncclGetVersion", C.gn_get_version(l.api, &v))
	return int(v), err
}

// VersionString spells a version code as NCCL releases are named: 22703
// is "2.27.3". Codes before 2.9 used a narrower minor field
// (major*1000 + minor*100 + patch: 2804 is 2.8.4).
func VersionString(code int) string {
	switch {
	case code <= 0:
		return "unknown"
	case code < 10000:
		return fmt.Sprintf("%d.%d.%d", code/1000, code%1000/100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)
}

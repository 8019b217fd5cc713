// Package nccltest builds a fake libnccl.so.2 from C for tests on machines
// without a GPU. It works over the fake libcuda of probes/cuda/cudatest,
// which must be loaded in the same process: operations queue their
// modelled time on that library's streams. The fake's behaviour is set
// through FAKE_NCCL_* variables (and NCCL's own NCCL_* ones) in the
// environment of the process that loads it; see c/fakenccl.c.
//
// What a caller must do with it is what it must do with NCCL: ranks join
// through a unique id (any processes on the machine; FAKE_NCCL_HOSTNAME
// makes one process play another node), non-blocking communicators answer
// ncclInProgress until every rank has joined and after a group that had to
// connect ranks, and a hung operation (FAKE_NCCL_HANG) keeps its stream
// from completing, so a stream or event synchronisation waits, until
// ncclCommAbort. Event queries do not advance the fake libcuda's clock:
// time the work with a synchronisation on the end event.
package nccltest

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

//go:embed c/fakenccl.c
var source []byte

// TB is the part of testing.TB Build needs.
type TB interface {
	Helper()
	TempDir() string
	Fatalf(format string, args ...any)
}

// built holds each set of defines' compiled library, so a test process
// compiles it once and gives each test a copy.
var built sync.Map // strings.Join(defines, " ") -> []byte

// Build returns the path of a fresh copy of the fake, in a new temporary
// directory, compiled with gcc the first time. Each define (e.g.
// "OMIT_ncclCommInitRankConfig") is passed as -D. Every copy is a file of
// its own, so the dynamic loader loads it anew and it reads its
// environment anew at its first call: a test sets the variables, then
// builds.
func Build(tb TB, defines ...string) string {
	tb.Helper()
	dir := tb.TempDir()
	lib := filepath.Join(dir, "libnccl.so.2")
	key := strings.Join(defines, " ")
	if so, ok := built.Load(key); ok {
		if err := os.WriteFile(lib, so.([]byte), 0o755); err != nil {
			tb.Fatalf("copying fake libnccl: %v", err)
		}
		return lib
	}
	src := filepath.Join(dir, "fakenccl.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		tb.Fatalf("writing fake libnccl source: %v", err)
	}
	args := []string{"-std=gnu11", "-Wall", "-Werror", "-Wno-unused-parameter", "-shared", "-fPIC", "-O1", "-o", lib, src, "-lpthread", "-ldl"}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		tb.Fatalf("building fake libnccl: %v\n%s", err, out)
	}
	so, err := os.ReadFile(lib)
	if err != nil {
		tb.Fatalf("reading fake libnccl: %v", err)
	}
	built.Store(key, so)
	return lib
}

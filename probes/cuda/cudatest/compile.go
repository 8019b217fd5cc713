package cudatest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// built holds each compiled fake by library name and defines, so a test
// process compiles each once and gives each test a copy.
var built sync.Map // lib + " " + defines -> []byte

// Compile returns the path of a fresh copy of the shared library lib
// built from the C source named src, in a new temporary directory; gcc
// (or $CC) compiles it the first time, with -l for each of libs and -D
// for each define. Every copy is a file of its own, so the dynamic loader
// loads it anew and it reads its environment anew at its first call: a
// test sets the variables, then builds. The fakes of this package and of
// probes/nccl/nccltest are built through it.
func Compile(tb TB, src, lib string, source []byte, libs []string, defines ...string) string {
	tb.Helper()
	dir := tb.TempDir()
	out := filepath.Join(dir, lib)
	key := lib + " " + strings.Join(defines, " ")
	if so, ok := built.Load(key); ok {
		if err := os.WriteFile(out, so.([]byte), 0o755); err != nil {
			tb.Fatalf("copying fake %s: %v", lib, err)
		}
		return out
	}
	in := filepath.Join(dir, src)
	if err := os.WriteFile(in, source, 0o644); err != nil {
		tb.Fatalf("writing fake %s source: %v", lib, err)
	}
	args := []string{"-std=gnu11", "-Wall", "-Werror", "-Wno-unused-parameter", "-shared", "-fPIC", "-O1", "-o", out, in}
	for _, l := range libs {
		args = append(args, "-l"+l)
	}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if msg, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		tb.Fatalf("building fake %s: %v\n%s", lib, err, msg)
	}
	so, err := os.ReadFile(out)
	if err != nil {
		tb.Fatalf("reading fake %s: %v", lib, err)
	}
	built.Store(key, so)
	return out
}

// Package cudatest builds a fake libcuda.so.1 from C for tests on machines
// without a GPU. The fake's behaviour is set through FAKE_CUDA_* variables
// in the environment of the process that loads it; see c/fakecuda.c.
package cudatest

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
)

//go:embed c/fakecuda.c
var source []byte

// TB is the part of testing.TB Build needs.
type TB interface {
	Helper()
	TempDir() string
	Fatalf(format string, args ...any)
}

// Build compiles the fake with gcc into a new temporary directory and
// returns the library's path. Each define (e.g. "OMIT_cuMemHostRegister_v2")
// is passed as -D.
func Build(tb TB, defines ...string) string {
	tb.Helper()
	dir := tb.TempDir()
	src := filepath.Join(dir, "fakecuda.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		tb.Fatalf("writing fake libcuda source: %v", err)
	}
	lib := filepath.Join(dir, "libcuda.so.1")
	args := []string{"-std=gnu11", "-Wall", "-Werror", "-Wno-unused-parameter", "-shared", "-fPIC", "-O1", "-o", lib, src, "-lpthread"}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		tb.Fatalf("building fake libcuda: %v\n%s", err, out)
	}
	return lib
}

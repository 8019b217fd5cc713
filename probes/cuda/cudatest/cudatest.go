// Package cudatest builds a fake libcuda.so.1 from C for tests on machines
// without a GPU. The fake's behaviour is set through FAKE_CUDA_* variables
// in the environment of the process that loads it; see c/fakecuda.c.
package cudatest

import _ "embed"

//go:embed c/fakecuda.c
var source []byte

// TB is the part of testing.TB Build needs.
type TB interface {
	Helper()
	TempDir() string
	Fatalf(format string, args ...any)
}

// Build returns the path of a fresh copy of the fake libcuda.so.1 (see
// Compile). Each define (e.g. "OMIT_cuMemHostRegister_v2") is passed as
// -D.
func Build(tb TB, defines ...string) string {
	tb.Helper()
	return Compile(tb, "fakecuda.c", "libcuda.so.1", source, []string{"pthread"}, defines...)
}

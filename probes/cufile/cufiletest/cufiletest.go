// Package cufiletest builds a fake libcufile.so.0 from C for tests on
// machines without GPUDirect Storage, as cudatest fakes libcuda. Its
// behaviour is set through FAKE_CUFILE_* variables in the environment of
// the process that loads it; see c/fakecufile.c.
package cufiletest

import (
	_ "embed"

	"github.com/gpulink/gpulink_exporter/probes/cuda/cudatest"
)

//go:embed c/fakecufile.c
var source []byte

// Build returns the path of a fresh copy of the fake libcufile.so.0 (see
// cudatest.Compile). Each define (e.g. "OMIT_cuFileRead") is passed as -D.
func Build(tb cudatest.TB, defines ...string) string {
	tb.Helper()
	return cudatest.Compile(tb, "fakecufile.c", "libcufile.so.0", source, nil, defines...)
}

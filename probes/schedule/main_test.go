package schedule

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda/cudatest"
	"github.com/gpulink/gpulink_exporter/probes/nccl/collectives"
	"github.com/gpulink/gpulink_exporter/probes/nccl/nccltest"
)

// TestCollectiveRoundThroughTheChild runs the scheduler over the real
// collectives child: this test binary, with helperEnv set, plays it.
const helperEnv = "GPULINK_PROBE_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		if mode != "real-collectives" {
			fmt.Fprintln(os.Stderr, "schedule helper: unknown mode", mode)
			os.Exit(65)
		}
		app := kingpin.New("gpulink_exporter", "")
		cmd := &collectives.CollectiveCommand{}
		collectives.AddCollectiveCommand(app, cmd)
		app.Flag("cuda.library", "").StringVar(&cmd.CUDALibrary)
		if _, err := app.Parse(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(probes.ExitUsage)
		}
		os.Exit(cmd.Run(context.Background(), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// The fake libcuda's two GPUs, and the fake libnccl's rate between them
// with no fixed latency (see nccltest).
const (
	gpu0, gpu1   = "0000:00:06.0", "0000:00:07.0"
	fakeP2PRate  = 370e9
	busTolerance = 0.02
)

// collectivesMachine is a runner of the real collectives child over the
// fake libcuda and libnccl (unless flags name another --library), with
// flags added.
func collectivesMachine(t *testing.T, timeout time.Duration, flags ...string) *probes.ChildRunner {
	t.Helper()
	t.Setenv("FAKE_CUDA_BUSIDS", gpu0+","+gpu1)
	t.Setenv("FAKE_NCCL_LAT_US", "0")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(helperEnv, "real-collectives")
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	cmd := []string{exe, "collectives", "--cuda.library=" + cudatest.Build(t)}
	if !slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(f, "--library=") }) {
		cmd = append(cmd, "--library="+nccltest.Build(t))
	}
	return &probes.ChildRunner{Command: append(cmd, flags...), Timeout: timeout}
}

package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda/cudatest"
	"github.com/gpulink/gpulink_exporter/probes/nccl/nccltest"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// The scheduler over the real collectives child, as the daemon runs it:
// the command line collectivesCommand makes, run by this binary (the test
// binary, as main), over the fake libcuda and libnccl and the borrowed
// two-H200 VM's NVML. With NCCL the round succeeds at the fake's NVLink
// rate; without, it is a no_library skip (the child marks the binding's
// ErrLoad probes.NoLibrary, which the scheduler reads), not a failure.
func TestSchedulerRunsTheCollectivesChild(t *testing.T) {
	const fakeP2PRate, busTolerance = 370e9, 0.02 // nccltest's P2P rate with no fixed latency
	root := machine.Load(t, "h200-vm")
	snap, initErr, err := oneNVMLSample(nvmlmodel.NewH200Pair(), filepath.Join(root, "sys"), quiet)
	if initErr != nil || err != nil || len(snap.GPUs) != 2 {
		t.Fatalf("NVML sample of the H200 pair: %v, %v, %+v", initErr, err, snap)
	}
	t.Setenv("FAKE_CUDA_BUSIDS", snap.GPUs[0].PCIBusID+","+snap.GPUs[1].PCIBusID)
	t.Setenv("FAKE_NCCL_LAT_US", "0")
	cudaLib, ncclLib := cudatest.Build(t), nccltest.Build(t)
	t.Setenv(runMainEnv, "1")
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	for _, tc := range []struct {
		name, nccl string
		run, skip  string
	}{
		{"with NCCL", ncclLib, probes.RunSuccess, ""},
		{"without NCCL", "/nonexistent/libnccl.so.2", "", schedule.SkipNoLibrary},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newCLI()
			if _, err := l.app.Parse([]string{"--cuda.library=" + cudaLib, "--nccl.library=" + tc.nccl, "--collective.size=1MiB",
				"--collective.warmup=2", "--collective.iterations=3", "--collective.samples=2"}); err != nil {
				t.Fatal(err)
			}
			cfg := l.cfg.probe
			cfg.Interval, cfg.Timeout, cfg.CollectiveTimeout = time.Hour, time.Minute, time.Minute
			cfg.Runner = &probes.ChildRunner{} // no probe round is asked for
			cfg.CollectiveRunner = &probes.ChildRunner{Command: collectivesCommand(os.Args[0], l.cfg)}
			cfg.GPUs = func() *nvml.Snapshot { return snap }
			cfg.Processes = func() ([]nvml.Process, error) { return nil, nil }
			sched, err := schedule.NewScheduler(cfg)
			if err != nil {
				t.Fatal(err)
			}
			sched.RunCollectiveRound(context.Background())
			st := sched.Latest().Data.Collective
			if tc.skip != "" {
				if st.Skips[tc.skip] != 1 || total(st.Skips) != 1 || total(st.Runs) != 0 || sched.Status().Errors != 0 {
					t.Errorf("runs %v, skips %v, errors %d: want one %s skip", st.Runs, st.Skips, sched.Status().Errors, tc.skip)
				}
				return
			}
			if st.Runs[tc.run] != 1 || total(st.Runs) != 1 || st.Last == nil {
				t.Fatalf("runs %v, skips %v, last %+v", st.Runs, st.Skips, st.Last)
			}
			for _, r := range st.Last.Results {
				if r.SizeBytes == st.SizeBytes && math.Abs(r.BusBytesPerSecond-fakeP2PRate) > fakeP2PRate*busTolerance {
					t.Errorf("%s at %d bytes: bus bandwidth %.4g, want the fake's P2P %.4g", r.Collective, r.SizeBytes, r.BusBytesPerSecond, fakeP2PRate)
				}
			}
			if len(st.Last.Transports) == 0 || st.Last.Transports[0].Kind != probes.TransportP2P || len(st.GPUs) != 2 || st.GPUs[1].BusySeconds <= 0 {
				t.Errorf("transports %+v, GPUs %+v", st.Last.Transports, st.GPUs)
			}
		})
	}
}

// total is the sum of the counts in m.
func total(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

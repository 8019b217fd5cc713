package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/internal/testwait"
	"github.com/gpulink/gpulink_exporter/probes"
)

// TestFirstRoundWaitsForTheFirstSample: with no first delay, the probe
// scheduler's first round starts once the first NVML sample is there,
// not an interval later (issue 11, item 7).
func TestFirstRoundWaitsForTheFirstSample(t *testing.T) {
	n, err := sim.Start(sim.Config{Profile: "dgx-h100", Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	reader := nvml.NewReader(n.NVML(), n.FS().Sys, nil)
	t.Cleanup(reader.Shutdown)
	if err := reader.Init(); err != nil {
		t.Fatal(err)
	}
	nvmlSampler := sampler.New[*nvml.Snapshot]("nvml", reader, sampler.Options{Interval: time.Hour, Timeout: 10 * time.Second})
	sched, err := probes.NewScheduler(probes.SchedulerConfig{
		Policy: probes.PolicyAlways, Interval: time.Hour, FirstDelay: 0,
		Options: probes.Options{SizeBytes: probes.MinSizeBytes, Samples: 1, Probes: []probes.Kind{probes.LaunchLatency}},
		Runner:  n.Runner(), GPUs: nvmlSampler.LatestData,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sched.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	// Before the sample: nothing is probed, however long it takes.
	time.Sleep(300 * time.Millisecond)
	if st := sched.Latest().Data; len(st.GPUs) != 0 {
		t.Fatalf("probed before the first NVML sample: %+v", st.GPUs)
	}
	at := time.Now()
	nvmlSampler.SampleOnce(ctx)
	if nvmlSampler.LatestData() == nil {
		t.Fatal("no NVML sample")
	}
	// The interval is an hour: any round now is the first one, started
	// for the sample.
	testwait.Until(t, func() bool {
		st := sched.Latest().Data
		return len(st.GPUs) == len(nvmlSampler.LatestData().GPUs) && st.GPUs[len(st.GPUs)-1].Runs[probes.RunSuccess] == 1
	})
	first := sched.Latest().Data.GPUs[0].LastRound
	if first.Before(at) || first.Sub(at) > 3*time.Second {
		t.Errorf("first round started %s after the sample, want within the scheduler's poll of it", first.Sub(at))
	}
}

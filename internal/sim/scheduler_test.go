package sim_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/internal/testwait"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
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
	sched, err := schedule.NewScheduler(schedule.SchedulerConfig{
		Policy: schedule.PolicyAlways, Interval: time.Hour, FirstDelay: 0,
		Jitter: probes.DefaultJitter, MaxDuty: probes.DefaultMaxDuty, UtilizationThreshold: probes.DefaultUtilizationThreshold,
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

// The simulated node's jobs make the rounds they share contended: under
// policy always, the DGX's GPU 0 runs pid 4242, so every result of its
// round is contended, and an idle GPU's results against it are too, while
// that GPU's own results are not. Under idle the busy GPU is skipped and
// left out of the peers, and nothing is contended.
func TestSimulatedJobsMakeRoundsContended(t *testing.T) {
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
	nvmlSampler.SampleOnce(context.Background())
	const busy, idle = "0000:18:00.0", "0000:2a:00.0" // GPUs 0 and 1
	for _, policy := range []string{schedule.PolicyAlways, schedule.PolicyIdle} {
		t.Run(policy, func(t *testing.T) {
			sched, err := schedule.NewScheduler(schedule.SchedulerConfig{
				Policy: policy, Runner: n.Runner(), GPUs: nvmlSampler.LatestData, Processes: reader.ComputeProcesses,
				Jitter: probes.DefaultJitter, MaxDuty: probes.DefaultMaxDuty, UtilizationThreshold: probes.DefaultUtilizationThreshold,
				Options: probes.Options{SizeBytes: probes.MinSizeBytes, Samples: 3, Probes: []probes.Kind{probes.HostToDevice, probes.PeerCopy}},
			})
			if err != nil {
				t.Fatal(err)
			}
			sched.RunRound(context.Background())
			rounds := map[string]*probes.GPURound{}
			for _, g := range sched.Latest().Data.GPUs {
				rounds[g.PCIBusID] = g.Last
			}
			b, i := rounds[busy], rounds[idle]
			if i == nil {
				t.Fatal("the idle GPU was not probed")
			}
			if len(i.Contention.For("")) != 0 {
				t.Errorf("idle GPU's own results contended: %+v", i.Contention)
			}
			if policy == schedule.PolicyIdle {
				if b != nil || i.Contention.Contended() {
					t.Errorf("idle policy: busy GPU probed (%v) or idle GPU contended (%+v)", b != nil, i.Contention)
				}
				return
			}
			if b == nil || !slices.Equal(b.Contention.For(""), []string{probes.ContendedOtherProcess, probes.ContendedUtilization}) ||
				!slices.Equal(b.Contention.Processes[busy], []int{4242}) {
				t.Errorf("busy GPU: %+v", b)
			}
			if got := i.Contention.For(busy); !slices.Contains(got, probes.ContendedOtherProcess) {
				t.Errorf("idle GPU's results against the busy one: %v", got)
			}
			for _, r := range i.Results {
				if r.Noisy() {
					t.Errorf("a healthy simulated result is noisy: %+v", r)
				}
			}
		})
	}
}

package collector

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/internal/scrape/scrapetest"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// roundFunc adapts a function to probes.RoundRunner.
type roundFunc func(context.Context, probes.Options) (*probes.Round, error)

func (f roundFunc) Run(ctx context.Context, o probes.Options) (*probes.Round, error) {
	return f(ctx, o)
}

// TestProbeRenderedWhenPublished: the probe collector renders the
// scheduler's status when a round publishes it, on the round's goroutine,
// so that the scrape after a round renders nothing.
func TestProbeRenderedWhenPublished(t *testing.T) {
	gpus := &nvml.Snapshot{GPUs: []nvml.GPUState{
		{Identity: nvml.Identity{Index: 0, UUID: "GPU-0", PCIBusID: "0000:18:00.0"}},
		{Identity: nvml.Identity{Index: 1, UUID: "GPU-1", PCIBusID: "0000:2a:00.0"}},
	}}
	runner := roundFunc(func(_ context.Context, o probes.Options) (*probes.Round, error) {
		return &probes.Round{Version: probes.ContractVersion, GPUs: []probes.GPURound{{PCIBusID: o.GPU,
			Results: []probes.Result{{Probe: probes.LaunchLatency, Samples: 3, Seconds: 9e-6}}}}}, nil
	})
	sched, err := schedule.NewScheduler(schedule.SchedulerConfig{
		Policy: schedule.PolicyAlways, Runner: runner, GPUs: func() *nvml.Snapshot { return gpus },
		Options: probes.Options{SizeBytes: probes.DefaultSizeBytes, Samples: probes.DefaultSamples},
		Jitter:  probes.DefaultJitter, MaxDuty: probes.DefaultMaxDuty, UtilizationThreshold: probes.DefaultUtilizationThreshold,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := NewProbeCollector(sched)
	renders := 0
	// The collector's render, counted: Init again, which has the
	// scheduler call a second prepare after each publish, one that finds
	// the snapshot rendered already.
	c.Init(sched, func(s *scrape.Samples, st *schedule.Status) {
		renders++
		c.render(&out{s}, st)
	})
	now := time.Unix(1000, 0)
	c.SetClock(func() time.Time { return now })
	// A Prometheus every 15 s, gzipped OpenMetrics.
	get := func() scrape.Encoded {
		now = now.Add(15 * time.Second)
		return c.EncodeText(true, true)
	}
	get() // the status before any round: the policy
	get()

	renders = 0
	sched.RunRound(context.Background())
	// Published after each GPU and at the end of the round.
	if renders != 3 {
		t.Fatalf("%d renders during a round of 2 GPUs, want 3: one per publish", renders)
	}
	// That a publish encodes too, not only renders, is scrape's
	// TestEncodedWhenPublished.
	e := get()
	if renders != 3 {
		t.Errorf("the scrape after the round rendered %d more times", renders-3)
	}
	for _, want := range []string{
		`gpulink_probe_latency_seconds{gpu="0",host_numa_node="",pci_bus_id="0000:18:00.0",peer="",probe="launch_latency",transfer_size_bytes="0",uuid="GPU-0"} 9e-06`,
		`gpulink_probe_latency_seconds{gpu="1",host_numa_node="",pci_bus_id="0000:2a:00.0",peer="",probe="launch_latency",transfer_size_bytes="0",uuid="GPU-1"} 9e-06`,
	} {
		if !bytes.Contains(e.Text, []byte(want)) {
			t.Errorf("no %s in\n%s", want, e.Text)
		}
	}
	scrapetest.CheckText(t, c)
}

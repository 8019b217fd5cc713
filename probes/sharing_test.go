package probes

import (
	"slices"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// The commands judge utilisation against the threshold they are given,
// the daemon's flag, as the daemon does: 0 makes any utilisation busy, and
// a GPU at or under the threshold is not.
func TestSharingCheckUtilizationThreshold(t *testing.T) {
	const addr = "0000:18:00.0"
	snap := &nvml.Snapshot{GPUs: []nvml.GPUState{{Identity: nvml.Identity{PCIBusID: "00000000:18:00.0"}, Utilization: sampler.Some(0.03)}}}
	for _, tc := range []struct {
		threshold float64
		want      []string
	}{
		{0, []string{ContendedUtilization}},
		{0.02, []string{ContendedUtilization}},
		{0.03, nil},
		{DefaultUtilizationThreshold, nil},
	} {
		s := &SharingCheck{Snapshot: snap, Threshold: tc.threshold, Processes: func() ([]nvml.Process, error) { return nil, nil }}
		w := s.Start([]string{addr})
		w.Stop()
		if c := w.Collective([]string{addr}, 1); !slices.Equal(c.Reasons, tc.want) {
			t.Errorf("threshold %g, utilisation 0.03: reasons %v, want %v", tc.threshold, c.Reasons, tc.want)
		}
	}
}

package numa_test

import (
	"slices"
	"testing"
)

func TestHostNodes(t *testing.T) {
	for _, c := range []struct {
		profile, gpu string
		want         []int
	}{
		// DGX H100: GPU0 on socket 0, GPU4 on socket 1.
		{"dgx-h100", "0000:18:00.0", []int{0, 1}},
		{"dgx-h100", "0000:9a:00.0", []int{1, 0}},
		// The borrowed VM: one node, numa_node -1 but local_cpulist on it.
		{"h200-vm", "0000:00:06.0", []int{0}},
		{"no-gpu", "0000:18:00.0", []int{0}},
	} {
		topo := loadTopology(t, c.profile)
		if got := topo.HostNodes(c.gpu); !slices.Equal(got, c.want) {
			t.Errorf("%s %s: HostNodes = %v, want %v", c.profile, c.gpu, got, c.want)
		}
	}
}

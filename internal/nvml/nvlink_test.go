package nvml

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVML numbers NVLink point releases: an H100 or H200 answers 6 for its
// NVLink 4.0 (seen on the borrowed H200s, driver 580), which read as a plain
// number would make every expected NVLink rate wrong.
func TestNVLinkMajor(t *testing.T) {
	for v, want := range map[nvml.NvlinkVersion]int{
		nvml.NVLINK_VERSION_INVALID: 0, nvml.NVLINK_VERSION_2_2: 2, nvml.NVLINK_VERSION_3_1: 3,
		nvml.NVLINK_VERSION_4_0: 4, nvml.NVLINK_VERSION_5_0: 5, 99: 0,
	} {
		if got := nvlinkMajor(uint32(v)); got != want {
			t.Errorf("nvlinkMajor(%d) = %d, want %d", v, got, want)
		}
	}
}

//go:build gpu

package nvml

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestRealLibcudaLoadedBy says which NVML call maps libcuda into the
// process, and how much of it is resident: the daemon never runs CUDA
// itself (the probes do, in a child), so libcuda in its maps is part of
// what NVML costs. On driver 580.159.04 it is nvmlInit itself (3.8 MB
// resident). It needs a process of its own, as nothing unmaps libcuda:
//
//	.device/gpu.test -test.v -test.run 'TestRealLibcudaLoadedBy$'

// libcudaMapped reports whether libcuda is mapped into this process, and
// the kilobytes of it that are resident.
func libcudaMapped(t *testing.T) (bool, int) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	mapped, kb, in := false, 0, false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			in = len(f) >= 6 && strings.Contains(f[5], "libcuda.so")
			mapped = mapped || in
		case in && len(f) >= 2 && f[0] == "Rss:":
			n, _ := strconv.Atoi(f[1])
			kb += n
		}
	}
	return mapped, kb
}

func skipIfLibcudaMapped(t *testing.T) {
	if mapped, _ := libcudaMapped(t); mapped {
		t.Skip("libcuda is already mapped in this process; run this test alone")
	}
}

func TestRealLibcudaLoadedBy(t *testing.T) {
	skipIfLibcudaMapped(t)
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("NVML init: %v", ret)
	}
	defer lib.Shutdown()
	steps := []struct {
		name string
		call func() nvml.Return
	}{
		{"SystemGetDriverVersion", func() nvml.Return { _, r := lib.SystemGetDriverVersion(); return r }},
		{"SystemGetNVMLVersion", func() nvml.Return { _, r := lib.SystemGetNVMLVersion(); return r }},
		{"DeviceGetCount", func() nvml.Return { _, r := lib.DeviceGetCount(); return r }},
		{"SystemGetCudaDriverVersion", func() nvml.Return { _, r := lib.SystemGetCudaDriverVersion(); return r }},
		{"SystemGetCudaDriverVersion_v2", func() nvml.Return { _, r := lib.SystemGetCudaDriverVersion_v2(); return r }},
	}
	mapped, _ := libcudaMapped(t)
	t.Logf("after Init: libcuda mapped %v", mapped)
	for _, s := range steps {
		ret := s.call()
		m, kb := libcudaMapped(t)
		t.Logf("after %s (%v): libcuda mapped %v, %d kB resident", s.name, ret, m, kb)
		if m && !mapped {
			t.Logf("=> %s maps libcuda", s.name)
		}
		mapped = m
	}
}

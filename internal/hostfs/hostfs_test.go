package hostfs_test

import (
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
)

func TestPaths(t *testing.T) {
	r := hostfs.Root{Sys: "/host/sys", Proc: "/host/proc"}
	if got := r.SysPath("bus", "pci", "devices", "0000:18:00.0"); got != "/host/sys/bus/pci/devices/0000:18:00.0" {
		t.Errorf("SysPath = %q", got)
	}
	if got := r.ProcPath("1234", "numa_maps"); got != "/host/proc/1234/numa_maps" {
		t.Errorf("ProcPath = %q", got)
	}
	// No parts: the root itself, as numa reads a bare root's entries.
	if got := r.SysPath(); got != "/host/sys" {
		t.Errorf("SysPath() = %q", got)
	}
}

func TestUnder(t *testing.T) {
	if got := hostfs.Under("/fixtures/dgx"); got != (hostfs.Root{Sys: "/fixtures/dgx/sys", Proc: "/fixtures/dgx/proc"}) {
		t.Errorf("Under = %+v", got)
	}
}

package numa_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/pciconfig"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/numa"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o444); err != nil {
		t.Fatal(err)
	}
}

func TestGPUDirect(t *testing.T) {
	root := machine.Load(t, "dgx-h100")
	sys := filepath.Join(root, "sys")
	fsys := numa.FS{Sys: sys, Proc: filepath.Join(root, "proc")}
	topo, err := fsys.Topology()
	if err != nil {
		t.Fatal(err)
	}
	bridges := topo.ACSBridges()
	if len(bridges) < 2 {
		t.Fatalf("bridges on GPU paths: %v", bridges)
	}
	for _, b := range bridges {
		if d := topo.Device(b); d == nil || d.Kind != numa.KindBridge {
			t.Errorf("%s on a path is not a bridge", b)
		}
	}
	// GPU 0 and its nearest NIC meet below one switch: the switch's ports
	// are on the path.
	g0 := topo.Device(dgxGPUs[0])
	nics, _ := topo.NearestNICs(g0)
	if len(nics) == 0 || len(topo.PathBridges(g0, nics[0])) == 0 {
		t.Fatalf("GPU 0 to its NIC: no bridge (nics %v)", nics)
	}
	if !slices.Contains(bridges, g0.ParentAddr) {
		t.Errorf("GPU 0's parent port %s not among %v", g0.ParentAddr, bridges)
	}
	if len(topo.GPUDirect.IOMMUTranslated) != 0 {
		t.Errorf("IOMMU mode without kernel/iommu_groups: %v", topo.GPUDirect.IOMMUTranslated)
	}
	if got := topo.GPUDirect.ACS; len(got) != 0 {
		t.Errorf("ACS read without config files: %v", got)
	}

	// Config images: redirect on at GPU 0's port, off at the next bridge,
	// truncated (not root) at another.
	dev := func(a string) string { return filepath.Join(sys, "bus", "pci", "devices", a) }
	fixture := func(n string) string { return filepath.Join("..", "internal", "pciconfig", "testdata", n) }
	on, off, short := g0.ParentAddr, bridges[0], bridges[len(bridges)-1]
	if off == on {
		off = bridges[1]
	}
	copyFile(t, fixture("acs-redirect-off.bin"), filepath.Join(dev(off), "config"))
	copyFile(t, fixture("truncated.bin"), filepath.Join(dev(short), "config"))
	copyFile(t, fixture("acs-redirect-on.bin"), filepath.Join(dev(on), "config"))
	// peermem loaded; GPU 0 translated, GPU 1 identity, GPU 2 no group.
	for _, d := range []string{filepath.Join(sys, "module", "nvidia_peermem"), filepath.Join(sys, "kernel", "iommu_groups"), filepath.Join(root, "groups", "1"), filepath.Join(root, "groups", "2")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range []error{
		os.WriteFile(filepath.Join(root, "groups", "1", "type"), []byte("DMA-FQ\n"), 0o444),
		os.WriteFile(filepath.Join(root, "groups", "2", "type"), []byte("identity\n"), 0o444),
		os.Symlink(filepath.Join(root, "groups", "1"), filepath.Join(dev(dgxGPUs[0]), "iommu_group")),
		os.Symlink(filepath.Join(root, "groups", "2"), filepath.Join(dev(dgxGPUs[1]), "iommu_group")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}

	topo, err = fsys.Topology()
	if err != nil {
		t.Fatal(err)
	}
	g := topo.GPUDirect
	redirect := uint16(pciconfig.P2PRequestRedirect | pciconfig.P2PCompletionRedirect)
	if a := g.ACS[on]; !a.Known || !a.Enabled(redirect) {
		t.Errorf("%s: %+v, want redirect on", on, a)
	}
	if a := g.ACS[off]; !a.Known || !a.Present || a.Enabled(pciconfig.P2PRequestRedirect) {
		t.Errorf("%s: %+v, want redirect off", off, a)
	}
	if a, ok := g.ACS[short]; !ok || a.Known {
		t.Errorf("%s: %+v, want unknown", short, a)
	}
	if !g.PeermemLoaded.Valid || !g.PeermemLoaded.V {
		t.Errorf("peermem %+v", g.PeermemLoaded)
	}
	for i, want := range []bool{true, false, false} {
		if v := g.IOMMUTranslated[dgxGPUs[i]]; !v.Valid || v.V != want {
			t.Errorf("GPU %d IOMMU translated %+v, want %v", i, v, want)
		}
	}
}

package numa_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
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
	fsys := hostfs.Root{Sys: sys, Proc: filepath.Join(root, "proc")}
	topo, err := numa.ReadTopology(fsys)
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
	// As the DGX H100 is modelled: ACS redirect off on every downstream
	// port, no ACS on the switches' upstream ports; nvidia_peermem loaded;
	// the proprietary driver, so no dma-buf; IOMMU passthrough.
	g := topo.GPUDirect
	if len(g.ACS) != len(bridges) {
		t.Errorf("ACS read of %d bridges, want the %d on GPU paths", len(g.ACS), len(bridges))
	}
	for _, b := range bridges {
		if a := g.ACS[b]; !a.Known || a.Enabled(pciconfig.P2PRequestRedirect) || a.Enabled(pciconfig.P2PCompletionRedirect) {
			t.Errorf("%s: ACS %+v, want read, redirect off", b, a)
		}
	}
	if a := g.ACS[g0.ParentAddr]; !a.Present {
		t.Errorf("GPU 0's downstream port %s: no ACS: %+v", g0.ParentAddr, a)
	}
	usp := topo.Device(g0.ParentAddr).ParentAddr
	if a, ok := g.ACS[usp]; !ok || !a.Known || a.Present {
		t.Errorf("switch upstream port %s: %+v (read %v), want no ACS capability", usp, a, ok)
	}
	if !g.PeermemLoaded.Valid || !g.PeermemLoaded.V || !g.DMABufSupported.Valid || g.DMABufSupported.V {
		t.Errorf("peermem %+v, dma-buf %+v; want loaded, unsupported", g.PeermemLoaded, g.DMABufSupported)
	}
	for _, a := range dgxGPUs {
		if v := g.IOMMUTranslated[a]; !v.Valid || v.V {
			t.Errorf("GPU %s IOMMU translated %+v, want passthrough", a, v)
		}
	}

	// Config images: redirect on at GPU 0's port, truncated (not root) at
	// the next bridge; nvidia_peermem unloaded; the open driver; GPU 0's
	// group (it shares it with GPU 1) translating, GPU 2 in no group.
	dev := func(a string) string { return filepath.Join(sys, "bus", "pci", "devices", a) }
	fixture := func(n string) string { return filepath.Join("..", "internal", "pciconfig", "testdata", n) }
	on, short := g0.ParentAddr, bridges[0]
	if short == on {
		short = bridges[1]
	}
	copyFile(t, fixture("truncated.bin"), filepath.Join(dev(short), "config"))
	copyFile(t, fixture("acs-redirect-on.bin"), filepath.Join(dev(on), "config"))
	group, err := filepath.EvalSymlinks(filepath.Join(dev(dgxGPUs[0]), "iommu_group"))
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		os.RemoveAll(filepath.Join(sys, "module", "nvidia_peermem")),
		os.WriteFile(filepath.Join(group, "type"), []byte("DMA-FQ\n"), 0o444),
		os.Remove(filepath.Join(dev(dgxGPUs[2]), "iommu_group")),
		os.WriteFile(filepath.Join(root, "proc", "driver", "nvidia", "version"),
			[]byte("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  (b)  2024\n"), 0o444),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}

	topo, err = numa.ReadTopology(fsys)
	if err != nil {
		t.Fatal(err)
	}
	g = topo.GPUDirect
	redirect := uint16(pciconfig.P2PRequestRedirect | pciconfig.P2PCompletionRedirect)
	if a := g.ACS[on]; !a.Known || !a.Enabled(redirect) {
		t.Errorf("%s: %+v, want redirect on", on, a)
	}
	if a, ok := g.ACS[short]; !ok || a.Known {
		t.Errorf("%s: %+v, want unknown", short, a)
	}
	if !g.PeermemLoaded.Valid || g.PeermemLoaded.V {
		t.Errorf("peermem %+v, want not loaded", g.PeermemLoaded)
	}
	if !g.DMABufSupported.Valid || !g.DMABufSupported.V {
		t.Errorf("dma-buf %+v with the open driver on 5.15, want supported", g.DMABufSupported)
	}
	for i, want := range []bool{true, true, false, false} {
		if v := g.IOMMUTranslated[dgxGPUs[i]]; !v.Valid || v.V != want {
			t.Errorf("GPU %d IOMMU translated %+v, want %v", i, v, want)
		}
	}

	// Without sys/kernel/iommu_groups, the mode is unknown; without a
	// config file, the bridge's ACS.
	for _, p := range []string{filepath.Join(sys, "kernel", "iommu_groups"), filepath.Join(dev(on), "config")} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	if topo, err = numa.ReadTopology(fsys); err != nil {
		t.Fatal(err)
	}
	if got := topo.GPUDirect.IOMMUTranslated; len(got) != 0 {
		t.Errorf("IOMMU mode without kernel/iommu_groups: %v", got)
	}
	if a, ok := topo.GPUDirect.ACS[on]; ok {
		t.Errorf("%s: ACS %+v read without a config file", on, a)
	}
}

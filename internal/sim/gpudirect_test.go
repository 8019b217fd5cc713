package sim

import (
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/pciconfig"
)

// TestGPUDirectFaults: acs_redirect turns redirect on at the port above
// GPU 1 and no other; peermem_missing unloads nvidia_peermem and leaves
// the driver without dma-buf; removing them restores the node.
func TestGPUDirectFaults(t *testing.T) {
	const port = "0000:17:04.0" // the downstream port above GPU 1 (2a:00.0)
	redirect := uint16(pciconfig.P2PRequestRedirect | pciconfig.P2PCompletionRedirect)
	n, write := nodeWithFile(t, "dgx-h100")
	check := func(faulty bool) {
		t.Helper()
		g := topology(t, n).GPUDirect
		for addr, a := range g.ACS {
			if !a.Known || a.Enabled(redirect) != (faulty && addr == port) {
				t.Errorf("faulty %v: %s ACS %+v", faulty, addr, a)
			}
		}
		if _, ok := g.ACS[port]; !ok {
			t.Errorf("%s not read: %v", port, g.ACS)
		}
		if !g.PeermemLoaded.Valid || g.PeermemLoaded.V == faulty || !g.DMABufSupported.Valid || g.DMABufSupported.V {
			t.Errorf("faulty %v: peermem %+v, dma-buf %+v", faulty, g.PeermemLoaded, g.DMABufSupported)
		}
	}
	check(false)
	write("faults:\n- {kind: acs_redirect, gpu: 1}\n- {kind: peermem_missing}\n")
	step(t, n, time.Second)
	check(true)
	write("")
	step(t, n, time.Second)
	check(false)

	// On the p5 the open driver offers dma-buf: the fault takes it away.
	p5, write := nodeWithFile(t, "aws-p5")
	if g := topology(t, p5).GPUDirect; g.PeermemLoaded.V || !g.DMABufSupported.V {
		t.Errorf("healthy p5: peermem %+v, dma-buf %+v; want dma-buf alone", g.PeermemLoaded, g.DMABufSupported)
	}
	write("faults:\n- {kind: peermem_missing}\n")
	step(t, p5, time.Second)
	if g := topology(t, p5).GPUDirect; !g.PeermemLoaded.Valid || g.PeermemLoaded.V || !g.DMABufSupported.Valid || g.DMABufSupported.V {
		t.Errorf("p5 with peermem_missing: peermem %+v, dma-buf %+v; want neither", g.PeermemLoaded, g.DMABufSupported)
	}
}

package numa

import "github.com/gpulink/gpulink_exporter/internal/sampler"

// PCIeLinkOf reads one function's link state now, for a reading taken at a
// chosen moment (the probes read a GPU's link while a copy is moving data,
// since an idle GPU may lower its link generation). Absent values mean the
// function has no PCIe capability; the error names any file that was there
// but unreadable.
func (f FS) PCIeLinkOf(addr string) (PCIeLink, error) {
	var t sampler.Tally
	l := readPCIeLink(&t, f.sys("bus", "pci", "devices", addr))
	return l, t.Err()
}

package numa

import (
	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// ReadPCIeLink reads one function's link state under root now, for a
// reading taken at a chosen moment (the probes read a GPU's link while a
// copy is moving data, since an idle GPU may lower its link generation).
// Absent values mean the function has no PCIe capability; the error names
// any file that was there but unreadable.
func ReadPCIeLink(root hostfs.Root, addr string) (PCIeLink, error) {
	f := reader{root}
	var t sampler.Tally
	l := readPCIeLink(&t, f.sys("bus", "pci", "devices", addr))
	return l, t.Err()
}

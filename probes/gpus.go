package probes

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
)

// How the probe and collectives commands choose GPUs: by PCI address, or
// by index in PCI address order (nvidia-smi's numbering) among the
// devices the driver sees (cuda.PCIOrder).

// AddressesOnly reports whether there are GPU selectors and every one is
// a PCI address.
func AddressesOnly(sels []string) bool {
	for _, g := range sels {
		if !strings.Contains(g, ":") {
			return false
		}
	}
	return len(sels) > 0
}

// ResolveGPUs resolves one selector of flag against addrs, the PCI
// addresses CUDA sees, sorted: all of them, an index among them
// (nvidia-smi's numbering), or a PCI address, in any of its forms.
func ResolveGPUs(addrs []string, sel, flag string) ([]string, error) {
	if sel == "all" {
		return addrs, nil
	}
	if i, err := strconv.Atoi(sel); err == nil {
		if i < 0 || i >= len(addrs) {
			return nil, fmt.Errorf("--%s=%s: there are %d GPUs (0-%d)", flag, sel, len(addrs), len(addrs)-1)
		}
		return addrs[i : i+1], nil
	}
	return []string{pciaddr.Normalize(sel)}, nil
}

// AppendNew appends the strings of more that list lacks.
func AppendNew(list []string, more ...string) []string {
	for _, s := range more {
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}

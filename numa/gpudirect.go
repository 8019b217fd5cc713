package numa

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/pciconfig"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// GPUDirect is what decides whether GPUDirect P2P and RDMA can take the
// direct path: ACS on the bridges between GPUs and between GPUs and NICs,
// the nvidia_peermem module or dma-buf, and the IOMMU mode of the GPUs.
type GPUDirect struct {
	// ACS is, for every bridge on a GPU-to-GPU or GPU-to-NIC path below
	// one host bridge, its ACS capability as read from config space;
	// Known false where the config file is shorter than the extended space
	// (not root).
	ACS map[string]pciconfig.ACS
	// PeermemLoaded says whether the nvidia_peermem module is loaded;
	// absent where sysfs has no module directory.
	PeermemLoaded sampler.Opt[bool]
	// DMABufSupported says whether the kernel and the NVIDIA driver offer
	// dma-buf for GPU memory, the other way to GPUDirect RDMA (dmabuf.go);
	// absent where no NVIDIA driver is loaded or it cannot be told.
	DMABufSupported sampler.Opt[bool]
	// IOMMUTranslated is, by GPU address, whether its IOMMU group
	// translates DMA (type DMA or DMA-FQ) rather than passing it through
	// (identity); false where the GPU has no IOMMU group; absent where the
	// type cannot be read or sysfs has no kernel/iommu_groups.
	IOMMUTranslated map[string]sampler.Opt[bool]
}

// PathBridges lists the bridges traffic between a and b crosses below
// their host bridge: from where their chains part down to each device
// (the endpoints excluded). Devices on different host bridges meet in the
// root complex: none.
func (t *Topology) PathBridges(a, b *PCIDevice) []string {
	if a.HostBridge != b.HostBridge {
		return nil
	}
	ca, cb := a.chain(), b.chain()
	k := 0
	for k < len(ca)-1 && k < len(cb)-1 && ca[k] == cb[k] {
		k++
	}
	var out []string
	for _, c := range [][]string{ca, cb} {
		for i := max(k-1, 0); i < len(c)-1; i++ {
			if d := t.Devices[c[i]]; d != nil && d.Kind == KindBridge && !slices.Contains(out, c[i]) {
				out = append(out, c[i])
			}
		}
	}
	return out
}

// ACSBridges lists every bridge on a GPU-to-GPU or GPU-to-NIC path, sorted.
func (t *Topology) ACSBridges() []string {
	var out []string
	for i, g := range t.GPUs {
		peers := append(slices.Clone(t.GPUs[i+1:]), t.NICs...)
		for _, p := range peers {
			for _, b := range t.PathBridges(g, p) {
				if !slices.Contains(out, b) {
					out = append(out, b)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// readGPUDirect reads ACS, peermem, dma-buf and IOMMU state for topo;
// nothing is written, and config space is only read.
func (f reader) readGPUDirect(t *sampler.Tally, topo *Topology) GPUDirect {
	g := GPUDirect{ACS: map[string]pciconfig.ACS{}, IOMMUTranslated: map[string]sampler.Opt[bool]{}}
	for _, b := range topo.ACSBridges() {
		a, err := pciconfig.ReadACS(f.sys("bus", "pci", "devices", b, "config"))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				t.Add(err)
			}
			continue
		}
		g.ACS[b] = a
	}
	if _, err := os.Stat(f.sys("module")); err == nil {
		_, err := os.Stat(f.sys("module", "nvidia_peermem"))
		g.PeermemLoaded = sampler.Some(err == nil)
	}
	g.DMABufSupported = f.readDMABuf(t)
	// Without /sys/kernel/iommu_groups (a tree that does not model it)
	// the mode is unknown; with it, a GPU in no group has no translation.
	if _, err := os.Stat(f.sys("kernel", "iommu_groups")); err != nil {
		return g
	}
	for _, d := range topo.GPUs {
		dir := f.sys("bus", "pci", "devices", d.Address)
		if _, err := os.Lstat(filepath.Join(dir, "iommu_group")); err != nil {
			g.IOMMUTranslated[d.Address] = sampler.Some(false)
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "iommu_group", "type"))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				t.Add(err)
			}
			continue
		}
		switch typ := strings.TrimSpace(string(b)); typ {
		case "DMA", "DMA-FQ":
			g.IOMMUTranslated[d.Address] = sampler.Some(true)
		case "identity":
			g.IOMMUTranslated[d.Address] = sampler.Some(false)
		default:
			t.Add(fmt.Errorf("%s: unknown IOMMU group type %q", d.Address, typ))
		}
	}
	return g
}

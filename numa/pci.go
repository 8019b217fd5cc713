package numa

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sysfs"
)

// DeviceKind is what a PCI function is, as far as link health cares.
type DeviceKind string

// Kinds of PCI functions the topology keeps. Other functions appear only as
// bridges on the way to these.
const (
	KindGPU    DeviceKind = "gpu"
	KindNIC    DeviceKind = "nic"
	KindNVMe   DeviceKind = "nvme"
	KindBridge DeviceKind = "bridge"
	KindOther  DeviceKind = "other"
)

// kindOf classifies by PCI class code (base class, subclass, prog-if).
func kindOf(class uint32, vendor uint16) DeviceKind {
	switch {
	case (class>>8 == 0x0302 || class>>8 == 0x0300) && vendor == 0x10de:
		// 3D controller (datacenter GPUs) or VGA from NVIDIA; a VGA
		// function from another vendor is the BMC's display.
		return KindGPU
	case class>>16 == 0x02:
		return KindNIC
	case class == 0x010802:
		return KindNVMe
	case class>>8 == 0x0604:
		return KindBridge
	}
	return KindOther
}

// PCIeLink is the state of the link a function reports in sysfs. For an
// endpoint or a switch upstream port that is the link above it; for a root
// port or a switch downstream port, the link below it.
type PCIeLink struct {
	// Speed and MaxSpeed are in transfers per second (32e9 for Gen5).
	Speed, MaxSpeed sampler.Opt[float64]
	Width, MaxWidth sampler.Opt[int]
}

// pcieGenerations maps a transfer rate in GT/s to its PCIe generation and
// the usable bytes per second per lane in one direction after encoding
// (8b/10b up to Gen2, 128b/130b for Gen3-5, 242B/256B FLIT for Gen6).
var pcieGenerations = []struct {
	gts         float64
	gen         int
	bytesPerSec float64
}{
	{2.5, 1, 0.25e9},
	{5, 2, 0.5e9},
	{8, 3, 8e9 * 128 / 130 / 8},
	{16, 4, 16e9 * 128 / 130 / 8},
	{32, 5, 32e9 * 128 / 130 / 8},
	{64, 6, 64e9 * 242 / 256 / 8},
}

// Generation returns the PCIe generation of a transfer rate in T/s, 0 if
// it is none of the defined rates.
func Generation(transfersPerSec float64) int {
	for _, g := range pcieGenerations {
		if transfersPerSec == g.gts*1e9 {
			return g.gen
		}
	}
	return 0
}

// LaneBandwidth is the usable bytes per second of one lane in one
// direction at a transfer rate, 0 if the rate is unknown.
func LaneBandwidth(transfersPerSec float64) float64 {
	for _, g := range pcieGenerations {
		if transfersPerSec == g.gts*1e9 {
			return g.bytesPerSec
		}
	}
	return 0
}

// GenerationLaneBandwidth is LaneBandwidth by generation number, the form
// NVML reports (5 for 32 GT/s), 0 for a generation it does not know.
func GenerationLaneBandwidth(gen int) float64 {
	for _, g := range pcieGenerations {
		if g.gen == gen {
			return g.bytesPerSec
		}
	}
	return 0
}

// parseLinkSpeed parses current_link_speed / max_link_speed: "32.0 GT/s
// PCIe" on current kernels, "8 GT/s" or "2.5 GT/s" on older ones. The
// kernel prints "Unknown" (or "Unknown speed") for a link it cannot read,
// which is absent, not an error.
func parseLinkSpeed(s string) (sampler.Opt[float64], error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.HasPrefix(s, "Unknown") {
		return sampler.Opt[float64]{}, nil
	}
	num, unit, _ := strings.Cut(s, " ")
	if !strings.HasPrefix(unit, "GT/s") {
		return sampler.Opt[float64]{}, fmt.Errorf("link speed %q: want \"<n> GT/s\"", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 || v > 1024 {
		return sampler.Opt[float64]{}, fmt.Errorf("link speed %q: bad rate", s)
	}
	return sampler.Some(v * 1e9), nil
}

// parseLinkWidth parses current_link_width / max_link_width. Width 0 is
// what a link that is down reports; it is kept, since it is the fault.
func parseLinkWidth(s string) (sampler.Opt[int], error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.HasPrefix(s, "Unknown") {
		return sampler.Opt[int]{}, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > 32 {
		return sampler.Opt[int]{}, fmt.Errorf("link width %q: want 0-32 lanes", s)
	}
	return sampler.Some(v), nil
}

// readPCIeLink reads a function's link files from its sysfs directory.
// Functions without a PCIe capability (host bridges, virtio devices in a
// VM) have none: the result is all absent.
func readPCIeLink(t *sampler.Tally, dir string) PCIeLink {
	var l PCIeLink
	speed := func(name string) sampler.Opt[float64] {
		s := sysfs.OptString(t, filepath.Join(dir, name))
		if !s.Valid {
			return sampler.Opt[float64]{}
		}
		v, err := parseLinkSpeed(s.V)
		if err != nil {
			t.Add(fmt.Errorf("%s: %w", filepath.Join(dir, name), err))
		}
		return v
	}
	width := func(name string) sampler.Opt[int] {
		s := sysfs.OptString(t, filepath.Join(dir, name))
		if !s.Valid {
			return sampler.Opt[int]{}
		}
		v, err := parseLinkWidth(s.V)
		if err != nil {
			t.Add(fmt.Errorf("%s: %w", filepath.Join(dir, name), err))
		}
		return v
	}
	l.Speed, l.MaxSpeed = speed("current_link_speed"), speed("max_link_speed")
	l.Width, l.MaxWidth = width("current_link_width"), width("max_link_width")
	return l
}

// PCIDevice is one PCI function in the tree.
type PCIDevice struct {
	Address  string // sysfs form, 0000:18:00.0
	Kind     DeviceKind
	Class    uint32
	Vendor   uint16
	DeviceID uint16
	// NUMANode is sysfs numa_node; -1 when the platform does not say.
	NUMANode int
	// LocalCPUs are the CPUs the platform calls close to the device.
	LocalCPUs    sampler.Opt[CPUSet]
	Link         PCIeLink
	Driver       string
	HostBridge   string // pci0000:15
	ParentAddr   string // "" when directly on the host bridge
	ancestorAddr []string
	// Names are the device's RDMA devices (mlx5_0, rdmap79s0) and network
	// interfaces, RDMA first; empty for non-NICs.
	RDMANames, NetNames []string
}

// Name is how a NIC is named in the GPU x NIC matrix: its RDMA device, as
// nvidia-smi topo -m names it, else its interface, else its address.
func (d *PCIDevice) Name() string {
	if len(d.RDMANames) > 0 {
		return d.RDMANames[0]
	}
	if len(d.NetNames) > 0 {
		return d.NetNames[0]
	}
	return d.Address
}

// readPCIDevice reads one function; rel is its path under <sys>/devices.
func (f reader) readPCIDevice(t *sampler.Tally, rel string) *PCIDevice {
	hb, chain := sysfs.ChainOf(rel)
	addr := chain[len(chain)-1]
	dir := f.sys("devices", rel)
	d := &PCIDevice{Address: addr, HostBridge: hb, NUMANode: -1, ancestorAddr: chain[:len(chain)-1]}
	if len(chain) > 1 {
		d.ParentAddr = chain[len(chain)-2]
	}
	if v := sysfs.OptInt(t, filepath.Join(dir, "class")); v.Valid {
		d.Class = uint32(v.V)
	}
	if v := sysfs.OptInt(t, filepath.Join(dir, "vendor")); v.Valid {
		d.Vendor = uint16(v.V)
	}
	if v := sysfs.OptInt(t, filepath.Join(dir, "device")); v.Valid {
		d.DeviceID = uint16(v.V)
	}
	d.Kind = kindOf(d.Class, d.Vendor)
	if v := sysfs.OptInt(t, filepath.Join(dir, "numa_node")); v.Valid && v.V >= 0 {
		d.NUMANode = int(v.V)
	}
	if s := sysfs.OptString(t, filepath.Join(dir, "local_cpulist")); s.Valid {
		set, err := ParseCPUList(s.V)
		if err != nil {
			t.Add(fmt.Errorf("%s: %w", filepath.Join(dir, "local_cpulist"), err))
		} else {
			d.LocalCPUs = sampler.Some(set)
		}
	}
	d.Link = readPCIeLink(t, dir)
	if target, err := os.Readlink(filepath.Join(dir, "driver")); err == nil {
		d.Driver = filepath.Base(target)
	}
	if d.Kind == KindNIC {
		d.RDMANames = listDir(filepath.Join(dir, "infiniband"))
		d.NetNames = listDir(filepath.Join(dir, "net"))
		if len(d.NetNames) == 0 {
			// virtio-net: the netdev hangs off an intermediate device.
			d.NetNames = globNames(filepath.Join(dir, "virtio*", "net", "*"))
		}
	}
	return d
}

func listDir(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func globNames(pattern string) []string {
	matches, _ := filepath.Glob(pattern)
	names := make([]string, 0, len(matches))
	for _, m := range matches {
		names = append(names, filepath.Base(m))
	}
	return names
}

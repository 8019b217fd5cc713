package numa

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sysfs"
)

// Topology is the machine's layout: NUMA nodes and the PCIe tree of every
// GPU, NIC and NVMe drive with the bridges above them.
type Topology struct {
	Nodes []NUMANode
	// Devices holds every kept function and every bridge above one, by
	// address.
	Devices map[string]*PCIDevice
	// GPUs, NICs and NVMe are sorted by address.
	GPUs, NICs, NVMe []*PCIDevice
	// GPUDirect is ACS on the GPUs' paths, peermem and IOMMU mode.
	GPUDirect GPUDirect
	// Mounts are the filesystems on NVMe drives; GDS is GPUDirect
	// Storage's state (storage.go, gds.go).
	Mounts []DriveMount
	GDS    GDS
}

// ReadTopology reads NUMA nodes and the PCIe tree under root. Values that
// cannot be read are dropped and counted in a *sampler.PartialError; a
// missing PCI bus directory is an error.
func ReadTopology(root hostfs.Root) (*Topology, error) {
	f := reader{root}
	var t sampler.Tally
	nodes, err := ReadNUMANodes(root)
	t.Merge(err)
	topo := &Topology{Nodes: nodes, Devices: map[string]*PCIDevice{}}

	busDir := f.sys("bus", "pci", "devices")
	entries, err := os.ReadDir(busDir)
	if err != nil {
		return nil, fmt.Errorf("PCI devices: %w", err)
	}
	for _, e := range entries {
		if !pciaddr.IsSysfs(e.Name()) {
			continue
		}
		dir := filepath.Join(busDir, e.Name())
		class, vendor := sysfs.OptInt(&t, filepath.Join(dir, "class")), sysfs.OptInt(&t, filepath.Join(dir, "vendor"))
		if !class.Valid || !vendor.Valid {
			continue
		}
		switch kindOf(uint32(class.V), uint16(vendor.V)) {
		case KindGPU, KindNIC, KindNVMe:
		default:
			continue
		}
		rel, err := sysfs.ResolveDevicePath(f.Sys, dir)
		if err != nil {
			t.Add(err)
			continue
		}
		hb, chain := sysfs.ChainOf(rel)
		if hb == "" || len(chain) == 0 || chain[len(chain)-1] != e.Name() {
			t.Add(fmt.Errorf("%s: unexpected sysfs path %s", dir, rel))
			continue
		}
		// The device and every bridge above it, each read once.
		prefix := hb
		for _, addr := range chain {
			prefix += "/" + addr
			if _, seen := topo.Devices[addr]; !seen {
				topo.Devices[addr] = f.readPCIDevice(&t, prefix)
			}
		}
	}
	for _, d := range topo.Devices {
		switch d.Kind {
		case KindGPU:
			topo.GPUs = append(topo.GPUs, d)
		case KindNIC:
			topo.NICs = append(topo.NICs, d)
		case KindNVMe:
			topo.NVMe = append(topo.NVMe, d)
		}
	}
	byAddr := func(a, b *PCIDevice) int { return strings.Compare(a.Address, b.Address) }
	slices.SortFunc(topo.GPUs, byAddr)
	slices.SortFunc(topo.NICs, byAddr)
	slices.SortFunc(topo.NVMe, byAddr)
	topo.GPUDirect = f.readGPUDirect(&t, topo)
	topo.Mounts = f.driveMounts(&t, topo.NVMe)
	topo.GDS = f.readGDS(&t)
	return topo, t.Err()
}

// Device returns the function at a sysfs-form address, nil if not kept.
func (t *Topology) Device(addr string) *PCIDevice { return t.Devices[addr] }

// Node returns the node with id, nil if there is none.
func (t *Topology) Node(id int) *NUMANode {
	for i := range t.Nodes {
		if t.Nodes[i].ID == id {
			return &t.Nodes[i]
		}
	}
	return nil
}

// NodeOf is the NUMA node a device is attached to: sysfs numa_node where
// the platform says; otherwise the one node whose CPUs the device's
// local_cpulist falls on, which is how nvidia-smi topo -m still prints a
// NUMA affinity in a VM whose numa_node is -1. -1 when neither settles it
// (a multi-socket machine whose firmware gives no proximity information
// lists every CPU as local).
func (t *Topology) NodeOf(d *PCIDevice) int {
	if d.NUMANode >= 0 {
		return d.NUMANode
	}
	if !d.LocalCPUs.Valid || d.LocalCPUs.V.Count() == 0 {
		return -1
	}
	found := -1
	for _, n := range t.Nodes {
		if n.CPUs.Intersect(d.LocalCPUs.V).Count() > 0 {
			if found >= 0 {
				return -1
			}
			found = n.ID
		}
	}
	return found
}

// chain is the device's functions from the top of its tree down to itself.
func (d *PCIDevice) chain() []string { return append(slices.Clip(d.ancestorAddr), d.Address) }

// isUpstreamPort reports whether position i of a chain is a switch
// upstream port. Below a host bridge a chain runs root port, then for each
// switch an upstream and a downstream port, then the endpoint; sysfs has no
// port-type file (the PCIe capability is in config space, which only root
// may read in full), so the role follows from the position.
func (t *Topology) isUpstreamPort(chain []string, i int) bool {
	d := t.Devices[chain[i]]
	return i%2 == 1 && i < len(chain)-1 && d != nil && d.Kind == KindBridge
}

// Path classifies how two devices reach each other, with the meaning
// nvidia-smi topo -m gives PIX, PXB, PHB, NODE and SYS.
func (t *Topology) Path(a, b *PCIDevice) PathClass {
	if a.HostBridge != b.HostBridge {
		na, nb := t.NodeOf(a), t.NodeOf(b)
		if na >= 0 && nb >= 0 && na != nb {
			return PathSYS
		}
		// Unknown placement is no evidence of a socket crossing.
		return PathNODE
	}
	ca, cb := a.chain(), b.chain()
	k := 0
	for k < len(ca)-1 && k < len(cb)-1 && ca[k] == cb[k] {
		k++
	}
	if k == 0 {
		return PathPHB
	}
	switches := 0
	if t.isUpstreamPort(ca, k-1) {
		// The paths part at a switch's upstream port: each goes on
		// through its own downstream port of that switch.
		switches++
	}
	for _, c := range [][]string{ca, cb} {
		for i := k; i < len(c)-1; i++ {
			if t.isUpstreamPort(c, i) {
				switches++
			}
		}
	}
	if switches <= 1 {
		return PathPIX
	}
	return PathPXB
}

// PathClass is a PCIe path class; its value is NVML's topology level, so
// a smaller value is a closer path.
type PathClass int

// Path classes, as nvidia-smi topo -m's legend defines them.
const (
	PathPIX  PathClass = 10 // at most one PCIe switch
	PathPXB  PathClass = 20 // several switches, no host bridge
	PathPHB  PathClass = 30 // through a host bridge
	PathNODE PathClass = 40 // between host bridges of one NUMA node
	PathSYS  PathClass = 50 // across the interconnect between NUMA nodes
)

func (p PathClass) String() string {
	switch p {
	case PathPIX:
		return "PIX"
	case PathPXB:
		return "PXB"
	case PathPHB:
		return "PHB"
	case PathNODE:
		return "NODE"
	case PathSYS:
		return "SYS"
	}
	return fmt.Sprintf("PathClass(%d)", int(p))
}

// NearestNICs are the NICs with the closest path class to d, in address
// order, and that class. None when the machine has no NIC.
func (t *Topology) NearestNICs(d *PCIDevice) ([]*PCIDevice, PathClass) {
	return t.NearestNICsAmong(d, nil)
}

// NearestNICsAmong is NearestNICs over the NICs keep accepts (every NIC
// where keep is nil): the nearest usable NICs, where keep says which can
// carry traffic (internal/nic's Usable). None when it keeps none.
func (t *Topology) NearestNICsAmong(d *PCIDevice, keep func(*PCIDevice) bool) ([]*PCIDevice, PathClass) {
	among := t.NICs
	if keep != nil {
		among = nil
		for _, n := range t.NICs {
			if keep(n) {
				among = append(among, n)
			}
		}
	}
	return t.nearest(d, among)
}

// nearest are the devices of among with the closest path class to d, in
// among's order, and that class.
func (t *Topology) nearest(d *PCIDevice, among []*PCIDevice) ([]*PCIDevice, PathClass) {
	var best PathClass
	var out []*PCIDevice
	for _, n := range among {
		p := t.Path(d, n)
		switch {
		case len(out) == 0 || p < best:
			best, out = p, []*PCIDevice{n}
		case p == best:
			out = append(out, n)
		}
	}
	return out, best
}

// RailNICs are the NICs NCCL sends d's traffic to another node through,
// in address order: of the NICs nearest d, d's share among the GPUs as
// near to them, as NCCL's ncclTopoGetLocalNet deals them out (the k-th of
// m such GPUs takes ceil(nets/m) of them from the k-th share on). A DGX
// H100's switch holds two GPUs and two NICs: one NIC each, a rail. A p5's
// tray holds one GPU and four EFAs: all four. None when the machine has
// no NIC.
func (t *Topology) RailNICs(d *PCIDevice) []*PCIDevice {
	return t.RailNICsAmong(d, nil)
}

// RailNICsAmong is RailNICs over the NICs keep accepts (every NIC where
// keep is nil): NCCL's IB transport lists only active ports, so its rails
// are dealt out among the NICs that can carry traffic (internal/nic's
// Usable). None when it keeps none.
func (t *Topology) RailNICsAmong(d *PCIDevice, keep func(*PCIDevice) bool) []*PCIDevice {
	nearest, _ := t.NearestNICsAmong(d, keep)
	if len(nearest) == 0 {
		return nil
	}
	// The GPUs as near the first of those NICs as any GPU is, in address
	// order (t.GPUs is).
	var sharing []*PCIDevice
	for _, o := range t.GPUs {
		switch p := t.Path(o, nearest[0]); {
		case len(sharing) == 0 || p < t.Path(sharing[0], nearest[0]):
			sharing = []*PCIDevice{o}
		case p == t.Path(sharing[0], nearest[0]):
			sharing = append(sharing, o)
		}
	}
	k := max(slices.Index(sharing, d), 0)
	per := (len(nearest) + len(sharing) - 1) / len(sharing)
	out := make([]*PCIDevice, 0, per)
	for j := range per {
		out = append(out, nearest[(k*per+j)%len(nearest)])
	}
	return out
}

// Hop is one PCIe link on the way from a device up to the CPU.
type Hop struct {
	// Device is the lower end of the link: the endpoint itself or a
	// switch upstream port. Its sysfs files describe this link.
	Device *PCIDevice
	// Link is the current state; its maximum is what both ends support,
	// the lower of the two ends' own maxima.
	Link PCIeLink
}

// Bandwidth is the link's usable bytes per second, one direction, at its
// current (max false) or best supported (max true) speed and width; 0 when
// unknown.
func (h Hop) Bandwidth(max bool) float64 {
	s, w := h.Link.Speed, h.Link.Width
	if max {
		s, w = h.Link.MaxSpeed, h.Link.MaxWidth
	}
	if !s.Valid || !w.Valid {
		return 0
	}
	return LaneBandwidth(s.V) * float64(w.V)
}

// HostPath lists the links from d up to the CPU, d's own link first. A
// device straight on the host bridge (as in a VM) has its own link only.
func (t *Topology) HostPath(d *PCIDevice) []Hop {
	chain := d.chain()
	var hops []Hop
	for i := len(chain) - 1; i >= 0; i-- {
		if i != len(chain)-1 && !t.isUpstreamPort(chain, i) {
			continue
		}
		lower := t.Devices[chain[i]]
		if lower == nil {
			continue
		}
		link := lower.Link
		if i > 0 {
			if upper := t.Devices[chain[i-1]]; upper != nil {
				link.MaxSpeed = minOpt(link.MaxSpeed, upper.Link.MaxSpeed)
				link.MaxWidth = minOpt(link.MaxWidth, upper.Link.MaxWidth)
			}
		}
		hops = append(hops, Hop{Device: lower, Link: link})
	}
	return hops
}

func minOpt[T int | float64](a, b sampler.Opt[T]) sampler.Opt[T] {
	switch {
	case !a.Valid:
		return b
	case !b.Valid:
		return a
	}
	return sampler.Some(min(a.V, b.V))
}

// SlowestHop is the hop that bounds host<->device copies: the lowest
// bandwidth at current (max false) or supported (max true) link state.
// Among equals the one nearest the CPU is named, since that link is the
// one other devices may share. ok is false when no hop's state is known.
func (t *Topology) SlowestHop(d *PCIDevice, max bool) (hop Hop, ok bool) {
	for _, h := range t.HostPath(d) {
		bw := h.Bandwidth(max)
		if bw == 0 {
			continue
		}
		if !ok || bw <= hop.Bandwidth(max) {
			hop, ok = h, true
		}
	}
	return hop, ok
}

// LinkImpaired reports whether d's own PCIe link is down (width 0) or
// trained narrower than both its ends support. Its generation is not
// judged: a link may lower it to save power while idle (GPUs do), so only
// a reading under load proves a slow one. false where the width is not
// known.
func (t *Topology) LinkImpaired(d *PCIDevice) bool {
	hops := t.HostPath(d)
	if len(hops) == 0 {
		return false
	}
	l := hops[0].Link
	return l.Width.Valid && (l.Width.V == 0 || l.MaxWidth.Valid && l.Width.V < l.MaxWidth.V)
}

// Uplink is the link nearest the CPU on d's path, named by its lower end:
// devices with the same uplink share its bandwidth to the CPU.
func (t *Topology) Uplink(d *PCIDevice) *PCIDevice {
	hops := t.HostPath(d)
	if len(hops) == 0 {
		return d
	}
	return hops[len(hops)-1].Device
}

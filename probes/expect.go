package probes

import (
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/numa"
)

// Path is what the links of one GPU should give at most, in bytes per
// second, worked out from the hardware as discovered (link generation and
// width, NVLink count and rate, memory clock and bus width), never from the
// GPU's model name: the same H100 gives 63 GB/s to the host in one chassis
// and 15.75 GB/s in another. 0 means unknown.
type Path struct {
	// HostBytesPerSecond is one direction between GPU and CPU: the slowest
	// PCIe hop on the way at its best supported speed and width. The best
	// supported state, not the current one, so that a link trained below
	// its capability shows as a low ratio rather than lowering what it is
	// measured against.
	HostBytesPerSecond float64
	// HBMBytesPerSecond is the device memory's peak: maximum memory clock x
	// bus width / 8 x 2 (double data rate). A local copy counts the bytes
	// it reads and the bytes it writes, so it compares with this directly.
	HBMBytesPerSecond float64
	// PeerBytesPerSecond is one direction to each other GPU, by its PCI
	// address: the NVLinks that join the two, or where none do, PCIe
	// peer-to-peer through the host (the slower GPU's host rate).
	PeerBytesPerSecond map[string]float64
	// StorageBytesPerSecond is one direction between the GPU and each NVMe
	// drive, by the drive's PCI address: the slowest hop between the two at
	// best supported state, which is the drive's own link, the GPU's, or
	// an uplink either shares with the CPU where the path crosses it.
	StorageBytesPerSecond map[string]float64
}

// nvlinkDataRate is an NVLink's payload rate in one direction by the
// version NVML reports. NVML's own speed field gives the signalling rate
// (26.562 GB/s for an NVLink 4 link, whose payload rate is 25 GB/s, the
// figure NVIDIA quotes: 18 links, 450 GB/s), so where the version is known
// it caps that field.
func nvlinkDataRate(version int) float64 {
	switch {
	case version == 1:
		return 20e9
	case version >= 2 && version <= 4:
		return 25e9
	case version == 5:
		return 50e9
	}
	return 0
}

// nvlinkRate is one link's rate, one direction; 0 when neither NVML's speed
// nor the version says.
func nvlinkRate(l nvml.NVLink) float64 {
	data := 0.0
	if l.Version.Valid {
		data = nvlinkDataRate(l.Version.V)
	}
	speed := 0.0
	if l.SpeedBytes.Valid && l.SpeedBytes.V > 0 {
		speed = l.SpeedBytes.V
	}
	switch {
	case data == 0:
		return speed
	case speed == 0:
		return data
	}
	return min(data, speed)
}

// nvlinkPeerRate is what the active NVLinks between a and b carry in one
// direction. Links straight from a to b add up. On an NVSwitch machine
// every link goes to a switch and any pair can use all of them at once, so
// the pair gets the smaller of the two GPUs' switch bandwidths. Only active
// links count: NVML names no remote end for a link that is down (the link
// itself is reported by gpulink_gpu_nvlink_up).
func nvlinkPeerRate(a, b *nvml.GPUState) float64 {
	direct, aSwitch := 0.0, 0.0
	for _, l := range a.NVLinks {
		switch {
		case !l.Active:
		case l.RemoteType == "switch":
			aSwitch += nvlinkRate(l)
		case l.RemotePCIBusID == b.PCIBusID:
			direct += nvlinkRate(l)
		}
	}
	if direct > 0 {
		return direct
	}
	bSwitch := 0.0
	for _, l := range b.NVLinks {
		if l.Active && l.RemoteType == "switch" {
			bSwitch += nvlinkRate(l)
		}
	}
	return min(aSwitch, bSwitch)
}

// hostRate is HostBytesPerSecond of the GPU at busID. The topology's path
// comes first: it sees the switch uplinks between GPU and CPU (an AWS p5's
// Gen5 x16 GPU sits behind a Gen4 x8 uplink). Without it, NVML's view of
// the GPU's own link: the most generation and width GPU and slot allow.
func hostRate(snap *nvml.Snapshot, topo *numa.Topology, busID string) float64 {
	if topo != nil {
		if d := topo.Device(busID); d != nil {
			if h, ok := topo.SlowestHop(d, true); ok {
				return h.Bandwidth(true)
			}
		}
	}
	if g := snapshotGPU(snap, busID); g != nil && g.PCIe.MaxGeneration.Valid && g.PCIe.MaxWidth.Valid {
		return numa.GenerationLaneBandwidth(g.PCIe.MaxGeneration.V) * float64(g.PCIe.MaxWidth.V)
	}
	return 0
}

// hbmRate is the peak memory bandwidth, read and write together.
func hbmRate(g *nvml.GPUState) float64 {
	if g == nil || !g.Clocks.MemoryMax.Valid || g.MemoryBusWidth <= 0 {
		return 0
	}
	return g.Clocks.MemoryMax.V * float64(g.MemoryBusWidth) / 8 * 2
}

func snapshotGPU(snap *nvml.Snapshot, busID string) *nvml.GPUState {
	if snap == nil {
		return nil
	}
	for i := range snap.GPUs {
		if g := &snap.GPUs[i]; g.PCIBusID == busID && !g.Lost {
			return g
		}
	}
	return nil
}

// PathFor works out the Path of the GPU at busID (sysfs form) from an NVML
// snapshot and the PCIe topology. Either may be nil; what only it would
// give is then 0. Peers are every other GPU either source knows.
func PathFor(snap *nvml.Snapshot, topo *numa.Topology, busID string) Path {
	self := snapshotGPU(snap, busID)
	p := Path{
		HostBytesPerSecond: hostRate(snap, topo, busID),
		HBMBytesPerSecond:  hbmRate(self),
		PeerBytesPerSecond: map[string]float64{},
	}
	var peers []string
	if snap != nil {
		for _, g := range snap.GPUs {
			peers = append(peers, g.PCIBusID)
		}
	}
	if topo != nil {
		for _, d := range topo.GPUs {
			peers = append(peers, d.Address)
		}
	}
	for _, peer := range peers {
		if peer == busID || peer == "" {
			continue
		}
		if _, done := p.PeerBytesPerSecond[peer]; done {
			continue
		}
		rate := 0.0
		if other := snapshotGPU(snap, peer); self != nil && other != nil {
			rate = nvlinkPeerRate(self, other)
		}
		if rate == 0 {
			// PCIe peer-to-peer goes up one GPU's path and down the
			// other's; the slower of the two bounds it.
			rate = min(p.HostBytesPerSecond, hostRate(snap, topo, peer))
		}
		p.PeerBytesPerSecond[peer] = rate
	}
	if topo != nil {
		if gpu := topo.Device(busID); gpu != nil {
			p.StorageBytesPerSecond = map[string]float64{}
			for _, d := range topo.NVMe {
				if h, ok := topo.SlowestHopBetween(gpu, d, true); ok {
					p.StorageBytesPerSecond[d.Address] = h.Bandwidth(true)
				}
			}
		}
	}
	return p
}

// Expect is what r's path should give at most, in bytes per second; 0 when
// it is not known and for latency probes. Every direction compares with one
// direction of its link: PCIe and NVLink are full duplex, so each half of a
// bidirectional result should reach what a one-way copy does.
func (p Path) Expect(r Result) float64 {
	switch r.Probe {
	case HostToDevice, DeviceToHost, HostBidirectional:
		return p.HostBytesPerSecond
	case DeviceLocalCopy:
		return p.HBMBytesPerSecond
	case PeerCopy, PeerBidirectional:
		return p.PeerBytesPerSecond[r.Peer]
	case StorageToDevice, DeviceToStorage:
		return p.storage(r.StorageDrive)
	}
	return 0
}

// storage is what the drives (comma-joined, several under a RAID) should
// give the GPU together: each one's path, added, and no more than the
// GPU's own link to the host carries; 0 when any drive's path is unknown.
func (p Path) storage(drives string) float64 {
	if drives == "" {
		return 0
	}
	sum := 0.0
	for _, d := range strings.Split(drives, ",") {
		bw := p.StorageBytesPerSecond[d]
		if bw == 0 {
			return 0
		}
		sum += bw
	}
	if p.HostBytesPerSecond > 0 {
		sum = min(sum, p.HostBytesPerSecond)
	}
	return sum
}

// Annotate sets ExpectedBytesPerSecond on every result of g.
func (p Path) Annotate(g *GPURound) {
	for i := range g.Results {
		g.Results[i].ExpectedBytesPerSecond = p.Expect(g.Results[i])
	}
}

// PeerReachable reports whether GPU a can write into GPU b's memory: over
// NVLink, or PCIe peer to peer where the platform allows it. Pairs without
// it would only report errors.
func PeerReachable(snap *nvml.Snapshot, a, b int) bool {
	for _, p := range snap.Pairs {
		if (p.GPU == a && p.Peer == b) || (p.GPU == b && p.Peer == a) {
			if p.NVLinks > 0 || p.P2P["write"] {
				return true
			}
		}
	}
	return false
}

package probes_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/sampler"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
)

// Figures from shared/reference/links.md, one direction.
const (
	gen5x16  = 63.0e9   // PCIe Gen5 x16
	gen5x8   = 31.5e9   // PCIe Gen5 x8
	gen4x8   = 15.75e9  // PCIe Gen4 x8, the AWS p5 uplink
	nvlink18 = 450e9    // 18 NVLink 4 links
	h100HBM  = 3.352e12 // H100 SXM: 2619 MHz x 5120 bits, double data rate
)

// near reports whether got is within 0.1% of want: the table rounds
// 63.015 GB/s to 63.0.
func near(got, want float64) bool {
	return math.Abs(got-want) <= want*1e-3
}

func wantNear(t *testing.T, what string, got, want float64) {
	t.Helper()
	if !near(got, want) {
		t.Errorf("%s = %.4g B/s, want %.4g", what, got, want)
	}
}

func topology(t *testing.T, profile string) *numa.Topology {
	t.Helper()
	root := machine.Load(t, profile)
	topo, err := numa.ReadTopology(hostfs.Under(root))
	if err != nil {
		t.Fatalf("%s: %v", profile, err)
	}
	return topo
}

func sample(t *testing.T, m *nvmlmodel.Library) *nvml.Snapshot {
	t.Helper()
	snap, err := nvml.NewReader(m, "", nil).Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// The p5's GPU addresses, tray by tray (see machine.AWSP5).
func p5GPU(i int) string { return fmt.Sprintf("0000:%02x:00.0", 0x47+0x11*i+12) }

// p5NVML is a DGX H100's NVML at the p5's GPU addresses: the same eight
// H100 SXM on NVSwitch.
func p5NVML() *nvmlmodel.Library {
	m := nvmlmodel.NewDGXH100()
	m.Update(func() {
		for i, g := range m.GPUs {
			g.PciBusID = p5GPU(i)
		}
	})
	return m
}

var dgxGPUs = []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
	"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}

// The borrowed machine: Gen5 x16 straight on the root bus, all 18 NVLinks
// of each GPU going to the other.
func TestPathH200VM(t *testing.T) {
	topo, snap := topology(t, "h200-vm"), sample(t, nvmlmodel.NewH200Pair())
	p := probes.PathFor(snap, topo, "0000:00:06.0")
	wantNear(t, "host", p.HostBytesPerSecond, gen5x16)
	wantNear(t, "peer", p.PeerBytesPerSecond["0000:00:07.0"], nvlink18)
	// The fake's H200 reports 2619 MHz and 6144 bits.
	wantNear(t, "HBM", p.HBMBytesPerSecond, 2619e6*6144/8*2)
	if len(p.PeerBytesPerSecond) != 1 {
		t.Errorf("peers %v, want only the other GPU", p.PeerBytesPerSecond)
	}
	if snap.GPUs[0].MemoryBusWidth != 6144 {
		t.Errorf("memory bus width %d, want 6144 from NVML", snap.GPUs[0].MemoryBusWidth)
	}
}

// A DGX H100: Gen5 x16 all the way through its switches, NVSwitch between
// every pair.
func TestPathDGXH100(t *testing.T) {
	topo, snap := topology(t, "dgx-h100"), sample(t, nvmlmodel.NewDGXH100())
	for _, addr := range dgxGPUs {
		p := probes.PathFor(snap, topo, addr)
		wantNear(t, addr+" host", p.HostBytesPerSecond, gen5x16)
		wantNear(t, addr+" HBM", p.HBMBytesPerSecond, h100HBM)
		if len(p.PeerBytesPerSecond) != 7 {
			t.Errorf("%s: %d peers, want 7", addr, len(p.PeerBytesPerSecond))
		}
		for peer, bw := range p.PeerBytesPerSecond {
			wantNear(t, addr+" to "+peer, bw, nvlink18)
		}
	}
	if snap.GPUs[0].MemoryBusWidth != 5120 {
		t.Errorf("memory bus width %d, want 5120 from NVML", snap.GPUs[0].MemoryBusWidth)
	}
}

// Switch B's uplink trained x8 of x16. The expectation is the link's
// capability, so GPUs 2 and 3 keep 63 GB/s and their measured ratio is what
// falls; the topology's current state shows the narrow link.
func TestPathDowntrainedUplinkKeepsExpectation(t *testing.T) {
	topo, snap := topology(t, "dgx-h100-faults"), sample(t, nvmlmodel.NewDGXH100())
	for _, addr := range []string{"0000:3a:00.0", "0000:5d:00.0"} {
		wantNear(t, addr+" host", probes.PathFor(snap, topo, addr).HostBytesPerSecond, gen5x16)
		if h, ok := topo.SlowestHop(topo.Device(addr), false); !ok || !near(h.Bandwidth(false), gen5x8) {
			t.Errorf("%s: current slowest hop %+v, want the uplink at Gen5 x8", addr, h)
		}
	}
}

// On a p5 every GPU sits behind a Gen4 x8 uplink by design: that is its
// capability, so it is the expectation.
func TestPathAWSP5(t *testing.T) {
	topo, snap := topology(t, "aws-p5"), sample(t, p5NVML())
	for i := range 8 {
		p := probes.PathFor(snap, topo, p5GPU(i))
		wantNear(t, p5GPU(i)+" host", p.HostBytesPerSecond, gen4x8)
		wantNear(t, p5GPU(i)+" HBM", p.HBMBytesPerSecond, h100HBM)
		if len(p.PeerBytesPerSecond) != 7 {
			t.Errorf("%s: %d peers, want 7", p5GPU(i), len(p.PeerBytesPerSecond))
		}
		for peer, bw := range p.PeerBytesPerSecond {
			wantNear(t, p5GPU(i)+" to "+peer, bw, nvlink18)
		}
	}
	// GPU5 trained x8 of x16 below the uplink: the uplink still bounds it.
	faults := topology(t, "aws-p5-faults")
	wantNear(t, "GPU5 host, faulted", probes.PathFor(snap, faults, p5GPU(5)).HostBytesPerSecond, gen4x8)

	// Without NVML the pairs are known from the PCIe tree alone:
	// peer-to-peer through the host, no faster than either uplink.
	p := probes.PathFor(nil, topo, p5GPU(0))
	if p.HBMBytesPerSecond != 0 {
		t.Errorf("HBM %g without NVML, want 0 (unknown)", p.HBMBytesPerSecond)
	}
	if len(p.PeerBytesPerSecond) != 7 {
		t.Errorf("%d peers from the topology, want 7", len(p.PeerBytesPerSecond))
	}
	for peer, bw := range p.PeerBytesPerSecond {
		wantNear(t, "PCIe peer "+peer, bw, gen4x8)
	}
}

// Without a topology, NVML's maximum generation and width of the GPU's own
// link stand in: they cannot see a switch uplink.
func TestPathNVMLFallback(t *testing.T) {
	m := p5NVML()
	m.Update(func() { m.GPUs[1].PCIeMaxWidth = 8 })
	snap := sample(t, m)
	wantNear(t, "GPU0 host", probes.PathFor(snap, nil, p5GPU(0)).HostBytesPerSecond, gen5x16)
	wantNear(t, "GPU1 host", probes.PathFor(snap, nil, p5GPU(1)).HostBytesPerSecond, gen5x8)
	// A topology that does not know the GPU is no better than none.
	wantNear(t, "GPU0 host, foreign tree", probes.PathFor(snap, topology(t, "no-gpu"), p5GPU(0)).HostBytesPerSecond, gen5x16)
}

func TestPathUnknown(t *testing.T) {
	p := probes.PathFor(nil, nil, "0000:18:00.0")
	if p.HostBytesPerSecond != 0 || p.HBMBytesPerSecond != 0 || len(p.PeerBytesPerSecond) != 0 {
		t.Errorf("PathFor(nil, nil) = %+v, want all unknown", p)
	}
	if got := p.Expect(probes.Result{Probe: probes.HostToDevice}); got != 0 {
		t.Errorf("Expect on an unknown path = %g, want 0", got)
	}
}

// Links that are down carry nothing; with none up the pair falls back to
// PCIe peer-to-peer through the host.
func TestPathNVLinksDown(t *testing.T) {
	topo := topology(t, "h200-vm")
	m := nvmlmodel.NewH200Pair()
	m.Update(func() {
		m.GPUs[0].NVLinks[17].Up = false
		m.GPUs[1].NVLinks[17].Up = false
	})
	wantNear(t, "17 links", probes.PathFor(sample(t, m), topo, "0000:00:06.0").PeerBytesPerSecond["0000:00:07.0"], 17*25e9)
	m.Update(func() {
		for _, g := range m.GPUs {
			for l := range g.NVLinks {
				g.NVLinks[l].Up = false
			}
		}
	})
	wantNear(t, "no links", probes.PathFor(sample(t, m), topo, "0000:00:06.0").PeerBytesPerSecond["0000:00:07.0"], gen5x16)
}

// NVML's speed field is the signalling rate; the version's payload rate
// caps it, and each stands in where the other is missing.
func TestPathNVLinkRates(t *testing.T) {
	link := func(version int, speed float64) nvml.NVLink {
		l := nvml.NVLink{Active: true, RemotePCIBusID: "0000:00:07.0", RemoteType: "gpu"}
		if version > 0 {
			l.Version = sampler.Some(version)
		}
		if speed > 0 {
			l.SpeedBytes = sampler.Some(speed)
		}
		return l
	}
	for _, tc := range []struct {
		name  string
		links []nvml.NVLink
		want  float64
	}{
		{"v1 by version", []nvml.NVLink{link(1, 0), link(1, 0)}, 40e9},
		{"v3 by version", []nvml.NVLink{link(3, 0)}, 25e9},
		{"v5 by version", []nvml.NVLink{link(5, 0), link(5, 0)}, 100e9},
		{"v4 speed capped", []nvml.NVLink{link(4, 26562e6)}, 25e9},
		{"slower speed wins", []nvml.NVLink{link(4, 12.5e9)}, 12.5e9},
		{"unknown version, speed", []nvml.NVLink{link(9, 60e9), link(0, 60e9)}, 120e9},
		{"neither: PCIe", []nvml.NVLink{link(0, 0)}, gen5x16},
	} {
		snap := &nvml.Snapshot{GPUs: []nvml.GPUState{
			{Identity: nvml.Identity{PCIBusID: "0000:00:06.0"}, NVLinks: tc.links,
				PCIe: nvml.PCIeLink{MaxGeneration: sampler.Some(5), MaxWidth: sampler.Some(16)}},
			{Identity: nvml.Identity{PCIBusID: "0000:00:07.0"},
				PCIe: nvml.PCIeLink{MaxGeneration: sampler.Some(5), MaxWidth: sampler.Some(16)}},
		}}
		wantNear(t, tc.name, probes.PathFor(snap, nil, "0000:00:06.0").PeerBytesPerSecond["0000:00:07.0"], tc.want)
	}
}

func TestExpectAndAnnotate(t *testing.T) {
	node := func(n int) *int { return &n }
	const peer, stranger = "0000:00:07.0", "0000:00:08.0"
	p := probes.Path{HostBytesPerSecond: gen5x16, HBMBytesPerSecond: h100HBM,
		PeerBytesPerSecond: map[string]float64{peer: nvlink18}}
	g := &probes.GPURound{Results: []probes.Result{
		{Probe: probes.HostToDevice, Direction: probes.DirHostToDevice, HostNUMANode: node(0), BytesPerSecond: 55e9},
		{Probe: probes.DeviceToHost, Direction: probes.DirDeviceToHost, HostNUMANode: node(1), BytesPerSecond: 55e9},
		{Probe: probes.HostBidirectional, Direction: probes.DirHostToDevice, HostNUMANode: node(0), BytesPerSecond: 52e9},
		{Probe: probes.HostBidirectional, Direction: probes.DirDeviceToHost, HostNUMANode: node(0), BytesPerSecond: 52e9},
		{Probe: probes.DeviceLocalCopy, Direction: probes.DirLocal, BytesPerSecond: 3e12},
		{Probe: probes.PeerCopy, Direction: probes.DirToPeer, Peer: peer, BytesPerSecond: 385e9},
		{Probe: probes.PeerBidirectional, Direction: probes.DirToPeer, Peer: peer, BytesPerSecond: 380e9},
		{Probe: probes.PeerBidirectional, Direction: probes.DirFromPeer, Peer: peer, BytesPerSecond: 380e9},
		{Probe: probes.PeerCopy, Direction: probes.DirToPeer, Peer: stranger, Error: "peer access not supported"},
		{Probe: probes.HostLatency, HostNUMANode: node(0), Seconds: 1.2e-6, ExpectedBytesPerSecond: 1},
		{Probe: probes.PeerLatency, Peer: peer, Seconds: 0.8e-6},
		{Probe: probes.LaunchLatency, Seconds: 10e-6},
	}}
	want := []float64{gen5x16, gen5x16, gen5x16, gen5x16, h100HBM, nvlink18, nvlink18, nvlink18, 0, 0, 0, 0}
	for i, r := range g.Results {
		if got := p.Expect(r); got != want[i] {
			t.Errorf("Expect(%s %s %s) = %g, want %g", r.Probe, r.Direction, r.Peer, got, want[i])
		}
	}
	p.Annotate(g)
	for i, r := range g.Results {
		if r.ExpectedBytesPerSecond != want[i] {
			t.Errorf("annotated %s %s %s: %g, want %g", r.Probe, r.Direction, r.Peer, r.ExpectedBytesPerSecond, want[i])
		}
	}
}

// A DGX H100 drive on its GPU's switch is bound by its own Gen4 x4 link;
// one across the socket by the same link (the GPU's and the uplinks are
// wider), so the class of the path shows in the topology, not here.
func TestPathStorage(t *testing.T) {
	topo := topology(t, "dgx-h100")
	p := probes.PathFor(nil, topo, "0000:18:00.0")
	if len(p.StorageBytesPerSecond) != 4 {
		t.Fatalf("storage paths %v, want the 4 drives", p.StorageBytesPerSecond)
	}
	gen4x4 := 4 * 16e9 * 128 / 130 / 8
	wantNear(t, "GPU to its switch's drive", p.StorageBytesPerSecond["0000:1a:00.0"], gen4x4)
	r := probes.Result{Probe: probes.StorageToDevice, StorageDrive: "0000:1a:00.0"}
	wantNear(t, "expect", p.Expect(r), gen4x4)
	// An md RAID over two drives: each one's path, added.
	r.StorageDrive = "0000:1a:00.0,0000:3c:00.0"
	wantNear(t, "expect RAID", p.Expect(r), 2*gen4x4)
	r.StorageDrive = ""
	if got := p.Expect(r); got != 0 {
		t.Errorf("no drive known: expect %v, want 0 (unknown)", got)
	}
}

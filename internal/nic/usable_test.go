package nic

import (
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/numa"
)

// A NIC is usable where a port of it is up and its PCIe link is neither
// down nor narrow; its RDMA ports decide where it has any, its interfaces
// where not, and a NIC whose ports' state is not known is judged by its
// link alone.
func TestUsable(t *testing.T) {
	const addr = "0000:19:00.0"
	x16 := numa.PCIeLink{Width: sampler.Some(16), MaxWidth: sampler.Some(16)}
	x8 := numa.PCIeLink{Width: sampler.Some(8), MaxWidth: sampler.Some(16)}
	port := func(state, phys int) RDMAPort {
		return RDMAPort{Device: "mlx5_0", Port: 1, PCIAddress: addr, StateID: sampler.Some(state), PhysStateID: sampler.Some(phys)}
	}
	active, down := port(IBStateActive, IBPhysStateLinkUp), port(1, 3)
	iface := func(oper string) NetInterface {
		return NetInterface{Name: "ibp25s0", PCIAddress: addr, OperState: oper}
	}
	other := RDMAPort{Device: "mlx5_1", Port: 1, PCIAddress: "0000:29:00.0", StateID: sampler.Some(IBStateActive), PhysStateID: sampler.Some(IBPhysStateLinkUp)}
	for _, tc := range []struct {
		name string
		snap *Snapshot
		link numa.PCIeLink
		want bool
	}{
		{"port up", &Snapshot{Ports: []RDMAPort{active}}, x16, true},
		{"port down", &Snapshot{Ports: []RDMAPort{down}, Interfaces: []NetInterface{iface("up")}}, x16, false},
		{"port up, link x8 of x16", &Snapshot{Ports: []RDMAPort{active}}, x8, false},
		{"port up, link down", &Snapshot{Ports: []RDMAPort{active}}, numa.PCIeLink{Width: sampler.Some(0), MaxWidth: sampler.Some(16)}, false},
		{"one of two ports up", &Snapshot{Ports: []RDMAPort{down, func() RDMAPort { p := active; p.Port = 2; return p }()}}, x16, true},
		{"Ethernet only, up", &Snapshot{Interfaces: []NetInterface{iface("up")}}, x16, true},
		{"Ethernet only, down", &Snapshot{Interfaces: []NetInterface{iface("down")}}, x16, false},
		{"state unreadable", &Snapshot{Ports: []RDMAPort{{Device: "mlx5_0", Port: 1, PCIAddress: addr}}}, x16, true},
		{"another NIC's port", &Snapshot{Ports: []RDMAPort{other}}, x16, true},
		{"no NIC sample", nil, x16, true},
		{"no NIC sample, link x8", nil, x8, false},
	} {
		d := &numa.PCIDevice{Address: addr, Kind: numa.KindNIC, Link: tc.link}
		topo := &numa.Topology{Devices: map[string]*numa.PCIDevice{addr: d}, NICs: []*numa.PCIDevice{d}}
		if got := tc.snap.Usable(topo, d); got != tc.want {
			t.Errorf("%s: Usable %v, want %v", tc.name, got, tc.want)
		}
	}
}

package nodeprobe

import (
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/numa"
)

// NearestNICRate is what the NICs NCCL sends the GPU at gpu (any PCI
// address form) to another node through carry, one direction, in bytes
// per second: the GPU's rail (numa.Topology.RailNICs), one ConnectX port
// on a DGX H100, four EFA devices on an AWS p5. Each NIC counts with its
// fastest port that is not down (a port that is down reports a rate that
// means nothing: an InfiniBand port shows SDR), RDMA ports before
// Ethernet interfaces on the same function. 0 when the topology or the
// NIC sample is missing, or no rail NIC has a port up with a known rate.
func NearestNICRate(topo *numa.Topology, nics *nic.Snapshot, gpu string) float64 {
	if topo == nil || nics == nil {
		return 0
	}
	d := topo.Device(pciaddr.Normalize(gpu))
	if d == nil {
		return 0
	}
	total := 0.0
	for _, n := range topo.RailNICs(d) {
		best := 0.0
		for _, r := range functionRates(nics, n.Address) {
			best = max(best, r)
		}
		total += best
	}
	return total
}

// functionRates are the rates of the ports on the PCI function at addr
// that are not down: its RDMA ports, or its network interfaces where it
// has no RDMA port with a rate.
func functionRates(nics *nic.Snapshot, addr string) []float64 {
	var out []float64
	for i := range nics.Ports {
		p := &nics.Ports[i]
		if p.PCIAddress == addr && p.RateBytes.Valid && p.RateBytes.V > 0 && !down(p.Up()) {
			out = append(out, p.RateBytes.V)
		}
	}
	if len(out) > 0 {
		return out
	}
	for i := range nics.Interfaces {
		f := &nics.Interfaces[i]
		if f.PCIAddress == addr && f.SpeedBytes.Valid && f.SpeedBytes.V > 0 && !down(f.Up()) {
			out = append(out, f.SpeedBytes.V)
		}
	}
	return out
}

// down reports a state known to be down; unknown is not.
func down(up sampler.Opt[bool]) bool { return up.Valid && !up.V }

package probes

import (
	"slices"

	"github.com/gpulink/gpulink_exporter/internal/nccllog"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/numa"
)

// What a path to another node should give, from the node's NICs: the
// network NCCL should take from each GPU (NetworksFor, read by the nccl
// source and the simulated NCCL) and what the GPU's rail NICs carry
// (NearestNICRate, against which a node-to-node probe is compared).

// GPUNetwork is what NCCL should use between a GPU and other nodes, from
// the node's NICs: the network of the GPU's rail NICs (numa's RailNICs,
// as NCCL deals them out, among the NICs that can carry traffic: nic's
// Usable, as NCCL's IB transport lists only active ports), and whether
// GPUDirect RDMA should carry it.
type GPUNetwork struct {
	GPU string // PCI address, sysfs form
	// Network is as nccllog names a connection's: IB, RoCE or EFA where
	// an RDMA port of that kind is up (on the GPU's rail NICs, else on
	// any NIC of the node), Socket where none is.
	Network string
	// GDR: GPUDirect RDMA is expected: the network is RDMA, the GPU's
	// rail NIC is PIX or PXB from it (NCCL's default NCCL_NET_GDR_LEVEL,
	// PXB), and nvidia_peermem is loaded or dma-buf offered.
	GDR bool
	// RailNICs are the rail NICs' names, Path the path class from the GPU
	// to the first (absent where no NIC of the node is usable).
	RailNICs []string
	Path     numa.PathClass
}

// rdmaNetwork is the network NCCL's IB transport or the OFI plugin gives
// a port of kind k; "" for a kind NCCL does not use (iWARP).
func rdmaNetwork(k nic.RDMAKind) string {
	switch k {
	case nic.RDMAInfiniBand:
		return nccllog.NetworkIB
	case nic.RDMARoCE:
		return nccllog.NetworkRoCE
	case nic.RDMAEFA:
		return nccllog.NetworkEFA
	}
	return ""
}

// upNetwork is the network of the first RDMA port that is up among ports
// on one of the functions in (every function where on is nil); "".
func upNetwork(ports []nic.RDMAPort, on []string) string {
	for i := range ports {
		p := &ports[i]
		if on != nil && !slices.Contains(on, p.PCIAddress) {
			continue
		}
		if up := p.Up(); up.Valid && up.V {
			if n := rdmaNetwork(p.Kind); n != "" {
				return n
			}
		}
	}
	return ""
}

// NetworksFor works out each GPU's GPUNetwork; nil without a topology. ports
// may be nil (the NICs could not be read): every GPU then expects
// sockets.
func NetworksFor(topo *numa.Topology, ports *nic.Snapshot) []GPUNetwork {
	if topo == nil {
		return nil
	}
	var all []nic.RDMAPort
	if ports != nil {
		all = ports.Ports
	}
	// A GPU whose rail port is down is dealt another NIC, perhaps one
	// still under its switch (GPUDirect RDMA then stays); a NIC whose
	// ports are all down is no GPU's way out.
	usable := func(n *numa.PCIDevice) bool { return ports.Usable(topo, n) }
	gdrKernel := topo.GPUDirect.PeermemLoaded.V || topo.GPUDirect.DMABufSupported.V
	var out []GPUNetwork
	for _, g := range topo.GPUs {
		e := GPUNetwork{GPU: g.Address}
		rails := topo.RailNICsAmong(g, usable)
		var addrs []string
		for _, n := range rails {
			e.RailNICs = append(e.RailNICs, n.Name())
			addrs = append(addrs, n.Address)
		}
		if len(rails) > 0 {
			e.Path = topo.Path(g, rails[0])
		}
		// The rails' own network; with no rails, addrs is nil and this
		// is already any NIC's.
		onRail := upNetwork(all, addrs)
		e.Network = onRail
		if e.Network == "" {
			// NCCL takes any NIC of the node where the nearest has no
			// RDMA port up: slower, but not sockets.
			e.Network = upNetwork(all, nil)
		}
		if e.Network == "" {
			e.Network = nccllog.NetworkSocket
		}
		// GPUDirect RDMA only through a rail NIC of the GPU's own.
		e.GDR = len(rails) > 0 && onRail != "" && e.Path <= numa.PathPXB && gdrKernel
		out = append(out, e)
	}
	return out
}

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
		if p.PCIAddress == addr && p.RateBytes.Valid && p.RateBytes.V > 0 && !portDown(p.Up()) {
			out = append(out, p.RateBytes.V)
		}
	}
	if len(out) > 0 {
		return out
	}
	for i := range nics.Interfaces {
		f := &nics.Interfaces[i]
		if f.PCIAddress == addr && f.SpeedBytes.Valid && f.SpeedBytes.V > 0 && !portDown(f.Up()) {
			out = append(out, f.SpeedBytes.V)
		}
	}
	return out
}

// portDown reports a state known to be down; unknown is not.
func portDown(up sampler.Opt[bool]) bool { return up.Valid && !up.V }

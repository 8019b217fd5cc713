// Package ncclcheck says, without running a collective, what an NCCL
// session between this node and another would use and what it lacks: the
// NCCL library, the network plugin, the RDMA devices a container must
// see, the memlock limit RDMA registration needs, GPUDirect RDMA's kernel
// side, and the network the node's own NICs call for. The check command
// prints it; the daemon exports it (the nccl source).
//
// Everything is read below a filesystem root (Env.Root) and through two
// functions (the memlock limit, the library's version), so that tests run
// the same code on fixture trees.
package ncclcheck

import (
	"slices"

	"github.com/gpulink/gpulink_exporter/internal/nccllog"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/numa"
)

// GPUNetwork is what NCCL should use between a GPU and other nodes, from
// the node's NICs: the network of the GPU's rail NICs (numa's RailNICs,
// as NCCL deals them out), and whether GPUDirect RDMA should carry it.
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
	// to the first (absent where the node has no NIC).
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

// Expect works out each GPU's GPUNetwork; nil without a topology. ports
// may be nil (the NICs could not be read): every GPU then expects
// sockets.
func Expect(topo *numa.Topology, ports *nic.Snapshot) []GPUNetwork {
	if topo == nil {
		return nil
	}
	var all []nic.RDMAPort
	if ports != nil {
		all = ports.Ports
	}
	gdrKernel := topo.GPUDirect.PeermemLoaded.V || topo.GPUDirect.DMABufSupported.V
	var out []GPUNetwork
	for _, g := range topo.GPUs {
		e := GPUNetwork{GPU: g.Address}
		rails := topo.RailNICs(g)
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

// expectedNetwork is the RDMA network the GPUs expect ("" for none): the
// first GPU's that is not sockets.
func expectedNetwork(es []GPUNetwork) string {
	for _, e := range es {
		if e.Network != nccllog.NetworkSocket {
			return e.Network
		}
	}
	return ""
}

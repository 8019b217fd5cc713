package nic

import (
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/numa"
)

// Usable reports whether NIC n, a function of topo, can carry traffic: a
// port of it is up, and its PCIe link is neither down nor trained narrow
// (numa's LinkImpaired). Its ports are its RDMA ports, or where it has
// none its network interfaces (an IPoIB or RoCE interface follows its
// port). A NIC none of whose ports' state s holds (s nil: no NIC sample;
// or unreadable) is judged by its link alone: an unknown state is no
// evidence the port is down. NCCL's IB transport, likewise, lists only
// ACTIVE ports, so the nearest usable NIC is the one a GPU's traffic
// leaves through.
func (s *Snapshot) Usable(topo *numa.Topology, n *numa.PCIDevice) bool {
	if topo.LinkImpaired(n) {
		return false
	}
	up := s.functionUp(n.Address)
	return !up.Valid || up.V
}

// functionUp is whether a port on the PCI function addr is up: its RDMA
// ports', or where it has none its interfaces'; absent where no such
// port's state is known.
func (s *Snapshot) functionUp(addr string) sampler.Opt[bool] {
	if s == nil {
		return sampler.Opt[bool]{}
	}
	var ups []sampler.Opt[bool]
	for i := range s.Ports {
		if s.Ports[i].PCIAddress == addr {
			ups = append(ups, s.Ports[i].Up())
		}
	}
	if len(ups) == 0 {
		for i := range s.Interfaces {
			if s.Interfaces[i].PCIAddress == addr {
				ups = append(ups, s.Interfaces[i].Up())
			}
		}
	}
	var out sampler.Opt[bool]
	for _, up := range ups {
		if up.Valid {
			out = sampler.Some(out.V || up.V)
		}
	}
	return out
}

package sim

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"

	"github.com/gpulink/gpulink_exporter/internal/nccllog"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
)

// This node's part of a node-to-node session: a communicator whose other
// ranks are another process's, on another node. The two simulated
// processes never meet (the unique id is made and handed over as the
// child's is, then each side goes on alone), so each models its own part
// from its own node: what leaves one of its GPUs for the other node goes
// through the GPU's rail NICs, at netEfficiency of their ports' rate, and
// fails where one of those ports is down. What the other node's NICs do is
// the other node's model: a fault there shows in the results that node's
// process reports (the send/recv it sends), not in this one's.

// openPeers makes or takes the unique id the other process joins with,
// as the collectives child does: rank 0's process makes it and sends it
// on ids before initialising, any other is given it.
func openPeers(ctx context.Context, o probes.CollectiveOptions, ids chan<- string) error {
	if o.UniqueID != "" {
		_, err := probes.ParseUniqueID(o.UniqueID) // checked by Validate too; the child parses it again
		return err
	}
	if ids == nil {
		return fmt.Errorf("%d of %d ranks are in other processes, and there is no one to hand them the unique id", o.Ranks-len(o.GPUs), o.Ranks)
	}
	var id probes.UniqueID
	_, _ = rand.Read(id[:]) // never fails: crypto/rand aborts the program instead
	select {
	case ids <- id.String():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("handing out the unique id: %w", context.Cause(ctx))
	}
}

// netLinks are, for each of this process's GPUs, its link to the ranks on
// the other node: NCCL's network transport through the GPU's rail NICs.
// The ports are the exporter's NIC reader's (c.ports), so nic_rate,
// nic_down and a flapping port in its down phase show.
func (c *comm) netLinks() []link {
	out := make([]link, len(c.gpus))
	ports, err := c.ports, c.portsErr
	for i, g := range c.gpus {
		switch nics := c.railNICs(g); {
		case len(nics) == 0:
			out[i] = link{kind: probes.TransportNet, why: "no NIC near GPU " + g.PCIBusID}
		case ports == nil:
			out[i] = link{kind: probes.TransportNet, why: fmt.Sprintf("the NIC ports cannot be read: %v", err)}
		default:
			out[i] = c.railLink(pciaddr.Normalize(g.PCIBusID), nics, ports)
		}
	}
	return out
}

// railNICs are the NICs NCCL sends g's traffic to another node through
// (numa.Topology.RailNICs); none without a topology.
func (c *comm) railNICs(g *nvml.GPUState) []*numa.PCIDevice {
	if c.topo == nil {
		return nil
	}
	d := c.topo.Device(pciaddr.Normalize(g.PCIBusID))
	if d == nil {
		return nil
	}
	return c.topo.RailNICs(d)
}

// railLink is the link through nics: netEfficiency of the rate of their
// ports, RDMA ports or, on a function that has none, its network
// interfaces (NCCL's socket transport). A port known to be down leaves no
// path: NCCL's channels over that NIC fail, and with them the operation.
func (c *comm) railLink(gpu string, nics []*numa.PCIDevice, ports *nic.Snapshot) link {
	l := link{kind: probes.TransportNet}
	total := 0.0
	for _, n := range nics {
		rate, found := 0.0, false // found: n has RDMA ports
		for i := range ports.Ports {
			p := &ports.Ports[i]
			if !slices.Contains(n.RDMANames, p.Device) {
				continue
			}
			found = true
			if up := p.Up(); up.Valid && !up.V {
				return link{kind: probes.TransportNet, why: fmt.Sprintf("%s port %d is down", p.Device, p.Port)}
			}
			if p.RateBytes.Valid {
				rate += p.RateBytes.V
			}
		}
		if !found {
			for i := range ports.Interfaces {
				f := &ports.Interfaces[i]
				if f.PCIAddress != n.Address {
					continue
				}
				if up := f.Up(); up.Valid && !up.V {
					return link{kind: probes.TransportNet, why: fmt.Sprintf("%s is down", f.Name)}
				}
				if f.SpeedBytes.Valid {
					rate += f.SpeedBytes.V
				}
			}
		}
		if c.net0.name == nccllog.NetworkSocket {
			rate = min(rate, socketBytesPerSecond)
		}
		total += rate
		l.details = append(l.details, c.net0.detail(gpu, n))
	}
	if total <= 0 {
		l.why = "no rate known for the ports of " + nics[0].Name()
	}
	l.rate = total * netEfficiency
	return l
}

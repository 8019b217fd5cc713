package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/nccllog"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
)

// The simulated communicator writes the INFO log NCCL would write, and
// the round's transports are read from it by the exporter's one parser of
// NCCL's log (probes.TransportsOf, internal/nccllog), as the child reads
// the real one: the network setup lines NCCL and aws-ofi-nccl print (the
// IB transport's device list with each port's link layer, the plugin's
// provider, "Using network"), then a line per connection.
//
// The network is what the node's NICs give, as the nccl source expects it
// (probes.NetworksFor): NCCL's IB transport over InfiniBand or RoCE ports
// that are up, aws-ofi-nccl ("Libfabric", provider efa) over EFA, sockets
// where no RDMA port is up; GPUDirect RDMA where expected. The
// nccl_net_socket fault takes the RDMA devices from the container, and
// NCCL falls back to sockets; nccl_gdr_off drops /GDRDMA.

// socketBytesPerSecond bounds what NCCL's socket transport carries
// through one NIC: TCP through the kernel, a few GB/s (2.9 GB/s measured
// between two processes over the H200 VMs' loopback).
const socketBytesPerSecond = 5e9

// netSetup is what the simulated NCCL found of the node's networks when
// the communicator opened.
type netSetup struct {
	// name is the network NCCL uses: IB, Libfabric or Socket.
	name string
	// ib are the IB transport's devices (InfiniBand and RoCE ports that
	// are up), in its numbering; efa the EFA devices that are up.
	ib, efa []nic.RDMAPort
	// gdr is, by GPU address, whether GPUDirect RDMA carries its traffic.
	gdr map[string]bool
}

// readNet works out the setup from the ports the communicator read
// (c.ports).
func (c *comm) readNet() netSetup {
	s := netSetup{name: nccllog.NetworkSocket, gdr: map[string]bool{}}
	ports := c.ports
	sockets := slices.ContainsFunc(c.faults, func(f Fault) bool { return f.Kind == NCCLNetSocket })
	if ports == nil || sockets {
		return s
	}
	for _, p := range ports.Ports {
		if up := p.Up(); !up.Valid || !up.V {
			continue
		}
		switch p.Kind {
		case nic.RDMAInfiniBand, nic.RDMARoCE:
			s.ib = append(s.ib, p)
		case nic.RDMAEFA:
			s.efa = append(s.efa, p)
		}
	}
	switch {
	case len(s.ib) > 0:
		s.name = nccllog.NetworkIB
	case len(s.efa) > 0:
		s.name = "Libfabric" // aws-ofi-nccl 1.13 on
	}
	noGDR := slices.ContainsFunc(c.faults, func(f Fault) bool { return f.Kind == NCCLGDROff })
	for _, e := range probes.NetworksFor(c.topo, ports) {
		s.gdr[e.GPU] = e.GDR && !noGDR && s.name != nccllog.NetworkSocket
	}
	return s
}

// header is the log's network setup lines.
func (s netSetup) header() []string {
	var out []string
	if len(s.ib) > 0 {
		var b strings.Builder
		for i, p := range s.ib {
			layer := "IB"
			if p.Kind == nic.RDMARoCE {
				layer = "RoCE"
			}
			fmt.Fprintf(&b, " [%d]%s:%d/%s", i, p.Device, p.Port, layer)
		}
		out = append(out, "NET/IB : Using"+b.String()+" ; OOB eth0:10.0.0.1<0>")
	} else {
		out = append(out, "NET/IB : No device found.")
	}
	if len(s.efa) > 0 {
		out = append(out, fmt.Sprintf("NET/OFI Selected provider is efa, fabric is efa-direct (found %d nics)", len(s.efa)))
	}
	// Printed whatever NCCL takes: no sign of a fallback by itself.
	out = append(out, "NET/Socket : Using [0]eth0:10.0.0.1<0>", "Using network "+s.name)
	return out
}

// detail is NCCL's name for a connection from gpu through nic n over
// the network.
func (s netSetup) detail(gpu string, n *numa.PCIDevice) string {
	dev := 0
	switch s.name {
	case nccllog.NetworkSocket:
		return "NET/Socket/0"
	case nccllog.NetworkIB:
		dev = max(slices.IndexFunc(s.ib, func(p nic.RDMAPort) bool { return n != nil && slices.Contains(n.RDMANames, p.Device) }), 0)
	default:
		dev = max(slices.IndexFunc(s.efa, func(p nic.RDMAPort) bool { return n != nil && slices.Contains(n.RDMANames, p.Device) }), 0)
	}
	d := fmt.Sprintf("NET/%s/%d", s.name, dev)
	if s.gdr[gpu] {
		d += "/GDRDMA"
	}
	return d
}

// logConnection writes the line NCCL writes for a connection, once per
// channel and ranks.
func (c *comm) logConnection(ch, from, to int, detail string) {
	k := [3]int{ch, from, to}
	if c.logged[k] {
		return
	}
	c.logged[k] = true
	dir := ""
	if strings.HasPrefix(detail, "NET/") {
		dir = "[send] "
	}
	c.log = append(c.log, fmt.Sprintf("Channel %02d/0 : %d[%d] -> %d[%d] %svia %s", ch, from, from, to, to, dir, detail))
}

// Transports are the connections made so far, read from the log.
func (c *comm) Transports() []probes.Transport {
	var b strings.Builder
	for _, l := range append(c.net0.header(), c.log...) {
		fmt.Fprintf(&b, "sim:%d:%d [0] NCCL INFO %s\n", c.o.FirstRank+1, c.o.FirstRank+1, l)
	}
	return probes.TransportsOf(strings.NewReader(b.String()))
}

package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
)

// NICCollector renders the NIC source's snapshot: RDMA ports (InfiniBand,
// RoCE, EFA) and physical network interfaces. Per-series labels are only
// device (and port); where a NIC sits (pci_bus_id, numa_node) is on the
// _info metrics, and its PCIe link state is the topology collector's
// gpulink_pcie_link_* series, joined on pci_bus_id.
type NICCollector struct {
	scrape.Rendered[*nic.Snapshot]
	d nicDescs
}

type nicDescs struct {
	portInfo, portUp, portState, portPhysState, portRate *prometheus.Desc
	portCounters                                         []nicPortCounter
	netInfo, netUp, netSpeed                             *prometheus.Desc
	netCounters                                          []nicNetCounter
}

type nicPortCounter struct {
	desc *prometheus.Desc
	get  func(*nic.RDMACounters) sampler.Opt[uint64]
}

type nicNetCounter struct {
	desc *prometheus.Desc
	get  func(*nic.NetInterface) sampler.Opt[uint64]
}

// NewNICCollector renders the snapshots of src.
func NewNICCollector(src scrape.Source[*nic.Snapshot]) *NICCollector {
	port := func(name, help string, get func(*nic.RDMACounters) sampler.Opt[uint64]) nicPortCounter {
		return nicPortCounter{newDesc("nic_port", name, help, "device", "port"), get}
	}
	net := func(name, help string, get func(*nic.NetInterface) sampler.Opt[uint64]) nicNetCounter {
		return nicNetCounter{newDesc("net_interface", name, help, "device"), get}
	}
	c := &NICCollector{d: nicDescs{
		portInfo: newDesc("nic_port", "info",
			"RDMA port identity; value 1. kind is infiniband, roce, iwarp or efa; pci_bus_id is empty for a software device, numa_node where the platform does not say.",
			"device", "port", "pci_bus_id", "numa_node", "link_layer", "kind"),
		portUp: newDesc("nic_port", "up",
			"1 if the port's logical state is ACTIVE and its physical state LinkUp.", "device", "port"),
		portState: newDesc("nic_port", "state_id",
			"Logical port state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.", "device", "port"),
		portPhysState: newDesc("nic_port", "physical_state_id",
			"Physical port state: 1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, 7 Phy Test.",
			"device", "port"),
		portRate: newDesc("nic_port", "rate_bytes_per_second",
			"Rate the port's link trained at (lanes times lane speed), one direction.", "device", "port"),
		portCounters: []nicPortCounter{
			port("receive_bytes_total", "Bytes received (port_rcv_data times 4; EFA rx_bytes).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.ReceiveBytes }),
			port("transmit_bytes_total", "Bytes sent (port_xmit_data times 4; EFA tx_bytes).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.TransmitBytes }),
			port("receive_packets_total", "Packets received (port_rcv_packets; EFA rx_pkts).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.ReceivePackets }),
			port("transmit_packets_total", "Packets sent (port_xmit_packets; EFA tx_pkts).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.TransmitPackets }),
			port("symbol_errors_total", "Minor link errors detected on one or more physical lanes (symbol_error).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.SymbolErrors }),
			port("link_downed_total", "Times the link error recovery process failed and the link went down (link_downed).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.LinkDowned }),
			port("link_error_recovery_total", "Times the link error recovery process completed successfully (link_error_recovery).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.LinkErrorRecovery }),
			port("receive_errors_total", "Received packets with errors (port_rcv_errors).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.ReceiveErrors }),
			port("transmit_discards_total", "Outbound packets discarded because the port was down or congested (port_xmit_discards).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.TransmitDiscards }),
			port("transmit_wait_total",
				"Ticks during which the port had data to send but no flow-control credits (port_xmit_wait); a tick is a device-specific interval, not a second.",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.TransmitWait }),
			port("out_of_sequence_total", "Packets received out of sequence: packets lost on the way (mlx5 out_of_sequence).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.OutOfSequence }),
			port("nak_sequence_errors_total",
				"NAK sequence error packets received: the responder saw a gap and this sender went back to resend (mlx5 packet_seq_err).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.NAKSequenceErrors }),
			port("adaptive_retransmissions_total", "RoCE adaptive retransmissions (mlx5 roce_adp_retrans).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.AdaptiveRetransmissions }),
			port("retransmitted_packets_total",
				"Packets retransmitted (EFA retrans_pkts). mlx5 does not count these; see nak_sequence_errors and local_ack_timeouts.",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.RetransmittedPackets }),
			port("ecn_marked_packets_total", "RoCEv2 packets received with ECN congestion-experienced marks (mlx5 np_ecn_marked_roce_packets).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.ECNMarkedPackets }),
			port("cnp_handled_total",
				"Congestion notification packets this port acted on by lowering its send rate (mlx5 rp_cnp_handled).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.CNPHandled }),
			port("local_ack_timeouts_total",
				"Times a sender's ack timer expired and it retransmitted (mlx5 local_ack_timeout_err; EFA retrans_timeout_events).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.LocalAckTimeouts }),
			port("receive_discards_total", "Received packets dropped (EFA rx_drops).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.ReceiveDiscards }),
			port("rnr_naks_total",
				"RNR (receiver not ready) NAKs this port received as a sender: the responder had no receive buffer posted, and the request waited and was retried (mlx5 rnr_nak_retry_err). A queue pair that runs out of RNR retries fails.",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.RNRNAKs }),
			port("requester_cqe_errors_total",
				"Work requests of this port's requester queue pairs that completed with an error, each leaving its queue pair in the error state: retries exceeded, remote access or operation errors (mlx5 req_cqe_error).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.RequesterCQEErrors }),
			port("receive_icrc_errors_total",
				"RoCE packets received with a bad ICRC, the end-to-end CRC: corrupted on the way and dropped (mlx5 rx_icrc_encapsulated).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.ICRCErrors }),
			port("retransmitted_bytes_total", "Bytes retransmitted (EFA retrans_bytes).",
				func(c *nic.RDMACounters) sampler.Opt[uint64] { return c.RetransmittedBytes }),
		},
		netInfo: newDesc("net_interface", "info",
			"Physical network interface identity; value 1. Virtual interfaces are not exported. numa_node is empty where the platform does not say.",
			"device", "pci_bus_id", "numa_node"),
		netUp: newDesc("net_interface", "up",
			"1 if the interface's operstate is up (its carrier where the driver reports operstate unknown).", "device"),
		netSpeed: newDesc("net_interface", "speed_bytes_per_second",
			"Link speed, one direction; absent when the driver does not know it.", "device"),
		netCounters: []nicNetCounter{
			net("carrier_changes_total", "Times the link went up or down.",
				func(n *nic.NetInterface) sampler.Opt[uint64] { return n.CarrierChanges }),
			net("receive_bytes_total", "Bytes received.",
				func(n *nic.NetInterface) sampler.Opt[uint64] { return n.Stats.ReceiveBytes }),
			net("transmit_bytes_total", "Bytes sent.",
				func(n *nic.NetInterface) sampler.Opt[uint64] { return n.Stats.TransmitBytes }),
			net("receive_errors_total", "Receive errors.",
				func(n *nic.NetInterface) sampler.Opt[uint64] { return n.Stats.ReceiveErrors }),
			net("transmit_errors_total", "Transmit errors.",
				func(n *nic.NetInterface) sampler.Opt[uint64] { return n.Stats.TransmitErrors }),
			net("receive_drops_total", "Received packets dropped.",
				func(n *nic.NetInterface) sampler.Opt[uint64] { return n.Stats.ReceiveDropped }),
			net("transmit_drops_total", "Packets dropped on the way out.",
				func(n *nic.NetInterface) sampler.Opt[uint64] { return n.Stats.TransmitDropped }),
		},
	}}
	c.Init(src, rendering(c.render))
	return c
}

// Describe implements prometheus.Collector.
func (c *NICCollector) Describe(ch chan<- *prometheus.Desc) {
	d := &c.d
	for _, desc := range []*prometheus.Desc{d.portInfo, d.portUp, d.portState, d.portPhysState, d.portRate,
		d.netInfo, d.netUp, d.netSpeed} {
		ch <- desc
	}
	for _, pc := range d.portCounters {
		ch <- pc.desc
	}
	for _, nc := range d.netCounters {
		ch <- nc.desc
	}
}

func (c *NICCollector) render(o *out, s *nic.Snapshot) {
	d := &c.d
	for i := range s.Ports {
		p := &s.Ports[i]
		o.Labels = []string{p.Device, itoa(p.Port)}
		o.gauge(d.portInfo, 1, p.PCIAddress, numaLabel(p.NUMANode), p.LinkLayer, string(p.Kind))
		o.optBool(d.portUp, p.Up())
		o.optInt(d.portState, p.StateID)
		o.optInt(d.portPhysState, p.PhysStateID)
		o.optGauge(d.portRate, p.RateBytes)
		for _, pc := range d.portCounters {
			o.optUint(pc.desc, prometheus.CounterValue, pc.get(&p.Counters))
		}
	}
	for i := range s.Interfaces {
		n := &s.Interfaces[i]
		o.Labels = []string{n.Name}
		o.gauge(d.netInfo, 1, n.PCIAddress, numaLabel(n.NUMANode))
		o.optBool(d.netUp, n.Up())
		o.optGauge(d.netSpeed, n.SpeedBytes)
		for _, nc := range d.netCounters {
			o.optUint(nc.desc, prometheus.CounterValue, nc.get(n))
		}
	}
}

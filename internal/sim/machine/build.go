package machine

import (
	"fmt"
	"hash/fnv"
	"math/bits"
)

// pciID is what identifies a kind of function: the IDs lspci -nn shows,
// its driver, and its own link capability.
type pciID struct {
	class                uint32
	vendor, device       uint16
	subVendor, subDevice uint16
	rev                  uint8
	driver               string
	maxGen, maxWidth     int // 0: conventional or virtual, no link files
}

// The functions the profiles are built from.
var (
	h100SXM    = pciID{0x030200, 0x10de, 0x2330, 0x10de, 0x16c1, 0xa1, "nvidia", 5, 16}
	h200SXM    = pciID{0x030200, 0x10de, 0x2335, 0x10de, 0x18be, 0xa1, "nvidia", 5, 16}
	cx7IB      = pciID{0x020700, 0x15b3, 0x1021, 0x15b3, 0x0041, 0x00, "mlx5_core", 5, 16}
	cx7Eth     = pciID{0x020000, 0x15b3, 0x1021, 0x15b3, 0x0040, 0x00, "mlx5_core", 5, 16}
	samsungSSD = pciID{0x010802, 0x144d, 0xa824, 0x144d, 0xa801, 0x00, "nvme", 4, 4}
	// Broadcom PEX89000: upstream and downstream ports share the IDs.
	pexPort = pciID{0x060400, 0x1000, 0xc030, 0x1000, 0x100b, 0xb0, "pcieport", 5, 16}
	// Sapphire Rapids root port, each on its own host bridge.
	sprRootPort = pciID{0x060400, 0x8086, 0x352a, 0x8086, 0x0000, 0x04, "pcieport", 5, 16}
	// EPYC 7R13 root port as p5 uses it: a Gen4 x8 uplink to each tray.
	milanRootPort = pciID{0x060400, 0x1022, 0x1483, 0x1022, 0x1453, 0x00, "pcieport", 4, 8}
	icxRootPort   = pciID{0x060400, 0x8086, 0x347a, 0x8086, 0x0000, 0x04, "pcieport", 4, 16}
	awsEFA        = pciID{0x020000, 0x1d0f, 0xefa1, 0x1d0f, 0xefa1, 0x00, "efa", 4, 16}
	awsENA        = pciID{0x020000, 0x1d0f, 0xec20, 0x1d0f, 0xec20, 0x00, "ena", 4, 8}
	intelE810     = pciID{0x020000, 0x8086, 0x1593, 0x8086, 0x0002, 0x02, "ice", 4, 16}
	// The VM's functions: a Q35-style host bridge and virtio devices, none
	// of them PCI Express.
	vmHostBridge = pciID{0x060000, 0x8086, 0x0d57, 0x8086, 0x0000, 0x00, "", 0, 0}
	virtioBlock  = pciID{0x018000, 0x1af4, 0x1042, 0x1af4, 0x1100, 0x01, "virtio-pci", 0, 0}
	virtioNet    = pciID{0x020000, 0x1af4, 0x1041, 0x1af4, 0x1100, 0x01, "virtio-pci", 0, 0}
)

func pciAddr(bus, dev int) string { return fmt.Sprintf("0000:%02x:%02x.0", bus, dev) }

// fn returns function 0 of device dev on bus, its link trained at its
// own maximum until a port above lowers it.
func (id pciID) fn(kind Kind, bus, dev int) *Device {
	return &Device{
		Addr: pciAddr(bus, dev), Kind: kind,
		Class: id.class, Vendor: id.vendor, DeviceID: id.device,
		SubVendor: id.subVendor, SubDevice: id.subDevice, Revision: id.rev,
		MaxGen: id.maxGen, MaxWidth: id.maxWidth, Gen: id.maxGen, Width: id.maxWidth,
		Driver: id.driver,
	}
}

// endpoint returns device 0 function 0 of bus.
func (id pciID) endpoint(bus int) *Device { return id.fn(Endpoint, bus, 0) }

// attach puts child below port and trains the link between them at what
// both ends support.
func attach(port, child *Device) {
	child.Gen = min(child.MaxGen, port.MaxGen)
	child.Width = min(child.MaxWidth, port.MaxWidth)
	port.Children = append(port.Children, child)
}

// hostBridge returns the root complex pci0000:<bus> with fns on its root
// bus.
func hostBridge(bus int, fns ...*Device) *HostBridge {
	return &HostBridge{Bus: bus, Devices: fns}
}

// rootPort returns root port <bus>:<dev>.0 with child below it.
func rootPort(id pciID, bus, dev int, child *Device) *Device {
	rp := id.fn(RootPort, bus, dev)
	attach(rp, child)
	return rp
}

// ownBridge returns what Sapphire Rapids and the p5's EPYCs show: a host
// bridge with a single root port, <bus>:01.0, above child.
func ownBridge(id pciID, bus int, child *Device) *HostBridge {
	return hostBridge(bus, rootPort(id, bus, 1, child))
}

// pexSwitch returns a Broadcom PEX switch: its upstream port <bus>:00.0
// and, on bus+1, one downstream port per child, <bus+1>:<i>.0 in order.
// Each downstream port is configured as wide as its device.
func pexSwitch(bus int, children ...*Device) *Device {
	usp := pexPort.fn(UpstreamPort, bus, 0)
	for i, c := range children {
		dsp := pexPort.fn(DownstreamPort, bus+1, i)
		dsp.MaxWidth = c.MaxWidth
		attach(dsp, c)
		attach(usp, dsp)
	}
	return usp
}

// onNode stamps numa_node on every function below the host bridges and
// returns them.
func onNode(node int, hbs ...*HostBridge) []*HostBridge {
	for _, hb := range hbs {
		var stamp func(ds []*Device)
		stamp = func(ds []*Device) {
			for _, d := range ds {
				d.NUMANode = node
				stamp(d.Children)
			}
		}
		stamp(hb.Devices)
	}
	return hbs
}

// gpu returns a GPU at <bus>:00.0.
func gpu(id pciID, bus int) *Device { return id.endpoint(bus) }

// nvme returns a Samsung NVMe drive at <bus>:00.0.
func nvme(bus int) *Device { return samsungSSD.endpoint(bus) }

// ibHCA returns a single-port ConnectX-7 in InfiniBand mode at <bus>:00.0:
// RDMA device name, port 1 ACTIVE at NDR 400, and its IPoIB interface
// ibp<bus>s0.
func ibHCA(bus int, name string) *Device {
	d := cx7IB.endpoint(bus)
	d.RDMA = []IBDev{mlx5Dev(name, bus, "InfiniBand", RateNDR400, bus)}
	d.Net = []NetDev{physNet(fmt.Sprintf("ibp%ds0", bus), TypeIPoIB, 400000, 4092, ipoibAddr(bus))}
	return d
}

// ethHCA returns a single-port ConnectX-7 in Ethernet mode at <bus>:00.0:
// RDMA device name with a RoCE port at 200 Gb/s and its interface
// enp<bus>s0f0np0.
func ethHCA(bus int, name string) *Device {
	d := cx7Eth.endpoint(bus)
	d.RDMA = []IBDev{mlx5Dev(name, bus, "Ethernet", RateHDR200, 0)}
	d.Net = []NetDev{physNet(fmt.Sprintf("enp%ds0f0np0", bus), TypeEther, 200000, 9000, mac(0x946dae, bus))}
	return d
}

// efa returns an AWS EFA device at <bus>:00.0 with RDMA device
// rdmap<bus>s0. EFA has no network interface of its own.
func efa(bus int) *Device {
	d := awsEFA.endpoint(bus)
	name := fmt.Sprintf("rdmap%ds0", bus)
	d.RDMA = []IBDev{{
		Name: name, FWVer: "0.0.0.0", NodeGUID: guid(0x0e6a_55ff, bus), NodeType: "1: CA",
		Ports: []IBPort{{
			Num: 1, State: PortActive, PhysState: PhysLinkUp, Rate: RateEDR100,
			LinkLayer: "Unspecified", HWCounters: efaCounters(name),
		}},
	}}
	return d
}

// mlx5Dev returns a ConnectX-7 RDMA device with one active port; lid 0
// means no subnet manager assigns one (RoCE).
func mlx5Dev(name string, bus int, linkLayer, rate string, lid int) IBDev {
	p := IBPort{
		Num: 1, State: PortActive, PhysState: PhysLinkUp, Rate: rate, LinkLayer: linkLayer,
		LID: lid, Counters: mlx5Counters(name), HWCounters: mlx5HWCounters(name, linkLayer),
	}
	if lid != 0 {
		p.SMLID = 1
	}
	return IBDev{
		Name: name, FWVer: "28.39.1002", NodeGUID: guid(0x946d_ae03, bus), NodeType: "1: CA",
		HCAType: "MT4129", BoardID: "MT_0000000838", Ports: []IBPort{p},
	}
}

// physNet returns a network interface that is up with a link at speed
// Mb/s.
func physNet(name string, typ, speed, mtu int, addr string) NetDev {
	return NetDev{
		Name: name, Type: typ, OperState: "up", Carrier: true, Speed: speed, Duplex: "full",
		MTU: mtu, Address: addr, CarrierUp: 1, Stats: netStats(name),
	}
}

// loopback returns lo, on which reading speed or duplex fails.
func loopback() NetDev {
	return NetDev{Name: "lo", Type: TypeLoopback, OperState: "unknown", Carrier: true,
		MTU: 65536, Address: "00:00:00:00:00:00", Stats: netStats("lo")}
}

// guid returns a node GUID from an OUI-like prefix and the bus.
func guid(prefix uint32, bus int) string {
	return fmt.Sprintf("%04x:%04x:00%02x:%04x", prefix>>16, prefix&0xffff, bus, 0x8ad4+bus)
}

// ipoibAddr is the 20-byte IPoIB hardware address: queue pair, GID prefix,
// port GUID.
func ipoibAddr(bus int) string {
	return fmt.Sprintf("00:00:10:29:fe:80:00:00:00:00:00:00:94:6d:ae:03:00:%02x:%02x:%02x",
		bus, (0x8ad4+bus)>>8, (0x8ad4+bus)&0xff)
}

// mac returns a MAC address from a 24-bit prefix and the bus.
func mac(prefix uint32, bus int) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x",
		prefix>>16, prefix>>8&0xff, prefix&0xff, bus, 0x5a, 0x2b)
}

// values yields counter values that look like a busy machine's and are
// the same on every run: each series is seeded by its port's name, so
// ports differ from each other but not between runs.
type values struct{ x uint64 }

func valuesFor(name string) *values {
	h := fnv.New64a()
	h.Write([]byte(name))
	return &values{h.Sum64()}
}

// in returns the next value in [lo, hi).
func (v *values) in(lo, hi uint64) uint64 {
	// splitmix64
	v.x += 0x9e3779b97f4a7c15
	z := v.x
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	scaled, _ := bits.Mul64(z, hi-lo) // z/2^64 of the range
	return lo + scaled
}

// counterSet fills names with values: those listed in ranges get a value
// in their range, every other one is an error counter and reads 0.
func counterSet(v *values, names []string, ranges map[string][2]uint64) map[string]uint64 {
	cs := make(map[string]uint64, len(names))
	for _, n := range names {
		cs[n] = 0
		if r, ok := ranges[n]; ok {
			cs[n] = v.in(r[0], r[1])
		}
	}
	return cs
}

// mlx5 port counters; data counters count 4-byte words.
var mlx5CounterNames = []string{
	"port_rcv_data", "port_xmit_data", "port_rcv_packets", "port_xmit_packets",
	"unicast_rcv_packets", "unicast_xmit_packets", "multicast_rcv_packets", "multicast_xmit_packets",
	"symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
	"port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
	"port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
	"excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_wait",
}

var mlx5HWCounterNames = []string{
	"out_of_sequence", "duplicate_request", "packet_seq_err", "local_ack_timeout_err",
	"rnr_nak_retry_err", "implied_nak_seq_err", "np_ecn_marked_roce_packets", "np_cnp_sent",
	"rp_cnp_handled", "rp_cnp_ignored", "req_cqe_error", "resp_cqe_error",
	"rx_icrc_encapsulated", "roce_adp_retrans", "roce_slow_restart",
}

var efaHWCounterNames = []string{
	"tx_bytes", "rx_bytes", "tx_pkts", "rx_pkts", "rx_drops", "send_bytes", "recv_bytes",
	"send_wrs", "recv_wrs", "rdma_read_bytes", "rdma_write_bytes", "rdma_read_wrs",
	"rdma_write_wrs", "rdma_read_resp_bytes", "rdma_write_recv_bytes", "retrans_bytes",
	"retrans_pkts", "retrans_timeout_events", "unresponsive_remote_events",
	"impaired_remote_conn_events", "lifespan",
}

var netStatNames = []string{
	"rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "tx_errors",
	"rx_dropped", "tx_dropped", "rx_crc_errors", "rx_missed_errors", "rx_fifo_errors",
	"tx_carrier_errors", "collisions", "multicast",
}

const (
	tera = 1_000_000_000_000
	giga = 1_000_000_000
)

func mlx5Counters(name string) map[string]uint64 {
	return counterSet(valuesFor(name+"/counters"), mlx5CounterNames, map[string][2]uint64{
		"port_rcv_data": {10 * tera, 90 * tera}, "port_xmit_data": {10 * tera, 90 * tera},
		"port_rcv_packets": {10 * giga, 90 * giga}, "port_xmit_packets": {10 * giga, 90 * giga},
		"unicast_rcv_packets": {10 * giga, 90 * giga}, "unicast_xmit_packets": {10 * giga, 90 * giga},
		"multicast_rcv_packets": {1000, 90000}, "multicast_xmit_packets": {100, 9000},
		"port_xmit_wait": {1 * giga, 9 * giga},
	})
}

// mlx5HWCounters: a healthy fabric still sees a few retransmissions, and
// RoCE ports see congestion notifications.
func mlx5HWCounters(name, linkLayer string) map[string]uint64 {
	ranges := map[string][2]uint64{"out_of_sequence": {1, 50}, "duplicate_request": {1, 20}}
	if linkLayer == "Ethernet" {
		ranges["np_ecn_marked_roce_packets"] = [2]uint64{1000, 900000}
		ranges["np_cnp_sent"] = [2]uint64{1000, 90000}
		ranges["rp_cnp_handled"] = [2]uint64{1000, 90000}
	}
	return counterSet(valuesFor(name+"/hw_counters"), mlx5HWCounterNames, ranges)
}

func efaCounters(name string) map[string]uint64 {
	return counterSet(valuesFor(name+"/hw_counters"), efaHWCounterNames, map[string][2]uint64{
		"tx_bytes": {10 * tera, 90 * tera}, "rx_bytes": {10 * tera, 90 * tera},
		"tx_pkts": {1 * giga, 9 * giga}, "rx_pkts": {1 * giga, 9 * giga},
		"send_bytes": {1 * tera, 9 * tera}, "recv_bytes": {1 * tera, 9 * tera},
		"send_wrs": {100_000_000, 900_000_000}, "recv_wrs": {100_000_000, 900_000_000},
		"rdma_read_bytes": {10 * tera, 90 * tera}, "rdma_write_bytes": {1 * tera, 9 * tera},
		"rdma_read_wrs": {10_000_000, 90_000_000}, "rdma_write_wrs": {10_000_000, 90_000_000},
		"rdma_read_resp_bytes": {10 * tera, 90 * tera}, "rdma_write_recv_bytes": {1 * tera, 9 * tera},
		"retrans_bytes": {1_000_000, 9_000_000}, "retrans_pkts": {1000, 9000},
		"lifespan": {12, 13},
	})
}

func netStats(name string) map[string]uint64 {
	return counterSet(valuesFor(name+"/statistics"), netStatNames, map[string][2]uint64{
		"rx_bytes": {1 * tera, 9 * tera}, "tx_bytes": {1 * tera, 9 * tera},
		"rx_packets": {1 * giga, 9 * giga}, "tx_packets": {1 * giga, 9 * giga},
		"multicast": {1000, 90000},
	})
}

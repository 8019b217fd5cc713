// Package nic reads NIC port health from sysfs: RDMA ports (InfiniBand,
// RoCE, iWARP, EFA) and physical network interfaces, each with the PCI
// function it sits on and that function's NUMA node.
package nic

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sysfs"
)

// NIC port health: RDMA ports (InfiniBand, RoCE, iWARP, EFA) from
// /sys/class/infiniband and physical network interfaces from
// /sys/class/net, each with the PCI function it sits on and that
// function's NUMA node. The function's PCIe link is the topology source's
// (gpulink_pcie_link_*{pci_bus_id}), not read again here. Every file is read on its own: a file that
// cannot be read or parsed drops that one value and is counted.

// RDMAKind is the transport an RDMA port carries.
type RDMAKind string

// RDMA kinds. The kind follows from the driver and the port's link_layer:
// the efa driver (its devices are named efa_N or, renamed by udev,
// rdmapNsM, and report link_layer Unspecified) is efa; node_type "4:
// RNIC" is iwarp; otherwise link_layer InfiniBand is infiniband and
// Ethernet is roce. Anything else is "".
const (
	RDMAInfiniBand RDMAKind = "infiniband"
	RDMARoCE       RDMAKind = "roce"
	RDMAiWARP      RDMAKind = "iwarp"
	RDMAEFA        RDMAKind = "efa"
)

// Port states as the kernel numbers them in ports/<n>/state and
// ports/<n>/phys_state.
const (
	IBStateActive     = 4 // "4: ACTIVE"
	IBPhysStateLinkUp = 5 // "5: LinkUp"
)

// RDMACounters are a port's counters. Byte counts are bytes (the IB
// port_*_data counters count 4-byte words and are scaled here). Each is
// absent where the device does not have it or it could not be read.
type RDMACounters struct {
	// Standard IB port counters (ports/<n>/counters; hw_counters on EFA).
	ReceiveBytes, TransmitBytes     sampler.Opt[uint64]
	ReceivePackets, TransmitPackets sampler.Opt[uint64]
	SymbolErrors                    sampler.Opt[uint64] // symbol_error
	LinkDowned                      sampler.Opt[uint64] // link_downed
	LinkErrorRecovery               sampler.Opt[uint64] // link_error_recovery
	ReceiveErrors                   sampler.Opt[uint64] // port_rcv_errors
	TransmitDiscards                sampler.Opt[uint64] // port_xmit_discards
	TransmitWait                    sampler.Opt[uint64] // port_xmit_wait, in device ticks

	// Driver counters (ports/<n>/hw_counters).
	OutOfSequence           sampler.Opt[uint64] // mlx5 out_of_sequence
	NAKSequenceErrors       sampler.Opt[uint64] // mlx5 packet_seq_err
	AdaptiveRetransmissions sampler.Opt[uint64] // mlx5 roce_adp_retrans
	RetransmittedPackets    sampler.Opt[uint64] // EFA retrans_pkts
	ECNMarkedPackets        sampler.Opt[uint64] // mlx5 np_ecn_marked_roce_packets
	CNPHandled              sampler.Opt[uint64] // mlx5 rp_cnp_handled
	LocalAckTimeouts        sampler.Opt[uint64] // mlx5 local_ack_timeout_err, EFA retrans_timeout_events
	ReceiveDiscards         sampler.Opt[uint64] // EFA rx_drops
	RNRNAKs                 sampler.Opt[uint64] // mlx5 rnr_nak_retry_err
	RequesterCQEErrors      sampler.Opt[uint64] // mlx5 req_cqe_error
	ICRCErrors              sampler.Opt[uint64] // mlx5 rx_icrc_encapsulated
	RetransmittedBytes      sampler.Opt[uint64] // EFA retrans_bytes
}

// RDMAPort is one port of an RDMA device.
type RDMAPort struct {
	Device string // mlx5_0, rdmap79s0
	Port   int
	// PCIAddress is the function the device sits on; "" for a software
	// device (rxe, siw).
	PCIAddress string
	// NUMANode is the function's numa_node; -1 when unknown.
	NUMANode int
	Driver   string // mlx5_core, efa; "" when unknown
	Kind     RDMAKind
	// LinkLayer is the link_layer file: InfiniBand, Ethernet, Unspecified.
	LinkLayer string
	// State and PhysState are the names in the state files ("ACTIVE",
	// "LinkUp"), "" when unreadable; the IDs are their numbers.
	State, PhysState     string
	StateID, PhysStateID sampler.Opt[int]
	// RateBytes is the rate the link trained at, one direction, in bytes
	// per second; Width its lanes and Speed the lane speed's name (NDR).
	RateBytes sampler.Opt[float64]
	Width     sampler.Opt[int]
	Speed     string
	Counters  RDMACounters
}

// Up reports whether the port is ACTIVE with its physical link up; absent
// when neither state could be read, or the one that could says up.
func (p *RDMAPort) Up() sampler.Opt[bool] {
	if p.StateID.Valid && p.StateID.V != IBStateActive ||
		p.PhysStateID.Valid && p.PhysStateID.V != IBPhysStateLinkUp {
		return sampler.Some(false)
	}
	if p.StateID.Valid && p.PhysStateID.Valid {
		return sampler.Some(true)
	}
	return sampler.Opt[bool]{}
}

// NetStats are a network interface's statistics/ counters.
type NetStats struct {
	ReceiveBytes, TransmitBytes     sampler.Opt[uint64]
	ReceivePackets, TransmitPackets sampler.Opt[uint64]
	ReceiveErrors, TransmitErrors   sampler.Opt[uint64]
	ReceiveDropped, TransmitDropped sampler.Opt[uint64]
}

// NetInterface is a network interface on a PCI function.
type NetInterface struct {
	Name       string
	PCIAddress string
	NUMANode   int // -1 when unknown
	Driver     string
	// OperState is the operstate file (up, down, unknown, dormant, ...);
	// "" when unreadable.
	OperState string
	Carrier   sampler.Opt[bool]
	// SpeedBytes is the link speed in bytes per second; absent when the
	// driver does not know it (speed -1, or EINVAL with no link).
	SpeedBytes     sampler.Opt[float64]
	CarrierChanges sampler.Opt[uint64]
	MTU            sampler.Opt[int64]
	Stats          NetStats
}

// Up reports whether the interface is operationally up. A driver that
// does not track operstate reports "unknown"; its carrier decides then.
func (n *NetInterface) Up() sampler.Opt[bool] {
	switch n.OperState {
	case "":
		return sampler.Opt[bool]{}
	case "up":
		return sampler.Some(true)
	case "unknown":
		return n.Carrier
	}
	return sampler.Some(false)
}

// Snapshot is every RDMA port and physical network interface.
type Snapshot struct {
	Ports      []RDMAPort     // by device, then port
	Interfaces []NetInterface // by name
}

// Reader samples NIC ports from a sysfs root.
type Reader struct {
	FS hostfs.Root
}

// Sample reads every RDMA port and physical network interface. Values
// that cannot be read are dropped and counted in a *sampler.PartialError.
// A machine without /sys/class/infiniband has no RDMA ports; that is not
// an error. Devices, ports and interfaces that vanish while being read are
// left out.
func (r *Reader) Sample(ctx context.Context) (*Snapshot, error) {
	var t sampler.Tally
	s := &Snapshot{}
	ports, err := sysRoot(r.FS.Sys).rdmaPorts(ctx, &t)
	if err != nil {
		return nil, err
	}
	s.Ports = ports
	ifs, err := sysRoot(r.FS.Sys).netInterfaces(ctx, &t)
	if err != nil {
		return nil, err
	}
	s.Interfaces = ifs
	return s, t.Err()
}

// classFunction is what a class entry's PCI function says about itself.
type classFunction struct {
	addr, driver string
	numaNode     int
}

// pciFunctionOf reads the PCI function a class entry (an RDMA device, a
// netdev) sits on. ok is false when the entry has gone; addr is "" for a
// virtual device.
func (f sysRoot) pciFunctionOf(t *sampler.Tally, entry string) (fn classFunction, ok bool) {
	fn.numaNode = -1
	rel, err := sysfs.ResolveDevicePath(string(f), entry)
	if err != nil {
		if !sysfs.Absent(err) {
			t.Add(err)
		}
		return fn, false
	}
	_, chain := sysfs.ChainOf(rel)
	if len(chain) == 0 {
		return fn, true
	}
	fn.addr = chain[len(chain)-1]
	parts := strings.Split(filepath.ToSlash(rel), "/")
	i := slices.Index(parts, fn.addr)
	dir := f.sys(append([]string{"devices"}, parts[:i+1]...)...)
	if v := sysfs.OptInt(t, filepath.Join(dir, "numa_node")); v.Valid && v.V >= 0 {
		fn.numaNode = int(v.V)
	}
	if target, err := os.Readlink(filepath.Join(dir, "driver")); err == nil {
		fn.driver = filepath.Base(target)
	}
	return fn, true
}

// vanished reports whether a path vanished (a device removed, a port
// unregistered) while it was being read.
func vanished(path string) bool {
	_, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist)
}

func (f sysRoot) rdmaPorts(ctx context.Context, t *sampler.Tally) ([]RDMAPort, error) {
	class := f.sys("class", "infiniband")
	entries, err := os.ReadDir(class)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			t.Add(err)
		}
		return nil, nil
	}
	var ports []RDMAPort
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ports = append(ports, f.rdmaDevice(t, filepath.Join(class, e.Name()))...)
	}
	slices.SortFunc(ports, func(a, b RDMAPort) int {
		if c := strings.Compare(a.Device, b.Device); c != 0 {
			return c
		}
		return a.Port - b.Port
	})
	return ports, nil
}

// rdmaDevice reads the ports of one device; none when it has gone.
func (f sysRoot) rdmaDevice(t *sampler.Tally, dir string) []RDMAPort {
	var dt sampler.Tally
	fn, ok := f.pciFunctionOf(&dt, dir)
	if !ok {
		t.Merge(dt.Err())
		return nil
	}
	name := filepath.Base(dir)
	nodeType := sysfs.OptString(&dt, filepath.Join(dir, "node_type"))
	entries, err := os.ReadDir(filepath.Join(dir, "ports"))
	if err != nil {
		if !sysfs.Absent(err) {
			dt.Add(err)
		}
		t.Merge(dt.Err())
		return nil
	}
	var ports []RDMAPort
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < 0 {
			continue
		}
		var pt sampler.Tally
		portDir := filepath.Join(dir, "ports", e.Name())
		p := readRDMAPort(&pt, portDir)
		if vanished(portDir) {
			continue
		}
		p.Device, p.Port = name, n
		p.PCIAddress, p.NUMANode, p.Driver = fn.addr, fn.numaNode, fn.driver
		p.Kind = rdmaKind(name, fn.driver, nodeType.V, p.LinkLayer)
		ports = append(ports, p)
		dt.Merge(pt.Err())
	}
	if vanished(dir) {
		return nil
	}
	t.Merge(dt.Err())
	return ports
}

func rdmaKind(name, driver, nodeType, linkLayer string) RDMAKind {
	switch {
	case driver == "efa" || strings.HasPrefix(name, "efa"):
		return RDMAEFA
	case strings.HasPrefix(nodeType, "4:"):
		return RDMAiWARP
	case linkLayer == "InfiniBand":
		return RDMAInfiniBand
	case linkLayer == "Ethernet":
		return RDMARoCE
	case driver == "" && strings.HasPrefix(name, "rdmap") && linkLayer == "Unspecified":
		// udev's name for an EFA device whose driver link is not there.
		return RDMAEFA
	}
	return ""
}

// readRDMAPort reads one port directory; identity is filled in by the caller.
func readRDMAPort(t *sampler.Tally, dir string) RDMAPort {
	p := RDMAPort{NUMANode: -1}
	state := func(name string) (sampler.Opt[int], string) {
		path := filepath.Join(dir, name)
		s := sysfs.OptString(t, path)
		if !s.Valid {
			return sampler.Opt[int]{}, ""
		}
		id, label, err := parseIBState(s.V)
		if err != nil {
			t.Add(fmt.Errorf("%s: %w", path, err))
			return sampler.Opt[int]{}, ""
		}
		return sampler.Some(id), label
	}
	p.StateID, p.State = state("state")
	p.PhysStateID, p.PhysState = state("phys_state")
	if s := sysfs.OptString(t, filepath.Join(dir, "rate")); s.Valid {
		r, err := parseIBRate(s.V)
		if err != nil {
			t.Add(fmt.Errorf("%s: %w", filepath.Join(dir, "rate"), err))
		} else {
			p.RateBytes, p.Speed = sampler.Some(r.BytesPerSecond), r.Speed
			if r.Width > 0 {
				p.Width = sampler.Some(r.Width)
			}
		}
	}
	p.LinkLayer = sysfs.OptString(t, filepath.Join(dir, "link_layer")).V

	c := &p.Counters
	std := func(name string) sampler.Opt[uint64] { return sysfs.OptUint(t, filepath.Join(dir, "counters", name)) }
	hw := func(name string) sampler.Opt[uint64] {
		return sysfs.OptUint(t, filepath.Join(dir, "hw_counters", name))
	}
	// Data counters count 4-byte words. A port without them (EFA has
	// no counters/ directory) has byte counts in hw_counters instead;
	// one that has them but could not read them stays absent, so the
	// series never switches source.
	data := func(std, hwName string) sampler.Opt[uint64] {
		path := filepath.Join(dir, "counters", std)
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			return hw(hwName)
		}
		v := sysfs.OptUint(t, path)
		if !v.Valid {
			return v
		}
		if v.V > math.MaxUint64/4 {
			t.Add(fmt.Errorf("%s: %d words overflow a byte count", path, v.V))
			return sampler.Opt[uint64]{}
		}
		return sampler.Some(v.V * 4)
	}
	packets := func(std, hwName string) sampler.Opt[uint64] {
		if _, err := os.Lstat(filepath.Join(dir, "counters", std)); errors.Is(err, fs.ErrNotExist) {
			return hw(hwName)
		}
		return sysfs.OptUint(t, filepath.Join(dir, "counters", std))
	}
	c.ReceiveBytes = data("port_rcv_data", "rx_bytes")
	c.TransmitBytes = data("port_xmit_data", "tx_bytes")
	c.ReceivePackets = packets("port_rcv_packets", "rx_pkts")
	c.TransmitPackets = packets("port_xmit_packets", "tx_pkts")
	c.SymbolErrors = std("symbol_error")
	c.LinkDowned = std("link_downed")
	c.LinkErrorRecovery = std("link_error_recovery")
	c.ReceiveErrors = std("port_rcv_errors")
	c.TransmitDiscards = std("port_xmit_discards")
	c.TransmitWait = std("port_xmit_wait")

	c.OutOfSequence = hw("out_of_sequence")
	c.NAKSequenceErrors = hw("packet_seq_err")
	c.AdaptiveRetransmissions = hw("roce_adp_retrans")
	c.RetransmittedPackets = hw("retrans_pkts")
	c.ECNMarkedPackets = hw("np_ecn_marked_roce_packets")
	c.CNPHandled = hw("rp_cnp_handled")
	c.LocalAckTimeouts = hw("local_ack_timeout_err")
	if !c.LocalAckTimeouts.Valid {
		c.LocalAckTimeouts = hw("retrans_timeout_events")
	}
	c.ReceiveDiscards = hw("rx_drops")
	// Failures rather than recoveries: a sender made to wait by a receiver
	// without buffers, work requests that ended in error (the queue pair
	// with them), RoCE packets corrupted on the way, EFA's resent bytes.
	c.RNRNAKs = hw("rnr_nak_retry_err")
	c.RequesterCQEErrors = hw("req_cqe_error")
	c.ICRCErrors = hw("rx_icrc_encapsulated")
	c.RetransmittedBytes = hw("retrans_bytes")
	return p
}

// parseIBState parses a port's state or phys_state file: "4: ACTIVE",
// "5: LinkUp", "7: Phy Test". The number is the kernel's (0-255); the name
// is kept as printed.
func parseIBState(s string) (int, string, error) {
	num, name, ok := strings.Cut(strings.TrimSpace(s), ": ")
	if !ok {
		return 0, "", fmt.Errorf("port state %q: want \"<n>: <name>\"", s)
	}
	if num == "" || len(num) > 3 || strings.Trim(num, "0123456789") != "" {
		return 0, "", fmt.Errorf("port state %q: bad number", s)
	}
	id, err := strconv.Atoi(num)
	if err != nil || id > 255 {
		return 0, "", fmt.Errorf("port state %q: bad number", s)
	}
	if name == "" || len(name) > 64 || name != strings.TrimSpace(name) || !printableASCII(name) {
		return 0, "", fmt.Errorf("port state %q: bad name", s)
	}
	return id, name, nil
}

// IBRate is a parsed rate file.
type IBRate struct {
	BytesPerSecond float64
	Width          int    // lanes; 0 when the file does not say
	Speed          string // lane speed name: SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR, XDR
}

// maxIBRateGbps bounds a believable port rate (XDR 12X is 2400 Gb/s).
const maxIBRateGbps = 100000

// parseIBRate parses a port's rate file: "400 Gb/sec (4X NDR)", "2.5
// Gb/sec (1X SDR)". The kernel prints the rate as an integer with an
// optional ".5"; the lanes-and-speed part may be missing on other drivers.
func parseIBRate(s string) (IBRate, error) {
	s = strings.TrimSpace(s)
	bad := func(why string) (IBRate, error) { return IBRate{}, fmt.Errorf("port rate %q: %s", s, why) }
	num, rest, ok := strings.Cut(s, " Gb/sec")
	if !ok {
		return bad("want \"<n> Gb/sec (<w>X <speed>)\"")
	}
	if !isDecimal(num) || len(num) > 12 {
		return bad("bad number")
	}
	gbps, err := strconv.ParseFloat(num, 64)
	if err != nil || gbps <= 0 || gbps > maxIBRateGbps {
		return bad("rate out of range")
	}
	r := IBRate{BytesPerSecond: gbps * 1e9 / 8}
	if rest == "" {
		return r, nil
	}
	inner, ok := strings.CutPrefix(rest, " (")
	if !ok {
		return bad("junk after rate")
	}
	inner, ok = strings.CutSuffix(inner, ")")
	if !ok {
		return bad("unterminated width")
	}
	width, speed, ok := strings.Cut(inner, "X")
	if !ok || width == "" || len(width) > 2 || strings.Trim(width, "0123456789") != "" {
		return bad("bad width")
	}
	r.Width, _ = strconv.Atoi(width)
	if r.Width < 1 || r.Width > 32 {
		return bad("bad width")
	}
	speed = strings.TrimPrefix(speed, " ")
	if speed == "" || len(speed) > 8 || strings.Trim(speed, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" {
		return bad("bad lane speed")
	}
	r.Speed = speed
	return r, nil
}

// isDecimal reports whether s is digits with an optional fraction.
func isDecimal(s string) bool {
	whole, frac, hasFrac := strings.Cut(s, ".")
	digits := func(d string) bool { return d != "" && strings.Trim(d, "0123456789") == "" }
	return digits(whole) && (!hasFrac || digits(frac))
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (f sysRoot) netInterfaces(ctx context.Context, t *sampler.Tally) ([]NetInterface, error) {
	class := f.sys("class", "net")
	entries, err := os.ReadDir(class)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			t.Add(err)
		}
		return nil, nil
	}
	var ifs []NetInterface
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		entry := filepath.Join(class, e.Name())
		var it sampler.Tally
		fn, ok := f.pciFunctionOf(&it, entry)
		if !ok || fn.addr == "" {
			// Gone, or virtual (lo, bridges, veth, ifb, tunnels,
			// VLANs): left out so cardinality stays bounded.
			t.Merge(it.Err())
			continue
		}
		n := readNetInterface(&it, entry)
		if vanished(entry) {
			continue
		}
		n.Name, n.PCIAddress, n.NUMANode, n.Driver = e.Name(), fn.addr, fn.numaNode, fn.driver
		ifs = append(ifs, n)
		t.Merge(it.Err())
	}
	slices.SortFunc(ifs, func(a, b NetInterface) int { return strings.Compare(a.Name, b.Name) })
	return ifs, nil
}

// readNetInterface reads one interface's directory; identity is filled in
// by the caller.
func readNetInterface(t *sampler.Tally, dir string) NetInterface {
	n := NetInterface{NUMANode: -1}
	n.OperState = sysfs.OptString(t, filepath.Join(dir, "operstate")).V
	if v := sysfs.OptInt(t, filepath.Join(dir, "carrier")); v.Valid {
		n.Carrier = sampler.Some(v.V != 0)
	}
	// Mb/s; -1 (SPEED_UNKNOWN, printed as 4294967295 by old kernels) when
	// the driver does not know, EINVAL when there is no link.
	if v := sysfs.OptInt(t, filepath.Join(dir, "speed")); v.Valid && v.V > 0 && v.V != math.MaxUint32 {
		n.SpeedBytes = sampler.Some(float64(v.V) * 1e6 / 8)
	}
	n.CarrierChanges = sysfs.OptUint(t, filepath.Join(dir, "carrier_changes"))
	n.MTU = sysfs.OptInt(t, filepath.Join(dir, "mtu"))
	stat := func(name string) sampler.Opt[uint64] { return sysfs.OptUint(t, filepath.Join(dir, "statistics", name)) }
	s := &n.Stats
	s.ReceiveBytes, s.TransmitBytes = stat("rx_bytes"), stat("tx_bytes")
	s.ReceivePackets, s.TransmitPackets = stat("rx_packets"), stat("tx_packets")
	s.ReceiveErrors, s.TransmitErrors = stat("rx_errors"), stat("tx_errors")
	s.ReceiveDropped, s.TransmitDropped = stat("rx_dropped"), stat("tx_dropped")
	return n
}

// sysRoot is the sysfs root the NIC files are read under.
type sysRoot string

func (r sysRoot) sys(parts ...string) string {
	return filepath.Join(append([]string{string(r)}, parts...)...)
}

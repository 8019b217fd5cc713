package nic

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/internal/sysfs"
)

// nicTree writes a small sysfs tree under a temporary root.
type nicTree struct {
	t    *testing.T
	root string
}

func newNICTree(t *testing.T) *nicTree {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"sys/devices", "sys/class", "proc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &nicTree{t: t, root: root}
}

func (s *nicTree) fs() hostfs.Root {
	return hostfs.Root{Sys: filepath.Join(s.root, "sys"), Proc: filepath.Join(s.root, "proc")}
}

func (s *nicTree) path(rel string) string { return filepath.Join(s.root, "sys", rel) }

// files writes name/content pairs under dir (relative to sys).
func (s *nicTree) files(dir string, kv ...string) {
	s.t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		p := s.path(filepath.Join(dir, kv[i]))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(kv[i+1]+"\n"), 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
}

// link makes sys/rel a symlink to target (relative to the link's directory).
func (s *nicTree) link(rel, target string) {
	s.t.Helper()
	p := s.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		s.t.Fatal(err)
	}
}

// replaceWithDir puts a directory where a file was: reading it fails with
// EISDIR, a read error that is not "absent" (chmod 000 does not stop root).
func (s *nicTree) replaceWithDir(rel string) {
	s.t.Helper()
	p := s.path(rel)
	if err := os.Remove(p); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		s.t.Fatal(err)
	}
}

// pciFunction writes a PCI function with its link files.
func (s *nicTree) pciFunction(fn, numaNode, driver, speed, width string) {
	rel := filepath.Join("devices", fn)
	s.files(rel, "numa_node", numaNode, "class", "0x020000", "vendor", "0x15b3",
		"current_link_speed", speed, "current_link_width", width,
		"max_link_speed", "32.0 GT/s PCIe", "max_link_width", "16")
	if driver != "" {
		s.link(filepath.Join(rel, "driver"), "../../../../bus/pci/drivers/"+driver)
	}
}

// rdmaDevice writes devices/<fn>/infiniband/<name> and its class link.
func (s *nicTree) rdmaDevice(fn, name string) string {
	dir := filepath.Join("devices", fn, "infiniband", name)
	s.files(dir, "node_type", "1: CA")
	s.link(filepath.Join("class/infiniband", name), "../../"+dir)
	return dir
}

func (s *nicTree) mlx5Port(dev, state, phys, rate, linkLayer string) string {
	port := filepath.Join(dev, "ports/1")
	s.files(port, "state", state, "phys_state", phys, "rate", rate, "link_layer", linkLayer)
	s.files(filepath.Join(port, "counters"),
		"port_rcv_data", "1000", "port_xmit_data", "2000",
		"port_rcv_packets", "30", "port_xmit_packets", "40",
		"symbol_error", "5", "link_downed", "6", "link_error_recovery", "7",
		"port_rcv_errors", "8", "port_xmit_discards", "9", "port_xmit_wait", "10",
		"port_rcv_remote_physical_errors", "0", "local_link_integrity_errors", "0")
	s.files(filepath.Join(port, "hw_counters"),
		"out_of_sequence", "11", "packet_seq_err", "12", "local_ack_timeout_err", "13",
		"roce_adp_retrans", "14", "np_ecn_marked_roce_packets", "15", "np_cnp_sent", "16",
		"rp_cnp_handled", "17", "rnr_nak_retry_err", "18", "req_cqe_error", "19", "rx_icrc_encapsulated", "20")
	return port
}

func (s *nicTree) netdev(devRel, name string, kv ...string) string {
	dir := filepath.Join("devices", devRel, "net", name)
	s.files(dir, kv...)
	s.link(filepath.Join("class/net", name), "../../"+dir)
	return dir
}

var nicNetStats = []string{"statistics/rx_bytes", "100", "statistics/tx_bytes", "200",
	"statistics/rx_packets", "3", "statistics/tx_packets", "4",
	"statistics/rx_errors", "5", "statistics/tx_errors", "6",
	"statistics/rx_dropped", "7", "statistics/tx_dropped", "8"}

// nicDGXTree is a DGX-like tree: an InfiniBand port and a RoCE port that is
// down, one EFA device, an IPoIB interface, a virtio interface and lo.
func nicDGXTree(t *testing.T) *nicTree {
	s := newNICTree(t)
	ib := "pci0000:00/0000:00:01.0/0000:01:00.0"
	s.pciFunction(ib, "1", "mlx5_core", "32.0 GT/s PCIe", "16")
	s.mlx5Port(s.rdmaDevice(ib, "mlx5_0"), "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand")
	s.netdev(ib, "ibp1s0", append([]string{"operstate", "up", "carrier", "1", "speed", "400000",
		"carrier_changes", "2", "mtu", "4092"}, nicNetStats...)...)

	roce := "pci0000:00/0000:00:01.0/0000:02:00.0"
	s.pciFunction(roce, "1", "mlx5_core", "16.0 GT/s PCIe", "8")
	s.mlx5Port(s.rdmaDevice(roce, "mlx5_1"), "1: DOWN", "3: Disabled", "25 Gb/sec (1X EDR)", "Ethernet")

	efa := "pci0000:10/0000:10:01.0/0000:11:00.0"
	s.pciFunction(efa, "-1", "efa", "16.0 GT/s PCIe", "8")
	port := filepath.Join(s.rdmaDevice(efa, "rdmap17s0"), "ports/1")
	s.files(port, "state", "4: ACTIVE", "phys_state", "5: LinkUp", "rate", "100 Gb/sec (4X EDR)",
		"link_layer", "Unspecified")
	s.files(filepath.Join(port, "hw_counters"), "rx_bytes", "1000", "tx_bytes", "2000",
		"rx_pkts", "30", "tx_pkts", "40", "rx_drops", "50", "retrans_pkts", "60",
		"retrans_bytes", "6000", "retrans_timeout_events", "70")

	s.files("devices/pci0000:00/0000:00:03.0", "numa_node", "-1", "class", "0x020000", "vendor", "0x1af4")
	s.netdev("pci0000:00/0000:00:03.0/virtio2", "eth0", append([]string{"operstate", "up", "carrier", "1",
		"speed", "-1", "carrier_changes", "1", "duplex", "unknown", "mtu", "1500"}, nicNetStats...)...)
	s.files("devices/virtual/net/lo", "operstate", "unknown", "carrier", "1", "mtu", "65536")
	s.link("class/net/lo", "../../devices/virtual/net/lo")
	s.files("devices/virtual/net/ifb0", "operstate", "down", "mtu", "1500")
	s.link("class/net/ifb0", "../../devices/virtual/net/ifb0")
	return s
}

func nicSample(t *testing.T, f hostfs.Root) (*Snapshot, *sampler.PartialError) {
	t.Helper()
	r := &Reader{FS: f}
	snap, err := r.Sample(context.Background())
	var p *sampler.PartialError
	if err != nil && !errors.As(err, &p) {
		t.Fatalf("Sample: %v", err)
	}
	if snap == nil {
		t.Fatal("Sample returned no snapshot")
	}
	return snap, p
}

func nicPort(t *testing.T, s *Snapshot, dev string, port int) *RDMAPort {
	t.Helper()
	for i := range s.Ports {
		if s.Ports[i].Device == dev && s.Ports[i].Port == port {
			return &s.Ports[i]
		}
	}
	t.Fatalf("no port %s/%d in %+v", dev, port, s.Ports)
	return nil
}

func nicIf(t *testing.T, s *Snapshot, name string) *NetInterface {
	t.Helper()
	for i := range s.Interfaces {
		if s.Interfaces[i].Name == name {
			return &s.Interfaces[i]
		}
	}
	t.Fatalf("no interface %s in %+v", name, s.Interfaces)
	return nil
}

func wantCount(t *testing.T, what string, got sampler.Opt[uint64], want uint64) {
	t.Helper()
	if !got.Valid || got.V != want {
		t.Errorf("%s = %+v, want %d", what, got, want)
	}
}

func wantNone[T any](t *testing.T, what string, got sampler.Opt[T]) {
	t.Helper()
	if got.Valid {
		t.Errorf("%s = %v, want absent", what, got.V)
	}
}

func TestReaderTree(t *testing.T) {
	snap, perr := nicSample(t, nicDGXTree(t).fs())
	if perr != nil {
		t.Fatalf("whole tree should read cleanly: %v", perr)
	}
	if len(snap.Ports) != 3 {
		t.Fatalf("ports = %d, want 3", len(snap.Ports))
	}
	if snap.Ports[0].Device != "mlx5_0" || snap.Ports[1].Device != "mlx5_1" || snap.Ports[2].Device != "rdmap17s0" {
		t.Errorf("ports not sorted by device: %s %s %s", snap.Ports[0].Device, snap.Ports[1].Device, snap.Ports[2].Device)
	}

	ib := nicPort(t, snap, "mlx5_0", 1)
	if ib.PCIAddress != "0000:01:00.0" || ib.NUMANode != 1 || ib.Driver != "mlx5_core" || ib.Kind != RDMAInfiniBand ||
		ib.LinkLayer != "InfiniBand" {
		t.Errorf("mlx5_0 identity = %q numa %d driver %q kind %q layer %q", ib.PCIAddress, ib.NUMANode, ib.Driver, ib.Kind, ib.LinkLayer)
	}
	if ib.State != "ACTIVE" || ib.StateID != sampler.Some(4) || ib.PhysState != "LinkUp" || ib.PhysStateID != sampler.Some(5) {
		t.Errorf("mlx5_0 state = %q %+v / %q %+v", ib.State, ib.StateID, ib.PhysState, ib.PhysStateID)
	}
	if ib.Up() != sampler.Some(true) {
		t.Errorf("mlx5_0 up = %+v", ib.Up())
	}
	if ib.RateBytes != sampler.Some(50e9) || ib.Width != sampler.Some(4) || ib.Speed != "NDR" {
		t.Errorf("mlx5_0 rate = %+v width %+v speed %q", ib.RateBytes, ib.Width, ib.Speed)
	}
	c := ib.Counters
	wantCount(t, "receive bytes (4-byte words)", c.ReceiveBytes, 4000)
	wantCount(t, "transmit bytes", c.TransmitBytes, 8000)
	wantCount(t, "receive packets", c.ReceivePackets, 30)
	wantCount(t, "transmit packets", c.TransmitPackets, 40)
	wantCount(t, "symbol errors", c.SymbolErrors, 5)
	wantCount(t, "link downed", c.LinkDowned, 6)
	wantCount(t, "link error recovery", c.LinkErrorRecovery, 7)
	wantCount(t, "receive errors", c.ReceiveErrors, 8)
	wantCount(t, "transmit discards", c.TransmitDiscards, 9)
	wantCount(t, "transmit wait", c.TransmitWait, 10)
	wantCount(t, "out of sequence", c.OutOfSequence, 11)
	wantCount(t, "NAK sequence errors", c.NAKSequenceErrors, 12)
	wantCount(t, "local ack timeouts", c.LocalAckTimeouts, 13)
	wantCount(t, "adaptive retransmissions", c.AdaptiveRetransmissions, 14)
	wantCount(t, "ECN marked", c.ECNMarkedPackets, 15)
	wantCount(t, "CNP handled", c.CNPHandled, 17)
	wantCount(t, "RNR NAKs", c.RNRNAKs, 18)
	wantCount(t, "requester CQE errors", c.RequesterCQEErrors, 19)
	wantCount(t, "ICRC errors", c.ICRCErrors, 20)
	wantNone(t, "mlx5 retransmitted packets", c.RetransmittedPackets)
	wantNone(t, "mlx5 retransmitted bytes", c.RetransmittedBytes)
	wantNone(t, "mlx5 receive discards", c.ReceiveDiscards)

	roce := nicPort(t, snap, "mlx5_1", 1)
	if roce.Kind != RDMARoCE || roce.Up() != sampler.Some(false) || roce.StateID != sampler.Some(1) || roce.PhysStateID != sampler.Some(3) ||
		roce.RateBytes != sampler.Some(25e9/8) {
		t.Errorf("mlx5_1 = kind %q up %+v state %+v phys %+v rate %+v",
			roce.Kind, roce.Up(), roce.StateID, roce.PhysStateID, roce.RateBytes)
	}

	efa := nicPort(t, snap, "rdmap17s0", 1)
	if efa.Kind != RDMAEFA || efa.NUMANode != -1 || efa.PCIAddress != "0000:11:00.0" || efa.RateBytes != sampler.Some(12.5e9) {
		t.Errorf("EFA = kind %q numa %d pci %q rate %+v", efa.Kind, efa.NUMANode, efa.PCIAddress, efa.RateBytes)
	}
	c = efa.Counters
	wantCount(t, "EFA receive bytes (not scaled)", c.ReceiveBytes, 1000)
	wantCount(t, "EFA transmit bytes", c.TransmitBytes, 2000)
	wantCount(t, "EFA receive packets", c.ReceivePackets, 30)
	wantCount(t, "EFA transmit packets", c.TransmitPackets, 40)
	wantCount(t, "EFA receive discards", c.ReceiveDiscards, 50)
	wantCount(t, "EFA retransmitted packets", c.RetransmittedPackets, 60)
	wantCount(t, "EFA retransmit timeouts", c.LocalAckTimeouts, 70)
	wantCount(t, "EFA retransmitted bytes", c.RetransmittedBytes, 6000)
	wantNone(t, "EFA RNR NAKs", c.RNRNAKs)
	wantNone(t, "EFA ICRC errors", c.ICRCErrors)
	wantNone(t, "EFA symbol errors", c.SymbolErrors)
	wantNone(t, "EFA out of sequence", c.OutOfSequence)

	if len(snap.Interfaces) != 2 {
		t.Fatalf("interfaces = %+v, want ibp1s0 and eth0 only", snap.Interfaces)
	}
	if snap.Interfaces[0].Name != "eth0" || snap.Interfaces[1].Name != "ibp1s0" {
		t.Errorf("interfaces not sorted: %s %s", snap.Interfaces[0].Name, snap.Interfaces[1].Name)
	}
	ipoib := nicIf(t, snap, "ibp1s0")
	if ipoib.PCIAddress != "0000:01:00.0" || ipoib.NUMANode != 1 || ipoib.Up() != sampler.Some(true) ||
		ipoib.SpeedBytes != sampler.Some(50e9) || ipoib.Carrier != sampler.Some(true) || ipoib.MTU != sampler.Some(int64(4092)) {
		t.Errorf("ibp1s0 = %+v", ipoib)
	}
	wantCount(t, "carrier changes", ipoib.CarrierChanges, 2)
	st := ipoib.Stats
	wantCount(t, "rx bytes", st.ReceiveBytes, 100)
	wantCount(t, "tx bytes", st.TransmitBytes, 200)
	wantCount(t, "rx errors", st.ReceiveErrors, 5)
	wantCount(t, "tx errors", st.TransmitErrors, 6)
	wantCount(t, "rx dropped", st.ReceiveDropped, 7)
	wantCount(t, "tx dropped", st.TransmitDropped, 8)

	eth0 := nicIf(t, snap, "eth0")
	if eth0.PCIAddress != "0000:00:03.0" || eth0.NUMANode != -1 || eth0.Up() != sampler.Some(true) {
		t.Errorf("eth0 = %+v", eth0)
	}
	wantNone(t, "virtio speed -1", eth0.SpeedBytes)
}

// One unreadable or unparseable file drops that value and no other, and
// is counted once (node_exporter#3265 drops the whole class instead).
func TestNICUnreadableFileDropsOneValue(t *testing.T) {
	for name, spoil := range map[string]func(s *nicTree, rel string){
		"read error": func(s *nicTree, rel string) { s.replaceWithDir(rel) },
		"N/A":        func(s *nicTree, rel string) { s.files(filepath.Dir(rel), filepath.Base(rel), "N/A") },
	} {
		t.Run(name, func(t *testing.T) {
			s := nicDGXTree(t)
			spoil(s, "devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0/ports/1/counters/symbol_error")
			snap, perr := nicSample(t, s.fs())
			if perr == nil || perr.Count != 1 {
				t.Fatalf("partial error = %v, want exactly one dropped value", perr)
			}
			if !strings.Contains(perr.First.Error(), "symbol_error") {
				t.Errorf("first error %v does not name the file", perr.First)
			}
			p := nicPort(t, snap, "mlx5_0", 1)
			wantNone(t, "symbol errors", p.Counters.SymbolErrors)
			wantCount(t, "link downed", p.Counters.LinkDowned, 6)
			wantCount(t, "receive bytes", p.Counters.ReceiveBytes, 4000)
			if p.Up() != sampler.Some(true) || p.RateBytes != sampler.Some(50e9) {
				t.Errorf("other values of the port were dropped: %+v", p)
			}
			if len(snap.Ports) != 3 || len(snap.Interfaces) != 2 {
				t.Errorf("devices dropped: %d ports, %d interfaces", len(snap.Ports), len(snap.Interfaces))
			}
		})
	}
}

func TestNICBadStateAndRateDropThatValue(t *testing.T) {
	s := nicDGXTree(t)
	port := "devices/pci0000:00/0000:00:01.0/0000:02:00.0/infiniband/mlx5_1/ports/1"
	s.files(port, "state", "ACTIVE", "rate", "fast")
	s.replaceWithDir("devices/pci0000:00/0000:00:03.0/virtio2/net/eth0/statistics/rx_errors")
	snap, perr := nicSample(t, s.fs())
	if perr == nil || perr.Count != 3 {
		t.Fatalf("partial error = %v, want 3 dropped values", perr)
	}
	p := nicPort(t, snap, "mlx5_1", 1)
	wantNone(t, "state", p.StateID)
	wantNone(t, "rate", p.RateBytes)
	if p.State != "" || p.PhysStateID != sampler.Some(3) || p.Up() != sampler.Some(false) {
		t.Errorf("mlx5_1 = state %q phys %+v up %+v", p.State, p.PhysStateID, p.Up())
	}
	eth0 := nicIf(t, snap, "eth0")
	wantNone(t, "eth0 rx errors", eth0.Stats.ReceiveErrors)
	wantCount(t, "eth0 tx errors", eth0.Stats.TransmitErrors, 6)
}

// Files a driver does not implement are absent, not errors: ifb0's speed
// reads EINVAL on a real kernel, EFA has no counters/ directory, a
// virtio function has no PCIe link files.
func TestNICMissingFilesAreNotErrors(t *testing.T) {
	s := nicDGXTree(t)
	if err := os.RemoveAll(s.path("devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0/ports/1/hw_counters")); err != nil {
		t.Fatal(err)
	}
	snap, perr := nicSample(t, s.fs())
	if perr != nil {
		t.Fatalf("missing files counted: %v", perr)
	}
	p := nicPort(t, snap, "mlx5_0", 1)
	wantNone(t, "out of sequence", p.Counters.OutOfSequence)
	wantCount(t, "symbol errors", p.Counters.SymbolErrors, 5)
}

func TestNICNoRDMA(t *testing.T) {
	s := newNICTree(t)
	s.files("devices/pci0000:00/0000:00:1f.6", "numa_node", "0", "class", "0x020000")
	s.netdev("pci0000:00/0000:00:1f.6", "eno1", "operstate", "down", "speed", "-1", "carrier_changes", "4")
	s.files("devices/virtual/net/lo", "operstate", "unknown")
	s.link("class/net/lo", "../../devices/virtual/net/lo")
	snap, perr := nicSample(t, s.fs())
	if perr != nil {
		t.Fatal(perr)
	}
	if len(snap.Ports) != 0 {
		t.Errorf("ports = %+v, want none", snap.Ports)
	}
	if len(snap.Interfaces) != 1 {
		t.Fatalf("interfaces = %+v, want eno1", snap.Interfaces)
	}
	n := snap.Interfaces[0]
	if n.Name != "eno1" || n.NUMANode != 0 || n.Up() != sampler.Some(false) || n.SpeedBytes.Valid {
		t.Errorf("eno1 = %+v", n)
	}
	// The NUMA node is 0 here because the file says 0, not by default.
	s.files("devices/pci0000:00/0000:00:1f.6", "numa_node", "-1")
	snap, _ = nicSample(t, s.fs())
	if snap.Interfaces[0].NUMANode != -1 {
		t.Errorf("unknown NUMA node = %d, want -1", snap.Interfaces[0].NUMANode)
	}
}

// Devices, ports and interfaces that go away between listing and reading
// are left out; nothing is counted and nothing panics.
func TestNICVanishingEntries(t *testing.T) {
	s := nicDGXTree(t)
	dev := "devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0"
	// A port listed in ports/ whose directory has gone.
	s.link(filepath.Join(dev, "ports/2"), "../../../gone/ports/2")
	// A device whose class link dangles: unregistered after the listing.
	s.link("class/infiniband/mlx5_9", "../../devices/pci0000:00/0000:00:01.0/0000:09:00.0/infiniband/mlx5_9")
	s.link("class/net/ens9", "../../devices/pci0000:00/0000:00:01.0/0000:09:00.0/net/ens9")
	// Junk in ports/ is not a port.
	s.files(filepath.Join(dev, "ports"), "README", "x")
	snap, perr := nicSample(t, s.fs())
	if perr != nil {
		t.Fatalf("vanished entries counted as errors: %v", perr)
	}
	if len(snap.Ports) != 3 || len(snap.Interfaces) != 2 {
		t.Errorf("got %d ports, %d interfaces; want 3, 2", len(snap.Ports), len(snap.Interfaces))
	}
}

func TestNICContextCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := &Reader{FS: nicDGXTree(t).fs()}
	if _, err := r.Sample(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled sample: err = %v", err)
	}
}

// The machine running the tests: whatever it has, only physical
// interfaces come back, each with a PCI address, and lo never does.
func TestNICRealSysfs(t *testing.T) {
	if _, err := os.Stat("/sys/class/net/lo"); err != nil {
		t.Skip("no /sys/class/net here")
	}
	snap, _ := nicSample(t, hostfs.Root{Sys: "/sys", Proc: "/proc"})
	for _, n := range snap.Interfaces {
		if n.Name == "lo" || !pciaddr.IsSysfs(n.PCIAddress) {
			t.Errorf("interface %s (%q) is not a physical one", n.Name, n.PCIAddress)
		}
		if n.NUMANode < -1 {
			t.Errorf("%s: NUMA node %d", n.Name, n.NUMANode)
		}
	}
	for _, p := range snap.Ports {
		if p.PCIAddress != "" && !pciaddr.IsSysfs(p.PCIAddress) {
			t.Errorf("port %s/%d: PCI address %q", p.Device, p.Port, p.PCIAddress)
		}
	}
}

func TestParseIBState(t *testing.T) {
	for _, c := range []struct {
		in   string
		id   int
		name string
		ok   bool
	}{
		{"4: ACTIVE", 4, "ACTIVE", true},
		{"4: ACTIVE\n", 4, "ACTIVE", true},
		{"1: DOWN", 1, "DOWN", true},
		{"2: INIT", 2, "INIT", true},
		{"5: LinkUp", 5, "LinkUp", true},
		{"3: Disabled", 3, "Disabled", true},
		{"4: PortConfigurationTraining", 4, "PortConfigurationTraining", true},
		{"7: Phy Test", 7, "Phy Test", true},
		{"0: <unknown>", 0, "<unknown>", true},
		{"ACTIVE", 0, "", false},
		{"4:ACTIVE", 0, "", false},
		{": ACTIVE", 0, "", false},
		{"-4: ACTIVE", 0, "", false},
		{"+4: ACTIVE", 0, "", false},
		{"256: ACTIVE", 0, "", false},
		{"0x4: ACTIVE", 0, "", false},
		{"4: ", 0, "", false},
		{"4:  ACTIVE", 0, "", false},
		{"4: ACT\x00IVE", 0, "", false},
		{"N/A", 0, "", false},
		{"", 0, "", false},
	} {
		id, name, err := parseIBState(c.in)
		if (err == nil) != c.ok || id != c.id || name != c.name {
			t.Errorf("parseIBState(%q) = %d, %q, %v; want %d, %q, ok=%v", c.in, id, name, err, c.id, c.name, c.ok)
		}
	}
}

func TestParseIBRate(t *testing.T) {
	for _, c := range []struct {
		in    string
		bytes float64
		width int
		speed string
		ok    bool
	}{
		{"400 Gb/sec (4X NDR)", 50e9, 4, "NDR", true},
		{"400 Gb/sec (4X NDR)\n", 50e9, 4, "NDR", true},
		{"200 Gb/sec (4X HDR)", 25e9, 4, "HDR", true},
		{"10 Gb/sec (1X SDR)", 1.25e9, 1, "SDR", true},
		{"2.5 Gb/sec (1X SDR)", 0.3125e9, 1, "SDR", true},
		{"14 Gb/sec (1X FDR)", 1.75e9, 1, "FDR", true},
		{"40 Gb/sec (4X FDR10)", 5e9, 4, "FDR10", true},
		{"100 Gb/sec (4X EDR)", 12.5e9, 4, "EDR", true},
		{"300 Gb/sec (12X EDR)", 37.5e9, 12, "EDR", true},
		{"800 Gb/sec (4X XDR)", 100e9, 4, "XDR", true},
		{"25 Gb/sec (1XEDR)", 3.125e9, 1, "EDR", true}, // no space before the speed, as some kernels printed
		{"56 Gb/sec", 7e9, 0, "", true},
		{"0 Gb/sec (4X NDR)", 0, 0, "", false},
		{"-400 Gb/sec (4X NDR)", 0, 0, "", false},
		{"NaN Gb/sec (4X NDR)", 0, 0, "", false},
		{"Inf Gb/sec", 0, 0, "", false},
		{"1e3 Gb/sec", 0, 0, "", false},
		{"400 Gb/s (4X NDR)", 0, 0, "", false},
		{"400 GB/sec (4X NDR)", 0, 0, "", false},
		{"400 Gb/sec (0X NDR)", 0, 0, "", false},
		{"400 Gb/sec (4X ndr)", 0, 0, "", false},
		{"400 Gb/sec (4X NDR", 0, 0, "", false},
		{"400 Gb/sec junk", 0, 0, "", false},
		{"400 Gb/sec (X NDR)", 0, 0, "", false},
		{"999999999 Gb/sec", 0, 0, "", false},
		{"4.00.0 Gb/sec", 0, 0, "", false},
		{"N/A", 0, 0, "", false},
		{"", 0, 0, "", false},
	} {
		r, err := parseIBRate(c.in)
		if (err == nil) != c.ok || r.BytesPerSecond != c.bytes || r.Width != c.width || r.Speed != c.speed {
			t.Errorf("parseIBRate(%q) = %+v, %v; want %v bytes/s, %dX %q, ok=%v", c.in, r, err, c.bytes, c.width, c.speed, c.ok)
		}
	}
}

// nicProfile samples a committed fixture tree.
func nicProfile(t *testing.T, profile string) (*Snapshot, *sampler.PartialError, hostfs.Root) {
	t.Helper()
	root := machine.Load(t, profile)
	f := hostfs.Under(root)
	snap, perr := nicSample(t, f)
	return snap, perr, f
}

// nicFileUint reads a counter file of a fixture, to compare with what the
// reader made of it.
func nicFileUint(t *testing.T, path string) uint64 {
	t.Helper()
	s, err := sysfs.ReadString(path)
	if err != nil {
		t.Fatal(err)
	}
	var v uint64
	for _, c := range s {
		v = v*10 + uint64(c-'0')
	}
	return v
}

// wholeMLX5 checks that every standard and mlx5 counter of a port is there.
func wholeMLX5(t *testing.T, p *RDMAPort, skipSymbol bool) {
	t.Helper()
	c := p.Counters
	for name, v := range map[string]sampler.Opt[uint64]{
		"receive bytes": c.ReceiveBytes, "transmit bytes": c.TransmitBytes,
		"receive packets": c.ReceivePackets, "transmit packets": c.TransmitPackets,
		"link downed": c.LinkDowned, "link error recovery": c.LinkErrorRecovery,
		"receive errors": c.ReceiveErrors, "transmit discards": c.TransmitDiscards, "transmit wait": c.TransmitWait,
		"out of sequence": c.OutOfSequence, "NAK sequence errors": c.NAKSequenceErrors,
		"adaptive retransmissions": c.AdaptiveRetransmissions, "ECN marked": c.ECNMarkedPackets,
		"CNP handled": c.CNPHandled, "local ack timeouts": c.LocalAckTimeouts,
		"RNR NAKs": c.RNRNAKs, "requester CQE errors": c.RequesterCQEErrors, "ICRC errors": c.ICRCErrors,
	} {
		if !v.Valid {
			t.Errorf("%s/%d: %s dropped", p.Device, p.Port, name)
		}
	}
	if !skipSymbol && !c.SymbolErrors.Valid {
		t.Errorf("%s/%d: symbol errors dropped", p.Device, p.Port)
	}
	if !p.StateID.Valid || !p.PhysStateID.Valid || !p.RateBytes.Valid || p.LinkLayer == "" {
		t.Errorf("%s/%d: state, rate or link layer dropped: %+v", p.Device, p.Port, p)
	}
}

func TestNICProfileDGXH100(t *testing.T) {
	t.Parallel()
	snap, perr, f := nicProfile(t, "dgx-h100")
	if perr != nil {
		t.Fatalf("healthy DGX: %v", perr)
	}
	if len(snap.Ports) != 10 {
		t.Fatalf("%d ports, want mlx5_0..mlx5_9", len(snap.Ports))
	}
	wantNode := map[string]int{"mlx5_0": 0, "mlx5_3": 0, "mlx5_8": 0, "mlx5_4": 1, "mlx5_7": 1, "mlx5_9": 1}
	for i := range snap.Ports {
		p := &snap.Ports[i]
		wholeMLX5(t, p, false)
		if n, ok := wantNode[p.Device]; ok && p.NUMANode != n {
			t.Errorf("%s on node %d, want %d", p.Device, p.NUMANode, n)
		}
		switch p.Device {
		case "mlx5_8", "mlx5_9":
			if p.Kind != RDMARoCE || p.RateBytes != sampler.Some(25e9) {
				t.Errorf("%s: kind %q rate %+v, want roce at 25e9", p.Device, p.Kind, p.RateBytes)
			}
		default:
			if p.Kind != RDMAInfiniBand || p.RateBytes != sampler.Some(50e9) || p.Up() != sampler.Some(true) {
				t.Errorf("%s: kind %q rate %+v up %+v", p.Device, p.Kind, p.RateBytes, p.Up())
			}
		}
	}
	p := nicPort(t, snap, "mlx5_0", 1)
	if p.PCIAddress != "0000:19:00.0" {
		t.Errorf("mlx5_0 at %q", p.PCIAddress)
	}
	dir := filepath.Join(f.Sys, "class/infiniband/mlx5_0/ports/1/counters")
	wantCount(t, "mlx5_0 receive bytes = 4 x port_rcv_data", p.Counters.ReceiveBytes, 4*nicFileUint(t, filepath.Join(dir, "port_rcv_data")))
	wantCount(t, "mlx5_0 transmit wait", p.Counters.TransmitWait, nicFileUint(t, filepath.Join(dir, "port_xmit_wait")))

	if len(snap.Interfaces) != 10 {
		t.Errorf("%d interfaces, want 8 IPoIB and 2 Ethernet (lo left out)", len(snap.Interfaces))
	}
	ib := nicIf(t, snap, "ibp25s0")
	if ib.PCIAddress != "0000:19:00.0" || ib.NUMANode != 0 || ib.SpeedBytes != sampler.Some(50e9) || ib.Up() != sampler.Some(true) {
		t.Errorf("ibp25s0 = %+v", ib)
	}
	eth := nicIf(t, snap, "enp228s0f0np0")
	if eth.PCIAddress != "0000:e4:00.0" || eth.NUMANode != 1 || eth.SpeedBytes != sampler.Some(25e9) {
		t.Errorf("enp228s0f0np0 = %+v", eth)
	}
}

func TestNICProfileDGXH100Faults(t *testing.T) {
	t.Parallel()
	snap, perr, _ := nicProfile(t, "dgx-h100-faults")
	if perr == nil || perr.Count != 1 || !strings.Contains(perr.First.Error(), "mlx5_1") {
		t.Fatalf("partial error = %v, want mlx5_1's symbol_error alone", perr)
	}
	if len(snap.Ports) != 9 {
		t.Errorf("%d ports, want mlx5_0..mlx5_8 (mlx5_9 is gone)", len(snap.Ports))
	}
	for i := range snap.Ports {
		wholeMLX5(t, &snap.Ports[i], snap.Ports[i].Device == "mlx5_1")
	}
	wantNone(t, "mlx5_1 symbol errors", nicPort(t, snap, "mlx5_1", 1).Counters.SymbolErrors)
	if p := nicPort(t, snap, "mlx5_2", 1); p.RateBytes != sampler.Some(25e9) || p.Up() != sampler.Some(true) || p.Speed != "HDR" {
		t.Errorf("mlx5_2 rate %+v (%s), up %+v; want 25e9 bytes/s and up", p.RateBytes, p.Speed, p.Up())
	}
	p := nicPort(t, snap, "mlx5_3", 1)
	if p.Up() != sampler.Some(false) || p.StateID != sampler.Some(1) || p.State != "DOWN" || p.PhysStateID != sampler.Some(3) || p.PhysState != "Disabled" {
		t.Errorf("mlx5_3 = up %+v, state %+v %q, phys %+v %q", p.Up(), p.StateID, p.State, p.PhysStateID, p.PhysState)
	}
	for _, name := range []string{"mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"} {
		if p := nicPort(t, snap, name, 1); p.NUMANode != 0 {
			t.Errorf("%s moved to node 0, read %d", name, p.NUMANode)
		}
	}
	n := nicIf(t, snap, "ibp92s0")
	if n.Up() != sampler.Some(false) || n.Carrier != sampler.Some(false) || n.SpeedBytes.Valid {
		t.Errorf("ibp92s0 = up %+v, carrier %+v, speed %+v", n.Up(), n.Carrier, n.SpeedBytes)
	}
	if n := nicIf(t, snap, "ibp59s0"); n.SpeedBytes != sampler.Some(25e9) {
		t.Errorf("ibp59s0 speed %+v", n.SpeedBytes)
	}
}

func TestNICProfileAWSP5(t *testing.T) {
	t.Parallel()
	snap, perr, f := nicProfile(t, "aws-p5")
	if perr != nil {
		t.Fatalf("healthy p5: %v", perr)
	}
	if len(snap.Ports) != 32 {
		t.Fatalf("%d ports, want 32 EFA", len(snap.Ports))
	}
	for i := range snap.Ports {
		p := &snap.Ports[i]
		c := p.Counters
		if p.Kind != RDMAEFA || p.LinkLayer != "Unspecified" || p.RateBytes != sampler.Some(12.5e9) || p.Up() != sampler.Some(true) ||
			!c.ReceiveBytes.Valid || !c.TransmitBytes.Valid || !c.ReceivePackets.Valid || !c.TransmitPackets.Valid ||
			!c.ReceiveDiscards.Valid || !c.RetransmittedPackets.Valid || !c.LocalAckTimeouts.Valid || !c.RetransmittedBytes.Valid ||
			c.SymbolErrors.Valid || c.OutOfSequence.Valid {
			t.Errorf("EFA %s = %+v", p.Device, p)
		}
	}
	p := nicPort(t, snap, "rdmap76s0", 1)
	hw := filepath.Join(f.Sys, "class/infiniband/rdmap76s0/ports/1/hw_counters")
	wantCount(t, "EFA rx_bytes, unscaled", p.Counters.ReceiveBytes, nicFileUint(t, filepath.Join(hw, "rx_bytes")))
	wantCount(t, "EFA retrans_pkts", p.Counters.RetransmittedPackets, nicFileUint(t, filepath.Join(hw, "retrans_pkts")))
	wantCount(t, "EFA retrans_bytes", p.Counters.RetransmittedBytes, nicFileUint(t, filepath.Join(hw, "retrans_bytes")))
	if p.PCIAddress != "0000:4c:00.0" || p.NUMANode != 0 {
		t.Errorf("rdmap76s0 at %q node %d", p.PCIAddress, p.NUMANode)
	}
	if p := nicPort(t, snap, "rdmap195s0", 1); p.NUMANode != 1 {
		t.Errorf("rdmap195s0 on node %d, want 1", p.NUMANode)
	}
	if len(snap.Interfaces) != 1 {
		t.Fatalf("interfaces %+v, want ens32 alone", snap.Interfaces)
	}
	if n := snap.Interfaces[0]; n.Name != "ens32" || n.PCIAddress != "0000:11:00.0" || n.SpeedBytes.Valid || n.Up() != sampler.Some(true) {
		t.Errorf("ens32 = %+v", n)
	}
}

func TestNICProfileAWSP5Faults(t *testing.T) {
	t.Parallel()
	snap, perr, _ := nicProfile(t, "aws-p5-faults")
	if perr != nil {
		t.Fatal(perr)
	}
	if p := nicPort(t, snap, "rdmap127s0", 1); p.Up() != sampler.Some(false) || p.StateID != sampler.Some(1) || p.PhysStateID != sampler.Some(3) {
		t.Errorf("rdmap127s0 = up %+v state %+v phys %+v", p.Up(), p.StateID, p.PhysStateID)
	}
	if p := nicPort(t, snap, "rdmap128s0", 1); p.Up() != sampler.Some(true) {
		t.Errorf("rdmap128s0 up %+v", p.Up())
	}
}

func TestNICProfileNoGPU(t *testing.T) {
	t.Parallel()
	snap, perr, _ := nicProfile(t, "no-gpu")
	if perr != nil {
		t.Fatal(perr)
	}
	if len(snap.Ports) != 0 {
		t.Errorf("ports %+v, want none", snap.Ports)
	}
	if len(snap.Interfaces) != 1 {
		t.Fatalf("interfaces %+v, want enp65s0f0 alone", snap.Interfaces)
	}
	n := snap.Interfaces[0]
	if n.Name != "enp65s0f0" || n.PCIAddress != "0000:41:00.0" || n.NUMANode != 0 || n.SpeedBytes != sampler.Some(3.125e9) {
		t.Errorf("enp65s0f0 = %+v", n)
	}
}

func TestNICProfileH200VM(t *testing.T) {
	t.Parallel()
	snap, perr, _ := nicProfile(t, "h200-vm")
	wantVirtioEth0(t, snap, perr)
}

// The NIC source on a tree captured from a real machine (the development
// and CI VM, numa/testdata/captured/dev-vm): the kernel's own files, speed
// -1 on virtio included, read without an error, as the modelled h200-vm.
func TestNICCapturedDevVM(t *testing.T) {
	t.Parallel()
	n := capturedVirtioEth0(t, "dev-vm")
	if s := n.Stats; !s.ReceiveBytes.Valid || s.ReceiveBytes.V == 0 || !s.TransmitPackets.Valid || s.TransmitPackets.V == 0 {
		t.Errorf("eth0 stats %+v, want the counters the kernel wrote", s)
	}
}

// The NIC source on a lent GPU VM as its kernel wrote it
// (numa/testdata/captured/h100-vm, bench/capture-fixture.sh, 2026-12-07):
// the same virtio eth0 as the development VM, with the counters the
// kernel had written by the capture (10 packets, 625 bytes in; 18, 1473
// out).
func TestNICCapturedH100VM(t *testing.T) {
	t.Parallel()
	n := capturedVirtioEth0(t, "h100-vm")
	wantCount(t, "eth0 received bytes", n.Stats.ReceiveBytes, 625)
	wantCount(t, "eth0 received packets", n.Stats.ReceivePackets, 10)
	wantCount(t, "eth0 transmitted bytes", n.Stats.TransmitBytes, 1473)
	wantCount(t, "eth0 transmitted packets", n.Stats.TransmitPackets, 18)
}

// capturedVirtioEth0 samples a tree captured from a VM
// (numa/testdata/captured/<name>) and checks its eth0 as wantVirtioEth0
// does, on the virtio-pci driver the kernel bound it to.
func capturedVirtioEth0(t *testing.T, name string) *NetInterface {
	t.Helper()
	root := machine.LoadCaptured(t, name)
	snap, perr := nicSample(t, hostfs.Under(root))
	n := wantVirtioEth0(t, snap, perr)
	if n.Driver != "virtio-pci" {
		t.Errorf("eth0 driver %q, want virtio-pci", n.Driver)
	}
	return n
}

// wantVirtioEth0 checks the NICs of a GPU VM as the lent machines and this
// one have them: no RDMA port, and eth0 alone (lo, ifb0 and ifb1 are
// virtual) on virtio at 0000:00:03.0, node unknown, up, MTU 1400, no
// speed (virtio writes -1), two carrier changes.
func wantVirtioEth0(t *testing.T, snap *Snapshot, perr *sampler.PartialError) *NetInterface {
	t.Helper()
	if perr != nil {
		t.Fatal(perr)
	}
	if len(snap.Ports) != 0 {
		t.Errorf("ports %+v, want none", snap.Ports)
	}
	if len(snap.Interfaces) != 1 {
		t.Fatalf("interfaces %+v, want eth0 alone (lo, ifb0, ifb1 are virtual)", snap.Interfaces)
	}
	n := &snap.Interfaces[0]
	if n.Name != "eth0" || n.PCIAddress != "0000:00:03.0" || n.NUMANode != -1 || n.Up() != sampler.Some(true) ||
		n.MTU != sampler.Some(int64(1400)) {
		t.Errorf("eth0 = %+v", n)
	}
	wantNone(t, "eth0 speed", n.SpeedBytes)
	wantCount(t, "eth0 carrier changes", n.CarrierChanges, 2)
	return n
}

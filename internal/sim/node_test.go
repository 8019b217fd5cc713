package sim

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/internal/testwait"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
)

// startNode starts a node of profile with faults (YAML; "" for none, in
// which case no fault file is given).
func startNode(t *testing.T, profile, faults string) *Node {
	t.Helper()
	cfg := Config{Profile: profile, Seed: 7}
	if faults != "" {
		cfg.FaultsFile = filepath.Join(t.TempDir(), "faults.yaml")
		if err := os.WriteFile(cfg.FaultsFile, []byte(faults), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// nodeWithFile starts a node whose fault file exists and can be rewritten.
func nodeWithFile(t *testing.T, profile string) (*Node, func(string)) {
	t.Helper()
	n := startNode(t, profile, "# healthy\n")
	write := func(faults string) {
		t.Helper()
		if err := os.WriteFile(n.cfg.FaultsFile, []byte(faults), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := n.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	return n, write
}

// step moves the node d past its last tick.
func step(t *testing.T, n *Node, d time.Duration) {
	t.Helper()
	n.mu.Lock()
	next := n.last.Add(d)
	n.mu.Unlock()
	if err := n.Advance(next); err != nil {
		t.Fatal(err)
	}
}

// gpus samples NVML as the exporter does.
func gpus(t *testing.T, n *Node) *nvml.Snapshot {
	t.Helper()
	// Each link's traffic too, to see which links a fault stops.
	r := nvml.NewReader(n.NVML(), n.FS().Sys, nil, nvml.WithLinkTraffic(true))
	snap, err := r.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func nics(t *testing.T, n *Node) *nic.Snapshot {
	t.Helper()
	s, err := (&nic.Reader{FS: n.FS()}).Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func port(t *testing.T, s *nic.Snapshot, device string) nic.RDMAPort {
	t.Helper()
	for _, p := range s.Ports {
		if p.Device == device {
			return p
		}
	}
	t.Fatalf("no port %s", device)
	return nic.RDMAPort{}
}

func netIf(t *testing.T, s *nic.Snapshot, name string) nic.NetInterface {
	t.Helper()
	for _, n := range s.Interfaces {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no interface %s", name)
	return nic.NetInterface{}
}

func topology(t *testing.T, n *Node) *numa.Topology {
	t.Helper()
	topo, err := numa.ReadTopology(n.FS())
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func placement(t *testing.T, n *Node) *process.Snapshot {
	t.Helper()
	r := nvml.NewReader(n.NVML(), n.FS().Sys, nil)
	topo := topology(t, n)
	s, err := (&process.Reader{FS: n.FS(), Processes: r.ComputeProcesses, GPUs: r.Identities,
		Topology: func() *numa.Topology { return topo }}).Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// defaultOptions are the daemon's flags' defaults.
var defaultOptions = probes.Options{SizeBytes: probes.DefaultSizeBytes, Samples: probes.DefaultSamples}

// round runs GPU i's probe round as the scheduler asks for it: every
// other GPU a peer, host buffers on every node, the GPU's own first.
func round(t *testing.T, n *Node, i int) *probes.GPURound {
	t.Helper()
	snap := gpus(t, n)
	topo := topology(t, n)
	o := defaultOptions
	o.GPU, o.HostNodes = snap.GPUs[i].PCIBusID, topo.HostNodes(snap.GPUs[i].PCIBusID)
	for j, g := range snap.GPUs {
		if j != i {
			o.Peers = append(o.Peers, g.PCIBusID)
		}
	}
	rnd, err := n.Runner().Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rnd.GPUs) != 1 || rnd.Version != probes.ContractVersion {
		t.Fatalf("round %+v", rnd)
	}
	g := &rnd.GPUs[0]
	if !g.OK() {
		t.Fatalf("round not OK: %+v", g)
	}
	return g
}

// result finds one result; peer "" and node -1 match any.
func result(t *testing.T, g *probes.GPURound, kind probes.Kind, dir, peer string, node int) probes.Result {
	t.Helper()
	for _, r := range g.Results {
		if r.Probe == kind && (dir == "" || r.Direction == dir) && (peer == "" || r.Peer == peer) &&
			(node < 0 || (r.HostNUMANode != nil && *r.HostNUMANode == node)) {
			return r
		}
	}
	t.Fatalf("no %s %s peer %q node %d in %+v", kind, dir, peer, node, g.Results)
	return probes.Result{}
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol*math.Abs(want) }

const (
	gen5x16 = 32e9 * 128 / 130 / 8 * 16
	gen4x8  = 16e9 * 128 / 130 / 8 * 8
)

// TestHealthyNode: a healthy node of each profile gives the alert rules
// nothing: no throttling but idle, no ECC or NVLink errors, every link and
// port up at full rate, nobody misaffine, probes near what the paths
// allow; and the counters move.
func TestHealthyNode(t *testing.T) {
	for _, c := range []struct {
		profile string
		host    float64 // expected host_to_device from the GPU's own node
		busy    []int
	}{
		{"dgx-h100", 0.87 * gen5x16, []int{0, 2, 4}},
		{"aws-p5", 0.9 * gen4x8, []int{0, 5}},
	} {
		t.Run(c.profile, func(t *testing.T) {
			n := startNode(t, c.profile, "")
			before := gpus(t, n)
			nicBefore := nics(t, n)
			topoBefore := topology(t, n)
			for range 5 {
				step(t, n, time.Second)
			}
			snap := gpus(t, n)
			for i, g := range snap.GPUs {
				if g.PCIe.Width.V != g.PCIe.MaxWidth.V || g.PCIe.Generation.V != g.PCIe.MaxGeneration.V {
					t.Errorf("GPU %d PCIe %+v", i, g.PCIe)
				}
				if g.ActiveNVLinks() != 18 {
					t.Errorf("GPU %d has %d NVLinks up", i, g.ActiveNVLinks())
				}
				if g.Throttle.Active.V&^0x1 != 0 {
					t.Errorf("GPU %d clock event reasons %#x", i, g.Throttle.Active.V)
				}
				for r, s := range g.Throttle.Seconds {
					if s != before.GPUs[i].Throttle.Seconds[r] {
						t.Errorf("GPU %d %s seconds moved %g -> %g", i, r, before.GPUs[i].Throttle.Seconds[r], s)
					}
				}
				if g.ECC.UncorrectedVolatile.V != 0 || g.ECC.RemapPending.V || g.ECC.RemapFailed.V {
					t.Errorf("GPU %d ECC %+v", i, g.ECC)
				}
				busy := false
				for _, b := range c.busy {
					busy = busy || b == i
				}
				if busy != (g.Utilization.V > 0.5) || busy != (g.Throttle.Active.V == 0) {
					t.Errorf("GPU %d busy %v: utilization %g, reasons %#x", i, busy, g.Utilization.V, g.Throttle.Active.V)
				}
				if g.Energy.V <= before.GPUs[i].Energy.V {
					t.Errorf("GPU %d energy did not grow: %g -> %g", i, before.GPUs[i].Energy.V, g.Energy.V)
				}
				for l, link := range g.NVLinks {
					for typ, v := range link.Errors {
						if v != 0 {
							t.Errorf("GPU %d link %d %s errors %g", i, l, typ, v)
						}
					}
					if busy && link.TransmitBytes.V <= before.GPUs[i].NVLinks[l].TransmitBytes.V {
						t.Errorf("busy GPU %d link %d transmit bytes did not grow", i, l)
					}
				}
				if busy && g.NVLinkTransmitBytes.V <= before.GPUs[i].NVLinkTransmitBytes.V {
					t.Errorf("busy GPU %d NVLink transmit bytes did not grow", i)
				}
			}
			s := nics(t, n)
			for j, p := range s.Ports {
				if !p.Up().V || p.RateBytes.V != nicBefore.Ports[j].RateBytes.V {
					t.Errorf("port %s up %v rate %g", p.Device, p.Up(), p.RateBytes.V)
				}
				if p.Counters.ReceiveBytes.V <= nicBefore.Ports[j].Counters.ReceiveBytes.V {
					t.Errorf("port %s receive bytes did not grow", p.Device)
				}
				for name, v := range map[string][2]uint64{
					"symbol_error": {nicBefore.Ports[j].Counters.SymbolErrors.V, p.Counters.SymbolErrors.V},
					"link_downed":  {nicBefore.Ports[j].Counters.LinkDowned.V, p.Counters.LinkDowned.V},
					"rcv_errors":   {nicBefore.Ports[j].Counters.ReceiveErrors.V, p.Counters.ReceiveErrors.V},
				} {
					if v[0] != v[1] {
						t.Errorf("port %s %s moved %d -> %d", p.Device, name, v[0], v[1])
					}
				}
			}
			for j, it := range s.Interfaces {
				if it.OperState != "up" || it.CarrierChanges.V != nicBefore.Interfaces[j].CarrierChanges.V {
					t.Errorf("interface %s %s carrier changes %d", it.Name, it.OperState, it.CarrierChanges.V)
				}
			}
			topo := topology(t, n)
			for j, node := range topo.Nodes {
				if node.Stat["numa_hit"] <= topoBefore.Nodes[j].Stat["numa_hit"] {
					t.Errorf("node %d numa_hit did not grow", node.ID)
				}
			}
			for _, g := range placement(t, n).GPUs {
				if g.Misaffine != 0 || g.Unknown != 0 {
					t.Errorf("GPU %d: %d misaffine, %d unknown", g.GPU, g.Misaffine, g.Unknown)
				}
			}
			for i := range snap.GPUs {
				g := round(t, n, i)
				path := probes.PathFor(snap, topo, g.PCIBusID)
				path.Annotate(g)
				for _, r := range g.Results {
					if r.BytesPerSecond > 0 && (r.BytesPerSecond/r.ExpectedBytesPerSecond < 0.78 || r.BytesPerSecond > r.ExpectedBytesPerSecond) {
						t.Errorf("GPU %d %s %s peer %s: %g of %g expected", i, r.Probe, r.Direction, r.Peer, r.BytesPerSecond, r.ExpectedBytesPerSecond)
					}
				}
				own := topo.HostNodes(g.PCIBusID)[0]
				if h := result(t, g, probes.HostToDevice, "", "", own); !near(h.BytesPerSecond, c.host, 0.01) {
					t.Errorf("GPU %d host_to_device %g, want %g", i, h.BytesPerSecond, c.host)
				}
				if l := g.LinkUnderLoad; l == nil || l.Generation != 5 || l.Width != 16 || !l.Confirmed {
					t.Errorf("GPU %d link under load %+v", i, l)
				}
			}
		})
	}
}

func TestPCIeFaults(t *testing.T) {
	n, write := nodeWithFile(t, "dgx-h100")
	write("faults:\n- {kind: pcie_width, gpu: 0, width: 8}\n- {kind: pcie_generation, gpu: 1, generation: 3}\n")
	step(t, n, time.Second)
	snap := gpus(t, n)
	if p := snap.GPUs[0].PCIe; p.Width.V != 8 || p.MaxWidth.V != 16 || p.Generation.V != 5 {
		t.Errorf("GPU 0 NVML PCIe %+v, want x8 of x16 at Gen5", p)
	}
	if p := snap.GPUs[1].PCIe; p.Generation.V != 3 || p.MaxGeneration.V != 5 || p.Width.V != 16 {
		t.Errorf("GPU 1 NVML PCIe %+v, want Gen3 of Gen5 at x16", p)
	}
	topo := topology(t, n)
	g0, g1 := topo.Device("0000:18:00.0"), topo.Device("0000:2a:00.0")
	if g0.Link.Width.V != 8 || g0.Link.MaxWidth.V != 16 {
		t.Errorf("GPU 0 sysfs link %+v", g0.Link)
	}
	if numa.Generation(g1.Link.Speed.V) != 3 || numa.Generation(g1.Link.MaxSpeed.V) != 5 {
		t.Errorf("GPU 1 sysfs link %+v", g1.Link)
	}
	if h, _ := topo.SlowestHop(g0, false); h.Device != g0 {
		t.Errorf("GPU 0's slowest hop is %s, want its own x8 link", h.Device.Address)
	}
	r0, r1 := round(t, n, 0), round(t, n, 1)
	if l := r0.LinkUnderLoad; l.Width != 8 || l.Generation != 5 {
		t.Errorf("GPU 0 under load %+v", l)
	}
	if l := r1.LinkUnderLoad; l.Width != 16 || l.Generation != 3 {
		t.Errorf("GPU 1 under load %+v", l)
	}
	if h := result(t, r0, probes.HostToDevice, "", "", 0); !near(h.BytesPerSecond, 0.87*gen5x16/2, 0.01) {
		t.Errorf("GPU 0 at x8 host_to_device %g, want %g", h.BytesPerSecond, 0.87*gen5x16/2)
	}
	if h := result(t, r1, probes.DeviceToHost, "", "", 0); !near(h.BytesPerSecond, 0.87*8e9*128/130/8*16, 0.01) {
		t.Errorf("GPU 1 at Gen3 device_to_host %g", h.BytesPerSecond)
	}
	// The expectation stays at what the link supports: a low ratio.
	path := probes.PathFor(snap, topo, "0000:18:00.0")
	if path.HostBytesPerSecond != gen5x16 {
		t.Errorf("GPU 0 expected host rate %g, want %g", path.HostBytesPerSecond, gen5x16)
	}

	write("faults: []\n")
	step(t, n, time.Second)
	snap = gpus(t, n)
	for i := range 2 {
		if p := snap.GPUs[i].PCIe; p.Width.V != 16 || p.Generation.V != 5 {
			t.Errorf("GPU %d PCIe not restored: %+v", i, p)
		}
	}
	if l := round(t, n, 0).LinkUnderLoad; l.Width != 16 || l.Generation != 5 {
		t.Errorf("GPU 0 under load not restored: %+v", l)
	}
	if h := result(t, round(t, n, 1), probes.HostToDevice, "", "", 0); !near(h.BytesPerSecond, 0.87*gen5x16, 0.01) {
		t.Errorf("GPU 1 host rate not restored: %g", h.BytesPerSecond)
	}
}

// TestPCIeFaultBehindUplink: on a p5 the Gen4 x8 uplink bounds every
// host copy, so a GPU link trained x8 does not lower them; one trained x2
// does.
func TestPCIeFaultBehindUplink(t *testing.T) {
	n, write := nodeWithFile(t, "aws-p5")
	write("faults:\n- {kind: pcie_width, gpu: 0, width: 8}\n- {kind: pcie_width, gpu: 1, width: 2}\n")
	step(t, n, time.Second)
	if h := result(t, round(t, n, 0), probes.HostToDevice, "", "", 0); !near(h.BytesPerSecond, 0.9*gen4x8, 0.01) {
		t.Errorf("GPU 0 x8 behind a Gen4 x8 uplink: %g, want %g", h.BytesPerSecond, 0.9*gen4x8)
	}
	if h := result(t, round(t, n, 1), probes.HostToDevice, "", "", 0); !near(h.BytesPerSecond, 0.9*gen5x16/8, 0.01) {
		t.Errorf("GPU 1 at x2: %g, want %g", h.BytesPerSecond, 0.9*gen5x16/8)
	}
}

// TestPCIeFaultOnSwitch: a switch's uplink trained x8 (device form) is
// what the tree shows at both ends of that link and what host copies of
// the GPUs below it reach; NVML, which reports each GPU's own link, keeps
// x16.
func TestPCIeFaultOnSwitch(t *testing.T) {
	n, write := nodeWithFile(t, "dgx-h100")
	write("faults:\n- {kind: pcie_width, device: \"0000:38:00.0\", width: 8}\n")
	step(t, n, time.Second)
	topo := topology(t, n)
	for _, addr := range []string{"0000:38:00.0", "0000:37:01.0"} {
		if d := topo.Device(addr); d == nil || d.Link.Width.V != 8 || d.Link.MaxWidth.V != 16 {
			t.Errorf("%s link %+v, want x8 of x16", addr, d)
		}
	}
	if p := gpus(t, n).GPUs[2].PCIe; p.Width.V != 16 {
		t.Errorf("GPU 2 NVML PCIe %+v, want its own link at x16", p)
	}
	if h := result(t, round(t, n, 2), probes.HostToDevice, "", "", 0); !near(h.BytesPerSecond, 0.87*gen5x16/2, 0.01) {
		t.Errorf("GPU 2 behind an x8 uplink: %g, want %g", h.BytesPerSecond, 0.87*gen5x16/2)
	}
	if h := result(t, round(t, n, 0), probes.HostToDevice, "", "", 0); !near(h.BytesPerSecond, 0.87*gen5x16, 0.01) {
		t.Errorf("GPU 0 behind another switch: %g", h.BytesPerSecond)
	}
	write("")
	step(t, n, time.Second)
	if d := topology(t, n).Device("0000:38:00.0"); d.Link.Width.V != 16 {
		t.Errorf("uplink not restored: %+v", d.Link)
	}
}

func TestNVLinkFaults(t *testing.T) {
	n, write := nodeWithFile(t, "dgx-h100")
	write("faults:\n- {kind: nvlink_down, gpu: 2, link: 5}\n- {kind: nvlink_errors, gpu: 3, link: 2, per_second: 50}\n")
	step(t, n, time.Second) // the faults take effect
	before := gpus(t, n)
	step(t, n, 10*time.Second)
	snap := gpus(t, n)
	g2 := snap.GPUs[2]
	if g2.ActiveNVLinks() != 17 || g2.NVLinks[5].Active || g2.NVLinks[5].SpeedBytes.Valid {
		t.Errorf("GPU 2: %d links up, link 5 %+v", g2.ActiveNVLinks(), g2.NVLinks[5])
	}
	if g2.NVLinks[5].TransmitBytes.V != before.GPUs[2].NVLinks[5].TransmitBytes.V {
		t.Error("a link that is down moved data")
	}
	for _, p := range snap.Pairs {
		if p.GPU == 2 && p.NVLinks != 17 {
			t.Errorf("pair %d-%d has %d NVLinks, want 17", p.GPU, p.Peer, p.NVLinks)
		}
	}
	errs := func(s *nvml.Snapshot, link int) map[string]float64 { return s.GPUs[3].NVLinks[link].Errors }
	d := map[string]float64{}
	for typ, v := range errs(snap, 2) {
		d[typ] = v - errs(before, 2)[typ]
	}
	if d["replay"] != 500 || d["crc_flit"] != 500 || d["recovery"] != 50 || d["crc_data"] != 100 {
		t.Errorf("GPU 3 link 2 errors over 10s at 50/s: %v", d)
	}
	for typ, v := range errs(snap, 3) {
		if v != 0 {
			t.Errorf("GPU 3 link 3 %s errors %g; only link 2 errs", typ, v)
		}
	}
	// Peer copies scale with the links up between the pair.
	r := round(t, n, 2)
	peer := snap.GPUs[6].PCIBusID
	if c := result(t, r, probes.PeerCopy, probes.DirToPeer, peer, -1); !near(c.BytesPerSecond, 17*25e9*0.86, 0.01) {
		t.Errorf("GPU 2 -> 6 with 17 links: %g, want %g", c.BytesPerSecond, 17*25e9*0.86)
	}
	if c := result(t, round(t, n, 0), probes.PeerCopy, probes.DirToPeer, peer, -1); !near(c.BytesPerSecond, 18*25e9*0.86, 0.01) {
		t.Errorf("GPU 0 -> 6 with 18 links: %g", c.BytesPerSecond)
	}

	write("")
	step(t, n, time.Second)
	mid := gpus(t, n)
	step(t, n, 10*time.Second)
	after := gpus(t, n)
	if after.GPUs[2].ActiveNVLinks() != 18 || !after.GPUs[2].NVLinks[5].SpeedBytes.Valid {
		t.Errorf("GPU 2 link 5 not restored: %+v", after.GPUs[2].NVLinks[5])
	}
	if after.GPUs[3].NVLinks[2].Errors["replay"] != mid.GPUs[3].NVLinks[2].Errors["replay"] {
		t.Error("errors still grow after the fault was removed")
	}
	if after.GPUs[3].NVLinks[2].Errors["replay"] < snap.GPUs[3].NVLinks[2].Errors["replay"] {
		t.Error("an error counter went back")
	}
	if c := result(t, round(t, n, 2), probes.PeerCopy, probes.DirToPeer, peer, -1); !near(c.BytesPerSecond, 18*25e9*0.86, 0.01) {
		t.Errorf("GPU 2 -> 6 not restored: %g", c.BytesPerSecond)
	}
}

func TestNICFaults(t *testing.T) {
	n, write := nodeWithFile(t, "dgx-h100")
	before := nics(t, n)
	write(`faults:
- {kind: nic_rate, device: mlx5_0, fraction: 0.5}
- {kind: nic_down, device: mlx5_1}
- {kind: nic_symbol_errors, device: mlx5_3, per_second: 5}
`)
	step(t, n, time.Second)
	s := nics(t, n)
	if p := port(t, s, "mlx5_0"); p.RateBytes.V != 200e9/8 || !p.Up().V || p.Speed != "HDR" {
		t.Errorf("mlx5_0 at half rate: %+v", p)
	}
	if it := netIf(t, s, "ibp25s0"); it.SpeedBytes.V != 200e9/8 {
		t.Errorf("mlx5_0's interface speed %g", it.SpeedBytes.V)
	}
	p1 := port(t, s, "mlx5_1")
	if p1.Up().V || p1.State != "DOWN" || p1.PhysState != "Disabled" {
		t.Errorf("mlx5_1 down: %+v", p1)
	}
	if d := p1.Counters.LinkDowned.V - port(t, before, "mlx5_1").Counters.LinkDowned.V; d != 1 {
		t.Errorf("mlx5_1 link_downed +%d, want +1", d)
	}
	if it := netIf(t, s, "ibp41s0"); it.Up().V || it.Carrier.V {
		t.Errorf("mlx5_1's interface still up: %+v", it)
	}
	p1rx := p1.Counters.ReceiveBytes.V
	symbols := port(t, s, "mlx5_3").Counters.SymbolErrors.V
	step(t, n, 10*time.Second)
	s = nics(t, n)
	if v := port(t, s, "mlx5_1").Counters.ReceiveBytes.V; v != p1rx {
		t.Error("a port that is down moved data")
	}
	if d := port(t, s, "mlx5_3").Counters.SymbolErrors.V - symbols; d != 50 {
		t.Errorf("mlx5_3 symbol errors +%d in 10s at 5/s", d)
	}
	if d := port(t, s, "mlx5_1").Counters.LinkDowned.V - port(t, before, "mlx5_1").Counters.LinkDowned.V; d != 1 {
		t.Errorf("mlx5_1 link_downed +%d after staying down, want +1", d)
	}

	write("faults: []\n")
	step(t, n, time.Second)
	s = nics(t, n)
	for _, dev := range []string{"mlx5_0", "mlx5_1", "mlx5_3"} {
		p, b := port(t, s, dev), port(t, before, dev)
		if !p.Up().V || p.RateBytes.V != b.RateBytes.V {
			t.Errorf("%s not restored: %+v", dev, p)
		}
	}
	it, b := netIf(t, s, "ibp41s0"), netIf(t, before, "ibp41s0")
	if !it.Up().V || it.CarrierChanges.V != b.CarrierChanges.V+2 {
		t.Errorf("ibp41s0 up %v, carrier changes %d -> %d, want +2", it.Up().V, b.CarrierChanges.V, it.CarrierChanges.V)
	}
	symbols = port(t, s, "mlx5_3").Counters.SymbolErrors.V
	step(t, n, 5*time.Second)
	if v := port(t, nics(t, n), "mlx5_3").Counters.SymbolErrors.V; v != symbols {
		t.Errorf("symbol errors still grow after removal: %d -> %d", symbols, v)
	}
}

func TestNICFlapping(t *testing.T) {
	n, write := nodeWithFile(t, "dgx-h100")
	before := nics(t, n)
	write("faults:\n- {kind: nic_flapping, device: mlx5_2, period: 3s}\n")
	n.mu.Lock()
	since := n.faults[0].since
	n.mu.Unlock()
	if d := n.tick(); d != time.Second {
		t.Errorf("tick %s with a 3s flap, want the configured 1s", d)
	}
	for _, c := range []struct {
		at                  time.Duration
		up                  bool
		downs, carrierMoves uint64
	}{
		{100 * time.Millisecond, false, 1, 1},
		{2 * time.Second, false, 1, 1},
		{3100 * time.Millisecond, true, 1, 2},
		{6100 * time.Millisecond, false, 2, 3},
		// Many periods in one tick are all counted: at 15.1s the port has
		// gone down at 0, 6, 12 and up at 3, 9, 15.
		{15100 * time.Millisecond, true, 3, 6},
	} {
		if err := n.Advance(since.Add(c.at)); err != nil {
			t.Fatal(err)
		}
		s := nics(t, n)
		p, it := port(t, s, "mlx5_2"), netIf(t, s, "ibp59s0")
		if p.Up().V != c.up || it.Up().V != c.up {
			t.Errorf("at %s: port up %v, interface up %v; want %v", c.at, p.Up().V, it.Up().V, c.up)
		}
		if d := p.Counters.LinkDowned.V - port(t, before, "mlx5_2").Counters.LinkDowned.V; d != c.downs {
			t.Errorf("at %s: link_downed +%d, want +%d", c.at, d, c.downs)
		}
		if d := it.CarrierChanges.V - netIf(t, before, "ibp59s0").CarrierChanges.V; d != c.carrierMoves {
			t.Errorf("at %s: carrier changes +%d, want +%d", c.at, d, c.carrierMoves)
		}
	}
	write("faults:\n- {kind: nic_flapping, device: mlx5_2, period: 3s}\n- {kind: nic_flapping, device: mlx5_5, period: 600ms}\n")
	if d := n.tick(); d != 300*time.Millisecond {
		t.Errorf("tick %s with a 600ms flap, want 300ms: each state seen once at least", d)
	}
	write("")
	if d := n.tick(); d != time.Second {
		t.Errorf("tick %s without faults", d)
	}
	// The port comes back up, with the transitions it made counted.
	step(t, n, time.Second)
	s := nics(t, n)
	p := port(t, s, "mlx5_2")
	if !p.Up().V || netIf(t, s, "ibp59s0").CarrierChanges.V-netIf(t, before, "ibp59s0").CarrierChanges.V != 6 {
		t.Errorf("mlx5_2 after the flapping stopped: %+v", p)
	}
}

func TestProcessFarSocket(t *testing.T) {
	for _, profile := range []string{"dgx-h100", "aws-p5"} {
		t.Run(profile, func(t *testing.T) {
			n, write := nodeWithFile(t, profile)
			write("faults:\n- {kind: process_far_socket, gpu: 1}\n")
			step(t, n, time.Second)
			snap := placement(t, n)
			g := snap.GPUs[1]
			if g.Processes != 1 || g.Misaffine != 1 || g.Procs[0].Placement.PID != newProcessPID(1) {
				t.Fatalf("GPU 1 placement %+v", g)
			}
			p := g.Procs[0]
			if p.RemoteCPURatio.V != 1 || p.RemoteThreadRatio.V != 1 || p.RemoteMemoryRatio.V < 0.89 || !p.NoLocalCPU.V {
				t.Errorf("far process %+v", p)
			}
			for _, other := range snap.GPUs {
				if other.GPU != 1 && other.Misaffine != 0 {
					t.Errorf("GPU %d has %d misaffine", other.GPU, other.Misaffine)
				}
			}
			if u := gpus(t, n).GPUs[1].Utilization.V; u < 0.5 {
				t.Errorf("GPU 1 with a job at utilization %g", u)
			}
			write("")
			step(t, n, time.Second)
			if g := placement(t, n).GPUs[1]; g.Processes != 0 {
				t.Errorf("GPU 1 after removal: %+v", g)
			}
			if _, err := os.Stat(filepath.Join(n.FS().Proc, "7001")); !os.IsNotExist(err) {
				t.Errorf("proc/7001 left behind: %v", err)
			}
		})
	}
}

// TestProcessFaultsOnProfileProcesses: with a pid, a process fault moves
// a process the profile has (its NVML entry stays one); process_far_memory
// leaves the CPUs and moves the memory.
func TestProcessFaultsOnProfileProcesses(t *testing.T) {
	n, write := nodeWithFile(t, "dgx-h100")
	write("faults:\n- {kind: process_far_socket, gpu: 0, pid: 4242}\n- {kind: process_far_memory, gpu: 4, pid: 5151}\n- {kind: process_far_memory, gpu: 6}\n")
	step(t, n, time.Second)
	step(t, n, time.Second) // threads keep to the node they were moved to
	snap := placement(t, n)
	for _, c := range []struct {
		gpu, pid          int
		cpus, threads     float64
		minMemory, maxMem float64
	}{
		{0, 4242, 1, 1, 0.89, 0.91},
		{4, 5151, 0, 0, 0.79, 0.81},
		{6, newProcessPID(6), 0, 0, 0.79, 0.81},
	} {
		g := snap.GPUs[c.gpu]
		if g.Processes != 1 || g.Misaffine != 1 || g.Procs[0].Placement.PID != c.pid {
			t.Errorf("GPU %d placement %+v", c.gpu, g)
			continue
		}
		p := g.Procs[0]
		if p.RemoteCPURatio.V != c.cpus || p.RemoteThreadRatio.V != c.threads || p.RemoteMemoryRatio.V < c.minMemory || p.RemoteMemoryRatio.V > c.maxMem {
			t.Errorf("GPU %d process %d: cpus %v threads %v memory %v remote", c.gpu, c.pid, p.RemoteCPURatio, p.RemoteThreadRatio, p.RemoteMemoryRatio)
		}
	}
	n.Fake().Update(func() {
		if procs := n.Fake().GPUs[0].Processes; len(procs) != 1 || procs[0].Pid != 4242 {
			t.Errorf("GPU 0 NVML processes %+v, want 4242 alone", procs)
		}
	})
	write("")
	step(t, n, time.Second)
	for _, i := range []int{0, 4, 6} {
		if g := placement(t, n).GPUs[i]; g.Misaffine != 0 {
			t.Errorf("GPU %d after removal: %+v", i, g)
		}
	}
}

// TestProcessExit: a profile process that ends leaves NVML's list and
// /proc, its GPU goes idle while the node's other jobs run on, and it
// comes back when the fault is removed.
func TestProcessExit(t *testing.T) {
	n, write := nodeWithFile(t, "dgx-h100")
	step(t, n, time.Second)
	nvmlPIDs := func(i int) []uint32 {
		var pids []uint32
		n.Fake().Update(func() {
			for _, p := range n.Fake().GPUs[i].Processes {
				pids = append(pids, p.Pid)
			}
		})
		return pids
	}
	if got := nvmlPIDs(0); !slices.Equal(got, []uint32{4242}) {
		t.Fatalf("GPU 0 NVML processes %v before the fault, want 4242", got)
	}
	write("faults:\n- {kind: process_exit, pid: 4242}\n")
	step(t, n, time.Second)
	if got := nvmlPIDs(0); len(got) != 0 {
		t.Errorf("GPU 0 NVML processes %v after 4242 ended, want none", got)
	}
	if got := nvmlPIDs(4); !slices.Equal(got, []uint32{5151}) {
		t.Errorf("GPU 4 NVML processes %v, want 5151 still", got)
	}
	if _, err := os.Stat(filepath.Join(n.FS().Proc, "4242")); !os.IsNotExist(err) {
		t.Errorf("proc/4242 after the process ended: %v", err)
	}
	if _, err := os.Stat(filepath.Join(n.FS().Proc, "5151")); err != nil {
		t.Errorf("proc/5151: %v", err)
	}
	snap := gpus(t, n)
	if u := snap.GPUs[0].Utilization.V; u != 0 {
		t.Errorf("GPU 0 without its job at utilization %g, want 0", u)
	}
	if u := snap.GPUs[4].Utilization.V; u < 0.5 {
		t.Errorf("GPU 4 with its job at utilization %g", u)
	}
	if g := placement(t, n).GPUs[0]; g.Processes != 0 {
		t.Errorf("GPU 0 placement after 4242 ended: %+v", g)
	}
	write("")
	step(t, n, time.Second)
	if got := nvmlPIDs(0); !slices.Equal(got, []uint32{4242}) {
		t.Errorf("GPU 0 NVML processes %v after the fault was removed, want 4242", got)
	}
	if _, err := os.Stat(filepath.Join(n.FS().Proc, "4242")); err != nil {
		t.Errorf("proc/4242 after the fault was removed: %v", err)
	}
}

func TestThrottle(t *testing.T) {
	n, write := nodeWithFile(t, "dgx-h100")
	write("faults:\n- {kind: throttle, gpu: 4, reason: hw_thermal_slowdown}\n- {kind: throttle, gpu: 1, reason: sw_power_cap}\n- {kind: throttle, gpu: 6, reason: hw_slowdown}\n")
	step(t, n, time.Second)
	before := gpus(t, n)
	step(t, n, 10*time.Second)
	snap := gpus(t, n)
	g4 := snap.GPUs[4]
	if g4.Throttle.Active.V&0x40 == 0 || g4.Throttle.Active.V&0x8 == 0 {
		t.Errorf("GPU 4 reasons %#x, want hw_thermal_slowdown and hw_slowdown", g4.Throttle.Active.V)
	}
	if d := g4.Throttle.Seconds["hw_thermal_slowdown"] - before.GPUs[4].Throttle.Seconds["hw_thermal_slowdown"]; !near(d, 10, 1e-6) {
		t.Errorf("GPU 4 hw_thermal_slowdown seconds +%g in 10s", d)
	}
	if g4.Clocks.SM.V >= g4.Clocks.SMMax.V || g4.GPUTemperature.V < 90 {
		t.Errorf("GPU 4 thermally throttled at %g Hz, %g C", g4.Clocks.SM.V, g4.GPUTemperature.V)
	}
	g1 := snap.GPUs[1]
	if g1.Throttle.Active.V&0x4 == 0 || !near(g1.Throttle.Seconds["sw_power_cap"]-before.GPUs[1].Throttle.Seconds["sw_power_cap"], 10, 1e-6) {
		t.Errorf("GPU 1 sw_power_cap %#x %v", g1.Throttle.Active.V, g1.Throttle.Seconds)
	}
	if snap.GPUs[6].Throttle.Active.V&0x8 == 0 {
		t.Errorf("GPU 6 reasons %#x, want hw_slowdown", snap.GPUs[6].Throttle.Active.V)
	}
	if snap.GPUs[5].Throttle.Active.V&^0x1 != 0 {
		t.Errorf("GPU 5 reasons %#x", snap.GPUs[5].Throttle.Active.V)
	}
	write("")
	step(t, n, time.Second)
	mid := gpus(t, n)
	step(t, n, 10*time.Second)
	after := gpus(t, n)
	if after.GPUs[4].Throttle.Active.V != 0 || after.GPUs[4].Clocks.SM.V != after.GPUs[4].Clocks.SMMax.V {
		t.Errorf("GPU 4 (busy) after removal: reasons %#x, SM %g", after.GPUs[4].Throttle.Active.V, after.GPUs[4].Clocks.SM.V)
	}
	if s := after.GPUs[4].Throttle.Seconds["hw_thermal_slowdown"]; s != mid.GPUs[4].Throttle.Seconds["hw_thermal_slowdown"] || s < snap.GPUs[4].Throttle.Seconds["hw_thermal_slowdown"] {
		t.Errorf("hw_thermal_slowdown seconds after removal %g", s)
	}
}

func TestXID(t *testing.T) {
	n, write := nodeWithFile(t, "dgx-h100")
	reader := nvml.NewReader(n.NVML(), n.FS().Sys, nil)
	w := nvml.NewXIDWatcher(reader, nil)
	w.Wait = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go w.Run(ctx, 10*time.Millisecond)
	testwait.Until(t, func() bool { return w.Status().Up })
	count := func() uint64 {
		var c uint64
		for _, x := range w.Counts() {
			if x.GPU == 5 && x.XID == 79 {
				c += x.Count
			}
		}
		return c
	}
	const xid = "faults:\n- {kind: xid, gpu: 5, code: 79}\n"
	write(xid)
	step(t, n, time.Second)
	testwait.Until(t, func() bool { return count() == 1 })
	step(t, n, time.Second)
	step(t, n, time.Second)
	write("faults:\n- {kind: xid, gpu: 5, code: 79}\n- {kind: nic_down, device: mlx5_1}\n") // the XID stays in force
	step(t, n, time.Second)
	write("")
	step(t, n, time.Second)
	write(xid)
	step(t, n, time.Second)
	testwait.Until(t, func() bool { return count() == 2 })
	if all := w.Counts(); len(all) != 1 {
		t.Errorf("XIDs %+v, want only GPU 5's 79", all)
	}
}

func TestProbeFaults(t *testing.T) {
	n, write := nodeWithFile(t, "dgx-h100")
	healthy := map[int]*probes.GPURound{}
	for _, i := range []int{5, 6, 7} {
		healthy[i] = round(t, n, i)
	}
	write(`faults:
- {kind: probe_bandwidth, gpu: 6, probe: host_to_device, fraction: 0.5}
- {kind: probe_bandwidth, gpu: 6, probe: peer_copy, peer_gpu: 7, fraction: 0.25}
- {kind: probe_bandwidth, gpu: 7, probe: peer_bidirectional, fraction: 0.5}
- {kind: probe_latency, gpu: 7, probe: host_latency, factor: 3}
`)
	step(t, n, time.Second)
	snap := gpus(t, n)
	bus := func(i int) string { return snap.GPUs[i].PCIBusID }
	r5, r6, r7 := round(t, n, 5), round(t, n, 6), round(t, n, 7)
	ratio := func(g, h *probes.GPURound, kind probes.Kind, dir, peer string, node int) float64 {
		return result(t, g, kind, dir, peer, node).BytesPerSecond / result(t, h, kind, dir, peer, node).BytesPerSecond
	}
	for _, node := range []int{0, 1} {
		if r := ratio(r6, healthy[6], probes.HostToDevice, "", "", node); !near(r, 0.5, 0.03) {
			t.Errorf("GPU 6 host_to_device node %d at %g of health, want 0.5", node, r)
		}
		if r := ratio(r6, healthy[6], probes.DeviceToHost, "", "", node); !near(r, 1, 0.03) {
			t.Errorf("GPU 6 device_to_host at %g of health, want 1", r)
		}
	}
	if r := ratio(r6, healthy[6], probes.PeerCopy, "", bus(7), -1); !near(r, 0.25, 0.03) {
		t.Errorf("GPU 6 -> 7 peer_copy at %g of health, want 0.25", r)
	}
	if r := ratio(r6, healthy[6], probes.PeerCopy, "", bus(5), -1); !near(r, 1, 0.03) {
		t.Errorf("GPU 6 -> 5 peer_copy at %g of health, want 1", r)
	}
	// GPU 7 is the highest address: its pairs' bidirectional copies are
	// measured in the other GPUs' rounds.
	for _, c := range []struct {
		g, h *probes.GPURound
	}{{r5, healthy[5]}, {r6, healthy[6]}} {
		if r := ratio(c.g, c.h, probes.PeerBidirectional, probes.DirFromPeer, bus(7), -1); !near(r, 0.5, 0.03) {
			t.Errorf("GPU %s <-> 7 bidirectional at %g of health", c.g.PCIBusID, r)
		}
	}
	if r := ratio(r5, healthy[5], probes.PeerBidirectional, probes.DirToPeer, bus(6), -1); !near(r, 1, 0.03) {
		t.Errorf("GPU 5 <-> 6 bidirectional at %g of health, want 1", r)
	}
	h7 := result(t, r7, probes.HostLatency, "", "", 1).Seconds / result(t, healthy[7], probes.HostLatency, "", "", 1).Seconds
	if !near(h7, 3, 0.03) {
		t.Errorf("GPU 7 host latency at %g of health, want 3", h7)
	}
	if l := result(t, r7, probes.LaunchLatency, "", "", -1).Seconds; !near(l, 10e-6, 0.01) {
		t.Errorf("GPU 7 launch latency %g", l)
	}

	write("")
	step(t, n, time.Second)
	if r := ratio(round(t, n, 6), healthy[6], probes.HostToDevice, "", "", 1); !near(r, 1, 0.03) {
		t.Errorf("GPU 6 host_to_device after removal at %g of health", r)
	}
}

// TestRoundCost: a round reports its GPU time and memory as the child
// does.
func TestRoundCost(t *testing.T) {
	n := startNode(t, "dgx-h100", "")
	g := round(t, n, 0)
	if g.BusySeconds <= 0 || g.ContextSeconds <= g.BusySeconds || g.DeviceMemoryBytes != 2*probes.DefaultSizeBytes ||
		g.HostMemoryBytes != 2*probes.DefaultSizeBytes || g.ContextMemoryBytes <= g.DeviceMemoryBytes {
		t.Errorf("round cost %+v", g)
	}
	// GPU 0 has the lowest address: its bidirectional and latency probes
	// cover all seven peers.
	if len(g.PeerBusySeconds) != 7 {
		t.Errorf("peer busy seconds %v", g.PeerBusySeconds)
	}
	last := round(t, n, 7)
	for _, r := range last.Results {
		if r.Probe == probes.PeerBidirectional || r.Probe == probes.PeerLatency {
			t.Errorf("GPU 7 measured %s against %s; the lower GPU's round does", r.Probe, r.Peer)
		}
	}
	// A round asked for one probe gives that probe only.
	o := defaultOptions
	o.GPU, o.Probes = "0000:18:00.0", []probes.Kind{probes.LaunchLatency}
	rnd, err := n.Runner().Run(context.Background(), o)
	if err != nil || len(rnd.GPUs[0].Results) != 1 || rnd.GPUs[0].Results[0].Probe != probes.LaunchLatency {
		t.Errorf("one-probe round %+v, %v", rnd, err)
	}
	o = defaultOptions
	o.GPU = "0000:99:00.0"
	rnd, err = n.Runner().Run(context.Background(), o)
	if err != nil || rnd.GPUs[0].Error == "" || !strings.Contains(rnd.GPUs[0].Error, "0000:99:00.0") {
		t.Errorf("round for a GPU that is not there: %+v, %v", rnd, err)
	}
	// Options the child refuses, the simulated node refuses too.
	o = defaultOptions
	o.GPU, o.SizeBytes = "0000:18:00.0", 8<<30
	rnd, err = n.Runner().Run(context.Background(), o)
	var rf *probes.RunFailure
	if rnd != nil || !errors.As(err, &rf) || rf.Result != probes.RunCrash || !strings.Contains(err.Error(), "--probe.size=8GiB: want 1MiB to 4GiB") {
		t.Errorf("round with an 8 GiB transfer: %+v, %v", rnd, err)
	}
}

// TestReloadKeepsFaultsOnBadFile: a file that cannot be used while
// running is counted, and the faults in force stay; a missing file is a
// healthy node.
func TestReloadKeepsFaultsOnBadFile(t *testing.T) {
	n, write := nodeWithFile(t, "dgx-h100")
	write("faults:\n- {kind: nic_down, device: mlx5_1}\n")
	if err := os.WriteFile(n.cfg.FaultsFile, []byte("faults:\n- {kind: nic_down, device: mlx5_99}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := n.Reload()
	if err == nil || !strings.Contains(err.Error(), "faults[0] (nic_down): device") {
		t.Errorf("Reload = %v", err)
	}
	if f := n.Faults(); len(f) != 1 || f[0].Device != "mlx5_1" {
		t.Errorf("faults in force %+v", f)
	}
	if st := n.Status(); st.Errors != 1 || !st.Up {
		t.Errorf("status %+v, want up with 1 error", st)
	}
	if err := n.Reload(); err != nil || n.Status().Errors != 1 {
		t.Errorf("the same bad file again: %v, %d errors; want it counted once", err, n.Status().Errors)
	}
	if err := os.Remove(n.cfg.FaultsFile); err != nil {
		t.Fatal(err)
	}
	if err := n.Reload(); err != nil || len(n.Faults()) != 0 {
		t.Errorf("missing file: %v, faults %+v", err, n.Faults())
	}
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(Config{Profile: "dgx-a100"}); err == nil || !strings.Contains(err.Error(), "aws-p5, dgx-h100") {
		t.Errorf("unknown profile: %v", err)
	}
	file := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(file, []byte("faults:\n- {kind: pcie_width, gpu: 0, width: 8}\n- {kind: xid, gpu: 12, code: 79}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := filepath.Glob("/dev/shm/gpulink-sim-*")
	_, err := Start(Config{Profile: "dgx-h100", FaultsFile: file})
	if err == nil || err.Error() != file+": faults[1] (xid): gpu: GPU 12: this node has GPUs 0-7" {
		t.Errorf("bad fault file at start: %v", err)
	}
	after, _ := filepath.Glob("/dev/shm/gpulink-sim-*")
	if len(after) > len(before) {
		t.Errorf("a failed start left its tree behind: %v", after)
	}
	// A fault file that does not exist yet is a healthy node.
	n, err := Start(Config{Profile: "aws-p5", FaultsFile: filepath.Join(t.TempDir(), "later.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	root := n.root
	n.Close()
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("Close left %s: %v", root, err)
	}
}

// TestDeterministic: two nodes with one seed, stepped alike, read alike.
func TestDeterministic(t *testing.T) {
	a, b := startNode(t, "aws-p5", ""), startNode(t, "aws-p5", "")
	t0 := time.Unix(1_800_000_000, 0)
	for i := range 5 {
		for _, n := range []*Node{a, b} {
			if err := n.Advance(t0.Add(time.Duration(i) * time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
	ga, gb := gpus(t, a), gpus(t, b)
	for i := range ga.GPUs {
		x, y := ga.GPUs[i], gb.GPUs[i]
		if x.Power != y.Power || x.GPUTemperature != y.GPUTemperature || x.Energy != y.Energy || x.UUID != y.UUID {
			t.Errorf("GPU %d differs: %v/%v %v/%v", i, x.Power, y.Power, x.GPUTemperature, y.GPUTemperature)
		}
	}
	na, nb := nics(t, a), nics(t, b)
	for i := range na.Ports {
		if na.Ports[i].Counters != nb.Ports[i].Counters {
			t.Errorf("port %s differs", na.Ports[i].Device)
		}
	}
	for _, pid := range []string{"3131", "3535"} {
		sa, _ := os.ReadFile(filepath.Join(a.FS().Proc, pid, "task", pid, "stat"))
		sb, _ := os.ReadFile(filepath.Join(b.FS().Proc, pid, "task", pid, "stat"))
		if string(sa) != string(sb) || len(sa) == 0 {
			t.Errorf("pid %s's main thread differs", pid)
		}
	}
}

// TestHealthyNodeOverTime: over ten minutes the gauges wander but stay
// where a healthy machine keeps them.
func TestHealthyNodeOverTime(t *testing.T) {
	n := startNode(t, "dgx-h100", "")
	seen := map[string]map[float64]bool{"temp": {}, "power": {}, "util": {}}
	for i := range 120 {
		step(t, n, 5*time.Second)
		if i%10 != 0 {
			continue
		}
		for _, g := range gpus(t, n).GPUs {
			if g.GPUTemperature.V > 84 || g.MemoryTemperature.V > 90 || g.Power.V > 0.96*g.PowerLimit.V || g.Throttle.Active.V&^0x1 != 0 {
				t.Fatalf("GPU %d at %s: %g C, memory %g C, %g of %g W, reasons %#x", g.Index, time.Duration(i)*5*time.Second,
					g.GPUTemperature.V, g.MemoryTemperature.V, g.Power.V, g.PowerLimit.V, g.Throttle.Active.V)
			}
			if g.Index == 0 {
				seen["temp"][g.GPUTemperature.V] = true
				seen["power"][g.Power.V] = true
				seen["util"][g.Utilization.V] = true
				if g.Utilization.V < 0.6 || g.Clocks.SM.V != g.Clocks.SMMax.V {
					t.Errorf("busy GPU 0 at %g, SM %g Hz", g.Utilization.V, g.Clocks.SM.V)
				}
			}
		}
	}
	for what, values := range seen {
		if len(values) < 3 {
			t.Errorf("GPU 0 %s took %d values in ten minutes; it should wander", what, len(values))
		}
	}
}

// TestRun: the node's own loop picks up a changed fault file and ticks,
// while probe rounds and status reads run beside it.
func TestRun(t *testing.T) {
	file := filepath.Join(t.TempDir(), "faults.yaml")
	n, err := Start(Config{Profile: "dgx-h100", FaultsFile: file, Tick: 20 * time.Millisecond, Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		n.Close()
	})
	first := n.Status().LastSuccess
	if err := os.WriteFile(file, []byte("faults:\n- {kind: nic_down, device: mlx5_1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, func() bool {
		_, _ = n.Runner().Run(context.Background(), probes.Options{GPU: "0000:18:00.0", Probes: []probes.Kind{probes.HostToDevice},
			SizeBytes: probes.DefaultSizeBytes, Samples: probes.DefaultSamples})
		s, err := (&nic.Reader{FS: n.FS()}).Sample(context.Background())
		if err != nil {
			return false
		}
		for _, p := range s.Ports {
			if p.Device == "mlx5_1" {
				return !p.Up().V
			}
		}
		return false
	})
	if st := n.Status(); !st.Up || !st.LastSuccess.After(first) {
		t.Errorf("status %+v after ticking", st)
	}
}

func TestFabricDownAndRecoveryAction(t *testing.T) {
	n, write := nodeWithFile(t, "dgx-h100")
	write("faults:\n- {kind: fabric_down, gpu: 6}\n- {kind: recovery_action, gpu: 7, action: 4}\n")
	step(t, n, time.Second)
	snap := gpus(t, n)
	for i, g := range snap.GPUs {
		wantState, wantAction := 3, 0
		if i == 6 {
			wantState = 1
		}
		if i == 7 {
			wantAction = 4
		}
		if !g.Fabric.Valid || g.Fabric.V.State != wantState || g.Fabric.V.Health["fabric_manager_disconnected"] != (i == 6) {
			t.Errorf("GPU %d fabric %+v, want state %d", i, g.Fabric, wantState)
		}
		if !g.RecoveryAction.Valid || g.RecoveryAction.V != wantAction {
			t.Errorf("GPU %d recovery action %+v, want %d", i, g.RecoveryAction, wantAction)
		}
	}
	write("")
	step(t, n, time.Second)
	snap = gpus(t, n)
	if g := snap.GPUs[6]; g.Fabric.V.State != 3 || g.Fabric.V.Health["fabric_manager_disconnected"] || snap.GPUs[7].RecoveryAction.V != 0 {
		t.Errorf("after removal: GPU 6 fabric %+v, GPU 7 recovery %+v", g.Fabric, snap.GPUs[7].RecoveryAction)
	}
}

// TestPublishedAfterEachTick: the node says when its status changes, with
// the new status and version in place, so that the /metrics handler builds
// its next body then.
func TestPublishedAfterEachTick(t *testing.T) {
	n := startNode(t, "dgx-h100", "")
	var seen []uint64
	n.OnPublish(func() {
		if st := n.Status(); !st.Up {
			t.Errorf("published before the status was up: %+v", st)
		}
		seen = append(seen, n.Version())
	})
	step(t, n, time.Second)
	step(t, n, time.Second)
	if len(seen) != 2 || seen[1] != n.Version() || seen[0] >= seen[1] {
		t.Errorf("versions seen by the hook %v, the node's now %d: want one per tick, the latest last", seen, n.Version())
	}
}

package numa_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/numa"
)

// dgxGPUs are the DGX H100's GPUs in NVML index order.
var dgxGPUs = []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
	"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}

func loadTopology(t *testing.T, profile string) *numa.Topology {
	t.Helper()
	root := machine.Load(t, profile)
	topo, err := numa.ReadTopology(hostfs.Under(root))
	if err != nil {
		t.Fatalf("%s: %v", profile, err)
	}
	return topo
}

// nvSwitched is a machine whose GPUs all meet through NVSwitch with n links.
func nvSwitched(addrs []string, n int) []numa.MatrixGPU {
	out := make([]numa.MatrixGPU, len(addrs))
	for i, a := range addrs {
		out[i] = numa.MatrixGPU{Address: a, NVLinks: make([]int, len(addrs))}
		for j := range addrs {
			if j != i {
				out[i].NVLinks[j] = n
			}
		}
	}
	return out
}

// cells splits a matrix into whitespace-separated fields per line, so the
// comparison does not hang on nvidia-smi's tab alignment.
func cells(s string) [][]string {
	var out [][]string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		out = append(out, strings.Fields(line))
	}
	return out
}

func compareMatrix(t *testing.T, got, want string) {
	t.Helper()
	g, w := cells(got), cells(want)
	if len(g) != len(w) {
		t.Fatalf("matrix has %d lines, want %d:\n%s", len(g), len(w), got)
	}
	for i := range w {
		if strings.Join(g[i], " ") != strings.Join(w[i], " ") {
			t.Errorf("line %d:\n got  %s\n want %s", i, strings.Join(g[i], " "), strings.Join(w[i], " "))
		}
	}
}

// TestDGXH100Matrix: what nvidia-smi topo -m prints on a DGX H100 with
// this layout (two GPUs and two ConnectX-7 per PCIe switch, two switches
// per socket, a storage port per socket on its own root port). Pairs in
// one switch are PIX, host bridges of one socket NODE, across sockets SYS.
func TestDGXH100Matrix(t *testing.T) {
	topo := loadTopology(t, "dgx-h100")
	want := `
	GPU0	GPU1	GPU2	GPU3	GPU4	GPU5	GPU6	GPU7	NIC0	NIC1	NIC2	NIC3	NIC4	NIC5	NIC6	NIC7	NIC8	NIC9	CPU Affinity	NUMA Affinity
GPU0	 X 	NV18	NV18	NV18	NV18	NV18	NV18	NV18	PIX	PIX	NODE	NODE	SYS	SYS	SYS	SYS	NODE	SYS	0-55,112-167	0
GPU1	NV18	 X 	NV18	NV18	NV18	NV18	NV18	NV18	PIX	PIX	NODE	NODE	SYS	SYS	SYS	SYS	NODE	SYS	0-55,112-167	0
GPU2	NV18	NV18	 X 	NV18	NV18	NV18	NV18	NV18	NODE	NODE	PIX	PIX	SYS	SYS	SYS	SYS	NODE	SYS	0-55,112-167	0
GPU3	NV18	NV18	NV18	 X 	NV18	NV18	NV18	NV18	NODE	NODE	PIX	PIX	SYS	SYS	SYS	SYS	NODE	SYS	0-55,112-167	0
GPU4	NV18	NV18	NV18	NV18	 X 	NV18	NV18	NV18	SYS	SYS	SYS	SYS	PIX	PIX	NODE	NODE	SYS	NODE	56-111,168-223	1
GPU5	NV18	NV18	NV18	NV18	NV18	 X 	NV18	NV18	SYS	SYS	SYS	SYS	PIX	PIX	NODE	NODE	SYS	NODE	56-111,168-223	1
GPU6	NV18	NV18	NV18	NV18	NV18	NV18	 X 	NV18	SYS	SYS	SYS	SYS	NODE	NODE	PIX	PIX	SYS	NODE	56-111,168-223	1
GPU7	NV18	NV18	NV18	NV18	NV18	NV18	NV18	 X 	SYS	SYS	SYS	SYS	NODE	NODE	PIX	PIX	SYS	NODE	56-111,168-223	1
NIC0	PIX	PIX	NODE	NODE	SYS	SYS	SYS	SYS	 X 	PIX	NODE	NODE	SYS	SYS	SYS	SYS	NODE	SYS
NIC1	PIX	PIX	NODE	NODE	SYS	SYS	SYS	SYS	PIX	 X 	NODE	NODE	SYS	SYS	SYS	SYS	NODE	SYS
NIC2	NODE	NODE	PIX	PIX	SYS	SYS	SYS	SYS	NODE	NODE	 X 	PIX	SYS	SYS	SYS	SYS	NODE	SYS
NIC3	NODE	NODE	PIX	PIX	SYS	SYS	SYS	SYS	NODE	NODE	PIX	 X 	SYS	SYS	SYS	SYS	NODE	SYS
NIC4	SYS	SYS	SYS	SYS	PIX	PIX	NODE	NODE	SYS	SYS	SYS	SYS	 X 	PIX	NODE	NODE	SYS	NODE
NIC5	SYS	SYS	SYS	SYS	PIX	PIX	NODE	NODE	SYS	SYS	SYS	SYS	PIX	 X 	NODE	NODE	SYS	NODE
NIC6	SYS	SYS	SYS	SYS	NODE	NODE	PIX	PIX	SYS	SYS	SYS	SYS	NODE	NODE	 X 	PIX	SYS	NODE
NIC7	SYS	SYS	SYS	SYS	NODE	NODE	PIX	PIX	SYS	SYS	SYS	SYS	NODE	NODE	PIX	 X 	SYS	NODE
NIC8	NODE	NODE	NODE	NODE	SYS	SYS	SYS	SYS	NODE	NODE	NODE	NODE	SYS	SYS	SYS	SYS	 X 	SYS
NIC9	SYS	SYS	SYS	SYS	NODE	NODE	NODE	NODE	SYS	SYS	SYS	SYS	NODE	NODE	NODE	NODE	SYS	 X

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
  NIC2: mlx5_2
  NIC3: mlx5_3
  NIC4: mlx5_4
  NIC5: mlx5_5
  NIC6: mlx5_6
  NIC7: mlx5_7
  NIC8: mlx5_8
  NIC9: mlx5_9
`
	compareMatrix(t, topo.Matrix(nvSwitched(dgxGPUs, 18)), want)

	// Without NVLink the GPU pairs show their PCIe path instead.
	g0, g1, g2, g4 := topo.Device(dgxGPUs[0]), topo.Device(dgxGPUs[1]), topo.Device(dgxGPUs[2]), topo.Device(dgxGPUs[4])
	for _, tc := range []struct {
		a, b *numa.PCIDevice
		want numa.PathClass
	}{{g0, g1, numa.PathPIX}, {g0, g2, numa.PathNODE}, {g0, g4, numa.PathSYS}, {g4, g0, numa.PathSYS}} {
		if got := topo.Path(tc.a, tc.b); got != tc.want {
			t.Errorf("Path(%s, %s) = %v, want %v", tc.a.Address, tc.b.Address, got, tc.want)
		}
	}
}

func nicNames(ds []*numa.PCIDevice) string {
	var names []string
	for _, d := range ds {
		names = append(names, d.Name())
	}
	return strings.Join(names, ",")
}

func TestNearestNICs(t *testing.T) {
	for _, tc := range []struct {
		profile string
		want    []string // per GPU in dgxGPUs order: "names path"
	}{
		{"dgx-h100", []string{
			"mlx5_0,mlx5_1 PIX", "mlx5_0,mlx5_1 PIX", "mlx5_2,mlx5_3 PIX", "mlx5_2,mlx5_3 PIX",
			"mlx5_4,mlx5_5 PIX", "mlx5_4,mlx5_5 PIX", "mlx5_6,mlx5_7 PIX", "mlx5_6,mlx5_7 PIX"}},
		// The far-socket fault: socket 1's NICs moved to socket 0, so GPUs
		// 4-7 reach every NIC across the socket interconnect.
		{"dgx-h100-faults", []string{
			"mlx5_0,mlx5_1 PIX", "mlx5_0,mlx5_1 PIX", "mlx5_2,mlx5_3 PIX", "mlx5_2,mlx5_3 PIX",
			"", "", "", ""}},
	} {
		topo := loadTopology(t, tc.profile)
		for i, addr := range dgxGPUs {
			nics, p := topo.NearestNICs(topo.Device(addr))
			got := nicNames(nics) + " " + p.String()
			if tc.want[i] == "" {
				if p != numa.PathSYS {
					t.Errorf("%s GPU%d nearest NICs %s, want every NIC across the sockets (SYS)", tc.profile, i, got)
				}
				continue
			}
			if got != tc.want[i] {
				t.Errorf("%s GPU%d nearest NICs %q, want %q", tc.profile, i, got, tc.want[i])
			}
		}
	}
}

const (
	gen5x16 = 32e9 * 128 / 130 / 8 * 16 // 63.0 GB/s
	gen5x8  = gen5x16 / 2               // 31.5 GB/s
	gen4x8  = 16e9 * 128 / 130 / 8 * 8  // 15.75 GB/s
)

func TestSlowestHopAndUplinks(t *testing.T) {
	dgx := loadTopology(t, "dgx-h100")
	for _, a := range dgxGPUs {
		g := dgx.Device(a)
		for _, max := range []bool{false, true} {
			h, ok := dgx.SlowestHop(g, max)
			if !ok || h.Bandwidth(max) != gen5x16 {
				t.Errorf("dgx-h100 %s slowest hop (max=%v) = %v, want Gen5 x16", a, max, h.Bandwidth(max))
			}
		}
		// GPU, switch upstream port: two links up to the root port.
		if n := len(dgx.HostPath(g)); n != 2 {
			t.Errorf("dgx-h100 %s has %d hops to the CPU, want 2", a, n)
		}
	}
	// GPUs in one switch share its uplink; GPUs in different switches do not.
	up := func(topo *numa.Topology, a string) string { return topo.Uplink(topo.Device(a)).Address }
	if up(dgx, dgxGPUs[0]) != up(dgx, dgxGPUs[1]) || up(dgx, dgxGPUs[0]) == up(dgx, dgxGPUs[2]) {
		t.Errorf("uplinks GPU0 %s GPU1 %s GPU2 %s: want 0 and 1 shared, 2 apart",
			up(dgx, dgxGPUs[0]), up(dgx, dgxGPUs[1]), up(dgx, dgxGPUs[2]))
	}
	if u := dgx.Device(up(dgx, dgxGPUs[0])); u == nil || u.Kind != numa.KindBridge {
		t.Errorf("GPU0's uplink %v is not the switch's upstream port", u)
	}

	// The x8 fault: switch B's uplink trained at x8 of x16. GPU2 and GPU3
	// behind it get half the host bandwidth now, the full one at best, and
	// name the switch's upstream port as the bottleneck.
	faults := loadTopology(t, "dgx-h100-faults")
	for _, a := range dgxGPUs[2:4] {
		g := faults.Device(a)
		cur, ok := faults.SlowestHop(g, false)
		if !ok || cur.Bandwidth(false) != gen5x8 {
			t.Errorf("faults %s current slowest hop %v, want Gen5 x8", a, cur.Bandwidth(false))
		}
		if cur.Device != faults.Uplink(g) || cur.Link.Width.V != 8 || cur.Link.MaxWidth.V != 16 {
			t.Errorf("faults %s bottleneck %s at x%d of x%d, want its uplink %s at x8 of x16",
				a, cur.Device.Address, cur.Link.Width.V, cur.Link.MaxWidth.V, faults.Uplink(g).Address)
		}
		if best, _ := faults.SlowestHop(g, true); best.Bandwidth(true) != gen5x16 {
			t.Errorf("faults %s best slowest hop %v, want Gen5 x16", a, best.Bandwidth(true))
		}
	}
	if h, _ := faults.SlowestHop(faults.Device(dgxGPUs[0]), false); h.Bandwidth(false) != gen5x16 {
		t.Errorf("faults GPU0 slowest hop %v: the x8 fault leaked to another switch", h.Bandwidth(false))
	}

	// AWS p5: Gen5 x16 GPUs behind a Gen4 x8 uplink, by design: the
	// uplink bounds host copies at 15.75 GB/s (links.md), and since the
	// root port cannot do more it is not a downtrained link.
	p5 := loadTopology(t, "aws-p5")
	if len(p5.GPUs) != 8 {
		t.Fatalf("aws-p5 has %d GPUs, want 8", len(p5.GPUs))
	}
	uplinks := map[string]bool{}
	for _, g := range p5.GPUs {
		for _, max := range []bool{false, true} {
			h, ok := p5.SlowestHop(g, max)
			if !ok || h.Bandwidth(max) != gen4x8 || h.Device != p5.Uplink(g) {
				t.Errorf("aws-p5 %s slowest hop (max=%v) %v at %s, want Gen4 x8 at its uplink", g.Address, max, h.Bandwidth(max), h.Device.Address)
			}
		}
		uplinks[p5.Uplink(g).Address] = true
	}
	if len(uplinks) != 8 {
		t.Errorf("aws-p5: %d distinct uplinks for 8 GPUs, want one each", len(uplinks))
	}

	// aws-p5-faults: GPU5's own link trained x8 of x16. The link shows
	// it, but Gen5 x8 (31.5 GB/s) is still faster than the Gen4 x8 uplink,
	// so the host bandwidth bound does not move: only the link metrics
	// and a probe under load can tell.
	p5f := loadTopology(t, "aws-p5-faults")
	g5 := p5f.Device("0000:a8:00.0")
	own := p5f.HostPath(g5)[0]
	if own.Device != g5 || own.Link.Width.V != 8 || own.Link.MaxWidth.V != 16 {
		t.Errorf("aws-p5-faults GPU5 own link x%d of x%d, want x8 of x16", own.Link.Width.V, own.Link.MaxWidth.V)
	}
	if h, _ := p5f.SlowestHop(g5, false); h.Bandwidth(false) != gen4x8 || h.Device != p5f.Uplink(g5) {
		t.Errorf("aws-p5-faults GPU5 slowest hop %v at %s, want the Gen4 x8 uplink", h.Bandwidth(false), h.Device.Address)
	}
}

func TestAWSP5Paths(t *testing.T) {
	p5 := loadTopology(t, "aws-p5")
	if len(p5.NICs) < 32 {
		t.Fatalf("aws-p5 has %d NICs, want 32 EFA and more", len(p5.NICs))
	}
	for _, g := range p5.GPUs {
		nics, p := p5.NearestNICs(g)
		// Each GPU's four EFA devices sit behind the GPU's L1 switch, in a
		// second-level switch of their own: PXB.
		if len(nics) != 4 || p != numa.PathPXB {
			t.Errorf("aws-p5 %s nearest NICs %s %v, want 4 EFA at PXB", g.Address, nicNames(nics), p)
		}
		for _, n := range nics {
			if n.Vendor != 0x1d0f || p5.NodeOf(n) != p5.NodeOf(g) {
				t.Errorf("aws-p5 %s nearest NIC %s vendor %#x node %d", g.Address, n.Name(), n.Vendor, p5.NodeOf(n))
			}
		}
	}
	if d := p5.Node(0).Distances[1]; d != 32 {
		t.Errorf("aws-p5 distance 0->1 = %d, want 32", d)
	}
}

func TestNUMANodes(t *testing.T) {
	dgx := loadTopology(t, "dgx-h100")
	if len(dgx.Nodes) != 2 {
		t.Fatalf("dgx-h100 nodes %d, want 2", len(dgx.Nodes))
	}
	for _, n := range dgx.Nodes {
		if n.CPUs.Count() != 112 || n.Distances[n.ID] != 10 || n.Distances[1-n.ID] != 21 || !n.MemTotal.Valid {
			t.Errorf("dgx-h100 node %d: %d CPUs, distances %v, memory %v", n.ID, n.CPUs.Count(), n.Distances, n.MemTotal)
		}
	}

	// The borrowed VM: numa_node is -1 everywhere. The GPU's NUMA node
	// stays unknown, but its local CPUs are node 0's, which is the NUMA
	// affinity nvidia-smi topo -m printed there.
	vm := loadTopology(t, "h200-vm")
	if len(vm.Nodes) != 1 || vm.Nodes[0].CPUs.String() != "0-31" {
		t.Fatalf("h200-vm nodes %+v", vm.Nodes)
	}
	if s := vm.Nodes[0].Stat; s["numa_hit"] != 554609 || s["interleave_hit"] != 1345 || len(s) != 6 {
		t.Errorf("h200-vm numastat %v", s)
	}
	if len(vm.GPUs) != 2 {
		t.Fatalf("h200-vm GPUs %d", len(vm.GPUs))
	}
	for _, g := range vm.GPUs {
		if g.NUMANode != -1 || vm.NodeOf(g) != 0 {
			t.Errorf("h200-vm %s numa_node %d affinity %d, want -1 and 0", g.Address, g.NUMANode, vm.NodeOf(g))
		}
		hops := vm.HostPath(g)
		if len(hops) != 1 || hops[0].Device != g || hops[0].Bandwidth(false) != gen5x16 {
			t.Errorf("h200-vm %s hops %+v, want its own Gen5 x16 link only", g.Address, hops)
		}
	}
	if p := vm.Path(vm.GPUs[0], vm.GPUs[1]); p != numa.PathPHB {
		t.Errorf("h200-vm GPU pair path %v, want PHB (both straight on the root bus)", p)
	}
	compareMatrix(t, vm.Matrix(nvSwitched([]string{"0000:00:06.0", "0000:00:07.0"}, 18)), `
	GPU0	GPU1	CPU Affinity	NUMA Affinity
GPU0	 X 	NV18	0-31	0
GPU1	NV18	 X 	0-31	0
`)
	if len(vm.NICs) != 1 || vm.NICs[0].Name() != "eth0" || vm.NICs[0].Address != "0000:00:03.0" {
		t.Errorf("h200-vm NICs %s, want eth0 at 0000:00:03.0", nicNames(vm.NICs))
	}

	none := loadTopology(t, "no-gpu")
	if len(none.GPUs) != 0 || len(none.NICs) != 1 || len(none.NVMe) != 1 {
		t.Errorf("no-gpu: %d GPUs %d NICs %d NVMe, want 0 1 1", len(none.GPUs), len(none.NICs), len(none.NVMe))
	}
}

// One unreadable or garbage file drops that value and is counted; the
// rest of the tree is read.
func TestTopologyBadFiles(t *testing.T) {
	root := machine.Load(t, "dgx-h100")
	sys := filepath.Join(root, "sys")
	gpu0 := filepath.Join(sys, "bus", "pci", "devices", dgxGPUs[0])
	if err := os.WriteFile(filepath.Join(gpu0, "current_link_width"), []byte("x16\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A directory where a file should be: reading it fails with EISDIR.
	dist := filepath.Join(sys, "devices", "system", "node", "node1", "distance")
	if err := os.Remove(dist); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dist, 0o755); err != nil {
		t.Fatal(err)
	}
	topo, err := numa.ReadTopology(hostfs.Root{Sys: sys})
	var partial *sampler.PartialError
	if !errors.As(err, &partial) || partial.Count != 2 {
		t.Fatalf("err = %v, want a partial error counting 2 values", err)
	}
	g := topo.Device(dgxGPUs[0])
	if g.Link.Width.Valid || !g.Link.Speed.Valid || !g.Link.MaxWidth.Valid {
		t.Errorf("GPU0 link %+v: want only the width dropped", g.Link)
	}
	if len(topo.GPUs) != 8 || len(topo.Nodes) != 2 || len(topo.Nodes[1].Distances) != 0 || len(topo.Nodes[0].Distances) != 2 {
		t.Errorf("rest of the tree not read: %d GPUs, nodes %+v", len(topo.GPUs), topo.Nodes)
	}
}

// A NIC's own PCIe link is read by the topology source (the NIC source
// joins on pci_bus_id): a CX-7 at Gen5 x16, the E810 at Gen4 x16, the VM's
// virtio NIC with no PCIe capability and so no link at all.
func TestNICLinks(t *testing.T) {
	for _, tc := range []struct {
		profile, addr string
		gts           float64
		width         int
	}{
		{"dgx-h100", "0000:19:00.0", 32e9, 16},
		{"no-gpu", "0000:41:00.0", 16e9, 16},
		{"h200-vm", "0000:00:03.0", 0, 0},
	} {
		topo := loadTopology(t, tc.profile)
		d := topo.Device(tc.addr)
		if d == nil || d.Kind != numa.KindNIC {
			t.Fatalf("%s: no NIC at %s", tc.profile, tc.addr)
		}
		l := d.Link
		if tc.width == 0 {
			if l.Speed.Valid || l.Width.Valid {
				t.Errorf("%s %s link %+v, want none", tc.profile, tc.addr, l)
			}
			continue
		}
		if l.Speed != sampler.Some(tc.gts) || l.Width != sampler.Some(tc.width) || l.MaxWidth != sampler.Some(tc.width) {
			t.Errorf("%s %s link %+v, want %v GT/s x%d", tc.profile, tc.addr, l, tc.gts/1e9, tc.width)
		}
	}
}

// TestNearestNICsAmong: the nearest of the NICs a filter keeps. On the
// two-NIC DGX (one ConnectX-7 per socket, mlx5_6 beside GPUs 6 and 7)
// without mlx5_6, GPUs 4-7 reach only mlx5_2, across the sockets; without
// either, none.
func TestNearestNICsAmong(t *testing.T) {
	topo := loadTopology(t, "dgx-h100-two-nics-faults")
	except := func(names ...string) func(*numa.PCIDevice) bool {
		return func(n *numa.PCIDevice) bool { return !strings.Contains(strings.Join(names, ","), n.Name()) }
	}
	for _, tc := range []struct {
		keep func(*numa.PCIDevice) bool
		want []string // per GPU in dgxGPUs order: "names path"
	}{
		{nil, []string{"mlx5_2 NODE", "mlx5_2 NODE", "mlx5_2 PIX", "mlx5_2 PIX", "mlx5_6 NODE", "mlx5_6 NODE", "mlx5_6 PIX", "mlx5_6 PIX"}},
		{except("mlx5_6"), []string{"mlx5_2 NODE", "mlx5_2 NODE", "mlx5_2 PIX", "mlx5_2 PIX", "mlx5_2 SYS", "mlx5_2 SYS", "mlx5_2 SYS", "mlx5_2 SYS"}},
		{except("mlx5_2", "mlx5_6"), []string{" ", " ", " ", " ", " ", " ", " ", " "}},
	} {
		for i, addr := range dgxGPUs {
			nics, p := topo.NearestNICsAmong(topo.Device(addr), tc.keep)
			got := nicNames(nics) + " "
			if len(nics) > 0 {
				got += p.String()
			}
			if got != tc.want[i] {
				t.Errorf("GPU%d nearest kept NICs %q, want %q", i, got, tc.want[i])
			}
		}
	}
	// NearestNICs is every NIC's.
	for _, addr := range dgxGPUs {
		a, pa := topo.NearestNICs(topo.Device(addr))
		b, pb := topo.NearestNICsAmong(topo.Device(addr), nil)
		if nicNames(a) != nicNames(b) || pa != pb {
			t.Errorf("%s: NearestNICs %s %s, NearestNICsAmong(nil) %s %s", addr, nicNames(a), pa, nicNames(b), pb)
		}
	}
}

// TestRailNICsAmong: rails dealt out among the NICs a filter keeps. On the
// DGX H100 each PCIe switch holds two GPUs and two NICs, one each; without
// mlx5_0 both GPUs of its switch share mlx5_1 (NCCL lists only active
// ports); without any NIC, none. nil keeps every NIC, as RailNICs.
func TestRailNICsAmong(t *testing.T) {
	topo := loadTopology(t, "dgx-h100")
	gpu0, gpu1 := topo.Device(dgxGPUs[0]), topo.Device(dgxGPUs[1])
	if got := nicNames(topo.RailNICs(gpu0)) + " " + nicNames(topo.RailNICs(gpu1)); got != "mlx5_0 mlx5_1" {
		t.Fatalf("rails of GPUs 0 and 1: %q, want mlx5_0 mlx5_1", got)
	}
	for _, addr := range dgxGPUs {
		if a, b := nicNames(topo.RailNICs(topo.Device(addr))), nicNames(topo.RailNICsAmong(topo.Device(addr), nil)); a != b {
			t.Errorf("%s: RailNICs %s, RailNICsAmong(nil) %s", addr, a, b)
		}
	}
	notMlx50 := func(n *numa.PCIDevice) bool { return n.Name() != "mlx5_0" }
	if got := nicNames(topo.RailNICsAmong(gpu0, notMlx50)) + " " + nicNames(topo.RailNICsAmong(gpu1, notMlx50)); got != "mlx5_1 mlx5_1" {
		t.Errorf("without mlx5_0: %q, want mlx5_1 mlx5_1", got)
	}
	if got := topo.RailNICsAmong(gpu0, func(*numa.PCIDevice) bool { return false }); len(got) != 0 {
		t.Errorf("no NIC kept: %s", nicNames(got))
	}
}

// A NIC's own link is impaired where it is down (width 0) or narrower
// than both ends support; a slower generation is not judged (a link may
// lower it when idle), nor an unknown width.
func TestLinkImpaired(t *testing.T) {
	some := sampler.Some[int]
	for _, tc := range []struct {
		link numa.PCIeLink
		want bool
	}{
		{numa.PCIeLink{Width: some(16), MaxWidth: some(16), Speed: sampler.Some(32e9), MaxSpeed: sampler.Some(32e9)}, false},
		{numa.PCIeLink{Width: some(8), MaxWidth: some(16)}, true},
		{numa.PCIeLink{Width: some(0), MaxWidth: some(16)}, true},
		{numa.PCIeLink{Width: some(0)}, true},
		{numa.PCIeLink{Width: some(16), MaxWidth: some(16), Speed: sampler.Some(16e9), MaxSpeed: sampler.Some(32e9)}, false},
		{numa.PCIeLink{MaxWidth: some(16)}, false},
		{numa.PCIeLink{}, false},
	} {
		d := &numa.PCIDevice{Address: "0000:19:00.0", Kind: numa.KindNIC, Link: tc.link}
		topo := &numa.Topology{Devices: map[string]*numa.PCIDevice{d.Address: d}, NICs: []*numa.PCIDevice{d}}
		if got := topo.LinkImpaired(d); got != tc.want {
			t.Errorf("%+v: LinkImpaired %v, want %v", tc.link, got, tc.want)
		}
	}
}

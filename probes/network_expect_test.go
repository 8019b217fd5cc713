package probes_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
)

// The simulated DGX H100: each GPU has one ConnectX-7 port at 400 Gb/s
// behind its PCIe switch, beside its neighbour's. NCCL gives each GPU one
// of the two, its rail (the first GPU the first NIC): that NIC's rate is
// what the GPU's side of a node-to-node path should carry, whatever the
// neighbour's does; with it down, nothing.
func TestNearestNICRate(t *testing.T) {
	faults := filepath.Join(t.TempDir(), "faults.yaml")
	node, err := sim.Start(sim.Config{Profile: "dgx-h100", FaultsFile: faults, Dir: t.TempDir(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	fs := node.FS()
	read := func() (*numa.Topology, *nic.Snapshot) {
		t.Helper()
		topo, err := (&numa.TopologyReader{FS: fs}).Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		nics, err := (&nic.Reader{FS: fs}).Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return topo, nics
	}
	topo, nics := read()
	if len(topo.GPUs) != 8 {
		t.Fatalf("%d GPUs in the simulated topology", len(topo.GPUs))
	}
	gpu := topo.GPUs[0]
	nearest, _ := topo.NearestNICs(gpu)
	// Two ports share GPU 0's PCIe switch: either may carry its traffic.
	if len(nearest) != 2 || len(nearest[0].RDMANames) == 0 || len(nearest[1].RDMANames) == 0 {
		t.Fatalf("GPU %s: %d nearest NICs, want the two behind its switch", gpu.Address, len(nearest))
	}
	one, other := nearest[0].RDMANames[0], nearest[1].RDMANames[0]
	// NVML's form of the address, as the gate gives it.
	nvmlForm := "0000" + gpu.Address
	for _, addr := range []string{gpu.Address, strings.ToUpper(nvmlForm)} {
		if got := probes.NearestNICRate(topo, nics, addr); got != 50e9 {
			t.Errorf("GPU %s: %g, want 400 Gb/s (50e9 bytes/s)", addr, got)
		}
	}
	for _, tc := range []struct {
		fault string
		want  float64
	}{
		// GPU 0's rail is the first NIC; the neighbour's is not its way out.
		{"[{kind: nic_rate, device: " + one + ", fraction: 0.5}]", 25e9},
		{"[{kind: nic_rate, device: " + other + ", fraction: 0.5}]", 50e9},
		{"[{kind: nic_down, device: " + other + "}]", 50e9},
		// A port down carries nothing (its rate file says SDR).
		{"[{kind: nic_down, device: " + one + "}]", 0},
	} {
		if err := os.WriteFile(faults, []byte("faults: "+tc.fault), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := node.Reload(); err != nil {
			t.Fatal(err)
		}
		if err := node.Advance(time.Now()); err != nil {
			t.Fatal(err)
		}
		topo, nics := read()
		if got := probes.NearestNICRate(topo, nics, gpu.Address); got != tc.want {
			t.Errorf("%s: %g, want %g", tc.fault, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		topo *numa.Topology
		nics *nic.Snapshot
		addr string
	}{
		{"no topology", nil, nics, gpu.Address},
		{"no NIC sample", topo, nil, gpu.Address},
		{"not a device", topo, nics, "0000:ff:1f.7"},
		{"no NIC ports", topo, &nic.Snapshot{}, gpu.Address},
	} {
		if got := probes.NearestNICRate(tc.topo, tc.nics, tc.addr); got != 0 {
			t.Errorf("%s: %g, want 0 (unknown)", tc.name, got)
		}
	}
}

// The simulated AWS p5: each GPU's tray holds four EFA devices, and NCCL
// sends through all four: the rail carries four ports' worth, not one.
func TestNearestNICRateSumsTheRail(t *testing.T) {
	node, err := sim.Start(sim.Config{Profile: "aws-p5", Dir: t.TempDir(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	topo, err := (&numa.TopologyReader{FS: node.FS()}).Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	nics, err := (&nic.Reader{FS: node.FS()}).Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	gpu := topo.GPUs[0]
	rail := topo.RailNICs(gpu)
	if len(rail) != 4 {
		t.Fatalf("GPU %s: rail of %d NICs, want its tray's four EFAs", gpu.Address, len(rail))
	}
	one := 0.0
	for _, p := range nics.Ports {
		if p.PCIAddress == rail[0].Address && p.RateBytes.Valid {
			one = max(one, p.RateBytes.V)
		}
	}
	if got := probes.NearestNICRate(topo, nics, gpu.Address); one <= 0 || got != 4*one {
		t.Errorf("GPU %s: %g, want the four EFAs' %g", gpu.Address, got, 4*one)
	}
}

// nicNode reads a fixture machine's topology and NICs.
func nicNode(t *testing.T, profile string) (*numa.Topology, *nic.Snapshot) {
	t.Helper()
	root := machine.Load(t, profile)
	fsys := hostfs.Under(root)
	topo, err := numa.ReadTopology(fsys)
	if topo == nil {
		t.Fatalf("topology: %v", err)
	}
	ports, err := (&nic.Reader{FS: fsys}).Sample(context.Background())
	if ports == nil {
		t.Fatalf("NICs: %v", err)
	}
	return topo, ports
}

// A DGX H100: eight InfiniBand ports up, each GPU with its own NIC under
// its PCIe switch (PIX), nvidia_peermem loaded: IB with GPUDirect RDMA for
// every GPU.
func TestNetworksForDGXH100(t *testing.T) {
	topo, ports := nicNode(t, "dgx-h100")
	es := probes.NetworksFor(topo, ports)
	if len(es) != 8 {
		t.Fatalf("%d GPUs, want 8", len(es))
	}
	for _, e := range es {
		if e.Network != "IB" || !e.GDR || e.Path != numa.PathPIX || len(e.RailNICs) != 1 {
			t.Errorf("%+v: want IB with GPUDirect RDMA over one PIX rail NIC", e)
		}
	}
	// A rail's port down: NCCL's IB transport lists only active ports, so
	// that GPU's traffic takes the other NIC under its PCIe switch, its
	// neighbour's, with GPUDirect RDMA (nic's Usable picks the NICs; on
	// 87dce87 the rail stayed the dead NIC, without GPUDirect RDMA).
	ports.Ports[0].StateID.V, ports.Ports[0].State = 1, "DOWN"
	es = probes.NetworksFor(topo, ports)
	if want := ports.Ports[1].Device; es[0].Network != "IB" || !es[0].GDR || es[0].Path != numa.PathPIX || !slices.Equal(es[0].RailNICs, []string{want}) {
		t.Errorf("rail port down: %+v, want IB with GPUDirect RDMA over %s", es[0], want)
	}
	if want := ports.Ports[1].Device; !slices.Equal(es[1].RailNICs, []string{want}) || !es[1].GDR {
		t.Errorf("the neighbour: %+v, want its own rail %s", es[1], want)
	}
	// Without peermem or dma-buf, no GPUDirect RDMA anywhere.
	topo.GPUDirect.PeermemLoaded.V, topo.GPUDirect.DMABufSupported.V = false, false
	for _, e := range probes.NetworksFor(topo, ports) {
		if e.GDR {
			t.Errorf("%+v: GPUDirect RDMA without peermem or dma-buf", e)
		}
	}
	// Every port down: sockets, through no dead RDMA NIC.
	for i := range ports.Ports {
		ports.Ports[i].StateID.V = 1
	}
	for _, e := range probes.NetworksFor(topo, ports) {
		if e.Network != "Socket" || e.GDR || slices.ContainsFunc(e.RailNICs, func(n string) bool { return strings.HasPrefix(n, "mlx5_") }) {
			t.Errorf("%+v: want Socket, no RDMA NIC as its rail", e)
		}
	}
	if probes.NetworksFor(nil, ports) != nil {
		t.Error("no topology: want nothing")
	}
}

// An AWS p5: EFA through the OFI plugin; GPUDirect RDMA where dma-buf or
// peermem is there (the fixture's kernel and driver offer dma-buf).
func TestNetworksForAWSP5(t *testing.T) {
	topo, ports := nicNode(t, "aws-p5")
	es := probes.NetworksFor(topo, ports)
	if len(es) != 8 {
		t.Fatalf("%d GPUs, want 8", len(es))
	}
	for _, e := range es {
		if e.Network != "EFA" || len(e.RailNICs) != 4 {
			t.Errorf("%+v: want EFA over four rail NICs", e)
		}
		if want := topo.GPUDirect.PeermemLoaded.V || topo.GPUDirect.DMABufSupported.V; e.GDR != want {
			t.Errorf("%+v: GDR %v, want %v (peermem %v, dma-buf %v)", e, e.GDR, want, topo.GPUDirect.PeermemLoaded, topo.GPUDirect.DMABufSupported)
		}
	}
}

package nodeprobe

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/numa"
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
		if got := NearestNICRate(topo, nics, addr); got != 50e9 {
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
		if got := NearestNICRate(topo, nics, gpu.Address); got != tc.want {
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
		if got := NearestNICRate(tc.topo, tc.nics, tc.addr); got != 0 {
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
	for _, r := range functionRates(nics, rail[0].Address) {
		one = max(one, r)
	}
	if got := NearestNICRate(topo, nics, gpu.Address); one <= 0 || got != 4*one {
		t.Errorf("GPU %s: %g, want the four EFAs' %g", gpu.Address, got, 4*one)
	}
}

package numa_test

import (
	"path/filepath"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/numa"
)

// loadCaptured reads the topology of a tree captured from a real machine
// (numa/testdata/captured, scripts/capture-machine.py).
func loadCaptured(t *testing.T, name string) *numa.Topology {
	t.Helper()
	root := machine.LoadCaptured(t, name)
	topo, err := numa.ReadTopology(hostfs.Root{Sys: filepath.Join(root, "sys"), Proc: filepath.Join(root, "proc")})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return topo
}

// dev-vm is the VM developers and CI run on, as its kernel wrote it: the
// same shape as the lent GPU VMs (one node, numa_node -1 on every device,
// a virtio NIC with no PCIe capability) without the GPUs. Every file the
// kernel had is read without one error, -1 is taken as unknown and not as
// node 0 while the one node still holds everything, and the virtio NIC is a
// NIC with no link rather than a link of zero.
func TestCapturedDevVM(t *testing.T) {
	topo := loadCaptured(t, "dev-vm")
	if len(topo.Nodes) != 1 || topo.Nodes[0].CPUs.String() != "0-1" || !topo.Nodes[0].MemTotal.Valid ||
		len(topo.Nodes[0].Distances) != 1 || topo.Nodes[0].Distances[0] != 10 {
		t.Fatalf("nodes %+v, want node 0 with CPUs 0-1, its memory and distance 10 to itself", topo.Nodes)
	}
	if s := topo.Nodes[0].Stat; len(s) != 6 || s["numa_hit"] == 0 || s["numa_miss"] != 0 {
		t.Errorf("numastat %v, want its six counters with hits and no misses", s)
	}
	if len(topo.GPUs) != 0 || len(topo.NVMe) != 0 {
		t.Errorf("%d GPUs and %d NVMe drives, want none (virtio disk)", len(topo.GPUs), len(topo.NVMe))
	}
	if len(topo.NICs) != 1 || topo.NICs[0].Name() != "eth0" || topo.NICs[0].Address != "0000:00:03.0" {
		t.Fatalf("NICs %s, want eth0 at 0000:00:03.0 (lo, ifb0 and ifb1 are virtual)", nicNames(topo.NICs))
	}
	nic := topo.NICs[0]
	if nic.NUMANode != -1 || topo.NodeOf(nic) != 0 {
		t.Errorf("eth0 numa_node %d affinity %d, want -1 (unknown) and 0 (the only node)", nic.NUMANode, topo.NodeOf(nic))
	}
	if l := nic.Link; l.Speed.Valid || l.Width.Valid || l.MaxSpeed.Valid || l.MaxWidth.Valid {
		t.Errorf("eth0 link %+v, want none: virtio has no PCIe link files", l)
	}
}

package numa_test

import (
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/numa"
)

// loadCaptured reads the topology of a tree captured from a real machine
// (numa/testdata/captured, scripts/capture-machine.py).
func loadCaptured(t *testing.T, name string) *numa.Topology {
	t.Helper()
	root := machine.LoadCaptured(t, name)
	topo, err := numa.ReadTopology(hostfs.Under(root))
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

// h100-vm is a lent GPU VM as its kernel wrote it (bench/capture-fixture.sh,
// 2026-12-07 07:38 UTC: one NVIDIA H100 80GB HBM3, driver 580.159.04,
// kernel 6.18.44-fc-v1272-gpu). The expectations are what nvidia-smi said of
// the same machine in the same run, quoted where they come from it:
//
//	nvidia-smi -q:   Bus Id 00000000:00:06.0, Device Id 0x233010DE,
//	                 PCIe Generation Max 5, Current 5; Link Width Max 16x,
//	                 Current 16x; Performance State P0; Driver Version 580.159.04
//	nvidia-smi topo -m: GPU0 CPU Affinity 0-15, NUMA Affinity 0
//
// The GPU sits on the root bus with no bridge above it, its numa_node is -1
// (the VM's firmware gives no proximity) and it still belongs to the one
// node, as topo -m says; disks and NIC are virtio.
func TestCapturedH100VM(t *testing.T) {
	topo := loadCaptured(t, "h100-vm")
	if len(topo.Nodes) != 1 || topo.Nodes[0].ID != 0 || topo.Nodes[0].CPUs.String() != "0-15" ||
		topo.Nodes[0].MemTotal != sampler.Some(uint64(131961972<<10)) ||
		len(topo.Nodes[0].Distances) != 1 || topo.Nodes[0].Distances[0] != 10 {
		t.Fatalf("nodes %+v, want node 0 with CPUs 0-15, 131961972 kB and distance 10 to itself", topo.Nodes)
	}
	if s := topo.Nodes[0].Stat; len(s) != 6 || s["numa_hit"] != 840914 || s["numa_miss"] != 0 || s["other_node"] != 0 {
		t.Errorf("numastat %v, want its six counters, 840914 hits and no misses", s)
	}

	if len(topo.GPUs) != 1 {
		t.Fatalf("%d GPUs, want the one H100", len(topo.GPUs))
	}
	gpu := topo.GPUs[0]
	if gpu.Address != "0000:00:06.0" || gpu.Vendor != 0x10de || gpu.DeviceID != 0x2330 || gpu.Class != 0x030200 ||
		gpu.Driver != "nvidia" {
		t.Errorf("GPU %s vendor %#x device %#x class %#x driver %q, want 0000:00:06.0, an NVIDIA 0x2330 3D controller on nvidia",
			gpu.Address, gpu.Vendor, gpu.DeviceID, gpu.Class, gpu.Driver)
	}
	// On the root bus: nothing between the GPU and the host bridge, so
	// its own link is its whole path to the CPU and no bridge needs ACS.
	if gpu.HostBridge != "pci0000:00" || gpu.ParentAddr != "" || len(topo.HostPath(gpu)) != 1 || len(topo.ACSBridges()) != 0 {
		t.Errorf("GPU under %s parent %q, %d hops to the CPU, ACS bridges %v; want straight on pci0000:00, one hop, none",
			gpu.HostBridge, gpu.ParentAddr, len(topo.HostPath(gpu)), topo.ACSBridges())
	}
	// numa_node -1 is unknown, not node 0; local_cpulist 0-15 is every
	// CPU of the one node, which places it there.
	if gpu.NUMANode != -1 || !gpu.LocalCPUs.Valid || gpu.LocalCPUs.V.String() != "0-15" || topo.NodeOf(gpu) != 0 {
		t.Errorf("GPU numa_node %d local CPUs %v affinity %d, want -1, 0-15 and node 0", gpu.NUMANode, gpu.LocalCPUs, topo.NodeOf(gpu))
	}
	// An idle GPU may train its link down to save power; this one was at
	// P0 holding a process's memory when both the files and nvidia-smi
	// were read, and both say Gen5 x16, current as max.
	l := gpu.Link
	if l.MaxSpeed != sampler.Some(32e9) || numa.Generation(l.MaxSpeed.V) != 5 || l.MaxWidth != sampler.Some(16) ||
		l.Speed != sampler.Some(32e9) || l.Width != sampler.Some(16) || topo.LinkImpaired(gpu) {
		t.Errorf("GPU link %+v, want 32 GT/s (Gen5) x16 current and max", l)
	}

	if len(topo.NVMe) != 0 || len(topo.Mounts) != 0 {
		t.Errorf("%d NVMe drives, %d mounts on them; want none (the disks are virtio)", len(topo.NVMe), len(topo.Mounts))
	}
	if len(topo.NICs) != 1 || topo.NICs[0].Name() != "eth0" || topo.NICs[0].Address != "0000:00:03.0" ||
		topo.NICs[0].Driver != "virtio-pci" {
		t.Fatalf("NICs %s, want eth0 at 0000:00:03.0 on virtio-pci (lo, ifb0 and ifb1 are virtual)", nicNames(topo.NICs))
	}
	nic := topo.NICs[0]
	if nic.NUMANode != -1 || topo.NodeOf(nic) != 0 || topo.Path(gpu, nic) != numa.PathPHB {
		t.Errorf("eth0 numa_node %d affinity %d path to the GPU %v, want -1, 0 and PHB (both on the host bridge)",
			nic.NUMANode, topo.NodeOf(nic), topo.Path(gpu, nic))
	}
	if l := nic.Link; l.Speed.Valid || l.Width.Valid || l.MaxSpeed.Valid || l.MaxWidth.Valid {
		t.Errorf("eth0 link %+v, want none: virtio has no PCIe link files", l)
	}

	// GPUDirect: sysfs has the nvidia modules (nvidia, nvidia_uvm) and the
	// capture keeps every nvidia* one, so nvidia_peermem and nvidia_fs
	// are not loaded; the driver is the open kernel module of branch 580
	// on Linux 6.18, which is what dma-buf needs.
	if g := topo.GPUDirect; g.PeermemLoaded != sampler.Some(false) || g.DMABufSupported != sampler.Some(true) || len(g.ACS) != 0 {
		t.Errorf("GPUDirect %+v, want peermem not loaded, dma-buf supported, no ACS bridge", g)
	}
	if g := topo.GDS; g.NVFSLoaded != sampler.Some(false) || g.NVFS != nil {
		t.Errorf("GDS %+v, want nvidia_fs not loaded and no counters of its", g)
	}
}

// The storage readings of h100-vm's virtio disks: the root filesystem is
// ext4 on /dev/vda (254:0, virtio_blk at 0000:00:01.0), which is no NVMe
// drive, so no drive is named for it.
func TestCapturedH100VMStorage(t *testing.T) {
	root := machine.LoadCaptured(t, "h100-vm")
	fs := hostfs.Under(root)
	mounts, err := numa.ReadMounts(fs)
	if err != nil {
		t.Fatal(err)
	}
	var rootMount *numa.Mount
	for i := range mounts {
		if mounts[i].MountPoint == "/" {
			rootMount = &mounts[i]
		}
	}
	if len(mounts) != 11 || rootMount == nil || rootMount.FSType != "ext4" || rootMount.Source != "/dev/vda" ||
		rootMount.Device != "254:0" || !numa.NativeFilesystem(rootMount.FSType, rootMount.Options) {
		t.Fatalf("%d mounts, / is %+v; want 11, / ext4 on /dev/vda (254:0), which cuFile could serve", len(mounts), rootMount)
	}
	for _, dev := range []string{"254:0", "254:16", "253:0", "7:0"} { // vda, vdb, zram0, loop0
		if d := numa.BlockDeviceDrives(fs, dev); len(d) != 0 {
			t.Errorf("block device %s on drives %v, want none (virtio, zram, loop)", dev, d)
		}
	}
}

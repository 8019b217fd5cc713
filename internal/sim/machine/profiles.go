package machine

import "fmt"

// Profiles returns the constructors of the machines in good health by
// name; each tree is committed as numa/testdata/<name>.txtar, beside the
// faulty ones internal/sim makes from them (sim.Fixtures).
func Profiles() map[string]func() *Machine {
	return map[string]func() *Machine{
		"dgx-h100": DGXH100,
		"aws-p5":   AWSP5,
		"no-gpu":   NoGPU,
		"h200-vm":  H200VM,
	}
}

// threads returns n tasks of pid spread over a CPU list (ThreadsOn).
func threads(pid, n int, cpus string) []Thread { return ThreadsOn(pid, n, mustList(cpus)) }

// ThreadsOn returns n tasks of pid with TIDs pid, pid+1, ..., spread evenly
// over cpus, the main thread on the first.
func ThreadsOn(pid, n int, cpus []int) []Thread {
	step := max(1, len(cpus)/n)
	ts := make([]Thread, n)
	for i := range ts {
		ts[i] = Thread{TID: pid + i, CPU: cpus[i*step%len(cpus)]}
	}
	return ts
}

// Two-socket Sapphire Rapids (Xeon Platinum 8480C) CPU lists, as a DGX
// H100 numbers them: each socket's first hyperthreads, then their
// siblings.
const (
	dgxNode0CPUs = "0-55,112-167"
	dgxNode1CPUs = "56-111,168-223"
)

// Kubernetes cgroup paths of the DGX's two pods, one per cgroup driver.
const (
	// systemd driver: burstable pod 1f0e8a2c-5b7d-4c3e-9a41-6f2d8e7b9c10.
	cgroupK8sSystemd = "/kubepods.slice/kubepods-burstable.slice/" +
		"kubepods-burstable-pod1f0e8a2c_5b7d_4c3e_9a41_6f2d8e7b9c10.slice/" +
		"cri-containerd-df0cfd85504aef29aa797130b1f7589d8cc53295524f1a20943e7c8e8bb856ae.scope"
	// cgroupfs driver: best-effort pod b6dcdec5-de98-5651-abf8-cfee8ab37743.
	cgroupK8sCgroupfs = "/kubepods/besteffort/podb6dcdec5-de98-5651-abf8-cfee8ab37743/" +
		"80503d6751646364e15fa5908396591b2fa604a693d9510981c446bf152d0054"
)

// DGXH100 models an NVIDIA DGX H100 in good health.
//
// Two sockets (Xeon 8480C): node0 CPUs 0-55,112-167, node1 56-111,168-223,
// distances 10/21, about 1 TiB per node. As on Sapphire Rapids, every root
// port is alone on its own host bridge (pci0000:<bus>, root port
// <bus>:01.0). Four Broadcom PEX Gen5 switches, each host bridge -> root
// port -> upstream port -> five downstream ports -> GPU, IB NIC, NVMe, IB
// NIC, GPU:
//
//	switch  node  host bridge  USP      GPUs                        IB NICs (netdev)                        NVMe
//	A       0     pci0000:15   16:00.0  GPU0 18:00.0, GPU1 2a:00.0  mlx5_0 19:00.0 ibp25s0, mlx5_1 29:00.0 ibp41s0    1a:00.0
//	B       0     pci0000:37   38:00.0  GPU2 3a:00.0, GPU3 5d:00.0  mlx5_2 3b:00.0 ibp59s0, mlx5_3 5c:00.0 ibp92s0    3c:00.0
//	C       1     pci0000:97   98:00.0  GPU4 9a:00.0, GPU5 ab:00.0  mlx5_4 9b:00.0 ibp155s0, mlx5_5 aa:00.0 ibp170s0  9c:00.0
//	D       1     pci0000:b7   b8:00.0  GPU6 ba:00.0, GPU7 db:00.0  mlx5_6 bb:00.0 ibp187s0, mlx5_7 da:00.0 ibp218s0  bc:00.0
//
// GPUs are H100 SXM (10de:2330), Gen5 x16 at both ends, their 18 NVLinks
// each on four NVSwitches (which only NVML shows). IB NICs are ConnectX-7
// (15b3:1021), port 1 ACTIVE, LinkUp, 400 Gb/sec (4X NDR), link layer
// InfiniBand, Gen5 x16; IPoIB interfaces up at 400000. NVMe drives are
// Gen4 x4. Two more ConnectX-7 in Ethernet mode sit directly behind their
// own root ports: mlx5_8 at 6c:00.0 (pci0000:6b, node 0, enp108s0f0np0) and mlx5_9 at
// e4:00.0 (pci0000:e3, node 1, enp228s0f0np0), RoCE at 200 Gb/sec (4X
// HDR), interfaces at 200000. Every function's numa_node is its socket.
// Virtual: lo.
//
// GPU to NIC path classes: a GPU and the two NICs of its switch are PIX,
// the other NICs of its socket (other switch or the Ethernet port) NODE,
// those of the other socket SYS.
//
// GPUDirect, as the node is set up for it: every root and downstream
// port has ACS with redirect off (control 0), upstream ports no ACS; the
// IOMMU passes DMA through (iommu=pt: groups of type identity, one per root
// port); kernel 5.15.0-1042-nvidia; the proprietary NVIDIA driver
// 535.161.08, which offers no dma-buf, so GPUDirect RDMA goes through
// nvidia_peermem, which is loaded (with nvidia, nvidia_uvm, mlx5_core,
// mlx5_ib, ib_core, ib_uverbs, nvme). The releases are this model's
// choice, not read from a DGX.
//
// Processes:
//   - 4242 python on GPU0, allowed and running on node0 CPUs, 2,000,000
//     pages on N0 and 12,000 on N1; Kubernetes, systemd driver
//     (pod 1f0e8a2c-5b7d-4c3e-9a41-6f2d8e7b9c10).
//   - 5151 python on GPU4, allowed and running on node1 CPUs, 9,000 pages
//     on N0 and 1,800,000 on N1; Kubernetes, cgroupfs driver
//     (pod b6dcdec5-de98-5651-abf8-cfee8ab37743).
//   - 6161 nvidia-cuda-mps (the MPS server) on GPU2, not pinned (0-223),
//     threads on both nodes, 55,000 pages on N0 and 45,000 on N1; a
//     login session, not Kubernetes.
//
// dgxCuFileConfig is the part of the cufile.json GDS installs that the
// exporter reads, comments and all.
const dgxCuFileConfig = `{
    // cuFile configuration as installed with GPUDirect Storage
    "logging": { "dir": "/var/log", "level": "ERROR" },
    "properties": {
        "max_direct_io_size_kb": 16384,
        // fall back to POSIX I/O where the direct path is not available
        "allow_compat_mode": true
    }
}
`

func DGXH100() *Machine {
	m := &Machine{
		Name: "dgx-h100",
		Nodes: []Node{
			bigNode(0, dgxNode0CPUs, 1056592740, 980123456),
			bigNode(1, dgxNode1CPUs, 1056964608, 991234560),
		},
		Distances:    [][]int{{10, 21}, {21, 10}},
		NetOnly:      []NetDev{loopback()},
		NVLink:       hgxNVLink,
		Kernel:       "5.15.0-1042-nvidia",
		NVIDIADriver: &NVIDIADriver{Version: "535.161.08"},
		Modules:      []string{"ib_core", "ib_uverbs", "mlx5_core", "mlx5_ib", "nvidia", "nvidia_fs", "nvidia_peermem", "nvidia_uvm", "nvme"},
		IOMMU:        "identity",
		// GPUDirect Storage installed and nvidia-fs loaded: the data
		// drives' RAID 0 is read natively.
		Mounts:       []Mount{{Point: "/raid", FSType: "xfs", Drives: []string{"0000:1a:00.0", "0000:3c:00.0", "0000:9c:00.0", "0000:bc:00.0"}}},
		CuFileConfig: dgxCuFileConfig,
	}
	spr := func(bus int, child *Device) *HostBridge { return ownBridge(sprRootPort, bus, child) }
	m.HostBridges = append(onNode(0,
		spr(0x15, pexSwitch(0x16, gpu(h100SXM, 0x18), ibHCA(0x19, "mlx5_0"), nvme(0x1a), ibHCA(0x29, "mlx5_1"), gpu(h100SXM, 0x2a))),
		spr(0x37, pexSwitch(0x38, gpu(h100SXM, 0x3a), ibHCA(0x3b, "mlx5_2"), nvme(0x3c), ibHCA(0x5c, "mlx5_3"), gpu(h100SXM, 0x5d))),
		spr(0x6b, ethHCA(0x6c, "mlx5_8")),
	), onNode(1,
		spr(0x97, pexSwitch(0x98, gpu(h100SXM, 0x9a), ibHCA(0x9b, "mlx5_4"), nvme(0x9c), ibHCA(0xaa, "mlx5_5"), gpu(h100SXM, 0xab))),
		spr(0xb7, pexSwitch(0xb8, gpu(h100SXM, 0xba), ibHCA(0xbb, "mlx5_6"), nvme(0xbc), ibHCA(0xda, "mlx5_7"), gpu(h100SXM, 0xdb))),
		spr(0xe3, ethHCA(0xe4, "mlx5_9")),
	)...)
	m.Processes = []Process{
		{PID: 4242, PPID: 4200, Comm: "python", Exe: "/usr/bin/python3.12", GPUs: []string{"0000:18:00.0"},
			CPUsAllowed: dgxNode0CPUs, Threads: threads(4242, 16, dgxNode0CPUs),
			Pages: []uint64{2_000_000, 12_000}, Cgroup: cgroupK8sSystemd},
		{PID: 5151, PPID: 5100, Comm: "python", Exe: "/usr/bin/python3.12", GPUs: []string{"0000:9a:00.0"},
			CPUsAllowed: dgxNode1CPUs, Threads: threads(5151, 16, dgxNode1CPUs),
			Pages: []uint64{9_000, 1_800_000}, Cgroup: cgroupK8sCgroupfs},
		{PID: 6161, PPID: 1, Comm: "nvidia-cuda-mps", Exe: "/usr/bin/nvidia-cuda-mps-server", GPUs: []string{"0000:3a:00.0"},
			CPUsAllowed: "0-223", Threads: threads(6161, 12, "0-223"),
			Pages: []uint64{55_000, 45_000}, Cgroup: "/user.slice/user-1000.slice/session-3.scope"},
	}
	return m
}

// hgxNVLink is an HGX H100 board's: every GPU's 18 NVLinks on four
// NVSwitches, link l on switch l%4, at the bus numbers a DGX H100 shows
// them (the p5 has the same board).
var hgxNVLink = NVLink{PerGPU: 18, Switches: []string{"0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"}}

// bigNode is one socket's memory: about 1 TiB, mostly free, and the
// numastat of a machine that has run for a while with most allocations
// local.
func bigNode(id int, cpus string, totalKB, freeKB uint64) Node {
	hit := uint64(1_834_567_890) + uint64(id)*123_456_789
	other := uint64(2_580_470) + uint64(id)*97_531
	return Node{ID: id, CPUs: cpus, MemTotalKB: totalKB, MemFreeKB: freeKB, NUMAStat: map[string]uint64{
		"numa_hit": hit, "numa_miss": 1_234_567 + uint64(id)*1_111_111, "numa_foreign": 2_345_678 - uint64(id)*1_111_111,
		"interleave_hit": 98_765, "local_node": hit - other, "other_node": other,
	}}
}

// DGXH100FarNICs is a DGX H100 built with the NICs of its second socket
// on the first: switches C and D keep their GPUs and NVMe drives but carry
// no NICs, mlx5_9 and its host bridge are gone, and mlx5_4..mlx5_7 sit on
// node 0 behind a fifth switch E: host bridge pci0000:70, root port
// 70:01.0, USP 71:00.0, NICs 73:00.0 (mlx5_4, ibp115s0), 74:00.0 (mlx5_5,
// ibp116s0), 75:00.0 (mlx5_6, ibp117s0), 76:00.0 (mlx5_7, ibp118s0). GPUs
// 4-7 are SYS to every NIC; GPUs 0-3 are NODE to mlx5_4..mlx5_7. It is the
// machine of the dgx-h100-faults fixture: a machine cabled that way is
// built wrong, which no fault of the fault file makes.
func DGXH100FarNICs() *Machine {
	m := DGXH100()
	for _, nic := range []string{"0000:9b:00.0", "0000:aa:00.0", "0000:bb:00.0", "0000:da:00.0"} {
		m.RemoveDevice(m.Parent(nic).Addr) // the downstream port goes with its NIC
	}
	m.RemoveDevice("0000:e3:01.0")
	m.HostBridges = append(m.HostBridges, onNode(0, ownBridge(sprRootPort, 0x70,
		pexSwitch(0x71, ibHCA(0x73, "mlx5_4"), ibHCA(0x74, "mlx5_5"), ibHCA(0x75, "mlx5_6"), ibHCA(0x76, "mlx5_7"))))...)
	return m
}

// DGXH100TwoNICs is a DGX H100 tree fitted with one compute NIC per
// socket, as a server built for fewer rails is: mlx5_2 (3b:00.0, under
// switch B beside GPUs 2 and 3) on node 0 and mlx5_6 (bb:00.0, under
// switch D beside GPUs 6 and 7) on node 1. The other ConnectX-7 and both
// Ethernet ports are not fitted (their downstream and root ports go with
// them). GPUs 2, 3 and 6, 7 are PIX to their socket's NIC, GPUs 0, 1 and
// 4, 5 NODE, every GPU SYS to the other socket's: mlx5_6 is the only NIC
// on GPUs 4-7's side of the machine.
func DGXH100TwoNICs() *Machine {
	m := DGXH100()
	m.Name = "dgx-h100-two-nics"
	for _, nic := range []string{"0000:19:00.0", "0000:29:00.0", "0000:5c:00.0", "0000:9b:00.0", "0000:aa:00.0", "0000:da:00.0"} {
		m.RemoveDevice(m.Parent(nic).Addr)
	}
	m.RemoveDevice("0000:6b:01.0")
	m.RemoveDevice("0000:e3:01.0")
	return m
}

// EPYC 7R13 CPU lists of a p5.48xlarge.
const (
	p5Node0CPUs = "0-47,96-143"
	p5Node1CPUs = "48-95,144-191"
)

// p5Base is the host bridge bus of the p5's GPU tray i.
func p5Base(i int) int { return 0x47 + 0x11*i }

// AWSP5 models an AWS p5.48xlarge in good health.
//
// Two sockets (AMD EPYC 7R13): node0 CPUs 0-47,96-143, node1
// 48-95,144-191, distances 10/32. Eight trays, GPUs 0-3 on node 0 and
// 4-7 on node 1. Tray i has base bus b = 0x47 + 0x11*i (47, 58, 69, 7a,
// 8b, 9c, ad, be) and is a two-level switch tree on its own host bridge:
//
//	pci0000:<b>  root port <b>:01.0 (max Gen4 x8)
//	  L1 USP <b+1>:00.0 (max Gen5 x16, trained Gen4 x8)
//	    L1 DSP <b+2>:00.0 -> L2 USP <b+3>:00.0 -> DSPs <b+4>:00.0-04.0
//	        -> 4 EFA <b+5>..<b+8>:00.0 (Gen4 x16), NVMe <b+9>:00.0 (Gen4 x4)
//	    L1 DSP <b+2>:01.0 -> L2 USP <b+10>:00.0 -> DSP <b+11>:00.0
//	        -> GPU <b+12>:00.0 (H100 10de:2330, Gen5 x16)
//
// GPUs: 53, 64, 75, 86 (node 0), 97, a8, b9, ca (node 1), all :00.0.
// The 32 EFA devices (1d0f:efa1) are rdmap<bus>s0 with bus in decimal:
// GPU0's are rdmap76s0..rdmap79s0 (4c-4f), GPU1's rdmap93s0..rdmap96s0,
// GPU2's rdmap110s0..113s0, GPU3's rdmap127s0..130s0, GPU4's
// rdmap144s0..147s0, GPU5's rdmap161s0..164s0, GPU6's rdmap178s0..181s0,
// GPU7's rdmap195s0..198s0. Each has one port, ACTIVE, 100 Gb/sec (4X
// EDR), link layer Unspecified, no counters/ directory and the EFA
// hw_counters; EFA has no network interface. The EFAs' Gen4 links are an
// assumption of this model. One ENA (1d0f:ec20) interface, ens32, at
// 11:00.0 directly behind root port 10:01.0 (pci0000:10, node 0); reading
// its speed fails, so there is no speed file. Virtual: lo.
//
// GPU to NIC path classes: a GPU and the four EFAs of its tray are PXB
// (they meet at the L1 switch, crossing both L2 switches); the other EFAs
// of its node, and the ENA for GPUs 0-3, are NODE; the rest SYS.
//
// GPUDirect: ACS redirect off on every root and downstream port; no IOMMU
// groups; kernel 6.8.0-1015-aws and the open NVIDIA kernel module
// 550.127.05, which offer dma-buf; no nvidia_peermem (EFA reaches GPU
// memory through its own driver or dma-buf); efa, ena, ib_core, ib_uverbs,
// nvidia, nvidia_uvm and nvme loaded. The releases are this model's choice.
//
// Processes: 3131 python on GPU0 (53:00.0), allowed and running on node0
// CPUs, 1,500,000 pages on N0 and 8,000 on N1; task 0 of step 0 of Slurm
// job 4242, whose cgroup v2 is named job_4242 (Slurm 22.05 to 25.11, or
// 26.05 with CgroupJobIdPaths=yes).
func AWSP5() *Machine {
	m := &Machine{
		Name: "aws-p5",
		Nodes: []Node{
			bigNode(0, p5Node0CPUs, 1056488764, 1001234568),
			bigNode(1, p5Node1CPUs, 1056964608, 1012345678),
		},
		Distances:    [][]int{{10, 32}, {32, 10}},
		NetOnly:      []NetDev{loopback()},
		NVLink:       hgxNVLink,
		Kernel:       "6.8.0-1015-aws",
		NVIDIADriver: &NVIDIADriver{Version: "550.127.05", Open: true},
		Modules:      []string{"efa", "ena", "ib_core", "ib_uverbs", "nvidia", "nvidia_uvm", "nvme"},
		// The instance store in RAID 0, no GPUDirect Storage installed:
		// cuFile from a framework's wheel runs in compatibility mode,
		// as expected here.
		Mounts: []Mount{{Point: "/opt/dlami/nvme", FSType: "ext4"}},
	}
	ena := awsENA.endpoint(0x11)
	ena.Net = []NetDev{physNet("ens32", TypeEther, 0, 9001, mac(0x0a1b2c, 0x11))}
	ena.Net[0].Duplex = "" // ENA implements no link settings: speed and duplex fail
	m.HostBridges = onNode(0, ownBridge(milanRootPort, 0x10, ena))
	for i := range 8 {
		b := p5Base(i)
		tray := pexSwitch(b+1,
			pexSwitch(b+3, efa(b+5), efa(b+6), efa(b+7), efa(b+8), nvme(b+9)),
			pexSwitch(b+10, gpu(h100SXM, b+12)))
		m.HostBridges = append(m.HostBridges, onNode(i/4, ownBridge(milanRootPort, b, tray))...)
		m.Mounts[0].Drives = append(m.Mounts[0].Drives, fmt.Sprintf("0000:%02x:00.0", b+9))
	}
	m.Processes = []Process{
		{PID: 3131, PPID: 1, Comm: "python", Exe: "/usr/bin/python3.10", GPUs: []string{"0000:53:00.0"},
			CPUsAllowed: p5Node0CPUs, Threads: threads(3131, 12, p5Node0CPUs),
			Pages: []uint64{1_500_000, 8_000}, Cgroup: "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0",
			Environ: SlurmEnviron("4242", "", "0")},
	}
	return m
}

// SlurmEnviron is what srun gives task 0 of a job step: the job and step
// IDs, and the job's SLUID where given (Slurm 26.05 and later), among the
// rest.
func SlurmEnviron(job, sluid, step string) []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/train", "SLURM_JOB_ID=" + job, "SLURM_JOBID=" + job,
		"SLURM_STEP_ID=" + step, "SLURM_PROCID=0", "SLURM_LOCALID=0", "CUDA_VISIBLE_DEVICES=0", "NCCL_NVLS_ENABLE=0"}
	if sluid != "" {
		env = append(env, "SLURM_JOB_SLUID="+sluid)
	}
	return env
}

// NoGPU models a small one-socket server without GPUs or RDMA.
//
// One node, CPUs 0-15, 64 GiB, distance 10. One host bridge, pci0000:40,
// with two root ports (Ice Lake, Gen4): 40:01.0 above an Intel E810
// Ethernet NIC at 41:00.0 (8086:1593, Gen4 x16, interface enp65s0f0 up at
// 25000) and 40:03.0 above an NVMe drive at 42:00.0 (Gen4 x4); the two
// endpoints are PHB to each other. Virtual: lo. No processes. Kernel
// 6.1.0-18-amd64, ice and nvme loaded, no IOMMU groups.
func NoGPU() *Machine {
	e810 := intelE810.endpoint(0x41)
	e810.Net = []NetDev{physNet("enp65s0f0", TypeEther, 25000, 1500, mac(0xb49691, 0x41))}
	return &Machine{
		Name: "no-gpu",
		Nodes: []Node{{ID: 0, CPUs: "0-15", MemTotalKB: 65_626_536, MemFreeKB: 52_118_220, NUMAStat: map[string]uint64{
			"numa_hit": 98_765_432, "interleave_hit": 4_321, "local_node": 98_765_432,
		}}},
		Distances: [][]int{{10}},
		NetOnly:   []NetDev{loopback()},
		Kernel:    "6.1.0-18-amd64",
		Modules:   []string{"ice", "nvme"},
		HostBridges: onNode(0, hostBridge(0x40,
			rootPort(icxRootPort, 0x40, 1, e810),
			rootPort(icxRootPort, 0x40, 3, nvme(0x42)))),
	}
}

// H200VM models the borrowed 2x H200 virtual machine as measured.
//
// One node, CPUs 0-31, distance 10; node0 numastat numa_hit 554609,
// numa_miss 0, numa_foreign 0, interleave_hit 1345, local_node 554609,
// other_node 0; MemTotal 4812272 kB, MemFree 3381940 kB, MemUsed 1430332
// kB. Every function sits directly on pci0000:00, with no bridges, and
// has numa_node -1 and local_cpulist 0-31:
//
//	00:00.0  host bridge 8086:0d57, class 0x060000, no link files
//	00:01.0  virtio block 1af4:1042, class 0x018000, no link files (virtio0)
//	00:02.0  virtio block 1af4:1042, no link files (virtio1)
//	00:03.0  virtio net 1af4:1041, class 0x020000, no link files; its
//	         interface eth0 is at 00:03.0/virtio2/net/eth0 and eth0's
//	         device link points at ../../../virtio2
//	00:06.0  H200 10de:2335, driver nvidia, 32.0 GT/s PCIe x16 current and max
//	00:07.0  H200 10de:2335, likewise
//
// eth0: up, speed -1, duplex unknown, carrier 1, carrier_changes 2, mtu
// 1400. Virtual: lo, and ifb0 and ifb1 down, whose speed file is left out
// (reading it fails with EINVAL on the real machine), as are carrier and
// duplex. No RDMA. Process 793 python3 on GPU 00:06.0, cgroup
// /process_api/98e385b556f11a16e066cff4ff314805, Cpus_allowed_list 0-31,
// 34 threads. Loaded modules as read there: nvidia and nvidia_uvm, no
// nvidia_peermem; no /sys/kernel/iommu_groups. The kernel release and the
// driver's flavour were not recorded: those files are left out.
func H200VM() *Machine {
	virtio := func(id pciID, dev int, name string, virtioID int) *Device {
		d := id.fn(Endpoint, 0, dev)
		d.Virtio = &Virtio{Name: name, DeviceID: virtioID}
		return d
	}
	eth := virtio(virtioNet, 3, "virtio2", 1)
	eth.Net = []NetDev{{Name: "eth0", Type: TypeEther, OperState: "up", Carrier: true, Speed: -1, Duplex: "unknown",
		MTU: 1400, Address: "42:01:0a:80:00:0b", CarrierUp: 1, CarrierDown: 1, Stats: netStats("eth0")}}
	ifb := func(name, addr string) NetDev {
		return NetDev{Name: name, Type: TypeEther, OperState: "down", AdminDown: true, MTU: 1500, Address: addr,
			Stats: counterSet(valuesFor(name), netStatNames, nil)} // never up: all zero
	}
	m := &Machine{
		Name: "h200-vm",
		Nodes: []Node{{ID: 0, CPUs: "0-31", MemTotalKB: 4812272, MemFreeKB: 3381940, NUMAStat: map[string]uint64{
			"numa_hit": 554609, "interleave_hit": 1345, "local_node": 554609,
		}}},
		Distances: [][]int{{10}},
		NetOnly:   []NetDev{loopback(), ifb("ifb0", "6e:3c:94:1a:d2:07"), ifb("ifb1", "d6:81:2b:5f:90:4e")},
		// The two H200s are joined directly, all 18 links of each.
		NVLink:  NVLink{PerGPU: 18},
		Modules: []string{"nvidia", "nvidia_uvm"},
		HostBridges: onNode(-1, hostBridge(0x00,
			vmHostBridge.fn(Endpoint, 0, 0),
			virtio(virtioBlock, 1, "virtio0", 2),
			virtio(virtioBlock, 2, "virtio1", 2),
			eth,
			h200SXM.fn(Endpoint, 0, 6),
			h200SXM.fn(Endpoint, 0, 7))),
		Processes: []Process{
			{PID: 793, PPID: 1, Comm: "python3", Exe: "/usr/bin/python3.12", GPUs: []string{"0000:00:06.0"},
				CPUsAllowed: "0-31", Threads: threads(793, 34, "0-31"),
				Pages: []uint64{210_000}, Cgroup: "/process_api/98e385b556f11a16e066cff4ff314805"},
		},
	}
	return m
}

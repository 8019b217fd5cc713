package sim

import (
	"fmt"
	"maps"
	"slices"

	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/numa"
)

// Profile is a machine the simulated node can be, and how fast its links
// move data.
type Profile struct {
	Name        string
	Description string
	// Machine builds the machine in good health: the one model the node's
	// sysfs and procfs tree, its NVML (nvmlmodel.New) and the check of a
	// fault file all derive from. It is built afresh for every change
	// written: faults are laid over a fresh copy, so that removing one
	// restores health.
	Machine func() *machine.Machine
	Links   LinkModel
	// NCCL is what the exporter's container holds of NCCL (ncclenv.go).
	NCCL ProfileNCCL
}

// LinkModel is what the modelled probes measure against what the path
// allows. The shares are those of real copies: a DMA over PCIe carries
// its data in TLPs with headers, and the copy engines and the memory
// controllers leave a little of the peak unused.
type LinkModel struct {
	// HostEfficiency is the share of the slowest PCIe hop's current rate a
	// host<->device copy reaches: 0.87 of Gen5 x16 is the 55 GB/s a DGX
	// H100 measures.
	HostEfficiency float64
	// InterSocketBytesPerSecond bounds a host copy whose buffer sits on
	// another NUMA node: the share of the socket interconnect one copy
	// gets.
	InterSocketBytesPerSecond float64
}

// What the other links give, the same on every profile (H100 SXM).
const (
	// NVLink 4: 25 GB/s of payload per link and direction; copies reach
	// 0.86 of it.
	nvlinkEfficiency = 0.86
	// Local HBM copies reach 0.85 of the peak.
	hbmEfficiency = 0.85
	// PCIe peer to peer through the host (no NVLink between the pair).
	pcieP2PEfficiency = 0.8
	// Each direction of a bidirectional copy, against a one-way copy.
	hostBidirectionalShare = 0.96
	peerBidirectionalShare = 0.97
	// Latencies: a pointer chase in pinned host memory, one in a peer's
	// memory, an empty kernel from launch to the host seeing it done.
	hostLatencySeconds   = 1.2e-6
	remoteNodeLatencyAdd = 0.15e-6
	peerLatencySeconds   = 0.85e-6
	launchLatencySeconds = 10e-6
)

// Profiles are the machines the simulated node can be, by name.
var Profiles = map[string]Profile{
	"dgx-h100": {
		Name:        "dgx-h100",
		Description: "NVIDIA DGX H100: 8 H100 SXM on NVSwitch, 2 Sapphire Rapids sockets, 8 ConnectX-7 NDR ports and 2 Ethernet ports, Gen5 x16 to every GPU",
		Machine:     machine.DGXH100,
		Links:       LinkModel{HostEfficiency: 0.87, InterSocketBytesPerSecond: 53e9},
		// NCCL's own IB transport: no plugin.
	},
	"aws-p5": {
		Name:        "aws-p5",
		Description: "AWS p5.48xlarge: 8 H100 SXM on NVSwitch, 2 EPYC sockets, 32 EFA devices, each GPU tray behind a Gen4 x8 uplink",
		Machine:     awsP5,
		// 0.9 of Gen4 x8 is 14.2 GB/s; a Gen4 link loses less to TLP
		// overhead than Gen5 at the payload size the switches use.
		Links: LinkModel{HostEfficiency: 0.9, InterSocketBytesPerSecond: 40e9},
		// aws-ofi-nccl where AWS's EFA installer puts it, found as the
		// chart's EFA example sets it up.
		NCCL: ProfileNCCL{
			Env:    map[string]string{"NCCL_NET_PLUGIN": "ofi", "LD_LIBRARY_PATH": "/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib"},
			Plugin: "opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so",
		},
	},
}

// ProfileNames lists the profiles in name order.
func ProfileNames() []string { return slices.Sorted(maps.Keys(Profiles)) }

// awsP5 is machine.AWSP5 (whose job 4242 runs on GPU 0) with a second
// job, on GPU 5, so that two GPUs are busy as on the DGX (which has
// three). Job 4343's cgroup is named by its SLUID, as Slurm 26.05 names
// it by default; the numeric ID is in its environment.
func awsP5() *machine.Machine {
	m := machine.AWSP5()
	const cpus = "48-95,144-191" // node 1, GPU 5's socket
	m.Processes = append(m.Processes, machine.Process{
		PID: 3535, PPID: 1, Comm: "python", Exe: "/usr/bin/python3.10", GPUs: []string{"0000:a8:00.0"},
		CPUsAllowed: cpus, Threads: machine.ThreadsOn(3535, 12, mustCPUs(cpus)),
		Pages: []uint64{6_000, 1_400_000}, Cgroup: "/system.slice/slurmstepd.scope/" + P5JobSLUID + "/step_0/user/task_0",
		Environ: machine.SlurmEnviron("4343", P5JobSLUID, "0"),
	})
	return m
}

// P5JobSLUID is the SLUID of the simulated p5's job 4343.
const P5JobSLUID = "s5K1KKYAYG5D00"

// mustCPUs parses a CPU list written in this package.
func mustCPUs(list string) []int {
	s, err := numa.ParseCPUList(list)
	if err != nil {
		panic(fmt.Sprintf("sim: CPU list %q: %v", list, err))
	}
	return s.CPUs()
}

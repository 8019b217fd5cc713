package sim

import (
	"fmt"
	"maps"

	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
)

// faultyFixtures are machines with faults laid over them, written in the
// fault file's own form and applied by ApplyFaults as the simulated node
// applies a fault file: the readers' tests see each defect as the node
// shows it. base is the machine before the faults, which may itself be
// built wrong in a way no fault makes (a PCIe tree cabled badly, a file
// holding garbage).
var faultyFixtures = map[string]struct {
	base   func() *machine.Machine
	faults string
}{
	// One of each defect the exporter must report on a DGX H100.
	"dgx-h100-faults": {dgxH100Miswired, `
faults:
# Switch B's uplink trained x8 of x16: the upstream port 38:00.0 and the
# root port 37:01.0 above it show x8; GPUs 2 and 3 keep x16 to the switch.
- {kind: pcie_width, device: "0000:38:00.0", width: 8}
# mlx5_2 ACTIVE at 200 Gb/sec (4X HDR), its interface ibp59s0 at 200000.
- {kind: nic_rate, device: mlx5_2, fraction: 0.5}
# mlx5_3 DOWN, Disabled, 10 Gb/sec (4X SDR), lid 0xffff; ibp92s0 down
# without carrier, speed -1.
- {kind: nic_down, device: mlx5_3}
# pid 4242 on GPU 0 (node 0) pinned to node 1's CPUs, its threads there
# and 90% of its pages (1,800,000 of 2,000,000) on N1.
- {kind: process_far_socket, gpu: 0, pid: 4242}
# ACS request and completion redirect on at GPU 2's downstream port
# 39:00.0 (control 0x1d in its config image).
- {kind: acs_redirect, gpu: 2}
# nvidia_peermem not loaded (the proprietary driver offers no dma-buf).
- {kind: peermem_missing}
`},
	// One compute NIC per socket, and socket 1's, beside GPUs 6 and 7
	// under switch D, down: GPUs 4-7 have no usable NIC on their side of
	// the machine (issue 37).
	"dgx-h100-two-nics-faults": {machine.DGXH100TwoNICs, `
faults:
# mlx5_6 DOWN, Disabled, 10 Gb/sec (4X SDR), lid 0xffff; ibp187s0 down
# without carrier, speed -1.
- {kind: nic_down, device: mlx5_6}
`},
	// Three defects of a p5.48xlarge.
	"aws-p5-faults": {awsP5TwoJobs, `
faults:
# GPU 3's first EFA, rdmap127s0 (7f:00.0), port 1 DOWN and Disabled.
- {kind: nic_down, device: rdmap127s0}
# GPU 5 (a8:00.0) trained Gen5 x8 of x16; the L2 downstream port a7:00.0
# above it shows x8 too.
- {kind: pcie_width, gpu: 5, width: 8}
# pid 3232 on GPU 6 (node 1) runs on node 1's CPUs with 80% of its pages
# (1,200,000 of 1,500,000) on N0.
- {kind: process_far_memory, gpu: 6, pid: 3232}
`},
}

// dgxH100Miswired is machine.DGXH100FarNICs, whose second socket's NICs sit
// on the first, with mlx5_1's symbol_error reading "N/A": one value a
// reader cannot parse, every other file fine.
func dgxH100Miswired() *machine.Machine {
	m := machine.DGXH100FarNICs()
	m.Overrides = map[string]string{m.IBPortDir("mlx5_1", 1) + "/counters/symbol_error": "N/A\n"}
	return m
}

// awsP5TwoJobs is machine.AWSP5 with a second training job, pid 3232 on
// GPU 6 (b9:00.0), on node 1's CPUs with its memory there.
func awsP5TwoJobs() *machine.Machine {
	m := machine.AWSP5()
	const cpus = "48-95,144-191" // node 1
	m.Processes = append(m.Processes, machine.Process{
		PID: 3232, PPID: 1, Comm: "python", Exe: "/usr/bin/python3.10", GPUs: []string{"0000:b9:00.0"},
		CPUsAllowed: cpus, Threads: machine.ThreadsOn(3232, 12, mustCPUs(cpus)),
		Pages: []uint64{8_000, 1_500_000}, Cgroup: "/system.slice/train-gpu6.service",
	})
	return m
}

// Fixtures returns the constructors of the machines whose trees are
// committed as numa/testdata/<name>.txtar, by name: machine's profiles in
// good health and the faulty ones above. A faulty one whose faults do not
// parse or do not fit its machine panics: it is a mistake in this file,
// which the fixture test catches.
func Fixtures() map[string]func() *machine.Machine {
	out := maps.Clone(machine.Profiles())
	for name, fx := range faultyFixtures {
		out[name] = func() *machine.Machine {
			m := fx.base()
			faults, err := ParseFaults(name, []byte(fx.faults))
			if err == nil {
				err = CheckFaults(name, m, faults)
			}
			if err != nil {
				panic(fmt.Sprintf("sim: fixture %v", err))
			}
			ApplyFaults(m, faults)
			m.Name = name
			return m
		}
	}
	return out
}

package sim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
)

// ApplyFaults lays faults over a machine model: what they change in its
// sysfs and procfs tree (link widths and generations, port rates and
// states, processes, their placement and their end, ACS, nvidia_peermem and the
// driver's flavour). It is the one code that does,
// for the simulated node (every tick, over a fresh machine in good health,
// with the faults as they stand at that moment: a flapping port in its
// down phase is a nic_down) and for the faulty fixtures of numa/testdata
// (Fixtures). What a tree cannot show (NVML, counters that grow, probe
// results) is the live node's. The faults must have passed CheckFaults
// against m; nic_flapping and the kinds the tree does not show are left
// out.
func ApplyFaults(m *machine.Machine, faults []Fault) {
	gpus := m.GPUs()
	// Ports go down last, so that a port both slowed and down shows down.
	for _, down := range []bool{false, true} {
		for _, f := range faults {
			if (f.Kind == NICDown) != down {
				continue
			}
			switch f.Kind {
			case PCIeWidth:
				linkOf(m, gpus, f).Width = f.Width
			case PCIeGeneration:
				linkOf(m, gpus, f).Gen = f.Generation
			case NICRate:
				scaleNIC(nicFunction(m, f.Device), f.Fraction)
			case NICDown:
				nicDown(nicFunction(m, f.Device))
			case ProcessFarSocket, ProcessFarMemory:
				pid := f.PID
				if pid == 0 {
					m.Processes = append(m.Processes, newProcess(m, f.GPU, gpus[f.GPU]))
					pid = newProcessPID(f.GPU)
				}
				place(m, gpus[f.GPU], m.Process(pid), f.Kind)
			case ProcessExit:
				m.Processes = slices.DeleteFunc(m.Processes, func(p machine.Process) bool { return p.PID == f.PID })
			case ACSRedirect, PeermemMissing:
				applyGPUDirect(m, gpus, f)
			case NVFSMissing:
				applyStorage(m, f)
			}
		}
	}
}

// linkOf is the function whose link a PCIe fault retrains: the GPU's, or
// the device named (the lower end of its link, whose files say what it
// trained at).
func linkOf(m *machine.Machine, gpus []*machine.Device, f Fault) *machine.Device {
	if f.Device != "" {
		return m.Device(f.Device)
	}
	return gpus[f.GPU]
}

// scaleNIC trains a NIC function's ports at a share of their rate, and
// its interfaces at that share of their speed.
func scaleNIC(d *machine.Device, fraction float64) {
	if fraction == 1 {
		return
	}
	for i := range d.RDMA {
		for j := range d.RDMA[i].Ports {
			p := &d.RDMA[i].Ports[j]
			p.Rate = scaleRate(p.Rate, fraction)
		}
	}
	for i := range d.Net {
		if nd := &d.Net[i]; nd.Speed > 0 {
			nd.Speed = int(float64(nd.Speed) * fraction)
		}
	}
}

// nicDown takes a NIC function's ports down as a pulled cable or a port
// disabled at the switch shows: the RDMA ports DOWN and Disabled (mlx5 at
// the lowest rate, an InfiniBand port without a LID), the interfaces
// without carrier, of unknown speed, and gone down since they last came
// up.
func nicDown(d *machine.Device) {
	for i := range d.RDMA {
		for j := range d.RDMA[i].Ports {
			p := &d.RDMA[i].Ports[j]
			p.State, p.PhysState = machine.PortDown, machine.PhysDisabled
			if p.LinkLayer != "Unspecified" {
				p.Rate = machine.RateSDR10
			}
			if p.LinkLayer == "InfiniBand" {
				p.LID, p.SMLID = 0xffff, 0
			}
		}
	}
	for i := range d.Net {
		nd := &d.Net[i]
		nd.OperState, nd.Carrier, nd.Speed = "down", false, -1
		nd.CarrierDown = max(nd.CarrierDown, nd.CarrierUp)
	}
}

// newProcessPID is the PID of the process a process fault without a pid
// starts on GPU i; no profile uses PIDs in this range.
func newProcessPID(i int) int { return 7000 + i }

// newProcess is the process a process fault without a pid starts on GPU
// i: a python job on the GPU's node, until place moves it.
func newProcess(m *machine.Machine, i int, gpu *machine.Device) machine.Process {
	pid := newProcessPID(i)
	cpus := nodeCPUs(m, gpu.NUMANode)
	return machine.Process{
		PID: pid, PPID: 1, Comm: "python", Exe: "/usr/bin/python3", GPUs: []string{gpu.Addr},
		CPUsAllowed: machine.FormatList(cpus), Threads: machine.ThreadsOn(pid, 16, cpus),
		Cgroup: fmt.Sprintf("/user.slice/user-1000.slice/session-%d.scope", 40+i),
	}
}

// The memory of a misplaced process, in 4 KiB pages: 7.6 GiB in all, most
// of it on the far node.
const (
	farSocketPages = 1_800_000 // process_far_socket: 90% far
	farMemoryPages = 1_200_000 // process_far_memory: 80% far
	allPages       = 2_000_000
	allMemoryPages = 1_500_000
)

// place puts a process on the GPU's far socket. process_far_socket binds
// its CPUs to the first other NUMA node, runs its threads there and puts
// 90% of its pages there: a job started with the wrong numactl.
// process_far_memory leaves its CPUs and puts 80% of its pages on the far
// node: a job whose memory was first touched before it was bound.
func place(m *machine.Machine, gpu *machine.Device, p *machine.Process, kind FaultKind) {
	far := gpu.NUMANode
	for _, n := range m.Nodes {
		if n.ID != gpu.NUMANode {
			far = n.ID
			break
		}
	}
	farPages, total := uint64(farSocketPages), uint64(allPages)
	if kind == ProcessFarMemory {
		farPages, total = farMemoryPages, allMemoryPages
	} else {
		cpus := nodeCPUs(m, far)
		p.CPUsAllowed, p.Threads = machine.FormatList(cpus), machine.ThreadsOn(p.PID, len(p.Threads), cpus)
	}
	p.Pages = make([]uint64, len(m.Nodes))
	for i, n := range m.Nodes {
		switch n.ID {
		case far:
			p.Pages[i] = farPages
		case gpu.NUMANode:
			p.Pages[i] = total - farPages
		}
	}
}

// nodeCPUs are the CPUs of a NUMA node.
func nodeCPUs(m *machine.Machine, id int) []int {
	for _, n := range m.Nodes {
		if n.ID == id {
			return mustCPUs(n.CPUs)
		}
	}
	return nil
}

// ibLaneGbps are InfiniBand lane speeds, slowest first.
var ibLaneGbps = []struct {
	name string
	gbps float64
}{{"SDR", 2.5}, {"DDR", 5}, {"QDR", 10}, {"FDR", 14.0625}, {"EDR", 25}, {"HDR", 50}, {"NDR", 100}, {"XDR", 200}}

// scaleRate returns an RDMA port's rate file for fraction of rate: the
// same lanes at a slower speed where one gives it (a port trained down),
// else the same speed on fewer lanes, else the bare rate.
func scaleRate(rate string, fraction float64) string {
	num, rest, ok := strings.Cut(rate, " Gb/sec")
	gbps, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil {
		return rate
	}
	width, speed := 4, ""
	if inner, ok := strings.CutPrefix(rest, " ("); ok {
		w, s, _ := strings.Cut(strings.TrimSuffix(inner, ")"), "X")
		if v, err := strconv.Atoi(w); err == nil && v > 0 {
			width = v
		}
		speed = strings.TrimSpace(s)
	}
	target := gbps * fraction
	near := func(a, b float64) bool { return math.Abs(a-b) < 0.01*b }
	for _, l := range ibLaneGbps {
		if near(l.gbps*float64(width), target) {
			return fmt.Sprintf("%s Gb/sec (%dX %s)", formatGbps(l.gbps*float64(width)), width, l.name)
		}
	}
	for _, l := range ibLaneGbps {
		if l.name != speed {
			continue
		}
		for _, w := range []int{1, 2, 4, 8, 12} {
			if near(l.gbps*float64(w), target) {
				return fmt.Sprintf("%s Gb/sec (%dX %s)", formatGbps(l.gbps*float64(w)), w, l.name)
			}
		}
	}
	return formatGbps(target) + " Gb/sec"
}

// formatGbps prints a rate as the kernel does: whole, or with ".5".
func formatGbps(v float64) string {
	whole := math.Floor(v)
	if v-whole >= 0.5 {
		return fmt.Sprintf("%d.5", int64(whole))
	}
	return strconv.FormatInt(int64(whole), 10)
}

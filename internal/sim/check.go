package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
)

// CheckFaults reports the first fault that names something m lacks: a
// GPU, NVLink, peer, PCI function, NIC or process it does not have, or a
// link state beyond what the link supports. Everything it knows comes from the machine
// model, the one the node's NVML and tree derive from. name is the fault
// file, for the error.
func CheckFaults(name string, m *machine.Machine, faults []Fault) error {
	gpus := m.GPUs()
	for i, f := range faults {
		fail := func(field, format string, args ...any) error {
			return &FaultError{File: name, Entry: i, Kind: f.Kind, Field: field, Err: fmt.Errorf(format, args...)}
		}
		if f.GPU >= len(gpus) {
			return fail("gpu", "GPU %d: this node has GPUs 0-%d", f.GPU, len(gpus)-1)
		}
		if f.PeerGPU >= len(gpus) {
			return fail("peer_gpu", "GPU %d: this node has GPUs 0-%d", f.PeerGPU, len(gpus)-1)
		}
		for _, i := range f.GPUs.Indices() {
			if i >= len(gpus) {
				return fail("gpus", "GPU %d: this node has GPUs 0-%d", i, len(gpus)-1)
			}
		}
		var g *machine.Device
		if f.GPU >= 0 {
			g = gpus[f.GPU]
		}
		switch f.Kind {
		case PCIeWidth, PCIeGeneration:
			d, link := g, fmt.Sprintf("GPU %d's link", f.GPU)
			if f.Device != "" {
				d, link = m.Device(f.Device), f.Device+"'s link"
				switch {
				case d == nil:
					return fail("device", "no PCI function %s on this node", f.Device)
				case slices.Contains(gpus, d):
					return fail("device", "%s is GPU %d: write gpu: %d", f.Device, slices.Index(gpus, d), slices.Index(gpus, d))
				case d.MaxGen == 0:
					return fail("device", "%s has no PCIe link", f.Device)
				case d.Kind == machine.RootPort || d.Kind == machine.DownstreamPort:
					return fail("device", "%s is the upper end of the link below it; name the function below", f.Device)
				}
			}
			if f.Width > d.MaxWidth {
				return fail("width", "x%d is wider than %s can train (x%d)", f.Width, link, d.MaxWidth)
			}
			if f.Generation > d.MaxGen {
				return fail("generation", "Gen%d is beyond what %s supports (Gen%d)", f.Generation, link, d.MaxGen)
			}
		case NVLinkDown, NVLinkErrors:
			if f.Link >= m.NVLink.PerGPU {
				return fail("link", "GPU %d has NVLinks 0-%d", f.GPU, m.NVLink.PerGPU-1)
			}
		case NICRate, NICDown, NICFlapping, NICSymbolErrors:
			fn := nicFunction(m, f.Device)
			if fn == nil {
				return fail("device", "no RDMA device or network interface %q on this node (%s)", f.Device, nicList(m))
			}
			if f.Kind == NICRate && !hasRate(fn) {
				return fail("device", "%s reports no rate or speed to lower", f.Device)
			}
			if f.Kind == NICSymbolErrors && !hasSymbolErrors(fn) {
				return fail("device", "%s has no symbol_error counter (EFA devices and plain interfaces have none)", f.Device)
			}
		case NCCLTransport:
			if f.Transport == probes.TransportNet && !hasRDMA(m) {
				return fail("transport", "this node has no RDMA device for NCCL's network transport")
			}
		case NCCLNetSocket, NCCLGDROff:
			if !hasRDMA(m) {
				return fail("kind", "this node has no RDMA device: NCCL takes sockets between nodes anyway")
			}
		case ProcessFarSocket, ProcessFarMemory:
			if len(m.Nodes) < 2 {
				return fail("gpu", "this node has one NUMA node: no socket is far")
			}
			if g.NUMANode < 0 {
				return fail("gpu", "GPU %d's NUMA node is unknown", f.GPU)
			}
			if p := m.Process(f.PID); f.PID != 0 && (p == nil || !slices.Contains(p.GPUs, g.Addr)) {
				return fail("pid", "no process %d on GPU %d", f.PID, f.GPU)
			}
		case ProcessExit:
			if m.Process(f.PID) == nil {
				return fail("pid", "no process %d on this node (%s)", f.PID, processList(m))
			}
		case ACSRedirect:
			if field, problem := checkACSRedirect(m, gpus, f); problem != "" {
				return fail(field, "%s", problem)
			}
		case PeermemMissing:
			if problem := checkPeermemMissing(m); problem != "" {
				return fail("kind", "%s", problem)
			}
		case NVFSMissing:
			if problem := checkNVFSMissing(m); problem != "" {
				return fail("kind", "%s", problem)
			}
		}
	}
	return nil
}

// processList names the machine's processes for an error: the PIDs in
// order.
func processList(m *machine.Machine) string {
	pids := make([]int, len(m.Processes))
	for i, p := range m.Processes {
		pids[i] = p.PID
	}
	slices.Sort(pids)
	names := make([]string, len(pids))
	for i, pid := range pids {
		names[i] = strconv.Itoa(pid)
	}
	if len(names) == 0 {
		return "it has none"
	}
	return "it has " + strings.Join(names, ", ")
}

// nicFunction returns the PCI function that carries an RDMA device or a
// network interface, or nil: a port's state is its function's.
func nicFunction(m *machine.Machine, name string) *machine.Device {
	var found *machine.Device
	walkDevices(m, func(d *machine.Device) {
		for _, ib := range d.RDMA {
			if ib.Name == name {
				found = d
			}
		}
		for _, nd := range d.Net {
			if nd.Name == name {
				found = d
			}
		}
	})
	return found
}

// hasRDMA says whether the machine has an RDMA device, the network NCCL
// would use between its own GPUs.
func hasRDMA(m *machine.Machine) bool {
	found := false
	walkDevices(m, func(d *machine.Device) { found = found || len(d.RDMA) > 0 })
	return found
}

// hasRate says whether a NIC function has a rate or speed a nic_rate
// fault can lower.
func hasRate(d *machine.Device) bool {
	for _, ib := range d.RDMA {
		for _, p := range ib.Ports {
			if p.Rate != "" {
				return true
			}
		}
	}
	return slices.ContainsFunc(d.Net, func(nd machine.NetDev) bool { return nd.Speed > 0 })
}

// hasSymbolErrors says whether a NIC function has a symbol_error counter
// (mlx5 does, EFA does not).
func hasSymbolErrors(d *machine.Device) bool {
	for _, ib := range d.RDMA {
		for _, p := range ib.Ports {
			if p.Counters != nil {
				return true
			}
		}
	}
	return false
}

// nicList names the machine's RDMA devices and interfaces for an error,
// the first dozen in natural order.
func nicList(m *machine.Machine) string {
	var names []string
	walkDevices(m, func(d *machine.Device) {
		for _, ib := range d.RDMA {
			names = append(names, ib.Name)
		}
		for _, nd := range d.Net {
			names = append(names, nd.Name)
		}
	})
	slices.SortFunc(names, numa.NaturalCompare)
	if len(names) > 12 {
		names = append(names[:12], "...")
	}
	return strings.Join(names, ", ")
}

// nicFunctions maps every RDMA device and interface name to the address of
// its PCI function.
func nicFunctions(m *machine.Machine) map[string]string {
	fnOf := map[string]string{}
	walkDevices(m, func(d *machine.Device) {
		for _, ib := range d.RDMA {
			fnOf[ib.Name] = d.Addr
		}
		for _, nd := range d.Net {
			fnOf[nd.Name] = d.Addr
		}
	})
	return fnOf
}

// walkDevices calls f for every PCI function, depth first.
func walkDevices(m *machine.Machine, f func(d *machine.Device)) {
	var visit func(ds []*machine.Device)
	visit = func(ds []*machine.Device) {
		for _, d := range ds {
			f(d)
			visit(d.Children)
		}
	}
	for _, hb := range m.HostBridges {
		visit(hb.Devices)
	}
}

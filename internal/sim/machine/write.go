package machine

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Write writes the machine under root: root/sys and root/proc, laid out
// as the kernel lays them out. Write into an empty directory: writing
// again over an earlier tree replaces the files the model has but leaves
// behind those of devices it no longer has.
func (m *Machine) Write(root string) error {
	t, err := m.tree(nil)
	if err != nil {
		return err
	}
	return t.writeTo(root)
}

// tree builds the machine's files in memory, calling pause (when not nil)
// between its parts.
func (m *Machine) tree(pause func()) (*tree, error) {
	if pause == nil {
		pause = func() {}
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	w := &writer{m: m, t: newTree(), nodeCPUs: map[int][]int{}, maps: map[int]mapsInfo{}, hugeUsed: map[int]uint64{}, nvme: map[string]nvmeNamespace{}}
	// Processes' hugepages come out of their nodes' pools, which meminfo
	// shows, so lay out their memory first.
	for _, p := range m.Processes {
		mi := numaMaps(&p)
		w.maps[p.PID] = mi
		for n, c := range mi.hugePerNode {
			w.hugeUsed[n] += c
		}
	}
	for _, n := range m.Nodes {
		cpus := mustList(n.CPUs) // check parsed them
		w.nodeCPUs[n.ID] = cpus
		w.cpus = append(w.cpus, cpus...)
	}
	slices.Sort(w.cpus)
	if len(w.cpus) > 0 {
		w.nrCPUs = w.cpus[len(w.cpus)-1] + 1
	}
	w.nodes()
	// Virtual interfaces come first so that lo gets ifindex 1, as it does
	// on every Linux machine.
	for i := range m.NetOnly {
		w.net("sys/devices/virtual", &m.NetOnly[i], false)
	}
	// Pauses between the parts, as Sync pauses between files: a DGX's
	// tree takes milliseconds to render.
	pause()
	for _, hb := range m.HostBridges {
		for _, d := range hb.Devices {
			w.device("sys/devices/"+hb.Name(), d)
		}
		pause()
	}
	w.storage()
	for i := range m.Processes {
		w.process(&m.Processes[i])
	}
	pause()
	w.kernel()
	for p, data := range m.Overrides {
		w.t.entries[p] = entry{data: data}
	}
	for p, to := range m.Links {
		w.t.link(p, to)
	}
	return w.t, w.t.err
}

// writer carries what every part of the tree needs to know about the
// machine as a whole.
type writer struct {
	m        *Machine
	t        *tree
	cpus     []int                    // every CPU, ascending
	nrCPUs   int                      // the kernel's nr_cpu_ids: bits in a CPU mask
	nodeCPUs map[int][]int            // node ID to its CPUs
	ifindex  int                      // last interface index handed out
	maps     map[int]mapsInfo         // numa_maps layout by PID
	hugeUsed map[int]uint64           // 2 MiB hugepages in use by node
	nvme     map[string]nvmeNamespace // NVMe drives' namespaces by PCI address
}

// maxNumNodes is MAX_NUMNODES of distribution kernels (NODES_SHIFT 10); it
// sets the width of nodemasks such as Mems_allowed.
const maxNumNodes = 1024

// nodes writes sys/devices/system/node and the CPU lists of
// sys/devices/system/cpu.
func (w *writer) nodes() {
	const base = "sys/devices/system/node"
	var ids []int
	for _, n := range w.m.Nodes {
		ids = append(ids, n.ID)
	}
	for _, f := range []string{"online", "possible", "has_cpu", "has_memory", "has_normal_memory"} {
		w.t.line(base+"/"+f, FormatList(ids))
	}
	for i, n := range w.m.Nodes {
		dir := fmt.Sprintf("%s/node%d", base, n.ID)
		w.t.line(dir+"/cpulist", FormatList(w.nodeCPUs[n.ID]))
		w.t.line(dir+"/cpumap", formatMask(w.nodeCPUs[n.ID], w.nrCPUs))
		w.t.line(dir+"/distance", joinInts(w.m.Distances[i], " "))
		w.t.file(dir+"/numastat", numastat(n.NUMAStat))
		w.t.file(dir+"/meminfo", meminfo(n, w.hugeUsed[n.ID]))
	}
	for _, f := range []string{"online", "possible", "present"} {
		w.t.line("sys/devices/system/cpu/"+f, FormatList(w.cpus))
	}
}

// numastatKeys are the lines of a node's numastat file, in kernel order.
var numastatKeys = []string{"numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node", "other_node"}

func numastat(v map[string]uint64) string {
	var b strings.Builder
	for _, k := range numastatKeys {
		fmt.Fprintf(&b, "%s %d\n", k, v[k])
	}
	return b.String()
}

// meminfo prints a node's meminfo file in the kernel's layout: the label
// padded to 16 columns and the value right-aligned in 8. Only the totals
// come from the model; the breakdown of used memory is a plausible split
// of it, for parsers to skip over. The hugepage pool is what the node's
// processes use, rounded up to a multiple of 256 pages.
func meminfo(n Node, hugeUsed uint64) string {
	used := n.MemTotalKB - n.MemFreeKB
	rows := []struct {
		k string
		v uint64
	}{
		{"MemTotal", n.MemTotalKB},
		{"MemFree", n.MemFreeKB},
		{"MemUsed", used},
		{"SwapCached", 0},
		{"Active", used / 2},
		{"Inactive", used / 4},
		{"Active(anon)", used / 4},
		{"Inactive(anon)", used / 16},
		{"Active(file)", used / 4},
		{"Inactive(file)", used/4 - used/16},
		{"Unevictable", 0},
		{"Mlocked", 0},
		{"Dirty", used / 1024},
		{"Writeback", 0},
		{"FilePages", used / 2},
		{"Mapped", used / 8},
		{"AnonPages", used / 4},
		{"Shmem", used / 64},
		{"KernelStack", used / 512},
		{"PageTables", used / 256},
	}
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "Node %d %-16s%8d kB\n", n.ID, r.k+":", r.v)
	}
	pool := (hugeUsed + 255) / 256 * 256
	for _, r := range []struct {
		k string
		v uint64
	}{{"HugePages_Total", pool}, {"HugePages_Free", pool - hugeUsed}, {"HugePages_Surp", 0}} {
		fmt.Fprintf(&b, "Node %d %-16s%5d\n", n.ID, r.k+":", r.v)
	}
	return b.String()
}

func joinInts(ns []int, sep string) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
}

// linkSpeeds are the current_link_speed and max_link_speed strings by
// PCIe generation; index 0 is what a port without a trained link shows.
var linkSpeeds = [...]string{"Unknown", "2.5 GT/s PCIe", "5.0 GT/s PCIe", "8.0 GT/s PCIe",
	"16.0 GT/s PCIe", "32.0 GT/s PCIe", "64.0 GT/s PCIe"}

// LinkSpeed returns the kernel's text for a PCIe generation, "32.0 GT/s
// PCIe" for 5, and "Unknown" outside 1..6.
func LinkSpeed(gen int) string {
	if gen < 1 || gen >= len(linkSpeeds) {
		return linkSpeeds[0]
	}
	return linkSpeeds[gen]
}

// device writes a PCI function below dir, its RDMA and network devices,
// its links from sys/bus and sys/class, and then its children.
func (w *writer) device(parent string, d *Device) {
	t := w.t
	dir := parent + "/" + d.Addr
	t.line(dir+"/class", fmt.Sprintf("0x%06x", d.Class))
	t.line(dir+"/vendor", fmt.Sprintf("0x%04x", d.Vendor))
	t.line(dir+"/device", fmt.Sprintf("0x%04x", d.DeviceID))
	t.line(dir+"/subsystem_vendor", fmt.Sprintf("0x%04x", d.SubVendor))
	t.line(dir+"/subsystem_device", fmt.Sprintf("0x%04x", d.SubDevice))
	t.line(dir+"/revision", fmt.Sprintf("0x%02x", d.Revision))
	t.line(dir+"/numa_node", d.NUMANode)
	local := w.cpus
	if cpus, ok := w.nodeCPUs[d.NUMANode]; ok {
		local = cpus
	}
	if d.LocalCPUs != "" {
		local = mustList(d.LocalCPUs) // check parsed it
	}
	t.line(dir+"/local_cpulist", FormatList(local))
	t.line(dir+"/local_cpus", formatMask(local, w.nrCPUs))
	if d.MaxGen > 0 {
		// Both ends of a link print its trained state; the lower end holds it.
		gen, width := d.Gen, d.Width
		if d.Kind.linkBelow() {
			gen, width = 0, 0
			if len(d.Children) > 0 {
				gen, width = d.Children[0].Gen, d.Children[0].Width
			}
		}
		t.line(dir+"/current_link_speed", LinkSpeed(gen))
		t.line(dir+"/current_link_width", width)
		t.line(dir+"/max_link_speed", LinkSpeed(d.MaxGen))
		t.line(dir+"/max_link_width", d.MaxWidth)
	}
	if d.hasConfig() {
		t.file(dir+"/config", string(d.config()))
	}
	// The subsystem link is how a reader tells PCI functions from other
	// devices (a virtio device has vendor and device files too).
	t.link(dir+"/subsystem", "sys/bus/pci")
	t.link("sys/bus/pci/devices/"+d.Addr, dir)
	if d.Driver != "" {
		drv := "sys/bus/pci/drivers/" + d.Driver
		t.link(dir+"/driver", drv)
		t.link(drv+"/"+d.Addr, dir)
	}
	netParent := dir
	if v := d.Virtio; v != nil {
		netParent = dir + "/" + v.Name
		// The virtio bus shows the PCI subsystem IDs' vendor and the
		// virtio device type.
		t.line(netParent+"/vendor", fmt.Sprintf("0x%04x", d.SubVendor))
		t.line(netParent+"/device", fmt.Sprintf("0x%04x", v.DeviceID))
		t.link(netParent+"/subsystem", "sys/bus/virtio")
		t.link("sys/bus/virtio/devices/"+v.Name, netParent)
	}
	for i := range d.RDMA {
		w.ib(dir, &d.RDMA[i])
	}
	for i := range d.Net {
		w.net(netParent, &d.Net[i], true)
	}
	if d.Class == nvmeClass {
		w.namespace(dir, d)
	}
	for _, c := range d.Children {
		w.device(dir, c)
	}
}

// ib writes an RDMA device below its PCI function's directory.
func (w *writer) ib(fn string, ib *IBDev) {
	t := w.t
	dir := fn + "/infiniband/" + ib.Name
	t.line(dir+"/fw_ver", ib.FWVer)
	t.line(dir+"/node_guid", ib.NodeGUID)
	t.line(dir+"/sys_image_guid", ib.NodeGUID)
	t.line(dir+"/node_type", ib.NodeType)
	if ib.HCAType != "" {
		t.line(dir+"/hca_type", ib.HCAType)
	}
	if ib.BoardID != "" {
		t.line(dir+"/board_id", ib.BoardID)
	}
	t.link(dir+"/device", fn)
	t.link("sys/class/infiniband/"+ib.Name, dir)
	for _, p := range ib.Ports {
		pd := fmt.Sprintf("%s/ports/%d", dir, p.Num)
		t.line(pd+"/state", p.State)
		t.line(pd+"/phys_state", p.PhysState)
		t.line(pd+"/rate", p.Rate)
		t.line(pd+"/link_layer", p.LinkLayer)
		t.line(pd+"/lid", fmt.Sprintf("0x%x", p.LID))
		t.line(pd+"/sm_lid", fmt.Sprintf("0x%x", p.SMLID))
		if p.Counters != nil {
			w.counters(pd+"/counters", p.Counters)
		}
		w.counters(pd+"/hw_counters", p.HWCounters)
	}
}

// counters writes one file per counter.
func (w *writer) counters(dir string, cs map[string]uint64) {
	for _, k := range slices.Sorted(maps.Keys(cs)) {
		w.t.line(dir+"/"+k, cs[k])
	}
}

// net writes a network device below parent (a PCI function, its virtio
// device, or sys/devices/virtual).
func (w *writer) net(parent string, n *NetDev, hasDevice bool) {
	t := w.t
	dir := parent + "/net/" + n.Name
	w.ifindex++
	t.line(dir+"/ifindex", w.ifindex)
	t.line(dir+"/type", n.Type)
	t.line(dir+"/mtu", n.MTU)
	t.line(dir+"/address", n.Address)
	t.line(dir+"/dev_port", n.DevPort)
	t.line(dir+"/operstate", n.OperState)
	if !n.AdminDown {
		carrier := 0
		if n.Carrier {
			carrier = 1
		}
		t.line(dir+"/carrier", carrier)
		if n.Speed != 0 {
			t.line(dir+"/speed", n.Speed)
		}
		if n.Duplex != "" {
			t.line(dir+"/duplex", n.Duplex)
		}
	}
	t.line(dir+"/carrier_changes", n.CarrierUp+n.CarrierDown)
	t.line(dir+"/carrier_up_count", n.CarrierUp)
	t.line(dir+"/carrier_down_count", n.CarrierDown)
	w.counters(dir+"/statistics", n.Stats)
	if hasDevice {
		t.link(dir+"/device", parent)
	}
	t.link("sys/class/net/"+n.Name, dir)
}

// check reports a model the kernel could not show: duplicate names or
// addresses, buses that do not nest, CPU lists that do not parse.
func (m *Machine) check() error {
	if len(m.Distances) != len(m.Nodes) {
		return fmt.Errorf("%s: %d distance rows for %d nodes", m.Name, len(m.Distances), len(m.Nodes))
	}
	nodes := map[int]bool{}
	for i, n := range m.Nodes {
		if _, err := parseList(n.CPUs); err != nil {
			return fmt.Errorf("%s: node %d: %w", m.Name, n.ID, err)
		}
		if len(m.Distances[i]) != len(m.Nodes) {
			return fmt.Errorf("%s: node %d: %d distances for %d nodes", m.Name, n.ID, len(m.Distances[i]), len(m.Nodes))
		}
		nodes[n.ID] = true
	}
	seen := map[string]bool{} // addresses, RDMA and interface names
	unique := func(kind, name string) error {
		if seen[kind+name] {
			return fmt.Errorf("%s: %s %s appears twice", m.Name, kind, name)
		}
		seen[kind+name] = true
		return nil
	}
	for _, n := range m.NetOnly {
		if err := unique("interface", n.Name); err != nil {
			return err
		}
	}
	// Every bus number belongs to one host bridge or one bridge's
	// secondary side.
	buses := map[int]string{}
	for _, hb := range m.HostBridges {
		if owner, dup := buses[hb.Bus]; dup {
			return fmt.Errorf("%s: bus %02x of %s is also below %s", m.Name, hb.Bus, hb.Name(), owner)
		}
		buses[hb.Bus] = hb.Name()
		for _, d := range hb.Devices {
			if d.Bus() != hb.Bus || (d.Kind != Endpoint && d.Kind != RootPort) {
				return fmt.Errorf("%s: %s cannot sit on the root bus of %s", m.Name, d.Addr, hb.Name())
			}
		}
	}
	var err error
	m.walk(func(_ *HostBridge, parent, d *Device) bool {
		err = m.checkDevice(parent, d, nodes, buses, unique)
		return err == nil
	})
	if err != nil {
		return err
	}
	for _, p := range m.Processes {
		if err := unique("pid", strconv.Itoa(p.PID)); err != nil {
			return err
		}
		if _, err := parseList(p.CPUsAllowed); err != nil {
			return fmt.Errorf("%s: pid %d: %w", m.Name, p.PID, err)
		}
		if _, err := parseList(p.MemsAllowed); err != nil {
			return fmt.Errorf("%s: pid %d: %w", m.Name, p.PID, err)
		}
		if !slices.ContainsFunc(p.Threads, func(t Thread) bool { return t.TID == p.PID }) {
			return fmt.Errorf("%s: pid %d has no main thread", m.Name, p.PID)
		}
		if len(p.Pages) > len(m.Nodes) {
			return fmt.Errorf("%s: pid %d has pages on %d nodes", m.Name, p.PID, len(p.Pages))
		}
	}
	for _, mt := range m.Mounts {
		if len(mt.Drives) == 0 {
			return fmt.Errorf("%s: mount %s is on no drive", m.Name, mt.Point)
		}
		for _, a := range mt.Drives {
			if d := m.Device(a); d == nil || d.Class != nvmeClass {
				return fmt.Errorf("%s: mount %s: %s is no NVMe drive of this machine", m.Name, mt.Point, a)
			}
		}
	}
	return nil
}

// allowedBelow says which kinds of function may sit on a port's secondary
// bus.
var allowedBelow = map[Kind][]Kind{
	RootPort:       {Endpoint, UpstreamPort},
	DownstreamPort: {Endpoint, UpstreamPort},
	UpstreamPort:   {DownstreamPort},
}

func (m *Machine) checkDevice(parent, d *Device, nodes map[int]bool, buses map[int]string,
	unique func(kind, name string) error) error {
	if err := unique("address", d.Addr); err != nil {
		return err
	}
	if _, err := splitAddr(d.Addr); err != nil {
		return fmt.Errorf("%s: %w", m.Name, err)
	}
	if d.NUMANode != -1 && !nodes[d.NUMANode] {
		return fmt.Errorf("%s: %s on node %d, which does not exist", m.Name, d.Addr, d.NUMANode)
	}
	if _, err := parseList(d.LocalCPUs); err != nil {
		return fmt.Errorf("%s: %s: %w", m.Name, d.Addr, err)
	}
	if parent != nil && !slices.Contains(allowedBelow[parent.Kind], d.Kind) {
		return fmt.Errorf("%s: %s cannot sit below %s", m.Name, d.Addr, parent.Addr)
	}
	if len(d.Children) > 0 {
		sec := d.Children[0].Bus()
		if owner, dup := buses[sec]; dup {
			return fmt.Errorf("%s: bus %02x below %s is also below %s", m.Name, sec, d.Addr, owner)
		}
		buses[sec] = d.Addr
		for _, c := range d.Children {
			if c.Bus() != sec || sec <= d.Bus() {
				return fmt.Errorf("%s: %s does not fit on bus %02x below %s", m.Name, c.Addr, sec, d.Addr)
			}
		}
	}
	for _, ib := range d.RDMA {
		if err := unique("RDMA device", ib.Name); err != nil {
			return err
		}
	}
	for _, n := range d.Net {
		if err := unique("interface", n.Name); err != nil {
			return err
		}
	}
	return nil
}

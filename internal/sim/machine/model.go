// Package machine models a host: its NUMA nodes, its PCIe tree, its RDMA
// and network devices and its GPU processes, and writes them out as the
// sysfs and procfs tree the numa package reads, laid out the way the
// kernel lays it out, so that code under test reads a modelled machine
// exactly as it reads /sys and /proc.
//
// It is the one model of the simulated node (internal/sim): its tree, its
// NVML (internal/sim/nvmlmodel.New) and the check of a fault file all
// derive from a Machine. What only NVML shows (which GPUs a process uses,
// how the NVLinks are wired) is carried for it and not written.
//
// Profiles model real machines (DGX H100, AWS p5.48xlarge, the borrowed
// H200 VM, a small host without GPUs). Each profile's tree is committed as
// a text archive under numa/testdata, beside faulty ones that internal/sim
// makes by laying faults of its fault file over a profile; Load extracts
// one for a test. Machines can be changed before writing (Device, IBPort,
// Net, Process, Overrides), which is how faults are laid over them.
package machine

import (
	"fmt"
	"slices"
	"strings"
)

// Machine is a declarative model of one host. Nothing is written until
// Write.
type Machine struct {
	Name string
	// Nodes are the NUMA nodes, in ID order.
	Nodes []Node
	// Distances[i] is node i's distance file, one entry per node.
	Distances [][]int
	// HostBridges are the PCI root complexes, sys/devices/pci<dddd>:<bb>.
	HostBridges []*HostBridge
	// NetOnly are virtual network devices (lo, ifb0), which have no PCI
	// function and live under sys/devices/virtual/net.
	NetOnly []NetDev
	// Processes are the GPU (and other) processes under proc.
	Processes []Process
	// Overrides replace the content of files the model writes (or add
	// files), keyed by path relative to the root with forward slashes, such
	// as DevicePath(addr)+"/current_link_width". They model files that
	// hold garbage on a real machine, which nothing typed can express, and
	// files outside sys and proc (the simulated node's container).
	Overrides map[string]string
	// Links add symbolic links, keyed as Overrides, each to the path
	// relative to the root it points to (written relative to the link's
	// directory), or to an absolute path outside the tree.
	Links map[string]string
	// NVLink is how the GPUs' NVLinks are wired, for an NVML model to
	// report (internal/sim/nvmlmodel); nothing under sys shows it, and
	// Write ignores it.
	NVLink NVLink
	// Kernel is the kernel release (proc/sys/kernel/osrelease); "" leaves
	// the file out.
	Kernel string
	// NVIDIADriver is the NVIDIA kernel driver loaded; nil for none.
	NVIDIADriver *NVIDIADriver
	// Modules are the loaded kernel modules, sys/module/<name>; none
	// leaves sys/module out, as a tree that does not model it.
	Modules []string
	// IOMMU is the type of every IOMMU group (DMA, DMA-FQ, identity);
	// "" means no IOMMU: no sys/kernel/iommu_groups.
	IOMMU string
	// Mounts are the filesystems on NVMe drives (storage.go); none leaves
	// proc/self/mountinfo out.
	Mounts []Mount
	// CuFileConfig is cuFile's configuration, etc/cufile.json under the
	// root; "" leaves it out, as on a node without GPUDirect Storage.
	CuFileConfig string
}

// NVIDIADriver is the NVIDIA kernel driver as /proc/driver/nvidia/version
// and sys/module/nvidia show it.
type NVIDIADriver struct {
	Version string // "535.161.08"
	// Open says the driver is the open kernel module flavour (NVIDIA's
	// open-gpu-kernel-modules) rather than the proprietary one.
	Open bool
}

// NVLink is the wiring of a machine's NVLinks.
type NVLink struct {
	// PerGPU is how many NVLinks each GPU has.
	PerGPU int
	// Switches are the PCI addresses of the NVSwitches (an HGX board):
	// link l of every GPU goes to Switches[l % len(Switches)]. With none,
	// the machine has two GPUs and every link of each goes to the other.
	Switches []string
}

// Node is a NUMA node.
type Node struct {
	ID int
	// CPUs in the kernel's list form, "0-55,112-167".
	CPUs       string
	MemTotalKB uint64
	MemFreeKB  uint64
	// NUMAStat holds the numastat counters (numa_hit, numa_miss,
	// numa_foreign, interleave_hit, local_node, other_node); missing ones
	// are written as 0.
	NUMAStat map[string]uint64
}

// HostBridge is a PCI root complex: the directory sys/devices/pci<dddd>:<bb>
// and the devices on its root bus.
type HostBridge struct {
	Domain, Bus int
	// Devices are the functions on the root bus: root ports on bare metal,
	// endpoints directly in a VM.
	Devices []*Device
}

// Name is the host bridge's directory name, "pci0000:15".
func (h *HostBridge) Name() string { return fmt.Sprintf("pci%04x:%02x", h.Domain, h.Bus) }

// Kind is a PCI function's place in the tree. It decides which link a
// function's current_link_* files describe.
type Kind uint8

const (
	// Endpoint is a device function: GPU, NIC, drive, or the host bridge
	// function a VM shows at 00:00.0. Its link files describe the link
	// above it.
	Endpoint Kind = iota
	// RootPort is a bridge on a root bus. Its link files describe the link
	// below it.
	RootPort
	// UpstreamPort is a switch's port towards the root. Like an endpoint,
	// its link files describe the link above it.
	UpstreamPort
	// DownstreamPort is a switch's port towards a device. Like a root
	// port, its link files describe the link below it.
	DownstreamPort
)

// linkBelow reports whether the function is the upper end of the link its
// files describe.
func (k Kind) linkBelow() bool { return k == RootPort || k == DownstreamPort }

// Device is one PCI function and whatever hangs below it.
type Device struct {
	// Addr is the function's address, "0000:18:00.0".
	Addr string
	Kind Kind
	// Class is the 24-bit class code, 0x030200 for a 3D controller.
	Class                uint32
	Vendor, DeviceID     uint16
	SubVendor, SubDevice uint16
	Revision             uint8
	// NUMANode is the numa_node file; -1 means unknown, as in a VM.
	NUMANode int
	// LocalCPUs overrides local_cpulist; "" means NUMANode's CPUs, or all
	// CPUs when NUMANode is -1, as the kernel reports.
	LocalCPUs string
	// MaxGen and MaxWidth are this function's own link capability
	// (max_link_speed as a PCIe generation, max_link_width). MaxGen 0
	// means a conventional PCI or virtual function without link files.
	MaxGen, MaxWidth int
	// Gen and Width are the trained state of the link above this
	// function. They matter for endpoints and upstream ports: a root or
	// downstream port prints its first child's, so both ends of a link
	// always agree. To retrain a link, change the lower end.
	Gen, Width int
	// Driver, if set, adds the driver symlink to sys/bus/pci/drivers/<name>.
	Driver string
	// ACSControl is a root or downstream port's ACS Control register, in
	// its config file (ConfigSpace): 0, redirect off, as a DGX is set up
	// for GPUDirect, or ACSRedirect, as the kernel sets every port when an
	// IOMMU translates.
	ACSControl uint16
	// Virtio, if set, is the virtio device a virtio-pci function carries
	// (directory "virtio2" below the function); the function's net
	// devices live below it rather than below the function.
	Virtio *Virtio
	// Children are the functions on the bus below a port.
	Children []*Device
	// RDMA are the InfiniBand/RDMA devices of this function.
	RDMA []IBDev
	// Net are the network devices of this function.
	Net []NetDev
}

// Bus is the bus number part of the address, or -1 if it does not parse.
func (d *Device) Bus() int {
	bus, err := splitAddr(d.Addr)
	if err != nil {
		return -1
	}
	return bus
}

// splitAddr returns the bus of a domain:bus:device.function address.
func splitAddr(addr string) (bus int, err error) {
	var dom, dev, fn int
	if n, _ := fmt.Sscanf(addr, "%04x:%02x:%02x.%1x", &dom, &bus, &dev, &fn); n != 4 || len(addr) != 12 {
		return 0, fmt.Errorf("bad PCI address %q", addr)
	}
	return bus, nil
}

// Virtio is a virtio device below a virtio-pci function.
type Virtio struct {
	Name     string // "virtio2"
	DeviceID int    // virtio device type: 1 net, 2 block
}

// IBDev is an RDMA device, sys/class/infiniband/<Name>.
type IBDev struct {
	Name     string // "mlx5_0", "rdmap79s0"
	FWVer    string
	NodeGUID string // "946d:ae03:0019:8ad4"
	NodeType string // "1: CA"
	// HCAType and BoardID are mlx5 attributes; "" leaves the file out, as
	// EFA does.
	HCAType string
	BoardID string
	Ports   []IBPort
}

// Port states and physical states as the kernel prints them.
const (
	PortActive   = "4: ACTIVE"
	PortDown     = "1: DOWN"
	PhysLinkUp   = "5: LinkUp"
	PhysDisabled = "3: Disabled"
	PhysPolling  = "2: Polling"
)

// Port rates as the kernel prints them.
const (
	RateNDR400 = "400 Gb/sec (4X NDR)"
	RateHDR200 = "200 Gb/sec (4X HDR)"
	RateEDR100 = "100 Gb/sec (4X EDR)"
	// RateSDR10 is what mlx5 reports for a port without a link.
	RateSDR10 = "10 Gb/sec (4X SDR)"
)

// IBPort is ports/<Num> of an RDMA device.
type IBPort struct {
	Num       int
	State     string // PortActive
	PhysState string // PhysLinkUp
	Rate      string // RateNDR400
	LinkLayer string // "InfiniBand", "Ethernet", "Unspecified" (EFA)
	LID       int
	SMLID     int
	// Counters is the counters/ directory; nil leaves it out, as EFA does.
	Counters map[string]uint64
	// HWCounters is the hw_counters/ directory.
	HWCounters map[string]uint64
}

// ARPHRD types for NetDev.Type.
const (
	TypeEther    = 1
	TypeIPoIB    = 32
	TypeLoopback = 772
)

// NetDev is a network interface, sys/class/net/<Name>.
type NetDev struct {
	Name      string
	Type      int    // TypeEther
	OperState string // "up", "down", "unknown"
	// AdminDown models an interface that is down administratively:
	// reading carrier, speed or duplex fails with EINVAL on a real machine,
	// so those files are not written.
	AdminDown bool
	Carrier   bool
	// Speed is the speed file in Mb/s; -1 is the kernel's unknown (no link,
	// virtio). 0 leaves the file out: on lo, ifb or ENA reading it fails
	// with EINVAL.
	Speed int
	// Duplex is "full" or "unknown"; "" leaves the file out, as for Speed.
	Duplex      string
	MTU         int
	Address     string
	DevPort     int
	CarrierUp   uint64 // carrier_up_count
	CarrierDown uint64 // carrier_down_count; carrier_changes is the sum
	// Stats is the statistics/ directory.
	Stats map[string]uint64
}

// Process is a process under proc/<PID>.
type Process struct {
	PID, PPID int
	Comm      string // at most 15 bytes, as the kernel keeps it
	// Exe is the binary that numa_maps shows mapped; "" means /usr/bin/<Comm>.
	Exe string
	// GPUs are the PCI bus ids (sysfs form) of the GPUs the process uses,
	// for a fake NVML to report; nothing under proc shows them.
	GPUs []string
	// CPUsAllowed is Cpus_allowed_list, list form.
	CPUsAllowed string
	// MemsAllowed is Mems_allowed_list; "" means every node.
	MemsAllowed string
	// Threads are the tasks; the main thread's TID equals PID.
	Threads []Thread
	// Pages are resident 4 KiB pages per node, indexed by node ID. The
	// numa_maps lines add up to exactly these, counting a hugepage line's
	// pages in 4 KiB units (N1=3 with kernelpagesize_kB=2048 is 1536).
	Pages []uint64
	// Cgroup is the cgroup v2 path, written as "0::<Cgroup>".
	Cgroup string
	// Environ is the environment the process started with, NAME=value
	// each, written NUL-separated as environ; none when empty.
	Environ []string
}

// Thread is one task of a process and the CPU it last ran on (field 39 of
// its stat file).
type Thread struct {
	TID, CPU int
}

// walk calls f for every device, depth first, with the host bridge it is
// under and its parent (nil on a root bus). f returning false stops.
func (m *Machine) walk(f func(hb *HostBridge, parent, d *Device) bool) {
	var visit func(hb *HostBridge, parent *Device, ds []*Device) bool
	visit = func(hb *HostBridge, parent *Device, ds []*Device) bool {
		for _, d := range ds {
			if !f(hb, parent, d) || !visit(hb, d, d.Children) {
				return false
			}
		}
		return true
	}
	for _, hb := range m.HostBridges {
		if !visit(hb, nil, hb.Devices) {
			return
		}
	}
}

// Device returns the function at addr, or nil.
func (m *Machine) Device(addr string) *Device {
	var found *Device
	m.walk(func(_ *HostBridge, _, d *Device) bool {
		if d.Addr == addr {
			found = d
		}
		return found == nil
	})
	return found
}

// Parent returns the port above addr, or nil when addr is on a root bus
// or absent.
func (m *Machine) Parent(addr string) *Device {
	var found *Device
	m.walk(func(_ *HostBridge, parent, d *Device) bool {
		if d.Addr == addr {
			found = parent
			return false
		}
		return true
	})
	return found
}

// RemoveDevice takes the function at addr and everything below it out of
// the machine, as if it had fallen off the bus. A host bridge left without
// devices goes too. It reports whether addr was there.
func (m *Machine) RemoveDevice(addr string) bool {
	match := func(d *Device) bool { return d.Addr == addr }
	if p := m.Parent(addr); p != nil {
		p.Children = slices.DeleteFunc(p.Children, match)
		return true
	}
	for i, hb := range m.HostBridges {
		j := slices.IndexFunc(hb.Devices, match)
		if j < 0 {
			continue
		}
		hb.Devices = slices.Delete(hb.Devices, j, j+1)
		if len(hb.Devices) == 0 {
			m.HostBridges = slices.Delete(m.HostBridges, i, i+1)
		}
		return true
	}
	return false
}

// DevicePath returns the directory of the function at addr relative to
// the root, "sys/devices/pci0000:15/0000:15:01.0/.../0000:18:00.0", or ""
// when it is absent.
func (m *Machine) DevicePath(addr string) string {
	var path string
	var find func(dir string, ds []*Device) bool
	find = func(dir string, ds []*Device) bool {
		for _, d := range ds {
			p := dir + "/" + d.Addr
			if d.Addr == addr {
				path = p
				return true
			}
			if find(p, d.Children) {
				return true
			}
		}
		return false
	}
	for _, hb := range m.HostBridges {
		if find("sys/devices/"+hb.Name(), hb.Devices) {
			break
		}
	}
	return path
}

// IB returns the RDMA device called name, or nil.
func (m *Machine) IB(name string) *IBDev {
	d, i := m.ibOwner(name)
	if d == nil {
		return nil
	}
	return &d.RDMA[i]
}

// ibOwner returns the function carrying RDMA device name and its index.
func (m *Machine) ibOwner(name string) (*Device, int) {
	var owner *Device
	idx := -1
	m.walk(func(_ *HostBridge, _, d *Device) bool {
		for i := range d.RDMA {
			if d.RDMA[i].Name == name {
				owner, idx = d, i
				return false
			}
		}
		return true
	})
	return owner, idx
}

// IBPort returns port num of RDMA device name, or nil.
func (m *Machine) IBPort(name string, num int) *IBPort {
	ib := m.IB(name)
	if ib == nil {
		return nil
	}
	for i := range ib.Ports {
		if ib.Ports[i].Num == num {
			return &ib.Ports[i]
		}
	}
	return nil
}

// IBPortDir returns ports/<num> of RDMA device name relative to the root,
// below its PCI function (not the sys/class link), or "" when absent.
func (m *Machine) IBPortDir(name string, num int) string {
	d, _ := m.ibOwner(name)
	if d == nil || m.IBPort(name, num) == nil {
		return ""
	}
	return fmt.Sprintf("%s/infiniband/%s/ports/%d", m.DevicePath(d.Addr), name, num)
}

// Net returns the network device called name, virtual or not, or nil.
func (m *Machine) Net(name string) *NetDev {
	for i := range m.NetOnly {
		if m.NetOnly[i].Name == name {
			return &m.NetOnly[i]
		}
	}
	var found *NetDev
	m.walk(func(_ *HostBridge, _, d *Device) bool {
		for i := range d.Net {
			if d.Net[i].Name == name {
				found = &d.Net[i]
			}
		}
		return found == nil
	})
	return found
}

// Process returns the process with pid, or nil.
func (m *Machine) Process(pid int) *Process {
	for i := range m.Processes {
		if m.Processes[i].PID == pid {
			return &m.Processes[i]
		}
	}
	return nil
}

// GPUs returns the display and 3D controllers (class 0x03xxxx) in bus id
// order, which is the order NVML numbers GPUs in.
func (m *Machine) GPUs() []*Device {
	var gpus []*Device
	m.walk(func(_ *HostBridge, _, d *Device) bool {
		if d.Class>>16 == 0x03 {
			gpus = append(gpus, d)
		}
		return true
	})
	slices.SortFunc(gpus, func(a, b *Device) int { return strings.Compare(a.Addr, b.Addr) })
	return gpus
}

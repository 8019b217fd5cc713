package collector

import (
	"maps"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/pciconfig"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/numa"
)

// TopologyCollector renders the machine's layout: NUMA nodes, the PCIe
// tree's links, and for every GPU its NUMA affinity, its path class to
// each NIC and GPU, its nearest NICs and the slowest hop to the CPU.
type TopologyCollector struct {
	scrape.Rendered[*numa.Topology]
	ids interface{ Identities() []nvml.Identity }
	d   topologyDescs
	s   storageDescs
}

type topologyDescs struct {
	nodeInfo, nodeCPUs, nodeMemTotal, nodeMemFree, nodeDistance *prometheus.Desc
	nodeStat                                                    map[string]*prometheus.Desc
	deviceInfo, linkGen, linkMaxGen, linkWidth, linkMaxWidth    *prometheus.Desc
	gpuNUMA, gpuNIC, gpuNearestNIC, gpuNearestLevel, gpuPair    *prometheus.Desc
	gpuHostBW, gpuSlowestHop, gpuUplink, uplinkGPUs             *prometheus.Desc
	acsCapable, acsRedirect, peermem, dmabuf, iommuTranslated   *prometheus.Desc
}

// NewTopologyCollector renders the topology source's snapshots. ids names
// GPUs by NVML index and UUID; without NVML those labels are empty and the
// GPU is known by its PCI address alone.
func NewTopologyCollector(src scrape.Source[*numa.Topology], ids interface{ Identities() []nvml.Identity }) *TopologyCollector {
	node := []string{"numa_node"}
	c := &TopologyCollector{ids: ids, d: topologyDescs{
		nodeInfo:     newDesc("numa_node", "info", "A NUMA node and its CPUs in kernel list form; value 1.", "numa_node", "cpus"),
		nodeCPUs:     newDesc("numa_node", "cpus", "Online CPUs of the NUMA node.", node...),
		nodeMemTotal: newDesc("numa_node", "memory_total_bytes", "Memory of the NUMA node.", node...),
		nodeMemFree:  newDesc("numa_node", "memory_free_bytes", "Free memory of the NUMA node.", node...),
		nodeDistance: newDesc("numa_node", "distance",
			"Firmware (SLIT) distance from the node to another; 10 is local, and remote memory costs about distance/10 times local.",
			"numa_node", "to_numa_node"),
		nodeStat: map[string]*prometheus.Desc{},
		deviceInfo: newDesc("pcie", "device_info",
			"A GPU, NIC, NVMe drive or a bridge above one; value 1. numa_node is empty where the platform does not say.",
			"pci_bus_id", "kind", "name", "vendor_id", "device_id", "driver", "numa_node", "parent_pci_bus_id", "host_bridge"),
		linkGen: newDesc("pcie", "link_generation",
			"Current PCIe generation of the link above the device (an endpoint or switch upstream port). Idle GPUs may lower it; compare under load.", "pci_bus_id"),
		linkMaxGen: newDesc("pcie", "link_max_generation",
			"Highest PCIe generation both ends of the link support.", "pci_bus_id"),
		linkWidth: newDesc("pcie", "link_width", "Current lane count of the link above the device.", "pci_bus_id"),
		linkMaxWidth: newDesc("pcie", "link_max_width",
			"Highest lane count both ends of the link support; below it the link trained narrow.", "pci_bus_id"),
		gpuNUMA: gpuDesc("topology", "gpu_numa_info",
			"Where the GPU sits: sysfs numa_node (empty when unknown), the NUMA affinity nvidia-smi topo -m prints, and its local CPUs; value 1.",
			"numa_node", "numa_affinity", "cpu_affinity"),
		gpuNIC: gpuDesc("topology", "gpu_nic_path",
			"PCIe path class from the GPU to a NIC, as nvidia-smi topo -m names it (label path); the value is NVML's level: 10 PIX, 20 PXB, 30 PHB, 40 NODE, 50 SYS.",
			"device", "nic_pci_bus_id", "path"),
		gpuNearestNIC: gpuDesc("topology", "gpu_nearest_nic_info",
			"The NICs closest to the GPU (all that tie), whatever their state; value 1. gpulink_topology_gpu_nearest_usable_nic_info "+
				"names those that can carry traffic.", "device", "nic_pci_bus_id", "path"),
		gpuNearestLevel: gpuDesc("topology", "gpu_nearest_nic_path",
			"Path class to the GPU's nearest NIC as NVML's level (10 PIX ... 50 SYS); 50 means every NIC is across the socket interconnect.", "path"),
		gpuPair: newDesc("topology", "gpu_pair_pcie_path",
			"PCIe path class between two GPUs, whatever NVLink joins them (label path); the value is NVML's level, 10 PIX ... 50 SYS.",
			"gpu", "pci_bus_id", "peer_gpu", "peer_pci_bus_id", "path"),
		gpuHostBW: gpuDesc("topology", "gpu_host_bandwidth_bytes_per_second",
			"What host<->GPU copies can reach at most, one direction: the slowest PCIe hop between GPU and CPU at its current (state=current) or best supported (state=max) speed and width.",
			"state"),
		gpuSlowestHop: gpuDesc("topology", "gpu_slowest_hop_info",
			"The PCIe link that bounds the GPU's host bandwidth at best supported state, named by its lower end; value 1.", "hop_pci_bus_id"),
		gpuUplink: gpuDesc("topology", "gpu_uplink_info",
			"The link nearest the CPU on the GPU's path, named by its lower end; GPUs with the same uplink share its bandwidth; value 1.", "uplink_pci_bus_id"),
		uplinkGPUs: newDesc("topology", "uplink_gpus", "GPUs behind an uplink to the CPU.", "uplink_pci_bus_id"),
		acsCapable: newDesc("pcie", "acs_capable",
			"1 if a bridge on a GPU-to-GPU or GPU-to-NIC path has the ACS capability; absent where its extended config space is not readable (not root).",
			"pci_bus_id"),
		acsRedirect: newDesc("pcie", "acs_redirect",
			"1 if ACS on this bridge sends peer traffic up through the root complex instead of across: kind request (P2P Request Redirect), "+
				"completion (P2P Completion Redirect), egress_control (P2P Egress Control). Peer copies and GPUDirect RDMA below the bridge slow down.",
			"pci_bus_id", "kind"),
		peermem: newDesc("gpudirect", "peermem_loaded",
			"1 if the nvidia_peermem module (GPUDirect RDMA through the RDMA core) is loaded."),
		dmabuf: newDesc("gpudirect", "dmabuf_supported",
			"1 if the kernel and the NVIDIA driver offer dma-buf for GPU memory, GPUDirect RDMA without nvidia_peermem: the driver's open kernel module, "+
				"branch R515 or later, on Linux 5.12 or later; 0 if one of these is missing; absent where no NVIDIA driver is loaded."),
		iommuTranslated: gpuDesc("iommu", "translated",
			"1 if the GPU's IOMMU group translates DMA (type DMA or DMA-FQ), 0 if it passes it through (identity) or the GPU has no IOMMU group."),
	}}
	c.s = newStorageDescs()
	for _, name := range numa.NUMAStatCounters {
		c.d.nodeStat[name] = newDesc("numa_node", numaStatMetric(name),
			"numastat "+name+": pages allocated, by the kernel's accounting.", node...)
	}
	c.Init(src, rendering(c.render))
	return c
}

// numaStatMetric names a numastat counter: numa_hit is hit_pages_total.
func numaStatMetric(counter string) string {
	if len(counter) > 5 && counter[:5] == "numa_" {
		counter = counter[5:]
	}
	return counter + "_pages_total"
}

// Describe implements prometheus.Collector.
func (c *TopologyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.d.nodeInfo, c.d.nodeCPUs, c.d.nodeMemTotal, c.d.nodeMemFree,
		c.d.nodeDistance, c.d.deviceInfo, c.d.linkGen, c.d.linkMaxGen, c.d.linkWidth, c.d.linkMaxWidth,
		c.d.gpuNUMA, c.d.gpuNIC, c.d.gpuNearestNIC, c.d.gpuNearestLevel, c.d.gpuPair, c.d.gpuHostBW,
		c.d.gpuSlowestHop, c.d.gpuUplink, c.d.uplinkGPUs, c.d.acsCapable, c.d.acsRedirect, c.d.peermem,
		c.d.dmabuf, c.d.iommuTranslated} {
		ch <- d
	}
	for _, name := range numa.NUMAStatCounters {
		ch <- c.d.nodeStat[name]
	}
	c.s.describe(ch)
}

func (c *TopologyCollector) render(o *out, t *numa.Topology) {
	for _, n := range t.Nodes {
		id := strconv.Itoa(n.ID)
		o.Labels = nil
		o.gauge(c.d.nodeInfo, 1, id, n.CPUs.String())
		o.gauge(c.d.nodeCPUs, float64(n.CPUs.Count()), id)
		o.optUint(c.d.nodeMemTotal, prometheus.GaugeValue, n.MemTotal, id)
		o.optUint(c.d.nodeMemFree, prometheus.GaugeValue, n.MemFree, id)
		for to, dist := range n.Distances {
			o.gauge(c.d.nodeDistance, float64(dist), id, strconv.Itoa(to))
		}
		for _, name := range numa.NUMAStatCounters {
			if v, ok := n.Stat[name]; ok {
				o.Add(c.d.nodeStat[name], prometheus.CounterValue, float64(v), id)
			}
		}
	}
	c.renderLinks(o, t)
	c.renderGPUs(o, t)
	c.renderGPUDirect(o, t)
	c.s.render(o, t)
}

// acsRedirects are the ACS controls that redirect peer traffic, by kind.
var acsRedirects = []struct {
	kind string
	bit  uint16
}{
	{"request", pciconfig.P2PRequestRedirect},
	{"completion", pciconfig.P2PCompletionRedirect},
	{"egress_control", pciconfig.P2PEgressControl},
}

func (c *TopologyCollector) renderGPUDirect(o *out, t *numa.Topology) {
	g := &t.GPUDirect
	o.Labels = nil
	for _, addr := range slices.Sorted(maps.Keys(g.ACS)) {
		a := g.ACS[addr]
		if !a.Known {
			continue
		}
		o.gauge(c.d.acsCapable, boolFloat(a.Present), addr)
		if !a.Present {
			continue
		}
		for _, r := range acsRedirects {
			o.gauge(c.d.acsRedirect, boolFloat(a.Enabled(r.bit)), addr, r.kind)
		}
	}
	o.optBool(c.d.peermem, g.PeermemLoaded)
	o.optBool(c.d.dmabuf, g.DMABufSupported)
}

// renderLinks exports every device once and every link once, by its lower
// end, with the maximum both ends support.
func (c *TopologyCollector) renderLinks(o *out, t *numa.Topology) {
	o.Labels = nil
	links := map[string]numa.Hop{}
	for _, d := range t.Devices {
		parent := d.ParentAddr
		o.gauge(c.d.deviceInfo, 1, d.Address, string(d.Kind), deviceName(d),
			hex4(d.Vendor), hex4(d.DeviceID), d.Driver, numaLabel(d.NUMANode), parent, d.HostBridge)
		if d.Kind == numa.KindBridge {
			continue
		}
		for _, h := range t.HostPath(d) {
			links[h.Device.Address] = h
		}
	}
	for addr, h := range links {
		if h.Link.Speed.Valid {
			if g := numa.Generation(h.Link.Speed.V); g > 0 {
				o.gauge(c.d.linkGen, float64(g), addr)
			}
		}
		if h.Link.MaxSpeed.Valid {
			if g := numa.Generation(h.Link.MaxSpeed.V); g > 0 {
				o.gauge(c.d.linkMaxGen, float64(g), addr)
			}
		}
		o.optInt(c.d.linkWidth, h.Link.Width, addr)
		o.optInt(c.d.linkMaxWidth, h.Link.MaxWidth, addr)
	}
}

// gpuLabelsOf gives a GPU of the topology its GPU labels (gpu, uuid,
// pci_bus_id): its NVML index and UUID where ids (may be nil) knows its
// address, else empty, the GPU known by its address alone.
func gpuLabelsOf(ids interface{ Identities() []nvml.Identity }) func(*numa.PCIDevice) []string {
	byAddr := map[string]nvml.Identity{}
	if ids != nil {
		for _, id := range ids.Identities() {
			byAddr[id.PCIBusID] = id
		}
	}
	return func(d *numa.PCIDevice) []string {
		if id, ok := byAddr[d.Address]; ok {
			return []string{strconv.Itoa(id.Index), id.UUID, d.Address}
		}
		return []string{"", "", d.Address}
	}
}

func (c *TopologyCollector) renderGPUs(o *out, t *numa.Topology) {
	labelsOf := gpuLabelsOf(c.ids)
	uplinkGPUs := map[string]int{}
	for _, g := range t.GPUs {
		o.Labels = labelsOf(g)
		cpus := ""
		if g.LocalCPUs.Valid {
			cpus = g.LocalCPUs.V.String()
		}
		o.gauge(c.d.gpuNUMA, 1, numaLabel(g.NUMANode), numaLabel(t.NodeOf(g)), cpus)
		for _, n := range t.NICs {
			p := t.Path(g, n)
			o.gauge(c.d.gpuNIC, float64(p), deviceName(n), n.Address, p.String())
		}
		if nearest, p := t.NearestNICs(g); len(nearest) > 0 {
			for _, n := range nearest {
				o.gauge(c.d.gpuNearestNIC, 1, deviceName(n), n.Address, p.String())
			}
			o.gauge(c.d.gpuNearestLevel, float64(p), p.String())
		}
		for state, max := range map[string]bool{"current": false, "max": true} {
			if h, ok := t.SlowestHop(g, max); ok {
				o.gauge(c.d.gpuHostBW, h.Bandwidth(max), state)
				if max {
					o.gauge(c.d.gpuSlowestHop, 1, h.Device.Address)
				}
			}
		}
		up := t.Uplink(g).Address
		o.gauge(c.d.gpuUplink, 1, up)
		uplinkGPUs[up]++
		if v, ok := t.GPUDirect.IOMMUTranslated[g.Address]; ok {
			o.optBool(c.d.iommuTranslated, v)
		}
		c.s.renderGPU(o, t, g)
	}
	o.Labels = nil
	for up, n := range uplinkGPUs {
		o.gauge(c.d.uplinkGPUs, float64(n), up)
	}
	for _, a := range t.GPUs {
		for _, b := range t.GPUs {
			if a == b {
				continue
			}
			p := t.Path(a, b)
			o.gauge(c.d.gpuPair, float64(p), labelsOf(a)[0], a.Address, labelsOf(b)[0], b.Address, p.String())
		}
	}
}

// deviceName is the name NIC metrics use for the device label.
func deviceName(d *numa.PCIDevice) string {
	if d.Kind != numa.KindNIC {
		return ""
	}
	return d.Name()
}

func hex4(v uint16) string { return "0x" + strconv.FormatUint(uint64(v)|0x10000, 16)[1:] }

package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/numa"
)

// NearestNICCollector renders each GPU's nearest usable NIC: the
// topology's path classes joined with the NIC source's port states (a
// port up, the PCIe link neither down nor narrow: nic's Usable). It
// renders whenever either source publishes, so a port that goes down
// shows within one NIC interval. gpulink_topology_gpu_nearest_nic_info
// keeps the machine as it is built; the two differ where a GPU's nearest
// NICs cannot be used and its traffic leaves through one farther away,
// across the sockets where none on its side can
// (GPUUsableNICAcrossSockets).
type NearestNICCollector struct {
	scrape.Rendered[nearestNICSources]
	ids        interface{ Identities() []nvml.Identity }
	info, path *prometheus.Desc
}

// nearestNICSources are the latest snapshots of the two sources; either
// nil.
type nearestNICSources = pair[*nic.Snapshot, *numa.Topology]

// NewNearestNICCollector renders the snapshots of nics joined with the
// topology's (without a topology nothing is rendered; without NIC
// snapshots every NIC counts as usable by its ports); ids (may be nil)
// names GPUs by NVML index and UUID.
func NewNearestNICCollector(nics scrape.Source[*nic.Snapshot], topology scrape.Source[*numa.Topology],
	ids interface{ Identities() []nvml.Identity }) *NearestNICCollector {
	c := &NearestNICCollector{ids: ids,
		info: gpuDesc("topology", "gpu_nearest_usable_nic_info",
			"The closest NICs to the GPU (all that tie) that can carry traffic: a port up (an RDMA port, or for a NIC without one a "+
				"network interface), the PCIe link neither down nor narrower than both ends support; a NIC whose port state is unknown "+
				"counts as usable. Value 1; none where no NIC is usable.", "device", "nic_pci_bus_id", "path"),
		path: gpuDesc("topology", "gpu_nearest_usable_nic_path",
			"Path class to the GPU's nearest usable NIC as NVML's level (10 PIX ... 50 SYS); 50 means every usable NIC is across the "+
				"socket interconnect, absent that none is. Above gpulink_topology_gpu_nearest_nic_path where the nearest NICs cannot be used.",
			"path"),
	}
	c.Init(join(nics, topology), rendering(c.render))
	return c
}

// Describe implements prometheus.Collector.
func (c *NearestNICCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.info
	ch <- c.path
}

func (c *NearestNICCollector) render(o *out, s nearestNICSources) {
	nics, t := s.A, s.B
	if t == nil {
		return
	}
	labelsOf := gpuLabelsOf(c.ids)
	usable := func(n *numa.PCIDevice) bool { return nics.Usable(t, n) }
	for _, g := range t.GPUs {
		nearest, p := t.NearestNICsAmong(g, usable)
		if len(nearest) == 0 {
			continue
		}
		o.Labels = labelsOf(g)
		for _, n := range nearest {
			o.gauge(c.info, 1, deviceName(n), n.Address, p.String())
		}
		o.gauge(c.path, float64(p), p.String())
	}
}

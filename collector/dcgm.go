package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/dcgm"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
)

// DCGMCollector renders the DCGM source's snapshot: the engine's version,
// each GPU's profiling fields and its health watches.
type DCGMCollector struct {
	scrape.Rendered[*dcgm.Snapshot]

	info, healthStatus, healthIncidents                           *prometheus.Desc
	engineActive, smActive, smOccupancy, tensorActive, dramActive *prometheus.Desc
	pcieTX, pcieRX, nvlinkTX, nvlinkRX                            *prometheus.Desc
}

// NewDCGMCollector renders the snapshots of src.
func NewDCGMCollector(src scrape.Source[*dcgm.Snapshot]) *DCGMCollector {
	c := &DCGMCollector{
		info: newDesc("dcgm", "info",
			"DCGM the exporter reads; value 1. version is the host engine's, library_version the client library's; mode is standalone (nv-hostengine) or embedded.",
			"version", "library_version", "mode"),
		healthStatus: gpuDesc("dcgm", "health_status",
			"DCGM health watch verdict on one system of the GPU: 1 for the current status (pass, warn, fail), 0 for the others.",
			"system", "status"),
		healthIncidents: gpuDesc("dcgm", "health_incidents",
			"Incidents DCGM's latest health check reported for the system of the GPU.", "system"),
		engineActive: gpuDesc("dcgm", "graphics_engine_active_ratio",
			"Share of time a graphics or compute engine was active, averaged over DCGM's update interval (DCGM_FI_PROF_GR_ENGINE_ACTIVE)."),
		smActive: gpuDesc("dcgm", "sm_active_ratio",
			"Share of time at least one warp was resident on an SM, averaged over all SMs (DCGM_FI_PROF_SM_ACTIVE)."),
		smOccupancy: gpuDesc("dcgm", "sm_occupancy_ratio",
			"Resident warps over the most an SM can hold, averaged over all SMs (DCGM_FI_PROF_SM_OCCUPANCY)."),
		tensorActive: gpuDesc("dcgm", "tensor_active_ratio",
			"Share of cycles the tensor pipes were active (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)."),
		dramActive: gpuDesc("dcgm", "dram_active_ratio",
			"Share of cycles device memory was sending or receiving data (DCGM_FI_PROF_DRAM_ACTIVE)."),
		pcieTX: gpuDesc("dcgm", "pcie_transmit_bytes_per_second",
			"PCIe traffic from the GPU, headers included, averaged over DCGM's update interval (DCGM_FI_PROF_PCIE_TX_BYTES)."),
		pcieRX: gpuDesc("dcgm", "pcie_receive_bytes_per_second",
			"PCIe traffic into the GPU, headers included, averaged over DCGM's update interval (DCGM_FI_PROF_PCIE_RX_BYTES)."),
		nvlinkTX: gpuDesc("dcgm", "nvlink_transmit_bytes_per_second",
			"NVLink traffic from the GPU over all its links, averaged over DCGM's update interval (DCGM_FI_PROF_NVLINK_TX_BYTES)."),
		nvlinkRX: gpuDesc("dcgm", "nvlink_receive_bytes_per_second",
			"NVLink traffic into the GPU over all its links, averaged over DCGM's update interval (DCGM_FI_PROF_NVLINK_RX_BYTES)."),
	}
	c.Init(src, rendering(c.render))
	return c
}

// Describe implements prometheus.Collector.
func (c *DCGMCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.healthStatus, c.healthIncidents, c.engineActive, c.smActive,
		c.smOccupancy, c.tensorActive, c.dramActive, c.pcieTX, c.pcieRX, c.nvlinkTX, c.nvlinkRX} {
		ch <- d
	}
}

func (c *DCGMCollector) render(o *out, s *dcgm.Snapshot) {
	o.gauge(c.info, 1, s.Version, s.LibraryVersion, s.Mode)
	for i := range s.GPUs {
		g := &s.GPUs[i]
		o.Labels = []string{itoa(g.Index), g.UUID, g.PCIBusID}
		p := &g.Profiling
		o.optGauge(c.engineActive, p.GraphicsEngineActive)
		o.optGauge(c.smActive, p.SMActive)
		o.optGauge(c.smOccupancy, p.SMOccupancy)
		o.optGauge(c.tensorActive, p.TensorActive)
		o.optGauge(c.dramActive, p.DRAMActive)
		o.optGauge(c.pcieTX, p.PCIeTransmit)
		o.optGauge(c.pcieRX, p.PCIeReceive)
		o.optGauge(c.nvlinkTX, p.NVLinkTransmit)
		o.optGauge(c.nvlinkRX, p.NVLinkReceive)
		for _, h := range g.Health {
			for _, r := range dcgm.HealthResults {
				o.gauge(c.healthStatus, boolFloat(h.Result == r), h.System, r.String())
			}
			o.gauge(c.healthIncidents, float64(h.Incidents), h.System)
		}
	}
}

package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
)

// gpuLabels join every per-GPU series with dcgm-exporter, node_exporter and
// sysfs-based data.
var gpuLabels = []string{"gpu", "uuid", "pci_bus_id"}

func gpuDesc(subsystem, name, help string, extra ...string) *prometheus.Desc {
	return newDesc(subsystem, name, help, append(append([]string{}, gpuLabels...), extra...)...)
}

// NVMLCollector renders the NVML source's snapshot.
type NVMLCollector struct {
	scrape.Rendered[*nvml.Snapshot]
	d nvmlDescs
	// linkSpeed exports each NVLink's rate: a constant per link (25 GB/s
	// on NVLink 4) repeated 18 times a GPU, which no rule or panel reads;
	// off unless asked for (WithNVLinkSpeed, --nvml.nvlink-speed).
	linkSpeed bool
}

// NVMLOption changes what NewNVMLCollector exports.
type NVMLOption func(*NVMLCollector)

// WithNVLinkSpeed exports gpulink_gpu_nvlink_speed_bytes_per_second per
// link.
func WithNVLinkSpeed(on bool) NVMLOption { return func(c *NVMLCollector) { c.linkSpeed = on } }

type nvmlDescs struct {
	driverInfo, info, lost, pstate                    *prometheus.Desc
	clock, clockMax, reasonActive, reasonSeconds      *prometheus.Desc
	temperature, power, powerLimit, energy            *prometheus.Desc
	utilization, memUtilization, memUsed, memTotal    *prometheus.Desc
	computeMode, migEnabled                           *prometheus.Desc
	eccVolatile, eccAggregate, remapped, remapPending *prometheus.Desc
	remapFailed, retired, retiredPending              *prometheus.Desc
	pcieGen, pcieMaxGen, pcieGPUMaxGen, pcieWidth     *prometheus.Desc
	pcieMaxWidth, pcieReplays, pcieCorrectable        *prometheus.Desc
	memReserved                                       *prometheus.Desc
	nvlinks, nvlinksActive, nvlinkUp, nvlinkSpeed     *prometheus.Desc
	nvlinkRemote, nvlinkErrors, nvlinkTX, nvlinkRX    *prometheus.Desc
	nvlinkLinkTX, nvlinkLinkRX                        *prometheus.Desc
	pairInfo, pairNVLinks                             *prometheus.Desc
	fabricState, fabricStatus, fabricHealth           *prometheus.Desc
	fabricInfo, recoveryAction                        *prometheus.Desc
}

// p2pLabels name the peer-to-peer capabilities on gpulink_gpu_pair_info.
var p2pLabels = func() []string {
	var out []string
	for _, cp := range nvml.P2PCapabilities {
		out = append(out, "p2p_"+cp)
	}
	return out
}()

// NewNVMLCollector renders the snapshots of src.
func NewNVMLCollector(src scrape.Source[*nvml.Snapshot], opts ...NVMLOption) *NVMLCollector {
	c := &NVMLCollector{d: nvmlDescs{
		driverInfo: newDesc("", "driver_info", "NVIDIA driver, CUDA driver API and NVML versions; value 1.",
			"driver_version", "cuda_driver_version", "nvml_version"),
		info: gpuDesc("gpu", "info", "GPU identity; value 1. numa_node is empty where the platform does not say.",
			"name", "serial", "vbios_version", "compute_capability", "numa_node", "driver_version", "cuda_driver_version"),
		lost: gpuDesc("gpu", "lost",
			"1 if NVML reports the GPU lost (fallen off the bus, XID 79); its other series are absent then."),
		pstate:        gpuDesc("gpu", "performance_state", "Performance state, 0 (fastest) to 15."),
		clock:         gpuDesc("gpu", "clock_hertz", "Current clock frequency.", "clock"),
		clockMax:      gpuDesc("gpu", "clock_max_hertz", "Maximum clock frequency.", "clock"),
		reasonActive:  gpuDesc("gpu", "clock_event_reason_active", "1 if this reason is holding clocks down now (nvidia-smi's Clocks Event Reasons).", "reason"),
		reasonSeconds: gpuDesc("gpu", "clock_event_reason_seconds_total", "Time clocks were held down for this reason since the driver loaded.", "reason"),
		temperature:   gpuDesc("gpu", "temperature_celsius", "Temperature by sensor.", "sensor"),
		power:         gpuDesc("gpu", "power_watts", "Power draw."),
		powerLimit:    gpuDesc("gpu", "power_limit_watts", "Enforced power limit."),
		energy:        gpuDesc("gpu", "energy_joules_total", "Energy consumed since the driver loaded."),
		utilization:   gpuDesc("gpu", "utilization_ratio", "Fraction of the last sample period a kernel was running."),
		memUtilization: gpuDesc("gpu", "memory_utilization_ratio",
			"Fraction of the last sample period device memory was being read or written."),
		memUsed:      gpuDesc("gpu", "memory_used_bytes", "Device memory in use."),
		memTotal:     gpuDesc("gpu", "memory_total_bytes", "Device memory in total."),
		memReserved:  gpuDesc("gpu", "memory_reserved_bytes", "Device memory the driver keeps for itself; not counted as used."),
		computeMode:  gpuDesc("gpu", "compute_mode", "1 for the GPU's compute mode.", "mode"),
		migEnabled:   gpuDesc("gpu", "mig_enabled", "1 if MIG mode is on."),
		eccVolatile:  gpuDesc("gpu", "ecc_errors_volatile_total", "ECC memory errors since the driver loaded.", "type"),
		eccAggregate: gpuDesc("gpu", "ecc_errors_aggregate_total", "ECC memory errors over the GPU's lifetime.", "type"),
		remapped:     gpuDesc("gpu", "remapped_rows", "Memory rows remapped, by the kind of error that caused it.", "cause"),
		remapPending: gpuDesc("gpu", "row_remap_pending", "1 if a row remap waits for a GPU reset."),
		remapFailed:  gpuDesc("gpu", "row_remap_failed", "1 if a row remap has failed: the GPU needs service."),
		retired:      gpuDesc("gpu", "retired_pages", "Memory pages retired (GPUs before A100), by cause.", "cause"),
		retiredPending: gpuDesc("gpu", "retired_pages_pending",
			"1 if a page retirement waits for a reboot."),
		pcieGen:    gpuDesc("gpu", "pcie_link_generation", "PCIe link generation now. Idle GPUs lower it to save power: compare under load."),
		pcieMaxGen: gpuDesc("gpu", "pcie_link_max_generation", "Highest PCIe generation GPU and slot together allow."),
		pcieGPUMaxGen: gpuDesc("gpu", "pcie_link_gpu_max_generation",
			"Highest PCIe generation the GPU itself supports."),
		pcieWidth:       gpuDesc("gpu", "pcie_link_width", "PCIe link width now, in lanes."),
		pcieMaxWidth:    gpuDesc("gpu", "pcie_link_max_width", "Widest PCIe link GPU and slot together allow, in lanes."),
		pcieReplays:     gpuDesc("gpu", "pcie_replays_total", "PCIe replays (link-level retransmissions)."),
		pcieCorrectable: gpuDesc("gpu", "pcie_correctable_errors_total", "PCIe correctable errors."),
		nvlinks:         gpuDesc("gpu", "nvlinks", "NVLinks the GPU has."),
		nvlinksActive:   gpuDesc("gpu", "nvlinks_active", "NVLinks that are up."),
		nvlinkUp:        gpuDesc("gpu", "nvlink_up", "1 if the NVLink is up.", "link"),
		nvlinkSpeed:     gpuDesc("gpu", "nvlink_speed_bytes_per_second", "NVLink rate, one direction.", "link"),
		// The version is a label here rather than a series a link of
		// its own: it is the same on every link of a GPU and never
		// changes, and as a series it cost as many as the links.
		nvlinkRemote: gpuDesc("gpu", "nvlink_remote_info",
			"What an active NVLink connects to, and its NVLink version as NVML numbers it (empty where NVML does not say); value 1.",
			"link", "remote_pci_bus_id", "remote_type", "version"),
		nvlinkErrors: gpuDesc("gpu", "nvlink_errors_total", "NVLink data-link errors by type: crc_flit, crc_data, replay, recovery.", "link", "type"),
		nvlinkTX:     gpuDesc("gpu", "nvlink_transmit_bytes_total", "Data bytes sent over all of the GPU's NVLinks."),
		nvlinkRX:     gpuDesc("gpu", "nvlink_receive_bytes_total", "Data bytes received over all of the GPU's NVLinks."),
		// Each link's counters cost 36 NVML field values a GPU a sample
		// on NVLink 4, and only with --nvml.nvlink-link-traffic are they
		// read: absent otherwise.
		nvlinkLinkTX: gpuDesc("gpu", "nvlink_link_transmit_bytes_total", "Data bytes sent over the NVLink (with --nvml.nvlink-link-traffic).", "link"),
		nvlinkLinkRX: gpuDesc("gpu", "nvlink_link_receive_bytes_total", "Data bytes received over the NVLink (with --nvml.nvlink-link-traffic).", "link"),
		// The peer-to-peer capabilities are labels of the pair, not a
		// series each: four constant series a pair were 224 on an 8-GPU
		// node.
		pairInfo: newDesc("gpu", "pair_info",
			"How two GPUs reach each other, as the nvidia-smi topo -m cell (NV#, PIX, PXB, PHB, NODE, SYS), and whether NVML "+
				"supports peer-to-peer access of each kind between them: p2p_read, p2p_write, p2p_nvlink, p2p_atomics, 1 or 0 "+
				"(empty where NVML does not say); value 1.",
			append([]string{"gpu", "peer_gpu", "level"}, p2pLabels...)...),
		fabricState: gpuDesc("gpu", "fabric_state",
			"NVLink fabric registration state (NVML): 1 not_started, 2 in_progress, 3 completed. Absent where the GPU has no NVSwitch fabric."),
		fabricStatus: gpuDesc("gpu", "fabric_status",
			"Result of the NVLink fabric registration as an NVML return code: 0 success; meaningful once the state is completed."),
		fabricHealth: gpuDesc("gpu", "fabric_health",
			"1 if this NVLink fabric health reason applies (degraded_bandwidth, route_recovery_in_progress, route_unhealthy, "+
				"access_timeout_recovery_in_progress, incorrect_configuration, partition_not_assigned, fabric_manager_disconnected); "+
				"reasons the driver does not report are absent.", "reason"),
		fabricInfo: gpuDesc("gpu", "fabric_info", "The NVLink domain the GPU registered with; value 1.", "clique_id", "cluster_uuid"),
		recoveryAction: gpuDesc("gpu", "recovery_action",
			"What the driver says to do about the GPU: 0 none, 1 gpu_reset, 2 node_reboot, 3 drain_p2p, 4 drain_and_reset, "+
				"5 recover_imex_domain, 6 bus_reset, 7 system_reboot."),
		pairNVLinks: newDesc("gpu", "pair_nvlinks", "NVLinks joining two GPUs (through NVSwitch included).", "gpu", "peer_gpu"),
	}}
	for _, o := range opts {
		o(c)
	}
	c.Init(src, rendering(c.render))
	return c
}

// Describe implements prometheus.Collector.
func (c *NVMLCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.d.all() {
		ch <- d
	}
}

func (d *nvmlDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{d.driverInfo, d.info, d.lost, d.pstate, d.clock, d.clockMax, d.reasonActive,
		d.reasonSeconds, d.temperature, d.power, d.powerLimit, d.energy, d.utilization, d.memUtilization,
		d.memUsed, d.memTotal, d.computeMode, d.migEnabled, d.eccVolatile, d.eccAggregate, d.remapped,
		d.remapPending, d.remapFailed, d.retired, d.retiredPending, d.pcieGen, d.pcieMaxGen, d.pcieGPUMaxGen,
		d.pcieWidth, d.pcieMaxWidth, d.pcieReplays, d.pcieCorrectable, d.memReserved, d.nvlinks,
		d.nvlinksActive, d.nvlinkUp, d.nvlinkSpeed, d.nvlinkRemote, d.nvlinkErrors,
		d.nvlinkTX, d.nvlinkRX, d.nvlinkLinkTX, d.nvlinkLinkRX, d.pairInfo, d.pairNVLinks, d.fabricState, d.fabricStatus,
		d.fabricHealth, d.fabricInfo, d.recoveryAction}
}

func (o *out) gauge(d *prometheus.Desc, v float64, extra ...string) {
	o.Add(d, prometheus.GaugeValue, v, extra...)
}

func (o *out) optGauge(d *prometheus.Desc, v sampler.Opt[float64], extra ...string) {
	if v.Valid {
		o.Add(d, prometheus.GaugeValue, v.V, extra...)
	}
}

func (o *out) optInt(d *prometheus.Desc, v sampler.Opt[int], extra ...string) {
	if v.Valid {
		o.Add(d, prometheus.GaugeValue, float64(v.V), extra...)
	}
}

func (o *out) optBool(d *prometheus.Desc, v sampler.Opt[bool], extra ...string) {
	if v.Valid {
		o.Add(d, prometheus.GaugeValue, boolFloat(v.V), extra...)
	}
}

func (o *out) optUint(d *prometheus.Desc, t prometheus.ValueType, v sampler.Opt[uint64], extra ...string) {
	if v.Valid {
		o.Add(d, t, float64(v.V), extra...)
	}
}

func (o *out) optCounter(d *prometheus.Desc, v sampler.Opt[float64], extra ...string) {
	if v.Valid {
		o.Add(d, prometheus.CounterValue, v.V, extra...)
	}
}

// numaLabel is a NUMA node as a label value: empty when unknown (-1).
func numaLabel(n int) string {
	if n < 0 {
		return ""
	}
	return itoa(n)
}

func (c *NVMLCollector) render(o *out, s *nvml.Snapshot) {
	d := &c.d
	o.gauge(d.driverInfo, 1, s.DriverVersion, s.CUDADriverVersion, s.NVMLVersion)
	for i := range s.GPUs {
		g := &s.GPUs[i]
		o.Labels = []string{itoa(g.Index), g.UUID, g.PCIBusID}
		o.gauge(d.info, 1, g.Name, g.Serial, g.VBIOS, g.ComputeCapability, numaLabel(g.NUMANode),
			s.DriverVersion, s.CUDADriverVersion)
		o.gauge(d.lost, boolFloat(g.Lost))
		if g.Lost {
			continue
		}
		c.renderGPU(o, g)
		c.renderPCIe(o, &g.PCIe)
		c.renderNVLinks(o, g)
	}
	o.Labels = nil
	for _, p := range s.Pairs {
		a, b := itoa(p.GPU), itoa(p.Peer)
		var buf [8]string // on the stack: the labels are copied in
		vals := append(buf[:0], a, b, p.Level)
		for _, cp := range nvml.P2PCapabilities {
			v := ""
			if ok, known := p.P2P[cp]; known {
				v = itoa(int(boolFloat(ok)))
			}
			vals = append(vals, v)
		}
		o.gauge(d.pairInfo, 1, vals...)
		o.gauge(d.pairNVLinks, float64(p.NVLinks), a, b)
	}
}

func (c *NVMLCollector) renderGPU(o *out, g *nvml.GPUState) {
	d := &c.d
	o.optInt(d.pstate, g.PerformanceState)
	o.optGauge(d.clock, g.Clocks.SM, "sm")
	o.optGauge(d.clock, g.Clocks.Memory, "memory")
	o.optGauge(d.clockMax, g.Clocks.SMMax, "sm")
	o.optGauge(d.clockMax, g.Clocks.MemoryMax, "memory")
	if g.Throttle.Active.Valid {
		for _, r := range nvml.ClockEventReasons {
			if g.Throttle.Supported.Valid && g.Throttle.Supported.V&r.Mask == 0 {
				continue
			}
			o.gauge(d.reasonActive, boolFloat(g.Throttle.Active.V&r.Mask != 0), r.Name)
		}
	}
	for _, r := range nvml.ClockEventReasons {
		if v, ok := g.Throttle.Seconds[r.Name]; ok {
			o.Add(d.reasonSeconds, prometheus.CounterValue, v, r.Name)
		}
	}
	o.optGauge(d.temperature, g.GPUTemperature, "gpu")
	o.optGauge(d.temperature, g.MemoryTemperature, "memory")
	o.optGauge(d.power, g.Power)
	o.optGauge(d.powerLimit, g.PowerLimit)
	o.optCounter(d.energy, g.Energy)
	o.optGauge(d.utilization, g.Utilization)
	o.optGauge(d.memUtilization, g.MemoryUtilization)
	o.optGauge(d.memUsed, g.MemoryUsed)
	o.optGauge(d.memTotal, g.MemoryTotal)
	o.optGauge(d.memReserved, g.MemoryReserved)
	if g.ComputeMode.Valid {
		o.gauge(d.computeMode, 1, g.ComputeMode.V)
	}
	o.optBool(d.migEnabled, g.MIGEnabled)

	e := &g.ECC
	o.optCounter(d.eccVolatile, e.CorrectedVolatile, "corrected")
	o.optCounter(d.eccVolatile, e.UncorrectedVolatile, "uncorrected")
	o.optCounter(d.eccAggregate, e.CorrectedAggregate, "corrected")
	o.optCounter(d.eccAggregate, e.UncorrectedAggregate, "uncorrected")
	o.optGauge(d.remapped, e.RemappedCorrectable, "correctable")
	o.optGauge(d.remapped, e.RemappedUncorrectable, "uncorrectable")
	o.optBool(d.remapPending, e.RemapPending)
	o.optBool(d.remapFailed, e.RemapFailed)
	o.optGauge(d.retired, e.RetiredSingleBit, "multiple_single_bit_ecc")
	o.optGauge(d.retired, e.RetiredDoubleBit, "double_bit_ecc")
	o.optBool(d.retiredPending, e.RetiredPending)

	o.optInt(d.recoveryAction, g.RecoveryAction)
	if g.Fabric.Valid {
		f := &g.Fabric.V
		o.gauge(d.fabricState, float64(f.State))
		o.gauge(d.fabricStatus, float64(f.Status))
		o.gauge(d.fabricInfo, 1, strconv.FormatUint(uint64(f.CliqueID), 10), f.ClusterUUID)
		for _, r := range nvml.FabricHealthReasons {
			if v, ok := f.Health[r]; ok {
				o.gauge(d.fabricHealth, boolFloat(v), r)
			}
		}
	}
}

func (c *NVMLCollector) renderPCIe(o *out, p *nvml.PCIeLink) {
	d := &c.d
	o.optInt(d.pcieGen, p.Generation)
	o.optInt(d.pcieMaxGen, p.MaxGeneration)
	o.optInt(d.pcieGPUMaxGen, p.GPUMaxGeneration)
	o.optInt(d.pcieWidth, p.Width)
	o.optInt(d.pcieMaxWidth, p.MaxWidth)
	o.optCounter(d.pcieReplays, p.Replays)
	o.optCounter(d.pcieCorrectable, p.CorrectableErrors)
}

func (c *NVMLCollector) renderNVLinks(o *out, g *nvml.GPUState) {
	d := &c.d
	o.gauge(d.nvlinks, float64(g.NVLinkCount))
	if len(g.NVLinks) == 0 {
		return
	}
	o.gauge(d.nvlinksActive, float64(g.ActiveNVLinks()))
	o.optCounter(d.nvlinkTX, g.NVLinkTransmitBytes)
	o.optCounter(d.nvlinkRX, g.NVLinkReceiveBytes)
	for _, l := range g.NVLinks {
		link := itoa(l.Link)
		o.gauge(d.nvlinkUp, boolFloat(l.Active), link)
		if c.linkSpeed {
			o.optGauge(d.nvlinkSpeed, l.SpeedBytes, link)
		}
		if l.Active && l.RemotePCIBusID != "" {
			version := ""
			if l.Version.Valid {
				version = itoa(l.Version.V)
			}
			o.gauge(d.nvlinkRemote, 1, link, l.RemotePCIBusID, l.RemoteType, version)
		}
		for _, t := range nvml.NVLinkErrorTypes {
			if v, ok := l.Errors[t]; ok {
				o.Add(d.nvlinkErrors, prometheus.CounterValue, v, link, t)
			}
		}
		o.optCounter(d.nvlinkLinkTX, l.TransmitBytes, link)
		o.optCounter(d.nvlinkLinkRX, l.ReceiveBytes, link)
	}
}

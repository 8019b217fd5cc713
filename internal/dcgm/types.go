package dcgm

import (
	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// Snapshot is one sample of DCGM: the engine it came from and, per GPU,
// the profiling fields and the health watches.
type Snapshot struct {
	// Mode is how the exporter reaches DCGM: "standalone" (an
	// nv-hostengine process) or "embedded" (an engine in this process).
	Mode string
	// Version is the host engine's DCGM version, LibraryVersion the
	// client library's (libdcgm.so.4 in this process); empty where DCGM
	// does not say. They differ when the library and nv-hostengine come
	// from different packages.
	Version, LibraryVersion string
	// Profiling is false when the engine refused to watch the profiling
	// fields (a GPU without DCGM profiling support, or another profiler
	// holding the counters); their values are absent then.
	Profiling bool
	// GPUs are sorted by Index, then DCGM id.
	GPUs []GPU
}

// GPU is one GPU as DCGM sees it, labelled as NVML labels it.
type GPU struct {
	// ID is DCGM's GPU id.
	ID uint
	// Index is the GPU's NVML index where NVML knows its UUID, else
	// DCGM's id (which DCGM assigns in NVML's order).
	Index int
	// UUID is DCGM's; PCIBusID is in sysfs form (0000:18:00.0), NVML's
	// where NVML knows the GPU, else DCGM's normalised. Empty when DCGM
	// gave none.
	UUID, PCIBusID string
	Profiling      Profiling
	// Health has one entry per watched system, in HealthSystems order;
	// empty when the health check failed this sample.
	Health []SystemHealth
}

// Profiling holds DCGM's profiling fields, averaged by DCGM over its
// update interval. Each is absent when DCGM has no value (not supported,
// not watched, no sample yet).
type Profiling struct {
	// GraphicsEngineActive is the share of time any graphics or compute
	// engine was active (DCGM_FI_PROF_GR_ENGINE_ACTIVE).
	GraphicsEngineActive sampler.Opt[float64]
	// SMActive is the share of time at least one warp was resident on an
	// SM, averaged over all SMs (DCGM_FI_PROF_SM_ACTIVE).
	SMActive sampler.Opt[float64]
	// SMOccupancy is resident warps over the most an SM can hold,
	// averaged over all SMs (DCGM_FI_PROF_SM_OCCUPANCY).
	SMOccupancy sampler.Opt[float64]
	// TensorActive is the share of cycles the tensor pipes were active
	// (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE).
	TensorActive sampler.Opt[float64]
	// DRAMActive is the share of cycles device memory was sending or
	// receiving data (DCGM_FI_PROF_DRAM_ACTIVE).
	DRAMActive sampler.Opt[float64]
	// PCIe and NVLink rates, in bytes per second, headers included
	// (DCGM_FI_PROF_PCIE_TX_BYTES, _RX_BYTES, DCGM_FI_PROF_NVLINK_TX_BYTES,
	// _RX_BYTES). Transmit is from the GPU.
	PCIeTransmit, PCIeReceive, NVLinkTransmit, NVLinkReceive sampler.Opt[float64]
}

// HealthResult is DCGM's verdict on one health system.
type HealthResult int

// The results, worst last; the values are DCGM's.
const (
	HealthPass HealthResult = 0
	HealthWarn HealthResult = 10
	HealthFail HealthResult = 20
)

// HealthResults are every result, in order, for renderers that export one
// series per result.
var HealthResults = []HealthResult{HealthPass, HealthWarn, HealthFail}

func (r HealthResult) String() string {
	switch r {
	case HealthPass:
		return "pass"
	case HealthWarn:
		return "warn"
	case HealthFail:
		return "fail"
	}
	return "unknown"
}

// SystemHealth is the health check's verdict on one system of one GPU.
type SystemHealth struct {
	// System is the exported name: pcie, nvlink, memory, thermal, power.
	System string
	// Result is the worst of the system's incidents; pass when none.
	Result HealthResult
	// Incidents counts what the check reported for the system.
	Incidents int
	// Message is the first incident's text, for the log.
	Message string
}

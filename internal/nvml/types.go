// Package nvml reads NVIDIA GPUs through NVML into typed snapshots. It knows
// nothing of Prometheus: the collector package renders what it returns.
package nvml

import (
	"time"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// Identity is what does not change while the driver is loaded.
type Identity struct {
	Index    int
	UUID     string
	PCIBusID string // sysfs form: 0000:18:00.0
	Name     string
	Serial   string
	VBIOS    string
	// ComputeCapability is "9.0" for Hopper.
	ComputeCapability string
	// NUMANode is -1 when unknown (sysfs numa_node -1, or not reported).
	NUMANode int
	// NVLinks is how many NVLinks the GPU has, active or not.
	NVLinkCount int
	// MemoryBusWidth is the device memory's bus width in bits (5120 on an
	// H100 SXM); 0 if unknown. With the maximum memory clock it gives the
	// peak memory bandwidth local copies are measured against.
	MemoryBusWidth int
}

// ClockEventReason is one reason NVML gives for clocks below their maximum.
type ClockEventReason struct {
	Name string
	Mask uint64
}

// ClockEventReasons are the reasons in the order they are exported. Names
// follow nvidia-smi -q's "Clocks Event Reasons" section.
var ClockEventReasons = []ClockEventReason{
	{"gpu_idle", 0x1},
	{"applications_clocks_setting", 0x2},
	{"sw_power_cap", 0x4},
	{"hw_slowdown", 0x8},
	{"sync_boost", 0x10},
	{"sw_thermal_slowdown", 0x20},
	{"hw_thermal_slowdown", 0x40},
	{"hw_power_brake_slowdown", 0x80},
	{"display_clock_setting", 0x100},
}

// Clocks holds clock frequencies in hertz.
type Clocks struct {
	SM, SMMax, Memory, MemoryMax sampler.Opt[float64]
}

// Throttle says whether and for how long clocks were held down, and why.
type Throttle struct {
	// Active is the current reasons bit mask; Supported the ones this GPU
	// can report.
	Active, Supported sampler.Opt[uint64]
	// Seconds is the time spent in each reason since the driver loaded, by
	// reason name; only reasons NVML keeps time for appear.
	Seconds map[string]float64
}

// ECC holds memory error counts and row remapping state.
type ECC struct {
	CorrectedVolatile, UncorrectedVolatile   sampler.Opt[float64]
	CorrectedAggregate, UncorrectedAggregate sampler.Opt[float64]
	// Row remapping (A100 and later).
	RemappedCorrectable, RemappedUncorrectable sampler.Opt[float64]
	RemapPending, RemapFailed                  sampler.Opt[bool]
	// Page retirement (before A100).
	RetiredSingleBit, RetiredDoubleBit sampler.Opt[float64]
	RetiredPending                     sampler.Opt[bool]
}

// PCIeLink is the GPU's own PCIe link as NVML reports it.
type PCIeLink struct {
	Generation, Width sampler.Opt[int]
	// MaxGeneration and MaxWidth are what GPU and slot together allow;
	// GPUMaxGeneration is what the GPU alone supports.
	MaxGeneration, MaxWidth, GPUMaxGeneration sampler.Opt[int]
	Replays, CorrectableErrors                sampler.Opt[float64]
}

// NVLink is one NVLink of a GPU.
type NVLink struct {
	Link    int
	Active  bool
	Version sampler.Opt[int]
	// SpeedBytes is the link's rate in bytes per second, one direction.
	SpeedBytes sampler.Opt[float64]
	// Remote end, only for active links.
	RemotePCIBusID string
	RemoteType     string // gpu, switch, ibmnpu, unknown
	// Errors by kind: crc_flit, crc_data, replay, recovery.
	Errors map[string]float64
	// Data bytes over the link since the driver loaded; read only with
	// WithLinkTraffic.
	TransmitBytes, ReceiveBytes sampler.Opt[float64]
}

// GPUState is one GPU in one sample.
type GPUState struct {
	Identity
	// Lost is true when NVML says the GPU is lost (fallen off the bus); no
	// other reading of it is valid then.
	Lost bool

	PerformanceState sampler.Opt[int]
	Clocks           Clocks
	Throttle         Throttle

	GPUTemperature, MemoryTemperature sampler.Opt[float64] // celsius
	Power, PowerLimit                 sampler.Opt[float64] // watts
	Energy                            sampler.Opt[float64] // joules since driver load
	Utilization, MemoryUtilization    sampler.Opt[float64] // 0..1
	MemoryUsed, MemoryTotal           sampler.Opt[float64] // bytes
	MemoryReserved                    sampler.Opt[float64] // bytes the driver keeps

	ECC     ECC
	PCIe    PCIeLink
	NVLinks []NVLink
	// Data bytes over all of the GPU's NVLinks since the driver loaded.
	NVLinkTransmitBytes, NVLinkReceiveBytes sampler.Opt[float64]

	ComputeMode sampler.Opt[string]
	MIGEnabled  sampler.Opt[bool]

	// Fabric is the NVLink fabric registration (slow tier); absent where
	// the GPU or driver has none.
	Fabric sampler.Opt[Fabric]
	// RecoveryAction is what the driver says to do about the GPU
	// (RecoveryActionNames; 0 none); absent on drivers without the field.
	RecoveryAction sampler.Opt[int]
}

// ActiveNVLinks counts the GPU's links that are up.
func (g *GPUState) ActiveNVLinks() int {
	n := 0
	for _, l := range g.NVLinks {
		if l.Active {
			n++
		}
	}
	return n
}

// Pair is how two GPUs reach each other, as nvidia-smi topo -m reports it.
type Pair struct {
	GPU, Peer int
	// Level is the nvidia-smi topo -m cell: NV#, PIX, PXB, PHB, NODE, SYS.
	Level   string
	NVLinks int
	// P2P is the peer-to-peer status by capability (read, write, nvlink,
	// atomics): true when NVML answers OK.
	P2P map[string]bool
}

// Snapshot is one sample of every GPU.
type Snapshot struct {
	DriverVersion     string
	CUDADriverVersion string // "12.4"
	NVMLVersion       string
	GPUs              []GPUState
	Pairs             []Pair
}

// XIDCount is how often one XID was seen on one GPU.
type XIDCount struct {
	GPU      int
	XID      uint64
	Count    uint64
	LastSeen time.Time
}

// NVLinkCounts returns, by GPU index (both ways round), how many NVLinks join each pair of
// GPUs in the snapshot (0 where none do).
func (s *Snapshot) NVLinkCounts() [][]int {
	out := make([][]int, len(s.GPUs))
	for i := range out {
		out[i] = make([]int, len(s.GPUs))
	}
	for _, p := range s.Pairs {
		if p.GPU >= 0 && p.GPU < len(out) && p.Peer >= 0 && p.Peer < len(out) {
			out[p.GPU][p.Peer], out[p.Peer][p.GPU] = p.NVLinks, p.NVLinks
		}
	}
	return out
}

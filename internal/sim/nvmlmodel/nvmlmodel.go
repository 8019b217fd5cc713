// Package nvmlmodel is the NVML library a machine of internal/sim/machine
// shows, built on go-nvml's DGX server mocks: it answers every call the gpu
// package makes with values modelled on real hardware, and lets tests
// break it: lose a GPU, hang a call, make a field unsupported, deliver XID
// events. Tests and the simulated node use it; it is never linked against
// real hardware.
package nvmlmodel

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
)

// Library is a fake NVML library with its GPUs.
type Library struct {
	*server.Server
	GPUs []*GPU

	// NoLibrary makes Init answer LIBRARY_NOT_FOUND, as on a machine
	// without a driver.
	NoLibrary bool

	mu     sync.Mutex
	events chan gonvml.EventData
	// eventSets are the event sets made, for ForgetCalls.
	eventSets []*mock.EventSet
}

// GPU is one fake GPU. Change its fields with Library.Update.
type GPU struct {
	*server.Device
	m *Library

	Lost bool
	// Unsupported names methods (GetPowerUsage, GetRemappedRows, ...) or
	// fields ("field:82"; "field:138:all" for only a field's all-links
	// scope) that answer NOT_SUPPORTED.
	Unsupported map[string]bool
	// Errors names methods that answer with a given error.
	Errors map[string]gonvml.Return
	// Hang, while non-nil, blocks every call until it is closed.
	Hang chan struct{}

	Serial, VBIOS             string
	SMClockMHz, MemClockMHz   uint32
	SMMaxMHz, MemMaxMHz       uint32
	PState                    gonvml.Pstates
	ClockReasons              uint64
	SupportedReasons          uint64
	TempC, MemTempC           uint32
	PowerMW, PowerLimitMW     uint32
	EnergyMJ                  uint64
	UtilGPU, UtilMem          uint32
	MemUsed, MemReserved      uint64
	ComputeMode               gonvml.ComputeMode
	ECC                       [2][2]uint64 // [corrected, uncorrected][volatile, aggregate]
	RemapCorr, RemapUnc       int
	RemapPending, RemapFailed bool
	// RetiredPages by cause; nil means page retirement is not supported.
	RetiredPages             map[gonvml.PageRetirementCause]int
	RetiredPending           bool
	PCIeGen, PCIeWidth       int
	PCIeMaxGen, PCIeMaxWidth int
	PCIeGPUMaxGen            int
	PCIeReplays              int
	// MemBusWidth answers GetMemoryBusWidth, in bits.
	MemBusWidth uint32
	// Fields holds field values by id and scope.
	Fields map[FieldKey]float64
	// NVLinks, one entry per link.
	NVLinks []Link
	// NUMANode answers GetNumaNodeId; -1 answers NOT_SUPPORTED as on x86.
	NUMANode int
	// Topology level to each other GPU by index.
	Levels map[int]gonvml.GpuTopologyLevel
	// Processes answers GetComputeRunningProcesses, MPSProcesses
	// GetMPSComputeRunningProcesses; nil answers an empty list.
	Processes, MPSProcesses []gonvml.ProcessInfo
	// Fabric answers the fabric info call (method name "GetGpuFabricInfoV"
	// in Unsupported and Errors); nil answers NOT_SUPPORTED, as a GPU
	// outside an NVSwitch system. Set the recovery action as the field
	// gonvml.FI_DEV_GET_GPU_RECOVERY_ACTION in Fields.
	Fabric *gonvml.GpuFabricInfo_v3
}

// Link is one fake NVLink.
type Link struct {
	Up         bool
	Version    uint32 // nvmlNvlinkVersion_t: NVLink 4.0 is 6
	RemoteBus  string // NVML form, 00000000:18:00.0
	RemoteType gonvml.IntNvLinkDeviceType
	Errors     [4]uint64 // by gonvml.NvLinkErrorCounter up to CRC_DATA
}

// allLinks is the scope of a field summed over every NVLink, as NVML
// answers the throughput fields for scope UINT_MAX.
const allLinks = math.MaxUint32

// linkSummed are the per-link fields NVML also sums over all links.
var linkSummed = map[uint32]bool{
	gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX: true, gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX: true,
	gonvml.FI_DEV_NVLINK_THROUGHPUT_RAW_TX: true, gonvml.FI_DEV_NVLINK_THROUGHPUT_RAW_RX: true,
}

// sumOverLinks is field id summed over the GPU's links; false when no link
// has it.
func (g *GPU) sumOverLinks(id uint32) (float64, bool) {
	sum, any := 0.0, false
	for l := range g.NVLinks {
		if v, ok := g.Fields[FieldKey{id, uint32(l)}]; ok {
			sum, any = sum+v, true
		}
	}
	return sum, any
}

// linkErrorFields serve Link.Errors as field values too, as the driver does.
var linkErrorFields = map[uint32]gonvml.NvLinkErrorCounter{
	gonvml.FI_DEV_NVLINK_ERROR_DL_REPLAY:         gonvml.NVLINK_ERROR_DL_REPLAY,
	gonvml.FI_DEV_NVLINK_ERROR_DL_RECOVERY:       gonvml.NVLINK_ERROR_DL_RECOVERY,
	gonvml.FI_DEV_NVLINK_ERROR_DL_CRC:            gonvml.NVLINK_ERROR_DL_CRC_FLIT,
	gonvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0: gonvml.NVLINK_ERROR_DL_CRC_DATA,
}

// FieldKey addresses a field value.
type FieldKey struct {
	ID, Scope uint32
}

// NewDGXH100 is the NVML of machine.DGXH100: eight H100 SXM, two sockets,
// every GPU's 18 NVLinks on four NVSwitches.
func NewDGXH100() *Library { return New(machine.DGXH100()) }

// NewAWSP5 is the NVML of machine.AWSP5: the same board as a DGX H100 at
// the p5's bus numbers, GPUs 0-3 on one socket and 4-7 on the other.
func NewAWSP5() *Library { return New(machine.AWSP5()) }

// NewH200Pair is the NVML of machine.H200VM, the borrowed 2x H200 machine:
// both GPUs on the VM's root bus, all 18 NVLinks of each going straight to
// the other.
func NewH200Pair() *Library { return New(machine.H200VM()) }

// boards are go-nvml's server mocks by the PCI device ID of their GPUs,
// with what the mocks do not model.
var boards = map[uint16]struct {
	new func() *server.Server
	// memBusWidth is GetMemoryBusWidth, in bits: 1024 per HBM stack.
	memBusWidth uint32
}{
	0x2330: {dgxh100.New, 5120}, // H100 SXM: five HBM3 stacks
	0x2335: {dgxh200.New, 6144}, // H200 SXM: six HBM3e stacks
}

// New is the NVML library a machine shows: one GPU per display or 3D
// controller of m, in bus id order as NVML numbers them, at its address,
// with its PCIe link as m has it trained and its NVLinks as m.NVLink wires
// them. Every GPU is of one kind, one go-nvml has a mock server for (H100
// or H200 SXM); anything else is a mistake in the model, and panics.
//
// The topology levels between GPUs are coarse: NODE on one NUMA node,
// SYSTEM across nodes, HOSTBRIDGE where the node is unknown (a VM, whose
// functions all sit on one root bus). PIX and PXB are not told apart.
func New(m *machine.Machine) *Library {
	devs := m.GPUs()
	if len(devs) == 0 {
		panic(fmt.Sprintf("nvmlmodel: %s has no GPU", m.Name))
	}
	board, ok := boards[devs[0].DeviceID]
	if !ok {
		panic(fmt.Sprintf("nvmlmodel: %s: no NVML mock for GPU %04x:%04x", m.Name, devs[0].Vendor, devs[0].DeviceID))
	}
	s := board.new()
	if len(devs) > len(s.Devices) {
		panic(fmt.Sprintf("nvmlmodel: %s has %d GPUs, the mock %d", m.Name, len(devs), len(s.Devices)))
	}
	s.Devices = s.Devices[:len(devs)]
	lib := newLibrary(s, m.NVLink.PerGPU)
	for i, g := range lib.GPUs {
		d := devs[i]
		if d.DeviceID != devs[0].DeviceID {
			panic(fmt.Sprintf("nvmlmodel: %s mixes GPUs %04x and %04x", m.Name, devs[0].DeviceID, d.DeviceID))
		}
		g.PciBusID = d.Addr
		g.PCIeGen, g.PCIeWidth = d.Gen, d.Width
		g.PCIeMaxGen, g.PCIeMaxWidth, g.PCIeGPUMaxGen = d.MaxGen, d.MaxWidth, d.MaxGen
		g.MemBusWidth = board.memBusWidth
		// Drivers from 570 report a recovery action; NVSwitch systems a
		// fabric, all GPUs in one clique.
		g.Fields[FieldKey{gonvml.FI_DEV_GET_GPU_RECOVERY_ACTION, 0}] = float64(gonvml.GPU_RECOVERY_ACTION_NONE)
		if len(m.NVLink.Switches) > 0 {
			g.Fabric = HealthyFabric(simClusterUUID, 1)
		}
		for l := range g.NVLinks {
			k := Link{Up: true, Version: uint32(gonvml.NVLINK_VERSION_4_0), RemoteType: gonvml.NVLINK_DEVICE_TYPE_SWITCH}
			if sw := m.NVLink.Switches; len(sw) > 0 {
				k.RemoteBus = pciaddr.NVMLForm(sw[l%len(sw)])
			} else {
				if len(devs) != 2 {
					panic(fmt.Sprintf("nvmlmodel: %s: NVLinks without switches join two GPUs, not %d", m.Name, len(devs)))
				}
				k.RemoteType, k.RemoteBus = gonvml.NVLINK_DEVICE_TYPE_GPU, pciaddr.NVMLForm(devs[1-i].Addr)
			}
			g.NVLinks[l] = k
		}
		for j, e := range devs {
			switch {
			case j == i:
			case d.NUMANode < 0 || e.NUMANode < 0:
				g.Levels[j] = gonvml.TOPOLOGY_HOSTBRIDGE
			case d.NUMANode == e.NUMANode:
				g.Levels[j] = gonvml.TOPOLOGY_NODE
			default:
				g.Levels[j] = gonvml.TOPOLOGY_SYSTEM
			}
		}
	}
	return lib
}

// newLibrary is a library of the mock's GPUs with values modelled on an
// H100 SXM at work, each with nvlinks NVLinks.
func newLibrary(s *server.Server, nvlinks int) *Library {
	m := &Library{Server: s, events: make(chan gonvml.EventData, 64)}
	for i, d := range s.Devices {
		g := &GPU{
			Device: d.(*server.Device), m: m,
			Unsupported: map[string]bool{}, Errors: map[string]gonvml.Return{},
			Serial: fmt.Sprintf("165322000%04d", i), VBIOS: "96.00.99.00.01",
			SMClockMHz: 1980, MemClockMHz: 2619, SMMaxMHz: 1980, MemMaxMHz: 2619,
			PState: gonvml.PSTATE_0, SupportedReasons: 0x1ff,
			TempC: 34, MemTempC: 41, PowerMW: 112000, PowerLimitMW: 700000, EnergyMJ: 8_123_456_789,
			UtilGPU: 0, UtilMem: 0, MemUsed: 512 << 20, MemReserved: 615 << 20,
			PCIeGen: 5, PCIeWidth: 16, PCIeMaxGen: 5, PCIeMaxWidth: 16, PCIeGPUMaxGen: 5,
			Fields: map[FieldKey]float64{
				{gonvml.FI_DEV_MEMORY_TEMP, 0}:                                 41,
				{gonvml.FI_DEV_NVLINK_LINK_COUNT, 0}:                           float64(nvlinks),
				{gonvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, 0}:            1.5e9,
				{gonvml.FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST, 0}:              0,
				{gonvml.FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, 0}:       0,
				{gonvml.FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, 0}:       0,
				{gonvml.FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, 0}: 0,
				{gonvml.FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS, 0}:               0,
			},
			NVLinks:  make([]Link, nvlinks),
			NUMANode: -1,
			Levels:   map[int]gonvml.GpuTopologyLevel{},
		}
		for l := range nvlinks {
			g.Fields[FieldKey{gonvml.FI_DEV_NVLINK_GET_SPEED, uint32(l)}] = 26562
			g.Fields[FieldKey{gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, uint32(l)}] = float64(1000 * (l + 1))
			g.Fields[FieldKey{gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, uint32(l)}] = float64(2000 * (l + 1))
		}
		m.GPUs = append(m.GPUs, g)
	}
	m.setLibraryFuncs()
	for _, g := range m.GPUs {
		g.setDeviceFuncs()
	}
	return m
}

// simClusterUUID is the simulated NVLink domain's cluster uuid.
var simClusterUUID = [16]uint8{0x5a, 0x1e, 0x7d, 0x2c, 0x41, 0x0b, 0x4e, 0x9a, 0x8f, 0x31, 0x6c, 0x02, 0xd4, 0xe5, 0x77, 0x10}

// GpuFabricInfo answers the fabric info call for the GPU of handle h (an
// nvml.FabricSource: go-nvml's mock cannot carry the versioned call).
func (m *Library) GpuFabricInfo(h gonvml.Device) (gonvml.GpuFabricInfo_v3, gonvml.Return) {
	for _, g := range m.GPUs {
		if gonvml.Device(g.Device) != h {
			continue
		}
		var info gonvml.GpuFabricInfo_v3
		supported := false
		// g.Fabric is read under the lock only: a fault's Update may be
		// setting it while a sampler asks (the race detector saw the nil
		// check outside it).
		ret := g.locked(g.call("GetGpuFabricInfoV"), func() {
			if g.Fabric != nil {
				info, supported = *g.Fabric, true
			}
		})
		if ret == gonvml.SUCCESS && !supported {
			ret = gonvml.ERROR_NOT_SUPPORTED
		}
		return info, ret
	}
	return gonvml.GpuFabricInfo_v3{}, gonvml.ERROR_INVALID_ARGUMENT
}

// HealthyFabric is the fabric info of a GPU registered with a healthy
// NVSwitch fabric, in clique clique of cluster uuid.
func HealthyFabric(uuid [16]uint8, clique uint32) *gonvml.GpuFabricInfo_v3 {
	const (
		bw     = gonvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE << gonvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW
		rr     = gonvml.GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_FALSE << gonvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY
		ru     = gonvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE << gonvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY
		at     = gonvml.GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_FALSE << gonvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY
		config = gonvml.GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE << gonvml.GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION
	)
	return &gonvml.GpuFabricInfo_v3{Version: 3, ClusterUuid: uuid, CliqueId: clique,
		State: gonvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(gonvml.SUCCESS),
		HealthMask:    bw | rr | ru | at | config,
		HealthSummary: gonvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY}
}

// Update changes machine state under its lock, so a running sampler never
// sees half of a change.
func (m *Library) Update(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
}

// SendXID delivers an XID event for GPU i (-1: no device).
func (m *Library) SendXID(i int, xid uint64) {
	m.events <- m.xidEvent(i, xid)
}

// TrySendXID delivers an XID event for GPU i unless the queue of events
// nobody has waited for yet is full, and reports whether it did. The
// simulated node uses it: with the XID collector off nothing waits, and a
// fault must not block the node.
func (m *Library) TrySendXID(i int, xid uint64) bool {
	select {
	case m.events <- m.xidEvent(i, xid):
		return true
	default:
		return false
	}
}

func (m *Library) xidEvent(i int, xid uint64) gonvml.EventData {
	ev := gonvml.EventData{EventType: gonvml.EventTypeXidCriticalError, EventData: xid}
	if i >= 0 {
		ev.Device = m.GPUs[i].Device
	}
	return ev
}

func (m *Library) setLibraryFuncs() {
	s := m.Server
	s.InitFunc = func() gonvml.Return {
		if m.NoLibrary {
			return gonvml.ERROR_LIBRARY_NOT_FOUND
		}
		return gonvml.SUCCESS
	}
	s.EventSetCreateFunc = func() (gonvml.EventSet, gonvml.Return) {
		es := &mock.EventSet{}
		es.FreeFunc = func() gonvml.Return {
			m.mu.Lock()
			defer m.mu.Unlock()
			if i := slices.Index(m.eventSets, es); i >= 0 {
				m.eventSets = slices.Delete(m.eventSets, i, i+1)
			}
			return gonvml.SUCCESS
		}
		es.WaitFunc = func(ms uint32) (gonvml.EventData, gonvml.Return) {
			select {
			case ev := <-m.events:
				return ev, gonvml.SUCCESS
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
			}
		}
		m.mu.Lock()
		m.eventSets = append(m.eventSets, es)
		m.mu.Unlock()
		return es, gonvml.SUCCESS
	}
}

// call is how every fake device method starts: it hangs if asked to, and
// otherwise says what the method should answer.
func (g *GPU) call(name string) gonvml.Return {
	g.m.mu.Lock()
	hang := g.Hang
	g.m.mu.Unlock()
	if hang != nil {
		<-hang
	}
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	switch {
	case g.Lost:
		return gonvml.ERROR_GPU_IS_LOST
	case g.Unsupported[name]:
		return gonvml.ERROR_NOT_SUPPORTED
	case g.Errors[name] != 0:
		return g.Errors[name]
	}
	return gonvml.SUCCESS
}

// verdict is what method would answer, but for a hang or a lost GPU; the
// caller holds the machine lock.
func (g *GPU) verdict(method string) gonvml.Return {
	switch {
	case g.Unsupported[method]:
		return gonvml.ERROR_NOT_SUPPORTED
	case g.Errors[method] != 0:
		return g.Errors[method]
	}
	return gonvml.SUCCESS
}

// methodField serves as a field value what a single call answers, as the
// driver does: the value, and the method whose verdict (unsupported, an
// error) the field shares. The caller holds the machine lock.
func (g *GPU) methodField(k FieldKey) (float64, string, bool) {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	retired := func(cause gonvml.PageRetirementCause) (float64, string, bool) {
		if g.RetiredPages == nil {
			return 0, "", false // Hopper: not supported
		}
		return float64(g.RetiredPages[cause]), "GetRetiredPages", true
	}
	switch k.ID {
	case gonvml.FI_DEV_POWER_AVERAGE:
		return float64(g.PowerMW), "GetPowerUsage", true
	case gonvml.FI_DEV_POWER_CURRENT_LIMIT:
		return float64(g.PowerLimitMW), "GetEnforcedPowerLimit", true
	case gonvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION:
		return float64(g.EnergyMJ), "GetTotalEnergyConsumption", true
	case gonvml.FI_DEV_ECC_SBE_VOL_TOTAL:
		return float64(g.ECC[gonvml.MEMORY_ERROR_TYPE_CORRECTED][gonvml.VOLATILE_ECC]), "GetTotalEccErrors", true
	case gonvml.FI_DEV_ECC_DBE_VOL_TOTAL:
		return float64(g.ECC[gonvml.MEMORY_ERROR_TYPE_UNCORRECTED][gonvml.VOLATILE_ECC]), "GetTotalEccErrors", true
	case gonvml.FI_DEV_ECC_SBE_AGG_TOTAL:
		return float64(g.ECC[gonvml.MEMORY_ERROR_TYPE_CORRECTED][gonvml.AGGREGATE_ECC]), "GetTotalEccErrors", true
	case gonvml.FI_DEV_ECC_DBE_AGG_TOTAL:
		return float64(g.ECC[gonvml.MEMORY_ERROR_TYPE_UNCORRECTED][gonvml.AGGREGATE_ECC]), "GetTotalEccErrors", true
	case gonvml.FI_DEV_REMAPPED_COR:
		return float64(g.RemapCorr), "GetRemappedRows", true
	case gonvml.FI_DEV_REMAPPED_UNC:
		return float64(g.RemapUnc), "GetRemappedRows", true
	case gonvml.FI_DEV_REMAPPED_PENDING:
		return b(g.RemapPending), "GetRemappedRows", true
	case gonvml.FI_DEV_REMAPPED_FAILURE:
		return b(g.RemapFailed), "GetRemappedRows", true
	case gonvml.FI_DEV_RETIRED_SBE:
		return retired(gonvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
	case gonvml.FI_DEV_RETIRED_DBE:
		return retired(gonvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
	case gonvml.FI_DEV_RETIRED_PENDING:
		if g.RetiredPages == nil {
			return 0, "", false
		}
		return b(g.RetiredPending), "GetRetiredPagesPendingStatus", true
	case gonvml.FI_DEV_PCIE_REPLAY_COUNTER:
		return float64(g.PCIeReplays), "GetPcieReplayCounter", true
	case gonvml.FI_DEV_NVLINK_GET_STATE:
		if int(k.Scope) < len(g.NVLinks) {
			return b(g.NVLinks[k.Scope].Up), "GetNvLinkState", true
		}
	}
	return 0, "", false
}

// answer is a getter's whole body: the call's verdict, and on success the
// value read under the machine lock.
func answer[T any](g *GPU, name string, read func() T) (T, gonvml.Return) {
	var v T
	return v, g.locked(g.call(name), func() { v = read() })
}

// locked runs f under the machine lock and returns ret, for readers of state.
func (g *GPU) locked(ret gonvml.Return, f func()) gonvml.Return {
	if ret == gonvml.SUCCESS {
		g.m.mu.Lock()
		f()
		g.m.mu.Unlock()
	}
	return ret
}

func cChars(s string) (out [32]int8) {
	for i := 0; i < len(s) && i < len(out)-1; i++ {
		out[i] = int8(s[i])
	}
	return out
}

func (g *GPU) setDeviceFuncs() {
	d := &g.Device.Device
	m := g.m
	d.GetUUIDFunc = func() (string, gonvml.Return) {
		return answer(g, "GetUUID", func() string { return g.UUID })
	}
	d.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
		var p gonvml.PciInfo
		return p, g.locked(g.call("GetPciInfo"), func() {
			p.BusId = cChars(pciaddr.NVMLForm(g.PciBusID))
			p.PciDeviceId = g.Config.PciDeviceId
		})
	}
	d.GetSerialFunc = func() (string, gonvml.Return) {
		return answer(g, "GetSerial", func() string { return g.Serial })
	}
	d.GetVbiosVersionFunc = func() (string, gonvml.Return) {
		return answer(g, "GetVbiosVersion", func() string { return g.VBIOS })
	}
	d.GetNumaNodeIdFunc = func() (int, gonvml.Return) {
		var v int
		ret := g.locked(g.call("GetNumaNodeId"), func() { v = g.NUMANode })
		if ret == gonvml.SUCCESS && v < 0 {
			return 0, gonvml.ERROR_NOT_SUPPORTED
		}
		return v, ret
	}
	d.GetSupportedClocksEventReasonsFunc = func() (uint64, gonvml.Return) {
		return answer(g, "GetSupportedClocksEventReasons", func() uint64 { return g.SupportedReasons })
	}
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, gonvml.Return) {
		return answer(g, "GetCurrentClocksEventReasons", func() uint64 { return g.ClockReasons })
	}
	d.GetPerformanceStateFunc = func() (gonvml.Pstates, gonvml.Return) {
		return answer(g, "GetPerformanceState", func() gonvml.Pstates { return g.PState })
	}
	d.GetClockInfoFunc = func(t gonvml.ClockType) (uint32, gonvml.Return) {
		return answer(g, "GetClockInfo", func() uint32 {
			return map[gonvml.ClockType]uint32{gonvml.CLOCK_SM: g.SMClockMHz, gonvml.CLOCK_MEM: g.MemClockMHz}[t]
		})
	}
	d.GetMaxClockInfoFunc = func(t gonvml.ClockType) (uint32, gonvml.Return) {
		return answer(g, "GetMaxClockInfo", func() uint32 {
			return map[gonvml.ClockType]uint32{gonvml.CLOCK_SM: g.SMMaxMHz, gonvml.CLOCK_MEM: g.MemMaxMHz}[t]
		})
	}
	d.GetTemperatureFunc = func(gonvml.TemperatureSensors) (uint32, gonvml.Return) {
		return answer(g, "GetTemperature", func() uint32 { return g.TempC })
	}
	d.GetPowerUsageFunc = func() (uint32, gonvml.Return) {
		return answer(g, "GetPowerUsage", func() uint32 { return g.PowerMW })
	}
	d.GetEnforcedPowerLimitFunc = func() (uint32, gonvml.Return) {
		return answer(g, "GetEnforcedPowerLimit", func() uint32 { return g.PowerLimitMW })
	}
	d.GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) {
		return answer(g, "GetTotalEnergyConsumption", func() uint64 { return g.EnergyMJ })
	}
	d.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
		return answer(g, "GetUtilizationRates", func() gonvml.Utilization { return gonvml.Utilization{Gpu: g.UtilGPU, Memory: g.UtilMem} })
	}
	d.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) {
		return answer(g, "GetMemoryInfo", func() gonvml.Memory {
			return gonvml.Memory{Total: g.MemoryInfo.Total, Used: g.MemUsed, Free: g.MemoryInfo.Total - g.MemUsed}
		})
	}
	d.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
		var v gonvml.Memory_v2
		return v, g.locked(g.call("GetMemoryInfo_v2"), func() {
			v = gonvml.Memory_v2{Total: g.MemoryInfo.Total, Reserved: g.MemReserved, Used: g.MemUsed,
				Free: g.MemoryInfo.Total - g.MemUsed - g.MemReserved}
		})
	}
	d.GetComputeModeFunc = func() (gonvml.ComputeMode, gonvml.Return) {
		return answer(g, "GetComputeMode", func() gonvml.ComputeMode { return g.ComputeMode })
	}
	prevMig := d.GetMigModeFunc
	d.GetMigModeFunc = func() (int, int, gonvml.Return) {
		if ret := g.call("GetMigMode"); ret != gonvml.SUCCESS {
			return 0, 0, ret
		}
		return prevMig()
	}
	d.GetTotalEccErrorsFunc = func(t gonvml.MemoryErrorType, c gonvml.EccCounterType) (uint64, gonvml.Return) {
		return answer(g, "GetTotalEccErrors", func() uint64 { return g.ECC[t][c] })
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) {
		var c, u int
		var p, f bool
		return c, u, p, f, g.locked(g.call("GetRemappedRows"), func() {
			c, u, p, f = g.RemapCorr, g.RemapUnc, g.RemapPending, g.RemapFailed
		})
	}
	// Hopper retires no pages (it remaps rows): RetiredPages nil answers
	// NOT_SUPPORTED, as there; set it to model an older GPU.
	d.GetRetiredPagesFunc = func(c gonvml.PageRetirementCause) ([]uint64, gonvml.Return) {
		var v []uint64
		ret := g.locked(g.call("GetRetiredPages"), func() {
			if g.RetiredPages != nil {
				v = make([]uint64, g.RetiredPages[c])
			}
		})
		if ret == gonvml.SUCCESS && v == nil {
			ret = gonvml.ERROR_NOT_SUPPORTED
		}
		return v, ret
	}
	d.GetRetiredPagesPendingStatusFunc = func() (gonvml.EnableState, gonvml.Return) {
		var v gonvml.EnableState
		supported := false
		ret := g.locked(g.call("GetRetiredPagesPendingStatus"), func() {
			supported = g.RetiredPages != nil
			if g.RetiredPending {
				v = gonvml.FEATURE_ENABLED
			}
		})
		if ret == gonvml.SUCCESS && !supported {
			ret = gonvml.ERROR_NOT_SUPPORTED
		}
		return v, ret
	}
	intGetter := func(name string, p *int) func() (int, gonvml.Return) {
		return func() (int, gonvml.Return) { return answer(g, name, func() int { return *p }) }
	}
	d.GetCurrPcieLinkGenerationFunc = intGetter("GetCurrPcieLinkGeneration", &g.PCIeGen)
	d.GetCurrPcieLinkWidthFunc = intGetter("GetCurrPcieLinkWidth", &g.PCIeWidth)
	d.GetMaxPcieLinkGenerationFunc = intGetter("GetMaxPcieLinkGeneration", &g.PCIeMaxGen)
	d.GetMaxPcieLinkWidthFunc = intGetter("GetMaxPcieLinkWidth", &g.PCIeMaxWidth)
	d.GetGpuMaxPcieLinkGenerationFunc = intGetter("GetGpuMaxPcieLinkGeneration", &g.PCIeGPUMaxGen)
	d.GetPcieReplayCounterFunc = intGetter("GetPcieReplayCounter", &g.PCIeReplays)
	d.GetMemoryBusWidthFunc = func() (uint32, gonvml.Return) {
		return answer(g, "GetMemoryBusWidth", func() uint32 { return g.MemBusWidth })
	}

	link := func(name string, l int, f func(*Link)) gonvml.Return {
		ret := g.call(name)
		if ret != gonvml.SUCCESS {
			return ret
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if l < 0 || l >= len(g.NVLinks) {
			return gonvml.ERROR_INVALID_ARGUMENT
		}
		f(&g.NVLinks[l])
		return gonvml.SUCCESS
	}
	d.GetNvLinkStateFunc = func(l int) (gonvml.EnableState, gonvml.Return) {
		var v gonvml.EnableState
		return v, link("GetNvLinkState", l, func(k *Link) {
			if k.Up {
				v = gonvml.FEATURE_ENABLED
			}
		})
	}
	d.GetNvLinkVersionFunc = func(l int) (uint32, gonvml.Return) {
		var v uint32
		return v, link("GetNvLinkVersion", l, func(k *Link) { v = k.Version })
	}
	d.GetNvLinkErrorCounterFunc = func(l int, c gonvml.NvLinkErrorCounter) (uint64, gonvml.Return) {
		var v uint64
		ret := link("GetNvLinkErrorCounter", l, func(k *Link) {
			if int(c) < len(k.Errors) {
				v = k.Errors[c]
			}
		})
		return v, ret
	}
	d.GetNvLinkRemotePciInfoFunc = func(l int) (gonvml.PciInfo, gonvml.Return) {
		var p gonvml.PciInfo
		return p, link("GetNvLinkRemotePciInfo", l, func(k *Link) { p.BusId = cChars(k.RemoteBus) })
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(l int) (gonvml.IntNvLinkDeviceType, gonvml.Return) {
		var v gonvml.IntNvLinkDeviceType
		return v, link("GetNvLinkRemoteDeviceType", l, func(k *Link) { v = k.RemoteType })
	}
	d.GetFieldValuesFunc = func(fv []gonvml.FieldValue) gonvml.Return {
		return g.locked(g.call("GetFieldValues"), func() {
			for i := range fv {
				k := FieldKey{fv[i].FieldId, fv[i].ScopeId}
				v, ok := g.Fields[k]
				if c, isErr := linkErrorFields[k.ID]; isErr && int(k.Scope) < len(g.NVLinks) {
					v, ok = float64(g.NVLinks[k.Scope].Errors[c]), true
				}
				if k.Scope == allLinks && linkSummed[k.ID] && !g.Unsupported[fmt.Sprintf("field:%d:all", k.ID)] {
					v, ok = g.sumOverLinks(k.ID)
				}
				ret := gonvml.SUCCESS
				if mv, method, isMethod := g.methodField(k); isMethod {
					v, ok, ret = mv, true, g.verdict(method)
				}
				switch {
				case !ok || len(g.Unsupported) > 0 && g.Unsupported[fmt.Sprintf("field:%d", k.ID)]:
					fv[i].NvmlReturn = uint32(gonvml.ERROR_NOT_SUPPORTED)
				case ret != gonvml.SUCCESS:
					fv[i].NvmlReturn = uint32(ret)
				default:
					fv[i] = nvml.FieldValueOf(k.ID, k.Scope, gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG, v)
					fv[i].NvmlReturn = uint32(gonvml.SUCCESS)
				}
			}
		})
	}
	d.GetViolationStatusFunc = func(gonvml.PerfPolicyType) (gonvml.ViolationTime, gonvml.Return) {
		if ret := g.call("GetViolationStatus"); ret != gonvml.SUCCESS {
			return gonvml.ViolationTime{}, ret
		}
		return gonvml.ViolationTime{}, gonvml.ERROR_NOT_SUPPORTED
	}
	d.GetTopologyCommonAncestorFunc = func(other gonvml.Device) (gonvml.GpuTopologyLevel, gonvml.Return) {
		return answer(g, "GetTopologyCommonAncestor", func() gonvml.GpuTopologyLevel { return g.Levels[other.(*server.Device).Index] })
	}
	d.GetP2PStatusFunc = func(gonvml.Device, gonvml.GpuP2PCapsIndex) (gonvml.GpuP2PStatus, gonvml.Return) {
		return gonvml.P2P_STATUS_OK, g.call("GetP2PStatus")
	}
	d.RegisterEventsFunc = func(uint64, gonvml.EventSet) gonvml.Return {
		return g.call("RegisterEvents")
	}
	g.setProcessFuncs()
}

// setProcessFuncs answers the process lists with copies of GPU.Processes
// and GPU.MPSProcesses.
func (g *GPU) setProcessFuncs() {
	d := &g.Device.Device
	d.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
		return answer(g, "GetComputeRunningProcesses", func() []gonvml.ProcessInfo { return append([]gonvml.ProcessInfo{}, g.Processes...) })
	}
	d.GetMPSComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
		return answer(g, "GetMPSComputeRunningProcesses", func() []gonvml.ProcessInfo { return append([]gonvml.ProcessInfo{}, g.MPSProcesses...) })
	}
}

// SetProcesses puts compute processes with these PIDs on GPU i, each
// holding usedBytes of device memory.
func (m *Library) SetProcesses(i int, usedBytes uint64, pids ...int) {
	m.Update(func() {
		g := m.GPUs[i]
		g.Processes = nil
		for _, pid := range pids {
			g.Processes = append(g.Processes, gonvml.ProcessInfo{Pid: uint32(pid), UsedGpuMemory: usedBytes})
		}
	})
}

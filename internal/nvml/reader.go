package nvml

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// ErrNoLibrary is returned while libnvidia-ml cannot be loaded (no driver).
var ErrNoLibrary = errors.New("NVML library not found (no NVIDIA driver on this machine)")

// Reader samples every GPU through an nvml.Interface. It calls nothing
// before Init has succeeded: with go-nvml, any call before that kills the
// process with a symbol lookup error.
type Reader struct {
	lib       nvml.Interface
	sysfsRoot string
	logger    *slog.Logger

	mu        sync.Mutex
	ready     bool
	system    systemInfo
	devices   []*device
	pairs     []pairStatic
	loggedOff map[string]bool // "what" already logged as unsupported

	// inventory is published at discovery for readers that must never wait
	// on a sample in progress (the scrape path, the XID watcher).
	inventory atomic.Pointer[Inventory]
}

// Inventory is the GPUs found at discovery.
type Inventory struct {
	IDs     []Identity
	Handles []nvml.Device
}

type systemInfo struct {
	driver, cuda, nvml string
}

// device is a GPU found at discovery with what does not change.
type device struct {
	handle    nvml.Device
	id        Identity
	supported sampler.Opt[uint64] // clock event reasons the GPU reports
	links     []linkStatic
}

// pairStatic is what the PCIe tree and driver say of a GPU pair; it does not
// change while the driver is loaded, so it is read once, not every sample.
type pairStatic struct {
	a, b  int
	level nvml.GpuTopologyLevel
	p2p   map[string]bool
}

// NewReader returns a reader over lib. sysfsRoot is where /sys is mounted
// (numa_node is read from there when NVML does not know it).
func NewReader(lib nvml.Interface, sysfsRoot string, logger *slog.Logger) *Reader {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Reader{lib: lib, sysfsRoot: sysfsRoot, logger: logger, loggedOff: map[string]bool{}}
}

// Init loads NVML and discovers the GPUs. It is safe to call again after a
// failure; it does nothing once it has succeeded.
func (r *Reader) Init() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.initLocked()
}

func (r *Reader) initLocked() error {
	if r.ready {
		return nil
	}
	switch ret := r.lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return ErrNoLibrary
	default:
		return fmt.Errorf("NVML init: %v", ret)
	}
	if err := r.discover(); err != nil {
		r.lib.Shutdown()
		return err
	}
	r.ready = true
	return nil
}

// Shutdown releases NVML.
func (r *Reader) Shutdown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready {
		r.lib.Shutdown()
		r.ready = false
	}
}

// Inventory returns the GPUs found at discovery; nil before Init has
// succeeded. It never waits on a sample.
func (r *Reader) Inventory() *Inventory { return r.inventory.Load() }

// Identities returns the discovered GPUs' identities; it never waits on a
// sample.
func (r *Reader) Identities() []Identity {
	if inv := r.inventory.Load(); inv != nil {
		return inv.IDs
	}
	return nil
}

// Lib is the NVML interface, for watchers that share the reader's Init.
func (r *Reader) Lib() nvml.Interface { return r.lib }

func (r *Reader) discover() error {
	var sys systemInfo
	if v, ret := r.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		sys.driver = v
	}
	if v, ret := r.lib.SystemGetNVMLVersion(); ret == nvml.SUCCESS {
		sys.nvml = v
	}
	if v, ret := r.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		sys.cuda = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	n, ret := r.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML device count: %v", ret)
	}
	devs := make([]*device, 0, n)
	for i := 0; i < n; i++ {
		h, ret := r.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			// A GPU that cannot even be opened is still a GPU: keep its
			// index so it is reported lost rather than silently dropped.
			r.logger.Warn("cannot open GPU", "gpu", i, "err", ret)
			devs = append(devs, &device{id: Identity{Index: i, NUMANode: -1}})
			continue
		}
		devs = append(devs, r.identify(i, h))
	}
	r.system = sys
	r.devices = devs
	r.pairs = r.readPairs(devs)
	inv := &Inventory{}
	for _, d := range devs {
		inv.IDs = append(inv.IDs, d.id)
		inv.Handles = append(inv.Handles, d.handle)
	}
	r.inventory.Store(inv)
	return nil
}

func (r *Reader) identify(i int, h nvml.Device) *device {
	d := &device{handle: h, id: Identity{Index: i, NUMANode: -1}}
	id := &d.id
	if v, ret := h.GetUUID(); ret == nvml.SUCCESS {
		id.UUID = v
	}
	if p, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		id.PCIBusID = NormalizeBusID(cString(p.BusId[:]))
	}
	if v, ret := h.GetName(); ret == nvml.SUCCESS {
		id.Name = v
	}
	if v, ret := h.GetSerial(); ret == nvml.SUCCESS {
		id.Serial = v
	}
	if v, ret := h.GetVbiosVersion(); ret == nvml.SUCCESS {
		id.VBIOS = v
	}
	if maj, min, ret := h.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		id.ComputeCapability = fmt.Sprintf("%d.%d", maj, min)
	}
	id.NUMANode = r.numaNode(h, id.PCIBusID)
	id.NVLinkCount = r.countNVLinks(h)
	if v, ret := h.GetMemoryBusWidth(); ret == nvml.SUCCESS {
		id.MemoryBusWidth = int(v)
	}
	if v, ret := h.GetSupportedClocksEventReasons(); ret == nvml.SUCCESS {
		d.supported = sampler.Some(v)
	}
	return d
}

// numaNode asks NVML first; on x86 it answers NOT_SUPPORTED, so sysfs's
// numa_node is the usual source. -1 there means the platform does not say.
func (r *Reader) numaNode(h nvml.Device, busID string) int {
	if v, ret := h.GetNumaNodeId(); ret == nvml.SUCCESS && v >= 0 {
		return v
	}
	if busID == "" || r.sysfsRoot == "" {
		return -1
	}
	b, err := os.ReadFile(filepath.Join(r.sysfsRoot, "bus", "pci", "devices", busID, "numa_node"))
	if err != nil {
		return -1
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || v < 0 {
		return -1
	}
	return v
}

// countNVLinks uses the link-count field, and where a driver lacks it asks
// each link's state until NVML says there are no more.
func (r *Reader) countNVLinks(h nvml.Device) int {
	fv := []nvml.FieldValue{{FieldId: nvml.FI_DEV_NVLINK_LINK_COUNT}}
	if h.GetFieldValues(fv) == nvml.SUCCESS && nvml.Return(fv[0].NvmlReturn) == nvml.SUCCESS {
		if v, ok := fieldFloat(fv[0]); ok {
			return int(v)
		}
	}
	n := 0
	for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
		if _, ret := h.GetNvLinkState(l); ret != nvml.SUCCESS {
			break
		}
		n++
	}
	return n
}

var p2pCaps = []struct {
	name string
	idx  nvml.GpuP2PCapsIndex
}{
	{"read", nvml.P2P_CAPS_INDEX_READ},
	{"write", nvml.P2P_CAPS_INDEX_WRITE},
	{"nvlink", nvml.P2P_CAPS_INDEX_NVLINK},
	{"atomics", nvml.P2P_CAPS_INDEX_ATOMICS},
}

func (r *Reader) readPairs(devs []*device) []pairStatic {
	var out []pairStatic
	for i, a := range devs {
		for j, b := range devs {
			if i == j || a.handle == nil || b.handle == nil {
				continue
			}
			p := pairStatic{a: i, b: j, level: -1, p2p: map[string]bool{}}
			if lvl, ret := a.handle.GetTopologyCommonAncestor(b.handle); ret == nvml.SUCCESS {
				p.level = lvl
			}
			for _, c := range p2pCaps {
				st, ret := a.handle.GetP2PStatus(b.handle, c.idx)
				if ret == nvml.SUCCESS {
					p.p2p[c.name] = st == nvml.P2P_STATUS_OK
				}
			}
			out = append(out, p)
		}
	}
	return out
}

// Sample reads every GPU. It implements sampler.Source.
func (r *Reader) Sample(ctx context.Context) (*Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.initLocked(); err != nil {
		return nil, err
	}
	snap := &Snapshot{
		DriverVersion:     r.system.driver,
		CUDADriverVersion: r.system.cuda,
		NVMLVersion:       r.system.nvml,
		GPUs:              make([]GPUState, 0, len(r.devices)),
	}
	var errs sampler.Tally
	for _, d := range r.devices {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sample abandoned at GPU %d: %w", d.id.Index, ctx.Err())
		}
		snap.GPUs = append(snap.GPUs, r.readGPU(d, &errs))
	}
	snap.Pairs = pairs(r.pairs, snap.GPUs)
	return snap, errs.Err()
}

// read is one GPU's read in one sample: it sorts NVML's answers into a
// value, a quiet skip (unsupported), a lost GPU, or a counted error.
type read struct {
	r    *Reader
	d    *device
	errs *sampler.Tally
	lost bool
}

// ok reports whether ret is SUCCESS, and deals with it otherwise.
func (rd *read) ok(what string, ret nvml.Return) bool {
	switch ret {
	case nvml.SUCCESS:
		return true
	case nvml.ERROR_GPU_IS_LOST:
		rd.lost = true
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_NOT_FOUND:
		key := fmt.Sprintf("%d/%s", rd.d.id.Index, what)
		if !rd.r.loggedOff[key] {
			rd.r.loggedOff[key] = true
			rd.r.logger.Debug("not supported, skipping", "gpu", rd.d.id.Index, "what", what, "nvml", ret)
		}
	default:
		rd.errs.Add(fmt.Errorf("GPU %d %s: %v", rd.d.id.Index, what, ret))
	}
	return false
}

func (r *Reader) readGPU(d *device, errs *sampler.Tally) GPUState {
	g := GPUState{Identity: d.id}
	if d.handle == nil {
		g.Lost = true
		return g
	}
	rd := &read{r: r, d: d, errs: errs}
	h := d.handle

	// Ask the cheapest call first: a lost GPU answers it with GPU_IS_LOST
	// and is not asked anything else.
	if v, ret := h.GetPerformanceState(); rd.ok("performance state", ret) {
		g.PerformanceState = sampler.Some(int(v))
	}
	if rd.lost {
		g.Lost = true
		return g
	}
	readClocks(rd, h, &g)
	readPowerThermal(rd, h, &g)
	readMemory(rd, h, &g)
	readECC(rd, h, &g)
	readPCIe(rd, h, &g)
	g.NVLinks = readNVLinks(rd, h, d)
	readFields(rd, h, &g)
	readNVLinkErrorCalls(rd, h, g.NVLinks)
	if rd.lost {
		// Readings taken before the GPU went are not trustworthy.
		return GPUState{Identity: d.id, Lost: true}
	}
	return g
}

func readClocks(rd *read, h nvml.Device, g *GPUState) {
	const mhz = 1e6
	if v, ret := h.GetClockInfo(nvml.CLOCK_SM); rd.ok("SM clock", ret) {
		g.Clocks.SM = sampler.Some(float64(v) * mhz)
	}
	if v, ret := h.GetMaxClockInfo(nvml.CLOCK_SM); rd.ok("SM max clock", ret) {
		g.Clocks.SMMax = sampler.Some(float64(v) * mhz)
	}
	if v, ret := h.GetClockInfo(nvml.CLOCK_MEM); rd.ok("memory clock", ret) {
		g.Clocks.Memory = sampler.Some(float64(v) * mhz)
	}
	if v, ret := h.GetMaxClockInfo(nvml.CLOCK_MEM); rd.ok("memory max clock", ret) {
		g.Clocks.MemoryMax = sampler.Some(float64(v) * mhz)
	}
	if v, ret := h.GetCurrentClocksEventReasons(); rd.ok("clock event reasons", ret) {
		g.Throttle.Active = sampler.Some(v)
	}
	g.Throttle.Supported = rd.d.supported
}

func readPowerThermal(rd *read, h nvml.Device, g *GPUState) {
	if v, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); rd.ok("GPU temperature", ret) {
		g.GPUTemperature = sampler.Some(float64(v))
	}
	if v, ret := h.GetPowerUsage(); rd.ok("power usage", ret) {
		g.Power = sampler.Some(float64(v) / 1000)
	}
	if v, ret := h.GetEnforcedPowerLimit(); rd.ok("enforced power limit", ret) {
		g.PowerLimit = sampler.Some(float64(v) / 1000)
	}
	if v, ret := h.GetTotalEnergyConsumption(); rd.ok("energy", ret) {
		g.Energy = sampler.Some(float64(v) / 1000)
	}
	if u, ret := h.GetUtilizationRates(); rd.ok("utilization", ret) {
		g.Utilization = sampler.Some(float64(u.Gpu) / 100)
		g.MemoryUtilization = sampler.Some(float64(u.Memory) / 100)
	}
	if v, ret := h.GetComputeMode(); rd.ok("compute mode", ret) {
		g.ComputeMode = sampler.Some(computeModeName(v))
	}
	if cur, _, ret := h.GetMigMode(); rd.ok("MIG mode", ret) {
		g.MIGEnabled = sampler.Some(cur == nvml.DEVICE_MIG_ENABLE)
	}
}

func computeModeName(m nvml.ComputeMode) string {
	switch m {
	case nvml.COMPUTEMODE_DEFAULT:
		return "default"
	case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
		return "exclusive_thread"
	case nvml.COMPUTEMODE_PROHIBITED:
		return "prohibited"
	case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		return "exclusive_process"
	}
	return "unknown"
}

// readMemory prefers the v2 call: v1 counts the driver's reserved memory as
// used, so an idle H200 shows 615 MiB used where nvidia-smi shows 0.
func readMemory(rd *read, h nvml.Device, g *GPUState) {
	m, ret := h.GetMemoryInfo_v2()
	switch {
	case ret == nvml.SUCCESS:
		g.MemoryUsed = sampler.Some(float64(m.Used))
		g.MemoryTotal = sampler.Some(float64(m.Total))
		g.MemoryReserved = sampler.Some(float64(m.Reserved))
		return
	case ret == nvml.ERROR_GPU_IS_LOST:
		rd.ok("memory info", ret)
		return
	}
	if m, ret := h.GetMemoryInfo(); rd.ok("memory info", ret) {
		g.MemoryUsed = sampler.Some(float64(m.Used))
		g.MemoryTotal = sampler.Some(float64(m.Total))
	}
}

func readECC(rd *read, h nvml.Device, g *GPUState) {
	e := &g.ECC
	for _, c := range []struct {
		dst  *sampler.Opt[float64]
		typ  nvml.MemoryErrorType
		kind nvml.EccCounterType
		what string
	}{
		{&e.CorrectedVolatile, nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC, "ECC corrected volatile"},
		{&e.UncorrectedVolatile, nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC, "ECC uncorrected volatile"},
		{&e.CorrectedAggregate, nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC, "ECC corrected aggregate"},
		{&e.UncorrectedAggregate, nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC, "ECC uncorrected aggregate"},
	} {
		if v, ret := h.GetTotalEccErrors(c.typ, c.kind); rd.ok(c.what, ret) {
			*c.dst = sampler.Some(float64(v))
		}
	}
	if corr, unc, pending, failed, ret := h.GetRemappedRows(); rd.ok("remapped rows", ret) {
		e.RemappedCorrectable = sampler.Some(float64(corr))
		e.RemappedUncorrectable = sampler.Some(float64(unc))
		e.RemapPending = sampler.Some(pending)
		e.RemapFailed = sampler.Some(failed)
	}
	if p, ret := h.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS); rd.ok("retired pages (single bit)", ret) {
		e.RetiredSingleBit = sampler.Some(float64(len(p)))
	}
	if p, ret := h.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR); rd.ok("retired pages (double bit)", ret) {
		e.RetiredDoubleBit = sampler.Some(float64(len(p)))
	}
	if v, ret := h.GetRetiredPagesPendingStatus(); rd.ok("retired pages pending", ret) {
		e.RetiredPending = sampler.Some(v == nvml.FEATURE_ENABLED)
	}
}

func readPCIe(rd *read, h nvml.Device, g *GPUState) {
	p := &g.PCIe
	for _, c := range []struct {
		dst  *sampler.Opt[int]
		get  func() (int, nvml.Return)
		what string
	}{
		{&p.Generation, h.GetCurrPcieLinkGeneration, "PCIe generation"},
		{&p.Width, h.GetCurrPcieLinkWidth, "PCIe width"},
		{&p.MaxGeneration, h.GetMaxPcieLinkGeneration, "PCIe max generation"},
		{&p.MaxWidth, h.GetMaxPcieLinkWidth, "PCIe max width"},
		{&p.GPUMaxGeneration, h.GetGpuMaxPcieLinkGeneration, "PCIe GPU max generation"},
	} {
		if v, ret := c.get(); rd.ok(c.what, ret) {
			*c.dst = sampler.Some(v)
		}
	}
	if v, ret := h.GetPcieReplayCounter(); rd.ok("PCIe replay counter", ret) {
		p.Replays = sampler.Some(float64(v))
	}
	// No PCIe byte counters: NVML's count fields are 32 bits wide and wrap
	// every 78 ms at Gen5 x16 speed, and its throughput call read 0.6 MB/s
	// on an H200 moving 55 GB/s (and blocks 20 ms per direction).
}

// NVLinkErrorTypes are the NVLink error counters, in export order.
var NVLinkErrorTypes = []string{"crc_flit", "crc_data", "replay", "recovery"}

// P2PCapabilities are the peer-to-peer capabilities read per GPU pair.
var P2PCapabilities = []string{"read", "write", "nvlink", "atomics"}

var nvlinkErrorCounters = []struct {
	name    string
	counter nvml.NvLinkErrorCounter
}{
	{"crc_flit", nvml.NVLINK_ERROR_DL_CRC_FLIT},
	{"crc_data", nvml.NVLINK_ERROR_DL_CRC_DATA},
	{"replay", nvml.NVLINK_ERROR_DL_REPLAY},
	{"recovery", nvml.NVLINK_ERROR_DL_RECOVERY},
}

// readNVLinks reads each link's state, which is cheap. What only changes
// when a link trains (version, remote end) is read again only when its
// state changes. Error and traffic counters come from readFields.
func readNVLinks(rd *read, h nvml.Device, d *device) []NVLink {
	n := d.id.NVLinkCount
	if n == 0 {
		return nil
	}
	if len(d.links) != n {
		d.links = make([]linkStatic, n)
	}
	links := make([]NVLink, n)
	for l := range links {
		link := &links[l]
		link.Link = l
		link.Errors = map[string]float64{}
		if st, ret := h.GetNvLinkState(l); rd.ok("NVLink state", ret) {
			link.Active = st == nvml.FEATURE_ENABLED
		}
		if rd.lost {
			return nil
		}
		c := &d.links[l]
		if !c.read || c.active != link.Active {
			*c = readLinkStatic(rd, h, l, link.Active)
		}
		link.Version, link.RemotePCIBusID, link.RemoteType = c.version, c.remoteBus, c.remoteType
	}
	return links
}

// linkStatic is what an NVLink keeps while its state stays the same.
type linkStatic struct {
	read, active          bool
	version               sampler.Opt[int]
	remoteBus, remoteType string
}

// nvlinkMajor turns NVML's nvmlNvlinkVersion_t into the NVLink generation
// people mean: NVML numbers the point releases too, so an H100's NVLink 4.0
// comes back as 6, not 4. 0 for a value it does not know.
func nvlinkMajor(v uint32) int {
	switch nvml.NvlinkVersion(v) {
	case nvml.NVLINK_VERSION_1_0:
		return 1
	case nvml.NVLINK_VERSION_2_0, nvml.NVLINK_VERSION_2_2:
		return 2
	case nvml.NVLINK_VERSION_3_0, nvml.NVLINK_VERSION_3_1:
		return 3
	case nvml.NVLINK_VERSION_4_0:
		return 4
	case nvml.NVLINK_VERSION_5_0:
		return 5
	case nvml.NVLINK_VERSION_6_0:
		return 6
	}
	return 0
}

func readLinkStatic(rd *read, h nvml.Device, l int, active bool) linkStatic {
	c := linkStatic{read: true, active: active}
	errsBefore := rd.errs.Count
	if v, ret := h.GetNvLinkVersion(l); rd.ok("NVLink version", ret) {
		if major := nvlinkMajor(v); major > 0 {
			c.version = sampler.Some(major)
		}
	}
	if !active {
		return c
	}
	if p, ret := h.GetNvLinkRemotePciInfo(l); rd.ok("NVLink remote PCI info", ret) {
		c.remoteBus = NormalizeBusID(cString(p.BusId[:]))
	}
	if t, ret := h.GetNvLinkRemoteDeviceType(l); rd.ok("NVLink remote device type", ret) {
		c.remoteType = remoteTypeName(t)
	}
	if rd.lost || rd.errs.Count > errsBefore {
		c.read = false // one of these reads failed: try again next sample
	}
	return c
}

// readNVLinkErrorCalls reads, one call each, the error counters the field
// API did not give (drivers before it had them). On a Hopper GPU one call
// costs about 0.8 ms where the batched field costs 0.25 ms.
func readNVLinkErrorCalls(rd *read, h nvml.Device, links []NVLink) {
	for i := range links {
		link := &links[i]
		for _, c := range nvlinkErrorCounters {
			if _, have := link.Errors[c.name]; have {
				continue
			}
			if v, ret := h.GetNvLinkErrorCounter(link.Link, c.counter); rd.ok("NVLink "+c.name+" errors", ret) {
				link.Errors[c.name] = float64(v)
			}
			if rd.lost {
				return
			}
		}
	}
}

func remoteTypeName(t nvml.IntNvLinkDeviceType) string {
	switch t {
	case nvml.NVLINK_DEVICE_TYPE_GPU:
		return "gpu"
	case nvml.NVLINK_DEVICE_TYPE_SWITCH:
		return "switch"
	case nvml.NVLINK_DEVICE_TYPE_IBMNPU:
		return "ibmnpu"
	}
	return "unknown"
}

// NormalizeBusID turns NVML's 00000000:18:00.0 into sysfs's 0000:18:00.0, so
// GPUs join with sysfs devices and other exporters.
func NormalizeBusID(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	dom, rest, ok := strings.Cut(id, ":")
	if !ok {
		return id
	}
	if len(dom) > 4 {
		dom = dom[len(dom)-4:]
	}
	for len(dom) < 4 {
		dom = "0" + dom
	}
	return dom + ":" + rest
}

// cString reads a NUL-terminated C char array.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// Level names the nvidia-smi topo -m cell for a topology level.
func levelName(l nvml.GpuTopologyLevel) string {
	switch l {
	case nvml.TOPOLOGY_INTERNAL:
		return "X"
	case nvml.TOPOLOGY_SINGLE:
		return "PIX"
	case nvml.TOPOLOGY_MULTIPLE:
		return "PXB"
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return "PHB"
	case nvml.TOPOLOGY_NODE:
		return "NODE"
	case nvml.TOPOLOGY_SYSTEM:
		return "SYS"
	}
	return "unknown"
}

// pairs joins the static pair facts with the NVLinks up in this sample.
// nvidia-smi topo -m prints NV<n> where n NVLinks join the two GPUs, either
// directly or, on NVSwitch machines, through the switches (the fewer of the
// two GPUs' switch links); otherwise the PCIe level.
func pairs(static []pairStatic, gpus []GPUState) []Pair {
	if len(static) == 0 {
		return nil
	}
	byIndex := map[int]*GPUState{}
	for i := range gpus {
		byIndex[gpus[i].Index] = &gpus[i]
	}
	out := make([]Pair, 0, len(static))
	for _, s := range static {
		a, b := byIndex[s.a], byIndex[s.b]
		if a == nil || b == nil {
			continue
		}
		n := nvlinksBetween(a, b)
		level := levelName(s.level)
		if n > 0 {
			level = fmt.Sprintf("NV%d", n)
		}
		out = append(out, Pair{GPU: s.a, Peer: s.b, Level: level, NVLinks: n, P2P: s.p2p})
	}
	return out
}

func nvlinksBetween(a, b *GPUState) int {
	direct, aSwitch, bSwitch := 0, 0, 0
	for _, l := range a.NVLinks {
		switch {
		case !l.Active:
		case l.RemoteType == "switch":
			aSwitch++
		case l.RemotePCIBusID == b.PCIBusID:
			direct++
		}
	}
	if direct > 0 {
		return direct
	}
	for _, l := range b.NVLinks {
		if l.Active && l.RemoteType == "switch" {
			bSwitch++
		}
	}
	return min(aSwitch, bSwitch)
}

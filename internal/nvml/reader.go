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
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// ErrNoLibrary is returned while libnvidia-ml cannot be loaded (no driver).
var ErrNoLibrary = errors.New("NVML library not found (no NVIDIA driver on this machine)")

// DefaultSlowInterval is how often a Reader reads the slow tier unless
// WithSlowInterval says otherwise.
const DefaultSlowInterval = 60 * time.Second

// Reader samples every GPU through an nvml.Interface. It calls nothing
// before Init has succeeded: with go-nvml, any call before that kills the
// process with a symbol lookup error.
//
// What it reads falls in three tiers:
//   - static: identity, maximum clocks and PCIe link, supported clock event
//     reasons, memory bus width, NVLink count, GPU pair topology, and per
//     NVLink its version, remote end and speed. Read at discovery (or on a
//     GPU's first sample), and again only when the GPU set changes: a GPU
//     that was lost answers again, or one that could not be opened opens.
//     An NVLink's statics are read again when its state changes.
//   - slow: ECC counts, row remapping, retired pages, PCIe replay and
//     correctable error counters, NVLink error counters, NVLink fabric
//     state and health (nvmlDeviceGetGpuFabricInfoV). Read every slow
//     interval (DefaultSlowInterval); samples in between carry the last
//     values, so series do not flap.
//   - fast: everything else (clocks, power, energy, temperatures, clock
//     event reasons and times, utilisation, memory use, PCIe and NVLink
//     link state, NVLink traffic, compute and MIG mode, the driver's GPU
//     recovery action), every sample.
//
// Values NVML offers as field values are read in one GetFieldValues call
// per GPU and tier; a GPU that does not support a field is asked the
// single call instead from then on. Whatever a GPU answers NOT_SUPPORTED
// is not asked again until the GPU set or the GPU's MIG mode changes.
type Reader struct {
	lib       nvml.Interface
	sysfsRoot string
	logger    *slog.Logger

	// slowInterval is how often the slow tier is read; 0 reads it every
	// sample.
	slowInterval time.Duration
	now          func() time.Time
	// linkStateFields reads NVLink states as field values in the fast
	// batch instead of one GetNvLinkState call per link. Off: on an H200
	// the 18 calls took 0.012 ms together, where field values cost
	// 0.06-0.25 ms each (bench/RESULTS.md, 2026-11-21).
	linkStateFields bool
	// linkTraffic reads each NVLink's data counters in the fast tier, not
	// just the GPU's totals (WithLinkTraffic).
	linkTraffic bool
	// fabricCall is which fabric info call the library has, looked up on
	// first use.
	fabricCall fabricCall

	mu      sync.Mutex
	ready   bool
	system  systemInfo
	devices []*device
	pairs   []pairStatic
	// setChanged says a GPU came back or opened since pairs and inventory
	// were last read.
	setChanged bool

	// inventory is published at discovery for readers that must never wait
	// on a sample in progress (the scrape path, the XID watcher).
	inventory atomic.Pointer[Inventory]

	// calls admits every NVML call: Shutdown closes it and waits for the
	// calls in flight, up to shutdownWait, before it unloads NVML.
	calls        gate
	shutdownWait time.Duration
}

// Option configures a Reader.
type Option func(*Reader)

// WithSlowInterval sets how often the slow tier (ECC, row remapping,
// retired pages, PCIe and NVLink error counters) is read; samples in between carry the last values. 0 or less reads it every
// sample. The default is DefaultSlowInterval.
func WithSlowInterval(d time.Duration) Option {
	return func(r *Reader) { r.slowInterval = max(d, 0) }
}

// WithLinkTraffic reads each NVLink's data counters every sample
// (GPUState.NVLinks[].TransmitBytes, ReceiveBytes) beside the GPU's totals
// over all its links, which are always read. Off by default: 36 field
// values a GPU on NVLink 4, the most costly part of a sample.
func WithLinkTraffic(on bool) Option {
	return func(r *Reader) { r.linkTraffic = on }
}

// WithClock sets the clock the slow interval is measured on (time.Now by
// default), for tests and the simulated node.
func WithClock(now func() time.Time) Option {
	return func(r *Reader) { r.now = now }
}

// Inventory is the GPUs found at discovery (or at the last change of the
// GPU set).
type Inventory struct {
	IDs     []Identity
	Handles []nvml.Device
}

type systemInfo struct {
	driver, cuda, nvml string
}

// device is a GPU found at discovery: what does not change, the slow
// tier's last values, and what the GPU does not support.
type device struct {
	handle    nvml.Device
	id        Identity
	supported sampler.Opt[uint64] // clock event reasons the GPU reports
	static    deviceStatic
	links     []linkStatic
	// lost says the last sample found the GPU lost; a GPU that answers
	// again is identified anew.
	lost bool
	// slow holds the slow tier's values, read at slowAt (zero: due).
	slow slowValues
	// mig is the MIG mode last read, to see it change.
	mig    sampler.Opt[bool]
	slowAt time.Time
	// off is what the GPU answered unsupported, and how: logged once, and
	// not asked again (see read.asks).
	off map[offKey]nvml.Return
	// batch is the field value requests of one GetFieldValues call,
	// reused from sample to sample.
	batch fieldBatch
}

// offKey names a value: a call or a field, with the link it is for (-1
// for the GPU).
type offKey struct {
	what string
	link int
}

// deviceStatic is what does not change while the driver is loaded and is
// read on a GPU's first sample, so that its failures are counted: a read
// that failed is tried again next sample.
type deviceStatic struct {
	read                                    bool
	smMax, memMax                           sampler.Opt[float64]
	pcieMaxGen, pcieMaxWidth, pcieGPUMaxGen sampler.Opt[int]
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
func NewReader(lib nvml.Interface, sysfsRoot string, logger *slog.Logger, opts ...Option) *Reader {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Reader{lib: lib, sysfsRoot: sysfsRoot, logger: logger, slowInterval: DefaultSlowInterval, now: time.Now,
		shutdownWait: defaultShutdownWait}
	for _, o := range opts {
		o(r)
	}
	return r
}

// SlowInterval is how often the slow tier is read.
func (r *Reader) SlowInterval() time.Duration { return r.slowInterval }

// Init loads NVML and discovers the GPUs. It is safe to call again after a
// failure; it does nothing once it has succeeded.
func (r *Reader) Init() error {
	if !r.calls.enter() {
		return ErrShutDown
	}
	defer r.calls.leave()
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

// Shutdown releases NVML once the calls in flight have ended; from its
// start every call returns ErrShutDown. A call still in NVML after
// five seconds is hung in the driver: NVML is then left loaded, and
// Shutdown says so and returns.
func (r *Reader) Shutdown() {
	if !r.calls.drain(r.shutdownWait) {
		r.logger.Warn("NVML calls still running at shutdown; NVML left loaded", "waited", r.shutdownWait)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready {
		r.lib.Shutdown()
		r.ready = false
	}
}

// Inventory returns the GPUs found at discovery, or since when the GPU set
// changed (a lost GPU answered again); nil before Init has succeeded. It
// never waits on a sample.
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
		devs = append(devs, r.open(i))
	}
	r.system = sys
	r.devices = devs
	r.pairs = r.readPairs(devs)
	r.publish()
	return nil
}

// open opens GPU i and reads its identity. A GPU that cannot even be
// opened is still a GPU: it keeps its index so it is reported lost rather
// than silently dropped, and opening it is tried again every slow interval.
func (r *Reader) open(i int) *device {
	h, ret := r.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		r.logger.Warn("cannot open GPU", "gpu", i, "err", ret)
		return &device{id: Identity{Index: i, NUMANode: -1}, slowAt: r.now(), off: map[offKey]nvml.Return{}}
	}
	return r.identify(i, h)
}

// publish makes the devices' identities and handles the inventory.
func (r *Reader) publish() {
	inv := &Inventory{}
	for _, d := range r.devices {
		inv.IDs = append(inv.IDs, d.id)
		inv.Handles = append(inv.Handles, d.handle)
	}
	r.inventory.Store(inv)
}

// setChange re-reads what depends on the GPU set after a GPU came back or
// opened: the pairs' topology and the inventory.
func (r *Reader) setChange() {
	if !r.setChanged {
		return
	}
	r.setChanged = false
	r.pairs = r.readPairs(r.devices)
	r.publish()
}

func (r *Reader) identify(i int, h nvml.Device) *device {
	d := &device{handle: h, id: Identity{Index: i, NUMANode: -1}, off: map[offKey]nvml.Return{}}
	id := &d.id
	if v, ret := h.GetUUID(); ret == nvml.SUCCESS {
		id.UUID = v
	}
	if p, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		id.PCIBusID = pciaddr.Normalize(cString(p.BusId[:]))
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
	if !r.calls.enter() {
		return nil, ErrShutDown
	}
	defer r.calls.leave()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.initLocked(); err != nil {
		return nil, err
	}
	now := r.now()
	snap := &Snapshot{
		DriverVersion:     r.system.driver,
		CUDADriverVersion: r.system.cuda,
		NVMLVersion:       r.system.nvml,
		GPUs:              make([]GPUState, 0, len(r.devices)),
	}
	var errs sampler.Tally
	for i := range r.devices {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sample abandoned at GPU %d: %w", i, ctx.Err())
		}
		snap.GPUs = append(snap.GPUs, r.readGPU(i, now, &errs))
	}
	r.setChange()
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

// unsupported says NVML cannot give this value here: not an error.
func unsupported(ret nvml.Return) bool {
	switch ret {
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_NOT_FOUND:
		return true
	}
	return false
}

// ok reports whether ret is SUCCESS, and deals with it otherwise.
func (rd *read) ok(what string, ret nvml.Return) bool { return rd.okAt(what, -1, ret) }

// okAt is ok for a value of one NVLink (link -1: the GPU's).
func (rd *read) okAt(what string, link int, ret nvml.Return) bool {
	switch {
	case ret == nvml.SUCCESS:
		return true
	case ret == nvml.ERROR_GPU_IS_LOST:
		rd.lost = true
	case unsupported(ret):
		k := offKey{what, link}
		if _, seen := rd.d.off[k]; !seen {
			rd.d.off[k] = ret
			rd.r.logger.Debug("not supported, skipping", "gpu", rd.d.id.Index, "what", what, "link", link, "nvml", ret)
		}
	default:
		if link >= 0 {
			rd.errs.Add(fmt.Errorf("GPU %d %s link %d: %v", rd.d.id.Index, what, link, ret))
		} else {
			rd.errs.Add(fmt.Errorf("GPU %d %s: %v", rd.d.id.Index, what, ret))
		}
	}
	return false
}

// asks says whether to ask for a value read every sample or every slow
// interval: not when the GPU said it does not support it. NOT_FOUND is
// quiet but asked again: NVML answers it for things that come and go.
// Values read only on a change (statics) do not consult it.
func (rd *read) asks(what string, link int) bool {
	ret, seen := rd.d.off[offKey{what, link}]
	return !seen || ret == nvml.ERROR_NOT_FOUND
}

// get reads one value with a single call unless the GPU said it does not
// support it.
func get[T any](rd *read, what string, f func() (T, nvml.Return)) (T, bool) {
	return getAt(rd, what, -1, f)
}

// getAt is get for a value of one NVLink.
func getAt[T any](rd *read, what string, link int, f func() (T, nvml.Return)) (T, bool) {
	if !rd.asks(what, link) {
		var zero T
		return zero, false
	}
	v, ret := f()
	return v, rd.okAt(what, link, ret)
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

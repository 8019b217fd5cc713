// Package dcgm reads NVIDIA DCGM through go-dcgm into typed snapshots: the
// profiling fields (engine, SM, tensor and DRAM activity, PCIe and NVLink
// traffic) and the health watches. It knows nothing of Prometheus.
//
// DCGM is reached through a host engine: an nv-hostengine process (at an
// address, by default localhost:5555) or, only when asked, an engine
// embedded in this process. The library, libdcgm.so.4, is loaded at run
// time; without it, or while the engine is away, the source reports down
// and the exporter goes on, connecting again on every sample until the
// engine answers.
//
// go-dcgm keeps one connection per process in package state, so one Reader
// per process: a second one's samples fail with ErrInUse.
package dcgm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	godcgm "github.com/NVIDIA/go-dcgm/pkg/dcgm"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// DefaultAddress is where nv-hostengine listens unless told otherwise.
const DefaultAddress = "localhost:5555"

// ErrInUse is returned by a Reader's samples while another Reader in the
// process holds go-dcgm's one connection.
var ErrInUse = errors.New("another DCGM reader in this process holds go-dcgm's connection")

// DCGM return codes the reader acts on (dcgm_structs.h).
const (
	stConnectionNotValid = -21
)

// Blank values: DCGM's "no value" markers and the codes just above them
// (not found, not supported, not permissioned).
const (
	fp64Blank  = 140737488355328.0
	int64Blank = 0x7ffffffffffffff0
	strBlank   = "<<<"
)

// Field statuses that mean "no value", not "an error".
const (
	stNoData = -14
)

// healthSystems are the health watches set, in export order.
var healthSystems = []struct {
	name string
	bit  godcgm.HealthSystem
}{
	{"pcie", godcgm.DCGM_HEALTH_WATCH_PCIE},
	{"nvlink", godcgm.DCGM_HEALTH_WATCH_NVLINK},
	{"memory", godcgm.DCGM_HEALTH_WATCH_MEM},
	{"thermal", godcgm.DCGM_HEALTH_WATCH_THERMAL},
	{"power", godcgm.DCGM_HEALTH_WATCH_POWER},
}

// HealthSystems are the exported names of the watched health systems.
func HealthSystems() []string {
	out := make([]string, len(healthSystems))
	for i, s := range healthSystems {
		out[i] = s.name
	}
	return out
}

var (
	identityFields = []godcgm.Short{godcgm.DCGM_FI_DEV_GPU_UUID, godcgm.DCGM_FI_DEV_PCI_BUS_ID}
	// profilingFields and the Profiling field each one fills.
	profilingFields = []struct {
		id  godcgm.Short
		set func(*Profiling) *sampler.Opt[float64]
	}{
		{godcgm.DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO, func(p *Profiling) *sampler.Opt[float64] { return &p.GraphicsEngineActive }},
		{godcgm.DCGM_FI_PROF_SM_UTIL_RATIO, func(p *Profiling) *sampler.Opt[float64] { return &p.SMActive }},
		{godcgm.DCGM_FI_PROF_SM_OCCUPANCY_RATIO, func(p *Profiling) *sampler.Opt[float64] { return &p.SMOccupancy }},
		{godcgm.DCGM_FI_PROF_TENSOR_UTIL_RATIO, func(p *Profiling) *sampler.Opt[float64] { return &p.TensorActive }},
		{godcgm.DCGM_FI_PROF_DRAM_UTIL_RATIO, func(p *Profiling) *sampler.Opt[float64] { return &p.DRAMActive }},
		{godcgm.DCGM_FI_PROF_PCIE_TX_BYTES, func(p *Profiling) *sampler.Opt[float64] { return &p.PCIeTransmit }},
		{godcgm.DCGM_FI_PROF_PCIE_RX_BYTES, func(p *Profiling) *sampler.Opt[float64] { return &p.PCIeReceive }},
		{godcgm.DCGM_FI_PROF_NVLINK_TX_BYTES, func(p *Profiling) *sampler.Opt[float64] { return &p.NVLinkTransmit }},
		{godcgm.DCGM_FI_PROF_NVLINK_RX_BYTES, func(p *Profiling) *sampler.Opt[float64] { return &p.NVLinkReceive }},
	}
)

// identityUpdate is how often DCGM refreshes the identity fields; they do
// not change while the driver is loaded.
const identityUpdate = time.Minute

// Config says where DCGM is and how to label what it reports.
type Config struct {
	// Address is nv-hostengine's: host:port (port 5555 if left out), a
	// unix socket path (starting with /), or a DCGM connection string
	// (tcp://, unix://, vsock://; DCGM 4.5 and later). Default
	// DefaultAddress.
	Address string
	// Embedded starts a host engine inside this process when none answers
	// at Address. The engine then runs in the exporter's process, with
	// the exporter's privileges.
	Embedded bool
	// Library is the path or name of libdcgm.so.4. A path must name a
	// library whose SONAME is libdcgm.so.4: that is the name go-dcgm loads.
	Library string
	// Interval is how often DCGM updates the profiling fields it averages
	// over; set it to the sampling interval. Default 5s.
	Interval time.Duration
	// GPUs, when set, lists NVML's GPUs (nvml.Reader's Identities), so that
	// DCGM's GPUs carry the same index and PCI address labels as NVML's.
	GPUs   func() []nvml.Identity
	Logger *slog.Logger
}

// Reader samples DCGM; it implements sampler.Source. It connects on its
// first sample and again on any sample after the connection was lost.
type Reader struct {
	cfg Config

	// mu serialises samples and Close: go-dcgm's connection is package
	// state.
	mu   sync.Mutex
	lib  *library
	conn *connection
	// down is true after a failed connect until one succeeds, so a
	// missing engine is logged once, not every sample.
	down         bool
	loggedNoProf bool
	// verdicts are the last health results, to log changes.
	verdicts map[healthKey]HealthResult
	// closeWait bounds how long Close waits for a sample in flight.
	closeWait time.Duration
}

// defaultCloseWait is how long Close waits for a sample in flight: a
// call hung in the host engine would otherwise hold the exporter's exit
// until it is killed.
const defaultCloseWait = 5 * time.Second

type healthKey struct {
	gpu    uint
	system string
}

// connection is what one connection to an engine set up.
type connection struct {
	mode            string
	version, libVer string
	gpus            []uint
	entities        []godcgm.GroupEntityPair
	group           godcgm.GroupHandle
	profiling       bool
	fields          []godcgm.Short
}

// owner is the Reader holding go-dcgm's connection.
var owner atomic.Pointer[Reader]

// NewReader returns a reader; nothing is loaded or connected until the
// first sample.
func NewReader(cfg Config) *Reader {
	if cfg.Address == "" {
		cfg.Address = DefaultAddress
	}
	if cfg.Library == "" {
		cfg.Library = DefaultLibrary
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reader{cfg: cfg, verdicts: map[healthKey]HealthResult{}, closeWait: defaultCloseWait}
}

// Sample reads the latest profiling values and the health check of every
// GPU, connecting first if need be. A value DCGM has not got is left out;
// a value it reports an error for is left out and counted in a
// *sampler.PartialError. A failure of the engine or the connection drops
// the connection: the sample fails and the next one connects afresh (a
// restarted nv-hostengine has forgotten our watches).
func (r *Reader) Sample(ctx context.Context) (*Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		if err := r.connect(ctx); err != nil {
			if !r.down {
				r.cfg.Logger.Warn("DCGM unavailable; the dcgm source reports down and connects again every sample", "err", err)
			} else {
				r.cfg.Logger.Debug("DCGM still unavailable", "err", err)
			}
			r.down = true
			return nil, err
		}
		if r.down {
			r.cfg.Logger.Info("DCGM available again")
		}
		r.down = false
	}
	snap, err := r.read()
	if snap == nil {
		r.cfg.Logger.Warn("DCGM connection lost; connecting again on the next sample", "err", err)
		r.disconnect()
		r.down = true
	}
	return snap, err
}

// Close disconnects from DCGM once a sample in flight has ended. The
// library stays loaded (see library). A sample still in DCGM after five
// seconds is hung in the engine: Close then returns, saying so, and the
// disconnect follows whenever the call does, or the process's exit.
func (r *Reader) Close() {
	closed := make(chan struct{})
	go func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.disconnect()
		close(closed)
	}()
	t := time.NewTimer(r.closeWait)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
		r.cfg.Logger.Warn("a DCGM call is still running at shutdown; disconnecting when it returns", "waited", r.closeWait)
	}
}

func (r *Reader) disconnect() {
	if r.conn == nil {
		return
	}
	r.conn = nil
	// Shutdown disconnects (or stops the embedded engine) and shuts the
	// client library down; the engine drops the watches and groups of a
	// connection that did not ask to persist. On a lost connection it may
	// report an error: nothing to do about it.
	if err := godcgm.Shutdown(); err != nil {
		r.cfg.Logger.Debug("DCGM shutdown", "err", err)
	}
	owner.CompareAndSwap(r, nil)
}

// connect loads the library, connects (or embeds an engine), and sets up
// the watches: a GPU group of every supported GPU, the identity fields,
// the profiling fields where the engine allows them, and the health
// watches.
func (r *Reader) connect(ctx context.Context) (err error) {
	if r.lib == nil {
		lib, err := loadLibrary(r.cfg.Library)
		if err != nil {
			return err
		}
		r.lib = lib
	}
	if !owner.CompareAndSwap(nil, r) && owner.Load() != r {
		return ErrInUse
	}
	mode, err := r.init()
	if err != nil {
		owner.CompareAndSwap(r, nil)
		return err
	}
	c := &connection{mode: mode}
	r.conn = c
	defer func() {
		if err != nil {
			r.disconnect()
		}
	}()

	if v, err := godcgm.GetVersionInfo(); err == nil {
		c.libVer = buildVersion(v.RawBuildInfoString)
	}
	if v, err := godcgm.GetHostengineVersionInfo(); err == nil {
		c.version = buildVersion(v.RawBuildInfoString)
	}
	c.gpus, err = godcgm.GetSupportedDevices()
	if err != nil {
		return fmt.Errorf("listing DCGM's GPUs: %w", err)
	}
	slices.Sort(c.gpus)
	c.fields = identityFields
	if len(c.gpus) == 0 {
		r.cfg.Logger.Info("connected to DCGM; it supports no GPU here", "mode", mode, "version", c.version)
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Names are unique on an engine, which several clients may share.
	suffix := fmt.Sprintf("%d_%x", os.Getpid(), rand.Uint32())
	c.group, err = godcgm.CreateGroup("gpulink_" + suffix)
	if err != nil {
		return err
	}
	for _, id := range c.gpus {
		if err := godcgm.AddToGroup(c.group, id); err != nil {
			return err
		}
		c.entities = append(c.entities, godcgm.GroupEntityPair{EntityGroupId: godcgm.FE_GPU, EntityId: id})
	}
	ids, err := godcgm.FieldGroupCreate("gpulink_identity_"+suffix, identityFields)
	if err != nil {
		return err
	}
	if err := godcgm.WatchFieldsWithGroupEx(ids, c.group, identityUpdate.Microseconds(), 0, 1); err != nil {
		return err
	}
	prof := make([]godcgm.Short, len(profilingFields))
	for i, f := range profilingFields {
		prof[i] = f.id
	}
	profGroup, err := godcgm.FieldGroupCreate("gpulink_profiling_"+suffix, prof)
	if err != nil {
		return err
	}
	// Profiling is refused on GPUs without it, and while another profiler
	// (Nsight, CUPTI) holds the counters: the rest is still worth having.
	if err := godcgm.WatchFieldsWithGroupEx(profGroup, c.group, r.cfg.Interval.Microseconds(), 0, 1); err != nil {
		if !r.loggedNoProf {
			r.cfg.Logger.Warn("DCGM refused to watch the profiling fields; exporting health only", "err", err)
			r.loggedNoProf = true
		}
	} else {
		c.profiling = true
		r.loggedNoProf = false
		c.fields = append(slices.Clip(identityFields), prof...)
	}
	var systems godcgm.HealthSystem
	for _, s := range healthSystems {
		systems |= s.bit
	}
	if err := godcgm.HealthSet(c.group, systems); err != nil {
		return err
	}
	r.cfg.Logger.Info("connected to DCGM", "mode", mode, "address", r.cfg.Address, "version", c.version,
		"library_version", c.libVer, "gpus", len(c.gpus), "profiling", c.profiling)
	return nil
}

// init connects to the host engine, or embeds one if allowed and none
// answers. It returns the mode.
func (r *Reader) init() (string, error) {
	addr := r.cfg.Address
	var err error
	switch {
	case strings.HasPrefix(addr, "/"):
		_, err = godcgm.Init(godcgm.Standalone, addr, "1")
	case strings.Contains(addr, "://"):
		_, err = godcgm.Init(godcgm.Standalone, addr)
	default:
		_, err = godcgm.Init(godcgm.Standalone, addr, "0")
	}
	if err == nil {
		return "standalone", nil
	}
	err = fmt.Errorf("no DCGM host engine at %s: %w", addr, err)
	if !r.cfg.Embedded {
		return "", err
	}
	if _, eerr := godcgm.Init(godcgm.Embedded); eerr != nil {
		return "", fmt.Errorf("%w; starting an embedded engine: %w", err, eerr)
	}
	r.cfg.Logger.Info("no DCGM host engine answered; running one embedded in this process", "address", addr, "err", err)
	return "embedded", nil
}

// read takes one sample over the connection. A nil snapshot means the
// connection is unusable.
func (r *Reader) read() (*Snapshot, error) {
	c := r.conn
	snap := &Snapshot{Mode: c.mode, Version: c.version, LibraryVersion: c.libVer, Profiling: c.profiling}
	if len(c.gpus) == 0 {
		return snap, nil
	}
	values, err := godcgm.EntitiesGetLatestValues(c.entities, c.fields, 0)
	if err != nil {
		return nil, fmt.Errorf("DCGM latest values: %w", err)
	}
	var t sampler.Tally
	byID := make(map[uint]*GPU, len(c.gpus))
	gpus := make([]GPU, len(c.gpus))
	for i, id := range c.gpus {
		gpus[i] = GPU{ID: id, Index: int(id)}
		byID[id] = &gpus[i]
	}
	for _, v := range values {
		g := byID[v.EntityID]
		if v.EntityGroupId != godcgm.FE_GPU || g == nil {
			continue
		}
		store(g, v, &t)
	}
	resp, err := godcgm.HealthCheck(c.group)
	if err != nil {
		var de *godcgm.Error
		if errors.As(err, &de) && int(de.Code) == stConnectionNotValid {
			return nil, fmt.Errorf("DCGM health check: %w", err)
		}
		t.Add(fmt.Errorf("DCGM health check: %w", err))
	} else {
		for i := range gpus {
			gpus[i].Health = r.health(gpus[i].ID, resp)
		}
	}
	label(gpus, r.cfg.GPUs)
	snap.GPUs = gpus
	return snap, t.Err()
}

// store puts one field value into its GPU. Only watched fields are asked
// for, so a field the engine says is not watched is an error.
func store(g *GPU, v godcgm.FieldValue_v2, t *sampler.Tally) {
	switch v.Status {
	case 0:
	case stNoData:
		return // watched, no sample yet
	default:
		t.Add(fmt.Errorf("DCGM field %d of GPU %d: status %d", v.FieldID, v.EntityID, v.Status))
		return
	}
	switch v.FieldID {
	case godcgm.DCGM_FI_DEV_GPU_UUID:
		if s := fieldString(v); s != "" {
			g.UUID = s
		}
		return
	case godcgm.DCGM_FI_DEV_PCI_BUS_ID:
		if s := fieldString(v); s != "" {
			g.PCIBusID = pciaddr.Normalize(s)
		}
		return
	}
	for _, f := range profilingFields {
		if f.id == v.FieldID {
			if x, ok := fieldNumber(v); ok {
				*f.set(&g.Profiling) = sampler.Some(x)
			}
			return
		}
	}
}

// health turns the check's incidents into one verdict per watched system
// of GPU id, and logs each change of verdict with the incident's message.
func (r *Reader) health(id uint, resp godcgm.HealthResponse) []SystemHealth {
	out := make([]SystemHealth, len(healthSystems))
	for i, s := range healthSystems {
		h := SystemHealth{System: s.name, Result: HealthPass}
		for _, in := range resp.Incidents {
			if in.System != s.bit || in.EntityInfo.EntityGroupId != godcgm.FE_GPU || in.EntityInfo.EntityId != id {
				continue
			}
			h.Incidents++
			if h.Message == "" {
				h.Message = in.Error.Message
			}
			if res := HealthResult(in.Health); res > h.Result {
				h.Result = res
			}
		}
		out[i] = h
		k := healthKey{id, s.name}
		if prev, seen := r.verdicts[k]; (seen && prev != h.Result) || (!seen && h.Result != HealthPass) {
			r.cfg.Logger.Info("DCGM health changed", "gpu", id, "system", s.name, "result", h.Result.String(), "message", h.Message)
		}
		r.verdicts[k] = h.Result
	}
	return out
}

// label gives DCGM's GPUs NVML's index and PCI address, by UUID.
func label(gpus []GPU, ids func() []nvml.Identity) {
	if ids != nil {
		byUUID := map[string]nvml.Identity{}
		for _, id := range ids() {
			byUUID[id.UUID] = id
		}
		for i := range gpus {
			if id, ok := byUUID[gpus[i].UUID]; ok && gpus[i].UUID != "" {
				gpus[i].Index = id.Index
				if id.PCIBusID != "" {
					gpus[i].PCIBusID = id.PCIBusID
				}
			}
		}
	}
	slices.SortStableFunc(gpus, func(a, b GPU) int {
		if a.Index != b.Index {
			return a.Index - b.Index
		}
		return int(a.ID) - int(b.ID)
	})
}

// fieldString is a string field's value, valid UTF-8 (it becomes a label
// value, and a C string may hold any bytes); empty when blank.
func fieldString(v godcgm.FieldValue_v2) string {
	if v.FieldType != godcgm.DCGM_FT_STRING {
		return ""
	}
	s := v.String()
	if strings.HasPrefix(s, strBlank) {
		return ""
	}
	return strings.ToValidUTF8(strings.TrimSpace(s), "\uFFFD")
}

func fieldNumber(v godcgm.FieldValue_v2) (float64, bool) {
	switch v.FieldType {
	case godcgm.DCGM_FT_DOUBLE:
		x := v.Float64()
		return x, x < fp64Blank && x > -fp64Blank
	case godcgm.DCGM_FT_INT64:
		x := v.Int64()
		return float64(x), x < int64Blank
	}
	return 0, false
}

// buildVersion picks the version out of DCGM's build info string,
// "version:4.2.3;arch:x86_64;...".
func buildVersion(raw string) string {
	for kv := range strings.SplitSeq(raw, ";") {
		if k, v, ok := strings.Cut(kv, ":"); ok && strings.TrimSpace(k) == "version" {
			return strings.ToValidUTF8(strings.TrimSpace(v), "\uFFFD")
		}
	}
	return ""
}

package nvml

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// XIDWatcher counts XID errors per GPU and code. XIDs arrive as NVML
// events, not as readable state, so a sampler cannot see them: one
// goroutine waits on an event set instead.
type XIDWatcher struct {
	reader *Reader
	logger *slog.Logger
	// Wait is how long one event wait may block; a wait that overruns it
	// three times over marks the watcher down.
	Wait time.Duration
	now  func() time.Time

	// version moves with every change to what the watcher reports, except
	// staleness, which follows the clock.
	version atomic.Uint64

	mu      sync.Mutex
	counts  map[xidKey]*XIDCount
	running bool
	lastOK  time.Time
	errors  uint64
	gpus    int // GPUs registered for XID events
}

type xidKey struct {
	gpu int
	xid uint64
}

// NewXIDWatcher returns a watcher sharing reader's NVML session.
func NewXIDWatcher(reader *Reader, logger *slog.Logger) *XIDWatcher {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &XIDWatcher{reader: reader, logger: logger.With("source", "xid"), Wait: time.Second,
		now: time.Now, counts: map[xidKey]*XIDCount{}}
}

// Counts returns the XIDs seen so far, ordered by GPU and code.
func (w *XIDWatcher) Counts() []XIDCount {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]XIDCount, 0, len(w.counts))
	for _, c := range w.counts {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GPU != out[j].GPU {
			return out[i].GPU < out[j].GPU
		}
		return out[i].XID < out[j].XID
	})
	return out
}

// Version changes whenever the counts or the watcher's state change.
func (w *XIDWatcher) Version() uint64 { return w.version.Load() }

// Status implements sampler.StatusReporter.
func (w *XIDWatcher) Status() sampler.Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	fresh := !w.lastOK.IsZero() && w.now().Sub(w.lastOK) < 3*w.Wait+time.Second
	return sampler.Status{
		Name:        "xid",
		Up:          w.running && w.gpus > 0 && fresh,
		LastSuccess: w.lastOK,
		Errors:      w.errors,
		Stalled:     w.running && !fresh,
	}
}

// Run watches until ctx ends. Until NVML can be loaded it retries every
// retry interval.
func (w *XIDWatcher) Run(ctx context.Context, retry time.Duration) {
	for {
		err := w.reader.Init()
		if err == nil {
			break
		}
		w.logger.Debug("NVML not ready, XID watch waits", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
	// The watch is one NVML call in flight from the event set's creation to
	// its Free, so that Shutdown waits for it (a wait ends within Wait).
	if !w.reader.calls.enter() {
		return
	}
	defer w.reader.calls.leave()
	handles := w.reader.Inventory().Handles
	lib := w.reader.Lib()
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		w.fail("cannot create NVML event set", ret)
		return
	}
	defer set.Free()
	registered := 0
	for i, h := range handles {
		if h == nil {
			continue
		}
		if ret := h.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			w.logger.Info("XID events not available for GPU", "gpu", i, "nvml", ret)
			continue
		}
		registered++
	}
	w.mu.Lock()
	w.gpus = registered
	w.running = true
	w.lastOK = w.now()
	w.mu.Unlock()
	w.version.Add(1)
	defer func() {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
		w.version.Add(1)
	}()
	if registered == 0 {
		w.logger.Warn("no GPU accepts XID event registration; XIDs are not counted")
		<-ctx.Done()
		return
	}

	ms := uint32(w.Wait / time.Millisecond)
	for ctx.Err() == nil {
		ev, ret := set.Wait(ms)
		switch ret {
		case nvml.SUCCESS:
			w.record(ev, handles)
		case nvml.ERROR_TIMEOUT:
			w.ok()
		default:
			// GPU_IS_LOST and friends: the sampler reports the GPU; here
			// only count and back off so a broken set does not spin.
			w.fail("event wait", ret)
			select {
			case <-ctx.Done():
			case <-time.After(w.Wait):
			}
		}
	}
}

func (w *XIDWatcher) ok() {
	w.mu.Lock()
	w.lastOK = w.now()
	w.mu.Unlock()
}

func (w *XIDWatcher) fail(what string, ret nvml.Return) {
	w.mu.Lock()
	w.errors++
	w.mu.Unlock()
	w.version.Add(1)
	w.logger.Debug(what, "nvml", ret)
}

func (w *XIDWatcher) record(ev nvml.EventData, handles []nvml.Device) {
	if ev.EventType&nvml.EventTypeXidCriticalError == 0 {
		w.ok()
		return
	}
	gpu := gpuOf(ev.Device, handles)
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.version.Add(1)
	w.lastOK = now
	k := xidKey{gpu, ev.EventData}
	c := w.counts[k]
	if c == nil {
		c = &XIDCount{GPU: gpu, XID: ev.EventData}
		w.counts[k] = c
	}
	c.Count++
	c.LastSeen = now
	w.logger.Warn("XID error", "gpu", gpu, "xid", ev.EventData)
}

// gpuOf finds the index of an event's device. -1 means the event came for
// all GPUs or for one NVML no longer names; it is still counted.
func gpuOf(d nvml.Device, handles []nvml.Device) int {
	if d == nil {
		return -1
	}
	for i, h := range handles {
		if h == d {
			return i
		}
	}
	uuid, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		return -1
	}
	for i, h := range handles {
		if h == nil {
			continue
		}
		if u, ret := h.GetUUID(); ret == nvml.SUCCESS && u == uuid {
			return i
		}
	}
	return -1
}

// Package scrape serves /metrics from a cache of encoded responses. It
// owns the whole exposition below the collectors: the samples a collector
// renders a snapshot into (Rendered, Samples), their text encoding
// (text.go), the deflated parts (deflate.go), the registry and this
// handler. The collectors only render.
//
// Every source publishes a new snapshot at most once per sample interval,
// so the metrics cannot change between two publishes. The handler encodes
// (and gzips) the formats being scraped once per change, when a source
// publishes, on that source's goroutine, and answers every scrape with the
// bytes built last: a scrape, fresh or not, only writes bytes, and never
// waits behind a sampler or a build (at GOMAXPROCS 1 the scrape that waits
// on a lock gives the one P to whatever holds it). A response is never
// older than MaxAge either, for values derived from the clock (a watcher
// that has gone quiet turns stale without publishing anything).
//
// A Prometheus scraping no faster than the sources sample meets new
// snapshots at every scrape. For it, a Registry lets the snapshot
// collectors encode themselves (TextCollector): once per snapshot, and
// deflated apart, so that only what changed is compressed, and a source
// does both when it publishes, before the handler joins the parts.
package scrape

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Versioned is a source whose version changes whenever anything it
// exports may have changed.
type Versioned interface {
	Version() uint64
}

// Handler serves gathered metrics. What it sends is a generation: the
// body of each format being scraped, built once for the sources as they
// were, and never written to after. A source that publishes (a sampler,
// the probe scheduler) has the handler build the next generation when it
// publishes, on the source's goroutine, after its collector has rendered
// the new snapshot; a scrape then only loads the generation and writes
// its bytes, holding no lock that a source or a build holds, so it never
// waits behind either. A source that does not publish (the XID watcher)
// is checked at each scrape: a new version of it, a format not built yet
// (asked for the first time, or by curl) or a generation older than
// MaxAge has the scrape build the body itself, as every scrape did
// before.
type Handler struct {
	gatherer prometheus.Gatherer
	// checked are the sources that do not publish: a generation is only
	// served for the sum of their versions it was built for.
	checked []Versioned
	logger  *slog.Logger
	// MaxAge bounds how long a generation is served: for values derived
	// from the clock, and for a source's status that changes without a
	// publish (a failed sample). While scraped, Run builds a new one
	// every MaxAge/2.
	MaxAge time.Duration
	now    func() time.Time
	// inFlight bounds concurrent requests; nil means no bound.
	inFlight chan struct{}

	served atomic.Pointer[generation]

	mu    sync.Mutex       // held while a generation is built
	sizes map[cacheKey]int // of the last body of each key, to size the next

	askMu sync.Mutex // held only to note or list asks
	asked map[cacheKey]*asks
}

// generation is the bodies built for the sources as they were at taken.
type generation struct {
	version uint64 // of the checked sources
	taken   time.Time
	bodies  map[cacheKey][]byte
}

// body returns g's body for key if g is still what the sources say; nil
// if not, or if g is nil.
func (g *generation) body(key cacheKey, version uint64, now time.Time, maxAge time.Duration) []byte {
	if g == nil || g.version != version || now.Sub(g.taken) >= maxAge {
		return nil
	}
	return g.bodies[key]
}

// A gzip writer holds about 1 MB of state: reuse them.
var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

// The formats a scrape may ask for, OpenMetrics included, in the order
// expfmt prefers them; made once, not per scrape.
var acceptedFormats = expfmt.DefaultOpenMetricsAcceptedFormats()

type cacheKey struct {
	format expfmt.Format
	gzip   bool
}

// NewHandler serves what g gathers, for sources; it builds a generation
// when any of them that publishes does. maxInFlight <= 0 means no limit.
func NewHandler(g prometheus.Gatherer, sources []Versioned, maxInFlight int, logger *slog.Logger) *Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{gatherer: g, logger: logger, MaxAge: time.Second, now: time.Now,
		sizes: map[cacheKey]int{}, asked: map[cacheKey]*asks{}}
	if maxInFlight > 0 {
		h.inFlight = make(chan struct{}, maxInFlight)
	}
	for _, s := range sources {
		if p, ok := s.(Publisher); ok {
			p.OnPublish(h.Refresh)
		} else {
			h.checked = append(h.checked, s)
		}
	}
	return h
}

func (h *Handler) checkedVersion() uint64 {
	var v uint64
	for _, s := range h.checked {
		v += s.Version() // versions only grow, so the sum changes with any of them
	}
	return v
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.inFlight != nil {
		select {
		case h.inFlight <- struct{}{}:
			defer func() { <-h.inFlight }()
		default:
			http.Error(w, "too many concurrent scrapes", http.StatusServiceUnavailable)
			return
		}
	}
	key := cacheKey{format: expfmt.NegotiateAccept(r.Header, acceptedFormats...), gzip: acceptsGzip(r.Header)}
	body, err := h.body(key)
	if err != nil {
		http.Error(w, "error encoding metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", string(key.format))
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	if key.gzip {
		hdr.Set("Content-Encoding", "gzip")
	}
	hdr.Add("Vary", "Accept-Encoding")
	w.Write(body) //nolint:errcheck // nothing to do about a client that went away
}

// body is the served generation's body for key, or one built now.
func (h *Handler) body(key cacheKey) ([]byte, error) {
	now := h.now()
	h.ask(key, now)
	if b := h.served.Load().body(key, h.checkedVersion(), now, h.MaxAge); b != nil {
		return b, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// A build that held mu may have made it meanwhile.
	v, now := h.checkedVersion(), h.now()
	old := h.served.Load()
	if b := old.body(key, v, now, h.MaxAge); b != nil {
		return b, nil
	}
	next := &generation{version: v, taken: now, bodies: map[cacheKey][]byte{}}
	if old != nil && old.version == v && now.Sub(old.taken) < h.MaxAge {
		// Still good: add this key's body to it.
		next.taken = old.taken
		maps.Copy(next.bodies, old.bodies)
	}
	b, err := h.build(key)
	if err != nil {
		return nil, err
	}
	next.bodies[key] = b
	h.served.Store(next)
	return b, nil
}

// Refresh builds a new generation for the formats being scraped, for the
// sources as they are now: the sources that publish call it then, on
// their own goroutine. A format asked for now and then (curl) is dropped
// from the served generation instead, for its next scrape to build; with
// nobody scraping, that is all it does.
func (h *Handler) Refresh() {
	keys := h.scraped(h.now())
	if len(keys) == 0 {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.served.Store(nil)
		return
	}
	// A scrape that arrived while the source sampled and rendered is
	// served before this build (see pause).
	pause()
	h.mu.Lock()
	defer h.mu.Unlock()
	v, now := h.checkedVersion(), h.now()
	next := &generation{version: v, taken: now, bodies: make(map[cacheKey][]byte, len(keys))}
	for _, k := range keys {
		b, err := h.build(k)
		if err != nil {
			// The scrape of k builds it again and reports the error.
			continue
		}
		next.bodies[k] = b
	}
	h.served.Store(next)
}

// Run builds a new generation every MaxAge/2 while someone scrapes and
// no source has published, so that a scrape never finds the served one
// too old, until ctx ends.
func (h *Handler) Run(ctx context.Context) {
	t := time.NewTicker(h.MaxAge / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.refreshIfOld()
		}
	}
}

// refreshIfOld builds a new generation if the served one is MaxAge/2 old.
func (h *Handler) refreshIfOld() {
	if g := h.served.Load(); g != nil && h.now().Sub(g.taken) >= h.MaxAge/2 {
		h.Refresh()
	}
}

// ask notes that key was asked for at now.
func (h *Handler) ask(key cacheKey, now time.Time) {
	h.askMu.Lock()
	defer h.askMu.Unlock()
	a := h.asked[key]
	if a == nil {
		a = &asks{}
		h.asked[key] = a
	}
	a.ask(now)
}

// scraped lists the keys a scraper keeps asking for (see asks.regular).
func (h *Handler) scraped(now time.Time) []cacheKey {
	h.askMu.Lock()
	defer h.askMu.Unlock()
	var keys []cacheKey
	for k, a := range h.asked {
		if a.regular(now) {
			keys = append(keys, k)
		}
	}
	return keys
}

// build encodes key's body. h.mu is held.
func (h *Handler) build(key cacheKey) ([]byte, error) {
	body, gatherErr, err := h.encode(key)
	if gatherErr != nil {
		// Like promhttp's ContinueOnError: serve what could be gathered.
		h.logger.Error("error gathering metrics", "err", gatherErr)
	}
	if err != nil {
		return nil, err
	}
	h.sizes[key] = len(body)
	return body, nil
}

func (h *Handler) encode(key cacheKey) (body []byte, gatherErr, err error) {
	if r, ok := h.gatherer.(*Registry); ok && isText(key.format) {
		return r.appendText(make([]byte, 0, h.sizes[key]), key.format, key.gzip)
	}
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if key.gzip {
		zw = gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(zw)
		zw.Reset(&buf)
		w = zw
	}
	gatherErr, err = encode(w, h.gatherer, key.format)
	if err == nil && zw != nil {
		err = zw.Close()
	}
	return buf.Bytes(), gatherErr, err
}

func isText(f expfmt.Format) bool {
	t := f.FormatType()
	return t == expfmt.TypeTextPlain || t == expfmt.TypeOpenMetrics
}

// encode gathers g and writes it in f.
func encode(w io.Writer, g prometheus.Gatherer, f expfmt.Format) (gatherErr, err error) {
	mfs, gatherErr := g.Gather()
	enc := expfmt.NewEncoder(w, f)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return gatherErr, err
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		err = c.Close()
	}
	return gatherErr, err
}

// acceptsGzip reports whether the client takes gzip with a non-zero weight.
func acceptsGzip(h http.Header) bool {
	for _, part := range strings.Split(h.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(enc), "gzip") {
			continue
		}
		q := 1.0
		if _, v, ok := strings.Cut(strings.ReplaceAll(params, " ", ""), "q="); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				q = f
			}
		}
		return q > 0
	}
	return false
}

// pause parks the calling goroutine for a moment, between the parts of
// the work a publish does (render, encode, deflate, build). At GOMAXPROCS
// 1 a goroutine that never blocks holds off every other one, and the
// network is only polled when the P has nothing else to run: a scrape
// that arrives meanwhile is not even read. runtime.Gosched does not help
// (the yielding goroutine runs again before the poll); a sleep parks it
// and the scheduler polls. The simulated node pauses in the same way
// (machine.Pause).
func pause() { time.Sleep(time.Microsecond) }

// Package scrape serves /metrics from a cache of encoded responses. It
// owns the whole exposition below the collectors: the samples a collector
// renders a snapshot into (Rendered, Samples), their text encoding
// (text.go), the deflated parts (deflate.go), the registry and this
// handler. The collectors only render.
//
// Every source publishes a new snapshot at most once per sample interval,
// so the metrics cannot change between two publishes. The handler encodes
// (and gzips) once per change, on the first scrape that needs it, and
// answers every other scrape with the same bytes: that serves a second
// Prometheus of an HA pair, or anyone scraping faster than the sources
// sample. A response is never older than MaxAge either, for values derived
// from the clock (a watcher that has gone quiet turns stale without
// publishing anything).
//
// A Prometheus scraping no faster than the sources sample meets new
// snapshots at every scrape. For that scrape, a Registry lets the snapshot
// collectors encode themselves (TextCollector): once per snapshot, and
// deflated apart, so that only what changed is compressed, and a source
// can do both when it publishes instead of when it is scraped.
package scrape

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Versioned is a source whose version changes whenever anything it
// exports may have changed.
type Versioned interface {
	Version() uint64
}

// Handler serves gathered metrics, cached per version of its sources.
type Handler struct {
	gatherer prometheus.Gatherer
	sources  []Versioned
	logger   *slog.Logger
	// MaxAge bounds how long a cached response is served.
	MaxAge time.Duration
	now    func() time.Time
	// inFlight bounds concurrent requests; nil means no bound.
	inFlight chan struct{}

	mu      sync.Mutex
	version uint64
	taken   time.Time
	bodies  map[cacheKey][]byte
	sizes   map[cacheKey]int // of the last body, to size the next
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

// NewHandler serves what g gathers. maxInFlight <= 0 means no limit.
func NewHandler(g prometheus.Gatherer, sources []Versioned, maxInFlight int, logger *slog.Logger) *Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{gatherer: g, sources: sources, logger: logger, MaxAge: time.Second, now: time.Now,
		bodies: map[cacheKey][]byte{}, sizes: map[cacheKey]int{}}
	if maxInFlight > 0 {
		h.inFlight = make(chan struct{}, maxInFlight)
	}
	return h
}

func (h *Handler) currentVersion() uint64 {
	var v uint64
	for _, s := range h.sources {
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

func (h *Handler) body(key cacheKey) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, now := h.currentVersion(), h.now()
	if v != h.version || now.Sub(h.taken) >= h.MaxAge {
		clear(h.bodies)
		h.version, h.taken = v, now
	}
	if b, ok := h.bodies[key]; ok {
		return b, nil
	}
	body, gatherErr, err := h.encode(key)
	if gatherErr != nil {
		// Like promhttp's ContinueOnError: serve what could be gathered.
		h.logger.Error("error gathering metrics", "err", gatherErr)
	}
	if err != nil {
		return nil, err
	}
	h.bodies[key], h.sizes[key] = body, len(body)
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

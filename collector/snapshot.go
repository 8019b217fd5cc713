package collector

import (
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
)

// latester is a sampler as a collector sees it.
type latester[T any] interface {
	Latest() *sampler.Snapshot[T]
}

// publisher is a source that says when it has a new snapshot.
type publisher interface {
	OnPublish(func())
}

// asks records when a format was asked for, to tell a scraper that comes
// back regularly from a one-off request.
type asks struct {
	last time.Time
	gaps [2]time.Duration // between the last three asks, newest first
}

// maxScrapeGap bounds the scrape interval a format is kept encoded for.
const maxScrapeGap = 10 * time.Minute

func (a *asks) ask(now time.Time) {
	if !a.last.IsZero() {
		a.gaps = [2]time.Duration{now.Sub(a.last), a.gaps[0]}
	}
	a.last = now
}

// regular reports whether the format is being scraped: asked before, and
// last within twice the longer of the last two gaps (two gaps, so that
// the two Prometheus servers of an HA pair count as one scraper).
func (a *asks) regular(now time.Time) bool {
	g := max(a.gaps[0], a.gaps[1])
	return g > 0 && g <= maxScrapeGap && now.Sub(a.last) <= 2*g
}

// snapshotMetrics renders a source's snapshot once into samples and serves
// them until the next snapshot arrives: encoded in the text formats by
// EncodeText (the /metrics handler's way), or as const metrics by collect
// (Gather's way, for tests and the protobuf format). Where the source says
// when it publishes, the formats a scraper keeps asking for are encoded
// then, on the sampler's goroutine, so that the scrape only copies bytes;
// a format asked for once (a person with curl) is encoded when asked.
// Every snapshot collector embeds one.
type snapshotMetrics[T any] struct {
	src    latester[T]
	render func(*out, T)
	now    func() time.Time

	mu       sync.Mutex
	rendered *sampler.Snapshot[T]
	out      out
	metrics  []prometheus.Metric // made on the first collect after a render
	// encoded[f] is the snapshot in the text format (f 0) or OpenMetrics
	// (1); never written to once made, a scrape may still be sending it.
	encoded [2]scrape.Encoded
	// asked[f][z] is when format f was asked for, deflated if z.
	asked [2][2]asks
}

// init sets the source and the render function; with a source that says
// when it publishes, it renders then.
func (s *snapshotMetrics[T]) init(src latester[T], render func(*out, T)) {
	s.src, s.render, s.now = src, render, time.Now
	if p, ok := src.(publisher); ok {
		p.OnPublish(s.prepare)
	}
}

// update renders the latest snapshot if it is new; false before the first.
// s.mu is held.
func (s *snapshotMetrics[T]) update() bool {
	snap := s.src.Latest()
	if snap == nil {
		return false
	}
	if s.rendered != snap {
		s.out.reset()
		s.render(&s.out, snap.Data)
		s.rendered, s.metrics, s.encoded = snap, nil, [2]scrape.Encoded{}
	}
	return true
}

// collect sends the metrics of the latest snapshot; none before the first.
func (s *snapshotMetrics[T]) collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	if !s.update() {
		s.mu.Unlock()
		return
	}
	if s.metrics == nil {
		s.metrics = s.out.metrics()
	}
	metrics := s.metrics
	s.mu.Unlock()
	for _, m := range metrics {
		ch <- m
	}
}

// EncodeText returns the metric families of the latest snapshot in the
// text format 0.0.4, or in OpenMetrics 1.0.0 (without its "# EOF" line),
// and deflated if asked; nothing before the first snapshot.
func (s *snapshotMetrics[T]) EncodeText(openMetrics, deflate bool) scrape.Encoded {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, z := b2i(openMetrics), b2i(deflate)
	s.asked[f][z].ask(s.now())
	if !s.update() {
		return scrape.Encoded{}
	}
	s.encode(f, z)
	return s.encoded[f]
}

// prepare renders and encodes a new snapshot in the formats being
// scraped. s.mu is not held.
func (s *snapshotMetrics[T]) prepare() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for f := range s.asked {
		for z := range s.asked[f] {
			if s.asked[f][z].regular(now) && s.update() {
				s.encode(f, z)
			}
		}
	}
}

// encode makes encoded[f], and its deflated text if z is 1. s.mu is held.
func (s *snapshotMetrics[T]) encode(f, z int) {
	e := &s.encoded[f]
	if e.Text == nil {
		// A new buffer each time: the last one may still be being sent.
		e.Text = s.out.appendText(make([]byte, 0, s.out.textSize[f]), f == 1)
		s.out.textSize[f] = len(e.Text) + len(e.Text)/16
	}
	if z == 1 && e.Deflated == nil {
		e.Deflated = scrape.Deflate(make([]byte, 0, len(e.Text)/8), e.Text)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pair is the latest data of two sources; a source that is off or has
// no snapshot yet gives its zero value.
type pair[A, B any] struct {
	A A
	B B
}

// joined serves two sources as one, for a collector that renders both
// together: its snapshot is new whenever either's is, and it says when
// either publishes. Either source may be nil.
type joined[A, B any] struct {
	a latester[A]
	b latester[B]

	mu    sync.Mutex
	lastA *sampler.Snapshot[A]
	lastB *sampler.Snapshot[B]
	cur   *sampler.Snapshot[pair[A, B]]
}

// join makes a latester of a and b; a nil latester (or a typed nil
// pointer in one) is a source that is off.
func join[A, B any](a latester[A], b latester[B]) *joined[A, B] {
	return &joined[A, B]{a: a, b: b}
}

// Latest returns the two sources' latest data, taken when the later of
// the two was; nil before either has a snapshot.
func (j *joined[A, B]) Latest() *sampler.Snapshot[pair[A, B]] {
	sa, sb := latestOf(j.a), latestOf(j.b)
	if sa == nil && sb == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cur == nil || sa != j.lastA || sb != j.lastB {
		next := &sampler.Snapshot[pair[A, B]]{}
		if sa != nil {
			next.Data.A, next.Taken = sa.Data, sa.Taken
		}
		if sb != nil {
			next.Data.B = sb.Data
			if sb.Taken.After(next.Taken) {
				next.Taken = sb.Taken
			}
		}
		j.cur, j.lastA, j.lastB = next, sa, sb
	}
	return j.cur
}

// OnPublish has f called after either source publishes a new snapshot.
func (j *joined[A, B]) OnPublish(f func()) {
	for _, s := range []any{j.a, j.b} {
		if p, ok := s.(publisher); ok && !isNil(s) {
			p.OnPublish(f)
		}
	}
}

func latestOf[T any](l latester[T]) *sampler.Snapshot[T] {
	if isNil(l) {
		return nil
	}
	return l.Latest()
}

// isNil reports whether v is nil or holds a nil pointer: wiring passes a
// source that is off as its nil *sampler.Sampler.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

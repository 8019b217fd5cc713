package scrape

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// Source is a sampler as a collector sees it.
type Source[T any] interface {
	Latest() *sampler.Snapshot[T]
}

// Publisher is a source that says when it has a new snapshot.
type Publisher interface {
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

// askSlack is how much later than twice its interval a scraper may come
// and still count as regular: a scraper's interval jitters by its own
// scheduling and the target's answer, which for one that comes every few
// milliseconds (a benchmark) is most of its interval.
const askSlack = time.Second

// regular reports whether the format is being scraped: asked before, and
// last within twice the longer of the last two gaps, and askSlack (two
// gaps, so that the two Prometheus servers of an HA pair count as one
// scraper).
func (a *asks) regular(now time.Time) bool {
	g := max(a.gaps[0], a.gaps[1])
	return g > 0 && g <= maxScrapeGap && now.Sub(a.last) <= 2*g+askSlack
}

// Rendered renders a source's snapshot once into samples and serves them
// until the next snapshot arrives: encoded in the text formats by
// EncodeText (the /metrics handler's way), or as const metrics by Collect
// (Gather's way, for tests and the protobuf format). Where the source says
// when it publishes, the formats a scraper keeps asking for are encoded
// then, on the sampler's goroutine, so that the scrape only copies bytes;
// a format asked for once (a person with curl) is encoded when asked.
// Every snapshot collector embeds one, and adds Describe.
type Rendered[T any] struct {
	src    Source[T]
	render func(*Samples, T)
	now    func() time.Time

	mu       sync.Mutex
	rendered *sampler.Snapshot[T]
	out      Samples
	metrics  []prometheus.Metric // made on the first collect after a render
	// encoded[f] is the snapshot in the text format (f 0) or OpenMetrics
	// (1); never written to once made, a scrape may still be sending it.
	encoded [2]Encoded
	// asked[f][z] is when format f was asked for, deflated if z.
	asked [2][2]asks
}

// Init sets the source and the render function; with a source that says
// when it publishes, it renders then.
func (s *Rendered[T]) Init(src Source[T], render func(*Samples, T)) {
	s.src, s.render, s.now = src, render, time.Now
	if p, ok := src.(Publisher); ok {
		p.OnPublish(s.prepare)
	}
}

// SetClock has s read the time from now instead of the clock: when a
// format was asked for decides whether a publish encodes it.
func (s *Rendered[T]) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// update renders the latest snapshot if it is new; false before the first.
// s.mu is held.
func (s *Rendered[T]) update() bool {
	snap := s.src.Latest()
	if snap == nil {
		return false
	}
	if s.rendered != snap {
		s.out.reset()
		s.render(&s.out, snap.Data)
		s.rendered, s.metrics, s.encoded = snap, nil, [2]Encoded{}
	}
	return true
}

// Collect sends the metrics of the latest snapshot; none before the first.
// With Describe, the collector's own, it makes a prometheus.Collector.
func (s *Rendered[T]) Collect(ch chan<- prometheus.Metric) {
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
func (s *Rendered[T]) EncodeText(openMetrics, deflate bool) Encoded {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, z := b2i(openMetrics), b2i(deflate)
	s.asked[f][z].ask(s.now())
	if !s.update() {
		return Encoded{}
	}
	s.encode(f, z)
	return s.encoded[f]
}

// prepare renders and encodes a new snapshot in the formats being
// scraped. s.mu is not held.
func (s *Rendered[T]) prepare() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for f := range s.asked {
		for z := range s.asked[f] {
			if s.asked[f][z].regular(now) && s.update() {
				// Render and encode apart: see pause. No scrape
				// waits on s.mu (the handler builds when this
				// is done), so holding it while parked costs none.
				pause()
				s.encode(f, z)
			}
		}
	}
}

// encode makes encoded[f], and its deflated text if z is 1. s.mu is held.
func (s *Rendered[T]) encode(f, z int) {
	e := &s.encoded[f]
	if e.Text == nil {
		// A new buffer each time: the last one may still be being sent.
		e.Text = s.out.appendText(make([]byte, 0, s.out.textSize[f]), f == 1)
		s.out.textSize[f] = len(e.Text) + len(e.Text)/16
	}
	if z == 1 && e.Deflated == nil {
		e.Deflated = Deflate(make([]byte, 0, len(e.Text)/8), e.Text)
	}
}

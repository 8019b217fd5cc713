package scrape

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Sampled collects a collector on its own schedule instead of at every
// scrape, and serves the last collection, encoded once: for the exporter's
// own go_* and process_* metrics, whose collector reads several /proc files
// at every collect (with their encoding, over half of a scrape's time once
// the sources encode themselves). Their values are up to one interval old.
type Sampled struct {
	c        prometheus.Collector
	reg      *prometheus.Registry
	interval time.Duration
	logger   *slog.Logger

	mu      sync.Mutex
	running bool                // Run samples; else every ask gathers
	asked   time.Time           // the last ask
	taken   time.Time           // when mfs was gathered
	mfs     []*dto.MetricFamily // of the last sample
	encoded [2]Encoded          // mfs in the text format and OpenMetrics, made once
	wanted  [2][2]bool          // formats asked for, and whether deflated
}

// NewSampled samples c every interval once Run runs, while it is being
// scraped; until then it gathers c at every scrape.
func NewSampled(c prometheus.Collector, interval time.Duration, logger *slog.Logger) *Sampled {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	return &Sampled{c: c, reg: reg, interval: interval, logger: logger}
}

// idleAfter is how long after the last scrape Run stops sampling: with
// nobody scraping, sampling is only cost. The next scrape samples then.
const idleAfter = 10 * time.Minute

// Run samples every interval until ctx ends.
func (s *Sampled) Run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	s.mu.Lock()
	s.running = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.mu.Lock()
			scraped := !s.asked.IsZero() && time.Since(s.asked) < idleAfter
			s.mu.Unlock()
			if scraped {
				s.sample()
			}
		}
	}
}

// sample gathers c and encodes it in the formats asked for so far.
func (s *Sampled) sample() {
	taken := time.Now()
	mfs, err := s.reg.Gather()
	if err != nil {
		s.logger.Error("error gathering metrics", "err", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mfs, s.encoded, s.taken = mfs, [2]Encoded{}, taken
	for f := range s.wanted {
		for z, w := range s.wanted[f] {
			if w {
				s.encode(f, z == 1)
			}
		}
	}
}

// encode makes encoded[f], deflated too if deflate. s.mu is held.
func (s *Sampled) encode(f int, deflate bool) {
	e := &s.encoded[f]
	if e.Text == nil {
		format := expfmt.NewFormat(expfmt.TypeTextPlain)
		if f == 1 {
			format = expfmt.NewFormat(expfmt.TypeOpenMetrics)
		}
		var b bytes.Buffer
		enc := expfmt.NewEncoder(&b, format)
		for _, mf := range s.mfs {
			enc.Encode(mf) //nolint:errcheck // a bytes.Buffer does not fail
		}
		e.Text = b.Bytes()
	}
	if deflate && e.Deflated == nil {
		e.Deflated = Deflate(nil, e.Text)
	}
}

// Describe implements prometheus.Collector.
func (s *Sampled) Describe(ch chan<- *prometheus.Desc) { s.c.Describe(ch) }

// Collect implements prometheus.Collector: a collection now, for Gather.
func (s *Sampled) Collect(ch chan<- prometheus.Metric) { s.c.Collect(ch) }

// EncodeText implements TextCollector: the last sample, encoded once; a
// new one if Run does not run or has not sampled for two intervals.
func (s *Sampled) EncodeText(openMetrics, deflate bool) Encoded {
	now := time.Now()
	s.mu.Lock()
	s.asked = now
	stale := !s.running || now.Sub(s.taken) > 2*s.interval
	s.mu.Unlock()
	if stale {
		s.sample()
	}
	f := 0
	if openMetrics {
		f = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wanted[f][b2i(deflate)] = true
	s.encode(f, deflate)
	return s.encoded[f]
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

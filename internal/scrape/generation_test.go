package scrape

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// publishing is a source that says when it has changed, as a sampler does.
type publishing struct {
	version
	mu    sync.Mutex
	hooks []func()
}

func (p *publishing) OnPublish(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hooks = append(p.hooks, f)
}

// publish is a new snapshot: the version moves, then the hooks run, on
// the publisher's goroutine.
func (p *publishing) publish() {
	p.v.Add(1)
	p.mu.Lock()
	hooks := p.hooks
	p.mu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// gaugeRegistry is a registry of one gauge, test_value.
func gaugeRegistry() (*prometheus.Registry, prometheus.Gauge) {
	reg := prometheus.NewRegistry()
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_value", Help: "A value."})
	reg.MustRegister(gauge)
	return reg, gauge
}

// scraper is a Prometheus every 15 s on the handler's clock.
type scraper struct {
	t   *testing.T
	h   *Handler
	now *time.Time
	hdr map[string]string
}

func (s scraper) scrape() string {
	s.t.Helper()
	*s.now = s.now.Add(15 * time.Second)
	resp, body := get(s.t, s.h, s.hdr)
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	return body
}

// setupPublishing is a handler over one gauge whose source publishes, and
// a scraper that has been scraping it long enough to count as regular.
func setupPublishing(t *testing.T, hdr map[string]string) (*Handler, *countingGatherer, *publishing, prometheus.Gauge, scraper) {
	t.Helper()
	reg, gauge := gaugeRegistry()
	g := &countingGatherer{Gatherer: reg}
	src := &publishing{}
	h := NewHandler(g, []Versioned{src}, 0, nil)
	// Values from the clock are Run's and TestRunBuildsBeforeMaxAge's.
	h.MaxAge = time.Hour
	now := time.Unix(1000, 0)
	h.now = func() time.Time { return now }
	s := scraper{t: t, h: h, now: &now, hdr: hdr}
	for range 3 {
		s.scrape()
	}
	return h, g, src, gauge, s
}

// TestBuiltWhenPublished: a publish builds the body of every format being
// scraped, on the publisher's goroutine; the scrape after it sends that
// body, gathering nothing, and it is the new one.
func TestBuiltWhenPublished(t *testing.T) {
	for _, hdr := range []map[string]string{
		nil,
		{"Accept-Encoding": "gzip", "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"},
	} {
		h, g, src, gauge, s := setupPublishing(t, hdr)
		for i := 1; i <= 3; i++ {
			gauge.Set(float64(i))
			*s.now = s.now.Add(5 * time.Second)
			src.publish()
			gathered := g.n.Load()
			if body := s.scrape(); !strings.Contains(body, "test_value "+strconv.Itoa(i)+"\n") &&
				!strings.Contains(body, "test_value "+strconv.Itoa(i)+".0\n") {
				t.Fatalf("%v: after publish %d the scrape sent\n%s", hdr, i, body)
			}
			if n := g.n.Load(); n != gathered {
				t.Fatalf("%v: the scrape after publish %d gathered %d times; the publish should have", hdr, i, n-gathered)
			}
		}
		_ = h
	}
}

// TestRunBuildsBeforeMaxAge: with no publish, Run builds a new generation
// once the served one is MaxAge/2 old, for values that follow the clock,
// and the scrape after sends it without gathering.
func TestRunBuildsBeforeMaxAge(t *testing.T) {
	h, g, _, gauge, s := setupPublishing(t, nil)
	// The served generation is the first scrape's, 30 s old at the last.
	h.MaxAge = 60 * time.Second
	gauge.Set(7)
	before := g.n.Load()
	h.refreshIfOld()
	if n := g.n.Load() - before; n != 1 {
		t.Fatalf("gathered %d times for a generation 30 s old, MaxAge 60 s; want 1", n)
	}
	if body := s.scrape(); !strings.Contains(body, "test_value 7\n") || g.n.Load() != before+1 {
		t.Errorf("after Run's build (%d gathers): %q", g.n.Load()-before, body)
	}
	h.refreshIfOld()
	if n := g.n.Load() - before; n != 1 {
		t.Errorf("built again a generation 15 s old")
	}
}

// TestNotBuiltForAOneOffFormat: a format asked for once (a person with
// curl) is built when asked, not at every publish after.
func TestNotBuiltForAOneOffFormat(t *testing.T) {
	h, g, src, _, s := setupPublishing(t, nil)
	get(t, h, map[string]string{"Accept-Encoding": "gzip"})
	before := g.n.Load()
	*s.now = s.now.Add(5 * time.Second)
	src.publish()
	if n := g.n.Load() - before; n != 1 {
		t.Errorf("a publish gathered %d times, want 1: the regular format only", n)
	}
}

// TestOneOffScrapeAfterPublish: a format asked for now and then is not
// built at a publish, but its next scrape is the new snapshot, however
// soon it comes.
func TestOneOffScrapeAfterPublish(t *testing.T) {
	reg, gauge := gaugeRegistry()
	src := &publishing{}
	h := NewHandler(reg, []Versioned{src}, 0, nil)
	now := time.Unix(1000, 0)
	h.now = func() time.Time { return now }
	gauge.Set(1)
	get(t, h, nil)
	gauge.Set(2)
	src.publish()
	if _, body := get(t, h, nil); !strings.Contains(body, "test_value 2\n") {
		t.Errorf("the scrape after a publish, at the same instant: %q", body)
	}
}

// TestNotBuiltWithoutScrapes: with nobody scraping, a publish costs
// nothing.
func TestNotBuiltWithoutScrapes(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := &countingGatherer{Gatherer: reg}
	src := &publishing{}
	NewHandler(g, []Versioned{src}, 0, nil)
	src.publish()
	if n := g.n.Load(); n != 0 {
		t.Errorf("gathered %d times with nobody scraping", n)
	}
}

// TestSourceWithoutPublishIsChecked: a source that does not say when it
// changes (the XID watcher) is checked at every scrape; a new version of
// it is served at once.
func TestSourceWithoutPublishIsChecked(t *testing.T) {
	reg, gauge := gaugeRegistry()
	quiet := &version{}
	h := NewHandler(reg, []Versioned{&publishing{}, quiet}, 0, nil)
	gauge.Set(1)
	get(t, h, nil)
	gauge.Set(2)
	quiet.v.Add(1)
	if _, body := get(t, h, nil); !strings.Contains(body, "test_value 2\n") {
		t.Errorf("a new version of a source that does not publish was not served:\n%s", body)
	}
}

// blocking blocks its second and later gathers until released.
type blocking struct {
	prometheus.Gatherer
	mu      sync.Mutex
	n       int
	entered chan struct{}
	release chan struct{}
}

func (b *blocking) Gather() ([]*dto.MetricFamily, error) {
	b.mu.Lock()
	b.n++
	n := b.n
	b.mu.Unlock()
	if n > 1 {
		b.entered <- struct{}{}
		<-b.release
	}
	return b.Gatherer.Gather()
}

// TestScrapeDoesNotWaitForABuild: while a publish builds the next body, a
// scrape is sent the last one at once instead of waiting for it.
func TestScrapeDoesNotWaitForABuild(t *testing.T) {
	reg, gauge := gaugeRegistry()
	g := &blocking{Gatherer: reg, entered: make(chan struct{}), release: make(chan struct{})}
	src := &publishing{}
	h := NewHandler(g, []Versioned{src}, 0, nil)
	now := time.Unix(1000, 0)
	var clock sync.Mutex
	h.now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	advance := func(d time.Duration) { clock.Lock(); defer clock.Unlock(); now = now.Add(d) }
	gauge.Set(1)
	// Three scrapes make the format regular; only the first gathers.
	for range 3 {
		advance(300 * time.Millisecond)
		get(t, h, nil)
	}
	gauge.Set(2)
	published := make(chan struct{})
	go func() { defer close(published); src.publish() }()
	select {
	case <-g.entered: // the publish is building
	case <-time.After(10 * time.Second):
		close(g.release)
		t.Fatal("the publish built nothing")
	}
	served := make(chan string, 1)
	go func() {
		_, body := get(t, h, nil)
		served <- body
	}()
	select {
	case body := <-served:
		if !strings.Contains(body, "test_value 1\n") {
			t.Errorf("during the build: %q, want the last body", body)
		}
	case <-time.After(10 * time.Second):
		t.Error("the scrape waited for the build")
	}
	close(g.release)
	<-published
	if _, body := get(t, h, nil); !strings.Contains(body, "test_value 2\n") {
		t.Errorf("after the build: %q", body)
	}
}

// TestConcurrentScrapesAndPublishes: scrapes of both encodings while a
// source publishes, under -race: each sees a whole body of one value, and
// never an older value than it saw before.
func TestConcurrentScrapesAndPublishes(t *testing.T) {
	reg, gauge := gaugeRegistry()
	src := &publishing{}
	h := NewHandler(reg, []Versioned{src}, 0, nil)
	const publishes = 200
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 4 {
		hdr := map[string]string{}
		if i%2 == 1 {
			hdr["Accept-Encoding"] = "gzip"
		}
		wg.Go(func() {
			last := -1.0
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, body := get(t, h, hdr)
				v, err := strconv.ParseFloat(strings.TrimSpace(body[strings.LastIndex(body, " ")+1:]), 64)
				if err != nil || !strings.HasSuffix(body, "\n") {
					t.Errorf("a scrape sent %q", body)
					return
				}
				if v < last {
					t.Errorf("a scrape sent %v after %v", v, last)
					return
				}
				last = v
			}
		})
	}
	for i := 1; i <= publishes; i++ {
		gauge.Set(float64(i))
		src.publish()
	}
	close(stop)
	wg.Wait()
	if _, body := get(t, h, nil); !strings.Contains(body, "test_value 200\n") {
		t.Errorf("after the last publish: %q", body)
	}
}

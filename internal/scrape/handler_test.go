package scrape

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

type version struct{ v atomic.Uint64 }

func (v *version) Version() uint64 { return v.v.Load() }

// countingGatherer counts how often the handler really gathers.
type countingGatherer struct {
	prometheus.Gatherer
	n atomic.Int32
}

func (g *countingGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.n.Add(1)
	return g.Gatherer.Gather()
}

func setup(t *testing.T) (*Handler, *countingGatherer, *version, prometheus.Gauge) {
	t.Helper()
	reg, gauge := gaugeRegistry()
	g := &countingGatherer{Gatherer: reg}
	v := &version{}
	return NewHandler(g, []Versioned{v}, 2, nil), g, v, gauge
}

func get(t *testing.T, h http.Handler, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	var r io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatalf("bad gzip: %v", err)
		}
		r = zr
	}
	b, _ := io.ReadAll(r)
	return resp, string(b)
}

func TestServesTextGzipAndOpenMetrics(t *testing.T) {
	h, _, _, gauge := setup(t)
	gauge.Set(3)
	resp, body := get(t, h, nil)
	if !strings.Contains(body, "test_value 3") || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("plain: %q %q", resp.Header.Get("Content-Type"), body)
	}
	resp, body = get(t, h, map[string]string{"Accept-Encoding": "gzip"})
	if resp.Header.Get("Content-Encoding") != "gzip" || !strings.Contains(body, "test_value 3") {
		t.Errorf("gzip: %q %q", resp.Header.Get("Content-Encoding"), body)
	}
	resp, body = get(t, h, map[string]string{"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"})
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/openmetrics-text") || !strings.HasSuffix(body, "# EOF\n") {
		t.Errorf("openmetrics: %q %q", resp.Header.Get("Content-Type"), body)
	}
}

func TestGathersOncePerVersion(t *testing.T) {
	h, g, v, gauge := setup(t)
	now := time.Unix(1000, 0)
	h.now = func() time.Time { return now }
	gauge.Set(1)
	for i := 0; i < 5; i++ {
		if _, body := get(t, h, nil); !strings.Contains(body, "test_value 1") {
			t.Fatalf("scrape %d: %q", i, body)
		}
	}
	if n := g.n.Load(); n != 1 {
		t.Fatalf("gathered %d times for one version, want 1", n)
	}
	// A new snapshot is served at once, not after the cache ages.
	gauge.Set(2)
	v.v.Add(1)
	if _, body := get(t, h, nil); !strings.Contains(body, "test_value 2") {
		t.Fatalf("after a new version: %q", body)
	}
	// Values that follow the clock are never older than MaxAge.
	gauge.Set(4)
	now = now.Add(h.MaxAge)
	if _, body := get(t, h, nil); !strings.Contains(body, "test_value 4") {
		t.Fatalf("after MaxAge: %q", body)
	}
	if n := g.n.Load(); n != 3 {
		t.Fatalf("gathered %d times, want 3", n)
	}
	// Each format and encoding is encoded once per version too.
	get(t, h, map[string]string{"Accept-Encoding": "gzip"})
	get(t, h, map[string]string{"Accept-Encoding": "gzip"})
	if n := g.n.Load(); n != 4 {
		t.Fatalf("gathered %d times, want 4", n)
	}
}

func TestInFlightLimit(t *testing.T) {
	h, _, _, _ := setup(t)
	h.inFlight <- struct{}{}
	h.inFlight <- struct{}{}
	if resp, _ := get(t, h, nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d with the limit reached, want 503", resp.StatusCode)
	}
	<-h.inFlight
	if resp, _ := get(t, h, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d below the limit, want 200", resp.StatusCode)
	}
}

func TestAcceptsGzip(t *testing.T) {
	for in, want := range map[string]bool{
		"":                      false,
		"gzip":                  true,
		"deflate, gzip;q=0.5":   true,
		"gzip;q=0":              false,
		"identity":              false,
		"GZIP":                  true,
		"br;q=1.0, gzip; q=0.8": true,
	} {
		h := http.Header{}
		h.Set("Accept-Encoding", in)
		if got := acceptsGzip(h); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", in, got, want)
		}
	}
}

// textCollector writes itself; it counts how often.
type textCollector struct {
	desc   *prometheus.Desc
	writes atomic.Int32
}

func (c *textCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *textCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 5)
}

func (c *textCollector) EncodeText(openMetrics, deflate bool) Encoded {
	c.writes.Add(1)
	v := "5"
	if openMetrics {
		v = "5.0"
	}
	e := Encoded{Text: []byte("# HELP text_value Written by itself.\n# TYPE text_value gauge\ntext_value " + v + "\n")}
	if deflate {
		e.Deflated = Deflate(nil, e.Text)
	}
	return e
}

func TestRegistryWritesTextCollectors(t *testing.T) {
	reg := NewPedanticRegistry()
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_value", Help: "A value."})
	gauge.Set(3)
	text := &textCollector{desc: prometheus.NewDesc("text_value", "Written by itself.", nil, nil)}
	reg.MustRegister(gauge, text)
	v := &version{}
	h := NewHandler(reg, []Versioned{v}, 0, nil)

	_, body := get(t, h, map[string]string{"Accept-Encoding": "gzip"})
	if body != "# HELP test_value A value.\n# TYPE test_value gauge\ntest_value 3\n"+
		"# HELP text_value Written by itself.\n# TYPE text_value gauge\ntext_value 5\n" {
		t.Errorf("text:\n%s", body)
	}
	resp, body := get(t, h, map[string]string{"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"})
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/openmetrics-text") ||
		body != "# HELP test_value A value.\n# TYPE test_value gauge\ntest_value 3.0\n"+
			"# HELP text_value Written by itself.\n# TYPE text_value gauge\ntext_value 5.0\n# EOF\n" {
		t.Errorf("openmetrics %q:\n%s", resp.Header.Get("Content-Type"), body)
	}
	if n := text.writes.Load(); n != 2 {
		t.Errorf("EncodeText called %d times for two formats, want 2", n)
	}
	// Other formats gather everything.
	resp, body = get(t, h, map[string]string{"Accept": "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"})
	if !strings.Contains(resp.Header.Get("Content-Type"), "protobuf") || !strings.Contains(body, "test_value") ||
		!strings.Contains(body, "text_value") {
		t.Errorf("protobuf %q: %q", resp.Header.Get("Content-Type"), body)
	}
	if n := text.writes.Load(); n != 2 {
		t.Errorf("EncodeText called for protobuf")
	}
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 2 {
		t.Errorf("Gather: %d families, %v", len(mfs), err)
	}
	// Registration is checked across both kinds.
	if err := reg.Register(&textCollector{desc: prometheus.NewDesc("test_value", "Other help.", nil, nil)}); err == nil {
		t.Error("a second test_value registered")
	}
}

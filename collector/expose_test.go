package collector

import (
	"bytes"
	"compress/flate"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
)

// CheckText fails t unless what c encodes in each text format is what
// expfmt writes of what Gather makes of c's Collect, up to the order of
// families and of series within a family, and its deflated text inflates
// to its text. collector_test uses it too.
func CheckText(t testing.TB, c scrape.TextCollector) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, om := range []bool{false, true} {
		f := expfmt.NewFormat(expfmt.TypeTextPlain)
		if om {
			f = expfmt.NewFormat(expfmt.TypeOpenMetrics)
		}
		var want bytes.Buffer
		enc := expfmt.NewEncoder(&want, f)
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
		e := c.EncodeText(om, true)
		inflated, err := io.ReadAll(flate.NewReader(bytes.NewReader(e.Deflated)))
		if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(inflated, e.Text) {
			// A sync flush and no final block: the reader wants more.
			t.Errorf("openmetrics %v: deflated text inflates to %d bytes (%v), text has %d", om, len(inflated), err, len(e.Text))
		}
		if plain := c.EncodeText(om, false); !bytes.Equal(plain.Text, e.Text) {
			t.Errorf("openmetrics %v: text differs with and without deflate", om)
		}
		w, g := textBlocks(want.String()), textBlocks(string(e.Text))
		if !slices.Equal(w, g) {
			for i := 0; i < max(len(w), len(g)); i++ {
				if i >= len(w) || i >= len(g) || w[i] != g[i] {
					var wi, gi string
					if i < len(w) {
						wi = w[i]
					}
					if i < len(g) {
						gi = g[i]
					}
					t.Fatalf("openmetrics %v: family %d of %d/%d differs:\nexpfmt:\n%s\nWriteText:\n%s", om, i, len(w), len(g), wi, gi)
				}
			}
		}
	}
}

// textBlocks splits an exposition into families, each with its series
// lines sorted, and sorts the families.
func textBlocks(s string) []string {
	var blocks []string
	var cur []string
	flush := func() {
		if len(cur) > 2 {
			slices.Sort(cur[2:])
		}
		if len(cur) > 0 {
			blocks = append(blocks, strings.Join(cur, "\n"))
		}
		cur = nil
	}
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "# HELP ") {
			flush()
		}
		if l != "" && l != "# EOF" {
			cur = append(cur, l)
		}
	}
	flush()
	slices.Sort(blocks)
	return blocks
}

type fixedSource[T any] struct{ snap *sampler.Snapshot[T] }

func (f *fixedSource[T]) Latest() *sampler.Snapshot[T] { return f.snap }

type textTestCollector struct {
	snapshotMetrics[[]float64]
	descs []*prometheus.Desc
}

func (c *textTestCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *textTestCollector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// TestWriteTextEdgeCases writes what the text formats escape or spell
// specially, as expfmt does.
func TestWriteTextEdgeCases(t *testing.T) {
	gauge := newDesc("test", "value", "A \"value\" with a \\ and a\nnewline.", "zeta", "alpha", "mid")
	counter := newDesc("test", "events_total", "Events.", "kind")
	bare := newDesc("test", "things", "A counter without _total.")
	untyped := newDesc("test", "untyped", "An untyped value.", "x")
	c := &textTestCollector{descs: []*prometheus.Desc{gauge, counter, bare, untyped}}
	values := []float64{0, 1, -1, math.Copysign(0, -1), 0.5, 3, -2.25, 1e21, 1e-7, 123456789, math.NaN(),
		math.Inf(1), math.Inf(-1), math.MaxFloat64, math.SmallestNonzeroFloat64}
	labels := []string{"plain", `a "quoted" value`, `back\slash`, "new\nline", "bad \xff utf-8", "", "ünïcode"}
	c.init(&fixedSource[[]float64]{snap: &sampler.Snapshot[[]float64]{Data: values}},
		func(o *out, vs []float64) {
			for i, v := range vs {
				o.labels = []string{labels[i%len(labels)]}
				o.gauge(gauge, v, itoa(i), labels[(i+1)%len(labels)])
				o.labels = nil
				o.add(counter, prometheus.CounterValue, math.Abs(v), itoa(i))
				o.add(untyped, prometheus.UntypedValue, v, itoa(i))
			}
			o.add(bare, prometheus.CounterValue, 7)
		})
	CheckText(t, c)

	// A second snapshot is rendered again; the same one is not.
	first := c.EncodeText(false, false).Text
	c.src.(*fixedSource[[]float64]).snap = &sampler.Snapshot[[]float64]{Data: values[:2]}
	second := c.EncodeText(false, false).Text
	if bytes.Equal(first, second) || bytes.Count(second, []byte("test_value{")) != 2 {
		t.Errorf("new snapshot not rendered:\n%s", second)
	}
	if again := c.EncodeText(false, false).Text; &again[0] != &second[0] {
		t.Error("the same snapshot encoded twice")
	}
	CheckText(t, c)
}

func TestEncodeTextNoSnapshot(t *testing.T) {
	c := &textTestCollector{}
	c.init(&fixedSource[[]float64]{}, func(*out, []float64) { t.Fatal("rendered without a snapshot") })
	if e := c.EncodeText(true, true); e.Text != nil || e.Deflated != nil {
		t.Errorf("%q", e.Text)
	}
}

// publishing is a source that says when it publishes.
type publishing struct {
	fixedSource[[]float64]
	published []func()
}

func (p *publishing) OnPublish(f func()) { p.published = append(p.published, f) }

func (p *publishing) publish(vs []float64) {
	p.snap = &sampler.Snapshot[[]float64]{Data: vs}
	for _, f := range p.published {
		f()
	}
}

// TestEncodedWhenPublished: a snapshot is encoded when it is published,
// in the formats a scraper keeps asking for, and not again when the
// scrape comes.
func TestEncodedWhenPublished(t *testing.T) {
	d := newDesc("test", "published", "A value.")
	renders := 0
	src := &publishing{}
	c := &textTestCollector{descs: []*prometheus.Desc{d}}
	c.init(src, func(o *out, vs []float64) {
		renders++
		o.gauge(d, vs[0])
	})
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	src.publish([]float64{1})
	if renders != 0 {
		t.Fatal("rendered before any scrape asked")
	}
	// Asked once (curl): encoded when asked, not when published.
	c.EncodeText(false, false)
	src.publish([]float64{2})
	if renders != 1 {
		t.Fatal("a format asked for once was rendered when published")
	}
	// A scraper every 15 s, gzipped OpenMetrics.
	scrape := func() scrape.Encoded {
		now = now.Add(15 * time.Second)
		return c.EncodeText(true, true)
	}
	if e := scrape(); !bytes.Contains(e.Text, []byte("gpulink_test_published 2.0")) || e.Deflated == nil {
		t.Fatalf("%s", e.Text)
	}
	scrape()
	renders = 0
	for i := 3; i <= 5; i++ {
		now = now.Add(5 * time.Second)
		src.publish([]float64{float64(i)})
	}
	if renders != 3 || c.encoded[1].Deflated == nil || c.encoded[0].Text != nil {
		t.Fatalf("after three publishes: %d renders, deflated OpenMetrics %v, text %v", renders, c.encoded[1].Deflated != nil, c.encoded[0].Text != nil)
	}
	prepared := c.encoded[1]
	if e := c.EncodeText(true, true); &e.Text[0] != &prepared.Text[0] || &e.Deflated[0] != &prepared.Deflated[0] || renders != 3 {
		t.Error("the scrape encoded again what the publish had")
	}
	// The scraper gone: nothing is encoded after twice its interval.
	now = now.Add(31 * time.Second)
	src.publish([]float64{6})
	if renders != 3 {
		t.Error("rendered with no scraper for twice its interval")
	}
}

package scrape_test

import (
	"bytes"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/internal/scrape/scrapetest"
)

type fixedSource[T any] struct{ snap *sampler.Snapshot[T] }

func (f *fixedSource[T]) Latest() *sampler.Snapshot[T] { return f.snap }

type textTestCollector struct {
	scrape.Rendered[[]float64]
	descs []*prometheus.Desc
}

func (c *textTestCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// TestWriteTextEdgeCases writes what the text formats escape or spell
// specially, as expfmt does.
func TestWriteTextEdgeCases(t *testing.T) {
	gauge := scrape.NewDesc("gpulink_test_value", "A \"value\" with a \\ and a\nnewline.", []string{"zeta", "alpha", "mid"})
	counter := scrape.NewDesc("gpulink_test_events_total", "Events.", []string{"kind"})
	bare := scrape.NewDesc("gpulink_test_things", "A counter without _total.", nil)
	untyped := scrape.NewDesc("gpulink_test_untyped", "An untyped value.", []string{"x"})
	c := &textTestCollector{descs: []*prometheus.Desc{gauge, counter, bare, untyped}}
	values := []float64{0, 1, -1, math.Copysign(0, -1), 0.5, 3, -2.25, 1e21, 1e-7, 123456789, math.NaN(),
		math.Inf(1), math.Inf(-1), math.MaxFloat64, math.SmallestNonzeroFloat64}
	labels := []string{"plain", `a "quoted" value`, `back\slash`, "new\nline", "bad \xff utf-8", "", "ünïcode"}
	src := &fixedSource[[]float64]{snap: &sampler.Snapshot[[]float64]{Data: values}}
	c.Init(src,
		func(o *scrape.Samples, vs []float64) {
			for i, v := range vs {
				o.Labels = []string{labels[i%len(labels)]}
				o.Add(gauge, prometheus.GaugeValue, v, strconv.Itoa(i), labels[(i+1)%len(labels)])
				o.Labels = nil
				o.Add(counter, prometheus.CounterValue, math.Abs(v), strconv.Itoa(i))
				o.Add(untyped, prometheus.UntypedValue, v, strconv.Itoa(i))
			}
			o.Add(bare, prometheus.CounterValue, 7)
		})
	scrapetest.CheckText(t, c)

	// A second snapshot is rendered again; the same one is not.
	first := c.EncodeText(false, false).Text
	src.snap = &sampler.Snapshot[[]float64]{Data: values[:2]}
	second := c.EncodeText(false, false).Text
	if bytes.Equal(first, second) || bytes.Count(second, []byte("test_value{")) != 2 {
		t.Errorf("new snapshot not rendered:\n%s", second)
	}
	if again := c.EncodeText(false, false).Text; &again[0] != &second[0] {
		t.Error("the same snapshot encoded twice")
	}
	scrapetest.CheckText(t, c)
}

func TestEncodeTextNoSnapshot(t *testing.T) {
	c := &textTestCollector{}
	c.Init(&fixedSource[[]float64]{}, func(*scrape.Samples, []float64) { t.Fatal("rendered without a snapshot") })
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
	d := scrape.NewDesc("gpulink_test_published", "A value.", nil)
	renders := 0
	src := &publishing{}
	c := &textTestCollector{descs: []*prometheus.Desc{d}}
	c.Init(src, func(o *scrape.Samples, vs []float64) {
		renders++
		o.Add(d, prometheus.GaugeValue, vs[0])
	})
	now := time.Unix(1000, 0)
	c.SetClock(func() time.Time { return now })
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
	get := func() scrape.Encoded {
		now = now.Add(15 * time.Second)
		return c.EncodeText(true, true)
	}
	if e := get(); !bytes.Contains(e.Text, []byte("gpulink_test_published 2.0")) || e.Deflated == nil {
		t.Fatalf("%s", e.Text)
	}
	get()
	renders = 0
	for i := 3; i <= 5; i++ {
		now = now.Add(5 * time.Second)
		src.publish([]float64{float64(i)})
	}
	if renders != 3 || c.Prepared(true).Deflated == nil || c.Prepared(false).Text != nil {
		t.Fatalf("after three publishes: %d renders, deflated OpenMetrics %v, text %v", renders, c.Prepared(true).Deflated != nil, c.Prepared(false).Text != nil)
	}
	prepared := c.Prepared(true)
	if e := c.EncodeText(true, true); &e.Text[0] != &prepared.Text[0] || &e.Deflated[0] != &prepared.Deflated[0] || renders != 3 {
		t.Error("the scrape encoded again what the publish had")
	}
	// The scraper gone: nothing is encoded after twice its interval.
	now = now.Add(35 * time.Second) // over twice 15 s, and the second of slack
	src.publish([]float64{6})
	if renders != 3 {
		t.Error("rendered with no scraper for twice its interval")
	}
}

package scrape

import (
	"bytes"
	"compress/flate"
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/testwait"
)

// counting counts its collects in its one gauge.
type counting struct {
	desc *prometheus.Desc
	n    atomic.Int64
}

func (c *counting) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *counting) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(c.n.Add(1)))
}

func TestSampledCollectsOffTheScrape(t *testing.T) {
	c := &counting{desc: prometheus.NewDesc("collects", "Collects so far.", nil, nil)}
	s := NewSampled(c, time.Hour, nil)
	// Not running: every scrape collects.
	s.EncodeText(false, false)
	if e := s.EncodeText(false, false); !strings.Contains(string(e.Text), "collects 2\n") {
		t.Fatalf("before Run: %s", e.Text)
	}
	s.interval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	testwait.Until(t, func() bool { return c.n.Load() == 3 })
	cancel()
	testwait.Until(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return !s.running })
	s.interval = time.Hour
	s.running = true // as if Run were still running, without its ticks
	for range 3 {
		e := s.EncodeText(true, true)
		if !bytes.Equal(e.Text, []byte("# HELP collects Collects so far.\n# TYPE collects gauge\ncollects 3.0\n")) {
			t.Fatalf("running: %q", e.Text)
		}
		inflated, _ := io.ReadAll(flate.NewReader(bytes.NewReader(e.Deflated)))
		if !bytes.Equal(inflated, e.Text) {
			t.Fatalf("deflated: %q", inflated)
		}
	}
	if n := c.n.Load(); n != 3 {
		t.Errorf("%d collects, want 3: scrapes collected", n)
	}
	// A sample encodes the formats asked for, ahead of the scrape.
	s.sample()
	s.mu.Lock()
	ready := s.encoded[1].Deflated != nil && s.encoded[0].Text != nil && s.encoded[0].Deflated == nil
	s.mu.Unlock()
	if !ready {
		t.Error("a sample did not encode the formats scrapes asked for, or deflated one nobody asked deflated")
	}
}

func TestSampledIdleWithoutScrapes(t *testing.T) {
	c := &counting{desc: prometheus.NewDesc("collects", "Collects so far.", nil, nil)}
	s := NewSampled(c, time.Millisecond, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	time.Sleep(20 * time.Millisecond)
	if n := c.n.Load(); n != 0 {
		t.Errorf("%d collects with nobody scraping", n)
	}
	s.EncodeText(false, false)
	testwait.Until(t, func() bool { return c.n.Load() > 3 })
}

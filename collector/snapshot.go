package collector

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// latester is a sampler as a collector sees it.
type latester[T any] interface {
	Latest() *sampler.Snapshot[T]
}

// snapshotMetrics renders a source's snapshot once and serves the result
// until the next snapshot arrives, so scrapes between samples cost no
// rendering. Every snapshot collector embeds one.
type snapshotMetrics[T any] struct {
	src    latester[T]
	render func(T) []prometheus.Metric

	mu       sync.Mutex
	rendered *sampler.Snapshot[T]
	metrics  []prometheus.Metric
}

// collect sends the metrics of the latest snapshot; none before the first.
func (s *snapshotMetrics[T]) collect(ch chan<- prometheus.Metric) {
	snap := s.src.Latest()
	if snap == nil {
		return
	}
	s.mu.Lock()
	if s.rendered != snap {
		s.metrics = s.render(snap.Data)
		s.rendered = snap
	}
	metrics := s.metrics
	s.mu.Unlock()
	for _, m := range metrics {
		ch <- m
	}
}

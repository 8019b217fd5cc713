package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// ExporterCollector reports the health of every source: whether its last
// sample succeeded in time, when the newest usable one was taken, how long
// sampling took and how many errors it has had.
type ExporterCollector struct {
	sources []sampler.StatusReporter

	up, lastSuccess, duration, errors *prometheus.Desc
}

// NewExporterCollector reports on sources.
func NewExporterCollector(sources ...sampler.StatusReporter) *ExporterCollector {
	return &ExporterCollector{
		sources: sources,
		up: newDesc("source", "up",
			"1 if the source's last sample finished within its deadline, 0 if it failed, is late or has not run.", "source"),
		lastSuccess: newDesc("source", "last_success_timestamp_seconds",
			"Unix time the source's newest usable snapshot was taken; stale while the source hangs.", "source"),
		duration: newDesc("source", "sample_duration_seconds",
			"How long the source's last finished sample took; absent for event-driven sources.", "source"),
		errors: newDesc("source", "errors_total",
			"Failed or late samples plus values dropped from samples because they could not be read.", "source"),
	}
}

// Describe implements prometheus.Collector.
func (c *ExporterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.lastSuccess
	ch <- c.duration
	ch <- c.errors
}

// Collect implements prometheus.Collector.
func (c *ExporterCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.sources {
		st := s.Status()
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, boolFloat(st.Up), st.Name)
		if !st.LastSuccess.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.lastSuccess, prometheus.GaugeValue,
				float64(st.LastSuccess.UnixNano())/1e9, st.Name)
		}
		// Event-driven sources (the XID watcher) never take a sample: no
		// duration rather than a constant 0.
		if st.LastDuration > 0 {
			ch <- prometheus.MustNewConstMetric(c.duration, prometheus.GaugeValue, st.LastDuration.Seconds(), st.Name)
		}
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(st.Errors), st.Name)
	}
}

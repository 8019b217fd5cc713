// Package collector renders the sources' latest snapshots as Prometheus
// metrics. Nothing here touches hardware: a scrape only reads snapshots.
package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/scrape"
)

// Namespace prefixes every metric the exporter exports.
const Namespace = "gpulink"

// newDesc makes every Desc of the package, through scrape.NewDesc, which
// keeps what the text formats need of it.
func newDesc(subsystem, name, help string, labels ...string) *prometheus.Desc {
	return scrape.NewDesc(prometheus.BuildFQName(Namespace, subsystem, name), help, labels)
}

// out is what a render adds its series to: the samples of scrape.Rendered,
// with the helpers the collectors share (gauge, optGauge, ...).
type out struct{ *scrape.Samples }

// rendering adapts a collector's render to scrape.Rendered's.
func rendering[T any](render func(*out, T)) func(*scrape.Samples, T) {
	return func(s *scrape.Samples, data T) { render(&out{s}, data) }
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func itoa(i int) string { return strconv.Itoa(i) }

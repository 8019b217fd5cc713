// Package collector renders the sources' latest snapshots as Prometheus
// metrics. Nothing here touches hardware: a scrape only reads snapshots.
package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric the exporter exports.
const Namespace = "gpulink"

func newDesc(subsystem, name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, subsystem, name), help, labels, nil)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func itoa(i int) string { return strconv.Itoa(i) }

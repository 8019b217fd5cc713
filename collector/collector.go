// Package collector renders the sources' latest snapshots as Prometheus
// metrics. Nothing here touches hardware: a scrape only reads snapshots.
package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric the exporter exports.
const Namespace = "gpulink"

// newDesc makes every Desc of the package, and keeps what the text formats
// need of it (see expose.go).
func newDesc(subsystem, name, help string, labels ...string) *prometheus.Desc {
	fqName := prometheus.BuildFQName(Namespace, subsystem, name)
	d := prometheus.NewDesc(fqName, help, labels, nil)
	families.Store(d, newFamily(fqName, help, labels))
	return d
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func itoa(i int) string { return strconv.Itoa(i) }

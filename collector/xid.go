package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
)

// XIDCollector renders the XIDs the watcher has counted. The cardinality is
// bounded by GPUs times the XID codes actually seen.
type XIDCollector struct {
	counts interface{ Counts() []nvml.XIDCount }
	ids    interface {
		Identities() []nvml.Identity
	}
	events, total, last *prometheus.Desc
}

// NewXIDCollector renders w's counts, labelled with the GPUs the reader
// found.
func NewXIDCollector(w interface{ Counts() []nvml.XIDCount }, ids interface{ Identities() []nvml.Identity }) *XIDCollector {
	return &XIDCollector{counts: w, ids: ids,
		events: gpuDesc("gpu", "xid_events_total",
			"XID errors of any code; present from 0 for every GPU, so increase() sees the first one."),
		total: gpuDesc("gpu", "xid_errors_total", "XID errors reported by the driver, by XID code.", "xid"),
		last:  gpuDesc("gpu", "xid_last_seen_timestamp_seconds", "Unix time this XID was last seen.", "xid"),
	}
}

// Describe implements prometheus.Collector.
func (c *XIDCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.total
	ch <- c.last
}

// Collect implements prometheus.Collector.
func (c *XIDCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.counts.Counts()
	ids := c.ids.Identities()
	perGPU := make([]uint64, len(ids))
	for _, x := range counts {
		if x.GPU >= 0 && x.GPU < len(ids) {
			perGPU[x.GPU] += x.Count
		}
	}
	for i, id := range ids {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(perGPU[i]),
			itoa(id.Index), id.UUID, id.PCIBusID)
	}
	for _, x := range counts {
		// An event NVML could not tie to a GPU keeps empty GPU labels.
		labels := []string{"", "", ""}
		if x.GPU >= 0 {
			labels[0] = itoa(x.GPU)
			if x.GPU < len(ids) {
				labels[1], labels[2] = ids[x.GPU].UUID, ids[x.GPU].PCIBusID
			}
		}
		code := strconv.FormatUint(x.XID, 10)
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.CounterValue, float64(x.Count), append(labels, code)...)
		ch <- prometheus.MustNewConstMetric(c.last, prometheus.GaugeValue,
			float64(x.LastSeen.UnixNano())/1e9, append(labels, code)...)
	}
}

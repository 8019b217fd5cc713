// Package latency sums up latencies the one way every bench tool reports
// them, so that a p99 from scrapebench and one from tracelat over the
// same scrapes are the same number. Standard library only: scrapebench
// builds without cgo for machines without Go.
package latency

import (
	"math"
	"slices"
	"time"
)

// Percentile is the nearest-rank percentile p (in (0, 1]) of sorted
// durations: the smallest that at least p of them do not exceed. sorted
// must not be empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// Spread is the usual summary of a set of latencies.
type Spread struct {
	P50, P90, P99, Max, Mean time.Duration
}

// SpreadOf sums up ds, which it sorts in place; the zero Spread when ds is
// empty.
func SpreadOf(ds []time.Duration) Spread {
	if len(ds) == 0 {
		return Spread{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Spread{P50: Percentile(ds, 0.50), P90: Percentile(ds, 0.90), P99: Percentile(ds, 0.99),
		Max: ds[len(ds)-1], Mean: sum / time.Duration(len(ds))}
}

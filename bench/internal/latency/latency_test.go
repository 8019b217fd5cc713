package latency

import (
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	// 1..100 ms: the p-th percentile of n=100 is the p-th value.
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := SpreadOf(ds)
	want := Spread{P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond,
		Max: 100 * time.Millisecond, Mean: 50500 * time.Microsecond}
	if s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	// Nearest rank of a few: p99 of 10 is the largest, p50 of 3 the middle.
	ten := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if got := Percentile(ten, 0.99); got != 10 {
		t.Errorf("p99 of 10: %d", got)
	}
	if got := Percentile([]time.Duration{1, 2, 3}, 0.5); got != 2 {
		t.Errorf("p50 of 3: %d", got)
	}
	if got := Percentile([]time.Duration{7}, 0.01); got != 7 {
		t.Errorf("p1 of one: %d", got)
	}
	if (SpreadOf(nil) != Spread{}) {
		t.Error("spread of none")
	}
}

//go:build gpu

package nvml

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"
)

// This file uses only what the reader had before its tiers (NewReader,
// Sample, realReader), so that it can be copied into an older tree to
// measure the same thing there.

// cpuTime is this process's user and system CPU time so far.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sampleCost takes n samples with r one after the other and logs the wall
// time per sample (median, p90, max) and the CPU time per sample (the
// process's getrusage over all n, divided by n). It returns the median and
// the CPU per sample.
func sampleCost(t *testing.T, name string, r *Reader, n int) (median, cpu time.Duration) {
	t.Helper()
	walls := make([]time.Duration, 0, n)
	cpu0 := cpuTime(t)
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := r.Sample(context.Background()); err != nil {
			t.Errorf("%s sample %d: %v", name, i, err)
		}
		walls = append(walls, time.Since(start))
	}
	cpu = (cpuTime(t) - cpu0) / time.Duration(n)
	slices.Sort(walls)
	median = walls[n/2]
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	t.Logf("%-40s %d samples: wall median %7.2f ms  p90 %7.2f ms  max %7.2f ms;  CPU %7.2f ms per sample",
		name, n, ms(median), ms(walls[n*9/10]), ms(walls[n-1]), ms(cpu))
	return median, cpu
}

// TestRealSampleCost times 50 samples of the reader as NewReader makes it,
// after two samples that discover the GPUs and read what is read once.
func TestRealSampleCost(t *testing.T) {
	r := realReader(t)
	for i := 0; i < 2; i++ {
		if _, err := r.Sample(context.Background()); err != nil {
			t.Fatalf("warm-up sample: %v", err)
		}
	}
	sampleCost(t, "NewReader defaults", r, 50)
}

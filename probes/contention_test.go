package probes

import (
	"slices"
	"testing"
)

// Contention and Result's spread are the probes' own: tested here, where
// the daemon's scheduler and the commands both take them from.

func TestContentionFor(t *testing.T) {
	var none *Contention
	if none.Contended() || none.For("") != nil || none.First() != "" {
		t.Error("nil contention")
	}
	c := &Contention{Peers: map[string][]string{"0000:28:00.0": {ContendedSampleSpread}, "0000:38:00.0": {ContendedUtilization, ContendedSampleSpread}}}
	if !c.Contended() || c.First() != ContendedUtilization || len(c.For("")) != 0 {
		t.Errorf("peers only: contended %v first %q for host %v", c.Contended(), c.First(), c.For(""))
	}
	c.Reasons = []string{ContendedSampleSpread}
	if got := c.For("0000:38:00.0"); !slices.Equal(got, []string{ContendedUtilization, ContendedSampleSpread}) {
		t.Errorf("for peer 2: %v", got)
	}
	if got := c.For("0000:3A:00.0"); !slices.Equal(got, []string{ContendedSampleSpread}) {
		t.Errorf("for an unshared peer: %v", got)
	}
	if c.First() != ContendedSampleSpread {
		t.Errorf("first %q: the GPU's own reason comes first", c.First())
	}
}

func TestResultSpread(t *testing.T) {
	for _, tc := range []struct {
		r      Result
		spread float64
		noisy  bool
	}{
		{Result{Probe: HostToDevice, BytesPerSecond: 50, SampleMin: 49.9, SampleMax: 50.2}, 0.006, false},
		{Result{Probe: DeviceToHost, BytesPerSecond: 50, SampleMin: 40, SampleMax: 55.5}, 0.31, true},
		{Result{Probe: DeviceLocalCopy, BytesPerSecond: 100, SampleMin: 95, SampleMax: 105}, 0.1, false}, // at the threshold
		{Result{Probe: PeerBidirectional, BytesPerSecond: 100, SampleMin: 80, SampleMax: 101}, 0.21, true},
		{Result{Probe: HostToDevice, BytesPerSecond: 50}, 0, false}, // samples unknown (an older child)
		{Result{Probe: HostToDevice, BytesPerSecond: 50, SampleMin: 10, SampleMax: 60, Error: "x"}, 1, false},
		{Result{Probe: HostLatency, Seconds: 1e-6, SampleMin: 0.5e-6, SampleMax: 2e-6}, 1.5, false},
	} {
		if got := tc.r.Spread(); got < tc.spread-1e-9 || got > tc.spread+1e-9 {
			t.Errorf("%+v: spread %g, want %g", tc.r, got, tc.spread)
		}
		if got := tc.r.Noisy(); got != tc.noisy {
			t.Errorf("%+v: noisy %v", tc.r, got)
		}
	}
}

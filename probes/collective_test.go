package probes

import "testing"

// The factors nccl-tests' PERFORMANCE.md gives, at 2 and 8 ranks.
func TestBusFactor(t *testing.T) {
	for _, tc := range []struct {
		c    Collective
		n    int
		want float64
	}{
		{AllReduce, 2, 1}, {AllReduce, 8, 1.75},
		{AllGather, 2, 0.5}, {AllGather, 8, 0.875},
		{ReduceScatter, 8, 0.875}, {AllToAll, 8, 0.875},
		{SendRecv, 2, 1}, {SendRecv, 8, 1},
		{AllReduce, 1, 0}, {AllReduce, 0, 0}, {Collective("broadcast"), 8, 0},
	} {
		if got := BusFactor(tc.c, tc.n); got != tc.want {
			t.Errorf("BusFactor(%s, %d) = %g, want %g", tc.c, tc.n, got, tc.want)
		}
	}
}

package numa_test

import (
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/numa"
)

func cpus(t *testing.T, s string) numa.CPUSet {
	t.Helper()
	c, err := numa.ParseCPUList(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Judge over typed values, each rule alone; internal/process's tests
// judge processes read from fixture trees.
func TestJudge(t *testing.T) {
	two := &numa.Topology{Nodes: []numa.NUMANode{
		{ID: 0, CPUs: cpus(t, "0-55,112-167")}, {ID: 1, CPUs: cpus(t, "56-111,168-223")}, {ID: 2}, // node 2: memory only
	}}
	one := &numa.Topology{Nodes: []numa.NUMANode{{ID: 0, CPUs: cpus(t, "0-31")}}}
	some := func(s string) sampler.Opt[numa.CPUSet] { return sampler.Some(cpus(t, s)) }
	mem := sampler.Some[map[int]uint64]
	none := sampler.Opt[bool]{}
	for _, tc := range []struct {
		name    string
		topo    *numa.Topology
		node    int
		allowed sampler.Opt[numa.CPUSet]
		threads []int
		memory  sampler.Opt[map[int]uint64]
		want    sampler.Opt[bool]
	}{
		{"local", two, 0, some("0-55"), []int{1, 2}, mem(map[int]uint64{0: 10}), sampler.Some(false)},
		{"memory mostly remote", two, 0, some("0-55"), []int{1}, mem(map[int]uint64{0: 49, 1: 51}), sampler.Some(true)},
		{"memory half remote", two, 0, some("0-55"), []int{1}, mem(map[int]uint64{0: 50, 1: 50}), sampler.Some(false)},
		{"threads mostly remote", two, 0, some("0-223"), []int{1, 60, 61}, mem(map[int]uint64{0: 1}), sampler.Some(true)},
		{"CPUs mostly remote", two, 0, some("0,56-111"), []int{0}, mem(map[int]uint64{0: 1}), sampler.Some(true)},
		{"no local CPU", two, 1, some("0-55"), nil, sampler.Opt[map[int]uint64]{}, sampler.Some(true)},
		{"unpinned", two, 0, some("0-223"), []int{1, 60}, mem(map[int]uint64{0: 1}), sampler.Some(false)},
		{"memory unread", two, 0, some("0-55"), []int{1}, sampler.Opt[map[int]uint64]{}, none},
		{"threads unread", two, 0, some("0-55"), nil, mem(map[int]uint64{0: 1}), none},
		{"GPU node unknown", two, -1, some("56-111"), []int{60}, mem(map[int]uint64{1: 1}), none},
		{"memory-only node", two, 2, some("0-55"), []int{1}, mem(map[int]uint64{2: 1}), none},
		{"no topology", nil, 0, some("56-111"), []int{60}, mem(map[int]uint64{1: 1}), none},
		{"one node", one, -1, some("0-31"), []int{7}, mem(map[int]uint64{0: 1}), sampler.Some(false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := numa.Judge(tc.topo, tc.node, tc.allowed, tc.threads, tc.memory)
			if v.Misaffine != tc.want {
				t.Errorf("misaffine %+v, want %+v (%+v)", v.Misaffine, tc.want, v)
			}
		})
	}
	// The ratios behind the verdict.
	v := numa.Judge(two, 0, some("0-223"), []int{1, 2, 57, 58, 113, 169}, mem(map[int]uint64{0: 55, 1: 45}))
	if v.RemoteCPURatio != sampler.Some(0.5) || v.RemoteThreadRatio != sampler.Some(0.5) ||
		v.RemoteMemoryRatio != sampler.Some(0.45) || v.NoLocalCPU != sampler.Some(false) {
		t.Errorf("ratios %+v", v)
	}
}

package numa

import "github.com/gpulink/gpulink_exporter/internal/sampler"

// MisaffineRatio is the share of a process's allowed CPUs, threads or
// resident memory that must sit off its GPU's NUMA node for the process to
// be called misaffine: more than half.
//
// A process is misaffine on a GPU when more than MisaffineRatio of its
// allowed CPUs (Cpus_allowed_list), of its threads (by the CPU each last
// ran on) or of its resident memory (numa_maps) is off the GPU's node, or
// when none of its allowed CPUs is on that node. It is not misaffine when
// all four are known and none holds; otherwise (a value could not be read)
// the verdict is unknown, unless a known one already holds.
//
// An unpinned process on a 2-socket machine has exactly half its allowed
// CPUs remote and is not misaffine by that alone; one pinned to the far
// socket has all of them remote, and one whose memory was first touched
// from the far socket has most of its pages there. On a machine with one
// NUMA node (or none: a kernel without NUMA) nothing is remote, whatever
// numa_node says; on one with more, a GPU whose node is unknown leaves
// every ratio and the verdict unknown: node 0 is never assumed.
const MisaffineRatio = 0.5

// Verdict is how far a process sits from its GPU's NUMA node.
type Verdict struct {
	// RemoteCPURatio is the share of its allowed CPUs that are not on the
	// GPU's node; RemoteThreadRatio the share of its threads that last ran
	// off that node; RemoteMemoryRatio the share of its resident bytes on
	// other nodes. Absent where unknown.
	RemoteCPURatio, RemoteThreadRatio, RemoteMemoryRatio sampler.Opt[float64]
	// NoLocalCPU is true when none of its allowed CPUs is on the GPU's
	// node.
	NoLocalCPU sampler.Opt[bool]
	// Misaffine is the verdict (see MisaffineRatio); absent when it
	// cannot be judged.
	Misaffine sampler.Opt[bool]
}

// Judge compares a process's placement with its GPU's node, gpuNode (-1
// when unknown), by the rule MisaffineRatio gives: allowed is where the
// process may run (Cpus_allowed_list), threadCPUs the CPU each of its
// threads last ran on (empty when none could be read), memoryByNode its
// resident bytes by node. topo nil (no topology yet) judges nothing.
func Judge(topo *Topology, gpuNode int, allowed sampler.Opt[CPUSet], threadCPUs []int, memoryByNode sampler.Opt[map[int]uint64]) Verdict {
	var v Verdict
	if topo == nil {
		return v
	}
	if len(topo.Nodes) <= 1 {
		zero := sampler.Some(0.0)
		if allowed.Valid && allowed.V.Count() > 0 {
			v.RemoteCPURatio = zero
			v.NoLocalCPU = sampler.Some(false)
		}
		if len(threadCPUs) > 0 {
			v.RemoteThreadRatio = zero
		}
		if memoryByNode.Valid && memTotal(memoryByNode.V) > 0 {
			v.RemoteMemoryRatio = zero
		}
		v.Misaffine = sampler.Some(false)
		return v
	}
	node := topo.Node(gpuNode)
	if gpuNode < 0 || node == nil {
		return v
	}
	// A node without CPUs (memory only) gives nothing to be near.
	if node.CPUs.Count() > 0 {
		if allowed.Valid {
			if n := allowed.V.Count(); n > 0 {
				local := allowed.V.Intersect(node.CPUs).Count()
				v.RemoteCPURatio = sampler.Some(float64(n-local) / float64(n))
				v.NoLocalCPU = sampler.Some(local == 0)
			}
		}
		if n := len(threadCPUs); n > 0 {
			remote := 0
			for _, c := range threadCPUs {
				if !node.CPUs.Contains(c) {
					remote++
				}
			}
			v.RemoteThreadRatio = sampler.Some(float64(remote) / float64(n))
		}
	}
	if memoryByNode.Valid {
		if total := memTotal(memoryByNode.V); total > 0 {
			remote := total - float64(memoryByNode.V[gpuNode])
			v.RemoteMemoryRatio = sampler.Some(max(0, remote/total))
		}
	}
	v.Misaffine = v.misaffine()
	return v
}

// misaffine ORs the four tests, any of which may be unknown.
func (v Verdict) misaffine() sampler.Opt[bool] {
	known := true
	for _, r := range []sampler.Opt[float64]{v.RemoteCPURatio, v.RemoteThreadRatio, v.RemoteMemoryRatio} {
		switch {
		case !r.Valid:
			known = false
		case r.V > MisaffineRatio:
			return sampler.Some(true)
		}
	}
	switch {
	case !v.NoLocalCPU.Valid:
		known = false
	case v.NoLocalCPU.V:
		return sampler.Some(true)
	}
	if !known {
		return sampler.Opt[bool]{}
	}
	return sampler.Some(false)
}

// memTotal sums resident bytes, in floating point: fixture values may
// be large enough to overflow a sum of integers.
func memTotal(m map[int]uint64) float64 {
	var s float64
	for _, v := range m {
		s += float64(v)
	}
	return s
}

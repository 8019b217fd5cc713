package probes

import (
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/numa"
)

// Expectations reads what a path should give from the latest samples of
// the sources it joins: the NVML snapshot, the PCIe topology and the NICs.
// Any of the three may be unset, or give nil, and what only it would tell
// is then unknown (0). The daemon, the simulated node's tests and the
// collectors' tests join the samples through it, so that every annotated
// round is worked out the same way.
type Expectations struct {
	GPUs     func() *nvml.Snapshot
	Topology func() *numa.Topology
	NICs     func() *nic.Snapshot
}

func (e Expectations) gpus() *nvml.Snapshot {
	if e.GPUs == nil {
		return nil
	}
	return e.GPUs()
}

func (e Expectations) topology() *numa.Topology {
	if e.Topology == nil {
		return nil
	}
	return e.Topology()
}

func (e Expectations) nics() *nic.Snapshot {
	if e.NICs == nil {
		return nil
	}
	return e.NICs()
}

// Annotate sets what each result of g should give (PathFor).
func (e Expectations) Annotate(g *GPURound) {
	PathFor(e.gpus(), e.topology(), g.PCIBusID).Annotate(g)
}

// AnnotateCollective sets what each result of r should give and returns
// the transport each ordered pair of its GPUs should use
// (CollectivePathFor).
func (e Expectations) AnnotateCollective(r *CollectiveRound) []PairTransport {
	return CollectivePathFor(e.gpus(), e.topology(), r.GPUs).Annotate(r)
}

// NearestNICRate is what the rail NICs of the GPU at gpu carry to another
// node (NearestNICRate).
func (e Expectations) NearestNICRate(gpu string) float64 {
	return NearestNICRate(e.topology(), e.nics(), gpu)
}

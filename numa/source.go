package numa

import (
	"context"
)

// TopologyReader is the topology source: NUMA nodes, their counters and
// the PCIe tree with each link's state, read again every sample since
// links retrain and counters move.
type TopologyReader struct {
	FS FS
}

// Sample implements sampler.Source.
func (r *TopologyReader) Sample(ctx context.Context) (*Topology, error) {
	return r.FS.Topology()
}

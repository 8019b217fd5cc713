package numa

import (
	"context"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
)

// TopologyReader is the topology source: NUMA nodes, their counters and
// the PCIe tree with each link's state, read again every sample since
// links retrain and counters move.
type TopologyReader struct {
	FS hostfs.Root
}

// Sample implements sampler.Source.
func (r *TopologyReader) Sample(ctx context.Context) (*Topology, error) {
	return ReadTopology(r.FS)
}

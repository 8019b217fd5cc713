package numa

import (
	"context"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// TopologyReader is the topology source: NUMA nodes, their counters and
// the PCIe tree with each link's state, read again every sample since
// links retrain and counters move.
type TopologyReader struct {
	FS hostfs.Root
	// CuFileConfig is where cuFile's configuration is read from
	// (CuFileConfigPath); empty leaves it unread.
	CuFileConfig string
}

// Sample implements sampler.Source.
func (r *TopologyReader) Sample(ctx context.Context) (*Topology, error) {
	topo, err := ReadTopology(r.FS)
	if topo == nil || r.CuFileConfig == "" {
		return topo, err
	}
	var t sampler.Tally
	t.Merge(err)
	topo.GDS.Config, err = ReadCuFileConfig(r.CuFileConfig)
	t.Add(err)
	return topo, t.Err()
}

// CuFileConfigPath is the configuration file cuFile reads, as it finds
// it: $CUFILE_ENV_PATH_JSON, else /etc/cufile.json.
func CuFileConfigPath(getenv func(string) string) string {
	if p := getenv(CuFileConfigEnv); p != "" {
		return p
	}
	return DefaultCuFileConfig
}

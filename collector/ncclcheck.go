package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/ncclcheck"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
)

// NCCLCheckCollector renders the nccl source's report: what an NCCL
// session between this node and another would use (the library, the
// network plugin) and lack, and what network and GPUDirect RDMA the
// node's NICs call for, beside which the channels NCCL actually made
// (gpulink_collective_channels, gpulink_node_probe_channels) are judged.
type NCCLCheckCollector struct {
	scrape.Rendered[*ncclcheck.Report]
	ids interface{ Identities() []nvml.Identity }
	d   ncclCheckDescs
}

type ncclCheckDescs struct {
	library, expected, ready, check *prometheus.Desc
}

// NewNCCLCheckCollector renders the snapshots of src; ids (may be nil)
// gives each GPU's NVML index.
func NewNCCLCheckCollector(src scrape.Source[*ncclcheck.Report], ids interface{ Identities() []nvml.Identity }) *NCCLCheckCollector {
	c := &NCCLCheckCollector{ids: ids, d: ncclCheckDescs{
		library: newDesc("collective", "library_info",
			"The NCCL library the collective child would load and the network plugin NCCL would take beside it; value 1. path is the file "+
				"found for --nccl.library (empty where the loader alone would find it, or nothing would), version its NCCL version (empty until "+
				"known), network_plugin the libnccl-net file NCCL_NET_PLUGIN names or NCCL looks for (empty: NCCL's own IB and Socket transports).",
			"version", "path", "network_plugin"),
		expected: newDesc("collective", "expected_network_info",
			"The network NCCL should take between this GPU and other nodes, from the node's NICs: IB, RoCE or EFA where an RDMA port of that "+
				"kind is up (the GPU's rail NICs first), else Socket; gdr 1 where GPUDirect RDMA should carry it (the rail NIC PIX or PXB from "+
				"the GPU, nvidia_peermem loaded or dma-buf offered). Value 1. Compare with the network and gdr labels of the channels.",
			"gpu", "pci_bus_id", "network", "gdr"),
		ready: newDesc("collective", "network_ready",
			"1 when an NCCL session between this node and another could run and use the RDMA the node's NICs offer (every check of "+
				"gpulink_collective_network_check passes), 0 when not: `gpulink_exporter collectives --check` says why."),
		check: newDesc("collective", "network_check",
			"1 when a requirement of NCCL between nodes is met, 0 when it is missing: library (libnccl 2.14 or later found), network_plugin "+
				"(aws-ofi-nccl where the NICs are EFA), rdma_devices (/dev/infiniband/uverbs* visible where RDMA ports are up), memlock "+
				"(RLIMIT_MEMLOCK unlimited or CAP_IPC_LOCK where RDMA ports are up), gpudirect (not failed by this check; GPUDirect RDMA's own "+
				"series say more).",
			"check"),
	}}
	c.Init(src, rendering(c.render))
	return c
}

// Describe implements prometheus.Collector.
func (c *NCCLCheckCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.d.library, c.d.expected, c.d.ready, c.d.check} {
		ch <- d
	}
}

func (c *NCCLCheckCollector) render(o *out, r *ncclcheck.Report) {
	o.gauge(c.d.library, 1, r.Version, r.LibraryPath, r.Plugin)
	o.gauge(c.d.ready, boolFloat(r.Ready()))
	for _, check := range ncclcheck.Checks {
		o.gauge(c.d.check, boolFloat(r.Passed(check)), check)
	}
	index := map[string]int{}
	if c.ids != nil {
		for _, id := range c.ids.Identities() {
			index[id.PCIBusID] = id.Index
		}
	}
	for _, e := range r.Networks {
		gpu := ""
		if i, ok := index[e.GPU]; ok {
			gpu = strconv.Itoa(i)
		}
		gdr := "0"
		if e.GDR {
			gdr = "1"
		}
		o.gauge(c.d.expected, 1, gpu, e.GPU, e.Network, gdr)
	}
}

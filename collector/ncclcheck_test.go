package collector_test

import (
	"testing"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/ncclcheck"
	"github.com/gpulink/gpulink_exporter/internal/scrape/scrapetest"
	"github.com/gpulink/gpulink_exporter/probes"
)

// A node whose NICs call for IB with GPUDirect RDMA on GPU 0 and sockets
// on a GPU NVML does not know, in a container without /dev/infiniband.
func TestNCCLCheckMetrics(t *testing.T) {
	r := &ncclcheck.Report{LibraryPath: "/usr/lib/x86_64-linux-gnu/libnccl.so.2", Version: "2.27.3",
		Networks: []probes.GPUNetwork{{GPU: "0000:18:00.0", Network: "IB", GDR: true}, {GPU: "0000:2a:00.0", Network: "Socket"}},
		Items: []ncclcheck.Item{{Check: ncclcheck.CheckLibrary, Status: ncclcheck.StatusOK},
			{Check: ncclcheck.CheckRDMADevices, Status: ncclcheck.StatusMissing}}}
	c := collector.NewNCCLCheckCollector(fixed(r), identities{{Index: 0, PCIBusID: "0000:18:00.0"}})
	scrapetest.CheckText(t, c)
	got := gathered(t, c)
	want := map[string]float64{
		"gpulink_collective_library_info" + labels("network_plugin", "", "path", "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "version", "2.27.3"): 1,
		"gpulink_collective_expected_network_info" + labels("gdr", "1", "gpu", "0", "network", "IB", "pci_bus_id", "0000:18:00.0"):              1,
		"gpulink_collective_expected_network_info" + labels("gdr", "0", "gpu", "", "network", "Socket", "pci_bus_id", "0000:2a:00.0"):           1,
		"gpulink_collective_network_ready{}":                                   0,
		"gpulink_collective_network_check" + labels("check", "library"):        1,
		"gpulink_collective_network_check" + labels("check", "network_plugin"): 1,
		"gpulink_collective_network_check" + labels("check", "rdma_devices"):   0,
		"gpulink_collective_network_check" + labels("check", "memlock"):        1,
		"gpulink_collective_network_check" + labels("check", "gpudirect"):      1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d series, want %d: %v", len(got), len(want), got)
	}
	lintClean(t, c)
}

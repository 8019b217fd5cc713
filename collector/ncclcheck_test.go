package collector_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/ncclcheck"
)

// A node whose NICs call for IB with GPUDirect RDMA on GPU 0 and sockets
// on a GPU NVML does not know, in a container without /dev/infiniband.
func TestNCCLCheckExposition(t *testing.T) {
	r := &ncclcheck.Report{LibraryPath: "/usr/lib/x86_64-linux-gnu/libnccl.so.2", Version: "2.27.3",
		Networks: []ncclcheck.GPUNetwork{{GPU: "0000:18:00.0", Network: "IB", GDR: true}, {GPU: "0000:2a:00.0", Network: "Socket"}},
		Items: []ncclcheck.Item{{Check: ncclcheck.CheckLibrary, Status: ncclcheck.StatusOK},
			{Check: ncclcheck.CheckRDMADevices, Status: ncclcheck.StatusMissing}}}
	c := collector.NewNCCLCheckCollector(fixed(r), identities{{Index: 0, PCIBusID: "0000:18:00.0"}})
	collector.CheckText(t, c)
	help := func(_ *testing.T, c prometheus.Collector, name string) string {
		ch := make(chan *prometheus.Desc, 8)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			if m := fqName.FindStringSubmatch(d.String()); m != nil && m[1] == name {
				h := regexp.MustCompile(`help: "((?:[^"\\]|\\.)*)"`).FindStringSubmatch(d.String())
				u, _ := strconv.Unquote(`"` + h[1] + `"`)
				return u
			}
		}
		t.Fatalf("no %s", name)
		return ""
	}
	want := `# HELP gpulink_collective_expected_network_info ` + help(t, c, "gpulink_collective_expected_network_info") + `
# TYPE gpulink_collective_expected_network_info gauge
gpulink_collective_expected_network_info{gdr="0",gpu="",network="Socket",pci_bus_id="0000:2a:00.0"} 1
gpulink_collective_expected_network_info{gdr="1",gpu="0",network="IB",pci_bus_id="0000:18:00.0"} 1
# HELP gpulink_collective_library_info ` + help(t, c, "gpulink_collective_library_info") + `
# TYPE gpulink_collective_library_info gauge
gpulink_collective_library_info{network_plugin="",path="/usr/lib/x86_64-linux-gnu/libnccl.so.2",version="2.27.3"} 1
# HELP gpulink_collective_network_check ` + help(t, c, "gpulink_collective_network_check") + `
# TYPE gpulink_collective_network_check gauge
gpulink_collective_network_check{check="gpudirect"} 1
gpulink_collective_network_check{check="library"} 1
gpulink_collective_network_check{check="memlock"} 1
gpulink_collective_network_check{check="network_plugin"} 1
gpulink_collective_network_check{check="rdma_devices"} 0
# HELP gpulink_collective_network_ready ` + help(t, c, "gpulink_collective_network_ready") + `
# TYPE gpulink_collective_network_ready gauge
gpulink_collective_network_ready 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

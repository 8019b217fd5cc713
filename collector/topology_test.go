package collector_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/numa"
)

// identities stands in for the NVML reader's GPU list.
type identities []nvml.Identity

func (ids identities) Identities() []nvml.Identity { return ids }

func fixtureFS(t *testing.T, profile string) hostfs.Root {
	root := machine.Load(t, profile)
	return hostfs.Under(root)
}

func topologyCollector(t *testing.T, fs hostfs.Root, ids identities) *collector.TopologyCollector {
	t.Helper()
	return topologyCollectorWith(t, fs, "", ids)
}

// topologyCollectorWith reads cuFile's configuration at cufileConfig too.
func topologyCollectorWith(t *testing.T, fs hostfs.Root, cufileConfig string, ids identities) *collector.TopologyCollector {
	t.Helper()
	s := sampler.New[*numa.Topology]("topology", &numa.TopologyReader{FS: fs, CuFileConfig: cufileConfig}, sampler.Options{Interval: time.Hour})
	s.SampleOnce(context.Background())
	if s.Latest() == nil {
		t.Fatalf("no topology sample: %+v", s.Status())
	}
	return collector.NewTopologyCollector(s, ids)
}

// The borrowed VM, as it is: two GPUs straight on the root bus, numa_node
// -1, one node. Every value here was seen there.
func TestTopologyMetricsH200VM(t *testing.T) {
	c := topologyCollector(t, fixtureFS(t, "h200-vm"), identities{
		{Index: 0, UUID: "GPU-a", PCIBusID: "0000:00:06.0"},
		{Index: 1, UUID: "GPU-b", PCIBusID: "0000:00:07.0"},
	})
	g0 := func(kv ...string) string {
		return labels(append([]string{"gpu", "0", "pci_bus_id", "0000:00:06.0", "uuid", "GPU-a"}, kv...)...)
	}
	g1 := func(kv ...string) string {
		return labels(append([]string{"gpu", "1", "pci_bus_id", "0000:00:07.0", "uuid", "GPU-b"}, kv...)...)
	}
	want := `
# HELP gpulink_numa_node_distance Firmware (SLIT) distance from the node to another; 10 is local, and remote memory costs about distance/10 times local.
# TYPE gpulink_numa_node_distance gauge
gpulink_numa_node_distance{numa_node="0",to_numa_node="0"} 10
# HELP gpulink_numa_node_hit_pages_total numastat numa_hit: pages allocated, by the kernel's accounting.
# TYPE gpulink_numa_node_hit_pages_total counter
gpulink_numa_node_hit_pages_total{numa_node="0"} 554609
# HELP gpulink_numa_node_memory_total_bytes Memory of the NUMA node.
# TYPE gpulink_numa_node_memory_total_bytes gauge
gpulink_numa_node_memory_total_bytes{numa_node="0"} 4.927766528e+09
# HELP gpulink_pcie_link_width Current lane count of the link above the device.
# TYPE gpulink_pcie_link_width gauge
gpulink_pcie_link_width{pci_bus_id="0000:00:06.0"} 16
gpulink_pcie_link_width{pci_bus_id="0000:00:07.0"} 16
# HELP gpulink_topology_gpu_host_bandwidth_bytes_per_second What host<->GPU copies can reach at most, one direction: the slowest PCIe hop between GPU and CPU at its current (state=current) or best supported (state=max) speed and width.
# TYPE gpulink_topology_gpu_host_bandwidth_bytes_per_second gauge
gpulink_topology_gpu_host_bandwidth_bytes_per_second` + g0("state", "current") + ` 6.301538461538461e+10
gpulink_topology_gpu_host_bandwidth_bytes_per_second` + g0("state", "max") + ` 6.301538461538461e+10
gpulink_topology_gpu_host_bandwidth_bytes_per_second` + g1("state", "current") + ` 6.301538461538461e+10
gpulink_topology_gpu_host_bandwidth_bytes_per_second` + g1("state", "max") + ` 6.301538461538461e+10
# HELP gpulink_topology_gpu_numa_info Where the GPU sits: sysfs numa_node (empty when unknown), the NUMA affinity nvidia-smi topo -m prints, and its local CPUs; value 1.
# TYPE gpulink_topology_gpu_numa_info gauge
gpulink_topology_gpu_numa_info` + g0("cpu_affinity", "0-31", "numa_affinity", "0", "numa_node", "") + ` 1
gpulink_topology_gpu_numa_info` + g1("cpu_affinity", "0-31", "numa_affinity", "0", "numa_node", "") + ` 1
# HELP gpulink_topology_gpu_pair_pcie_path PCIe path class between two GPUs, whatever NVLink joins them (label path); the value is NVML's level, 10 PIX ... 50 SYS.
# TYPE gpulink_topology_gpu_pair_pcie_path gauge
gpulink_topology_gpu_pair_pcie_path{gpu="0",path="PHB",pci_bus_id="0000:00:06.0",peer_gpu="1",peer_pci_bus_id="0000:00:07.0"} 30
gpulink_topology_gpu_pair_pcie_path{gpu="1",path="PHB",pci_bus_id="0000:00:07.0",peer_gpu="0",peer_pci_bus_id="0000:00:06.0"} 30
# HELP gpulink_topology_gpu_nearest_nic_path Path class to the GPU's nearest NIC as NVML's level (10 PIX ... 50 SYS); 50 means every NIC is across the socket interconnect.
# TYPE gpulink_topology_gpu_nearest_nic_path gauge
gpulink_topology_gpu_nearest_nic_path` + g0("path", "PHB") + ` 30
gpulink_topology_gpu_nearest_nic_path` + g1("path", "PHB") + ` 30
# HELP gpulink_topology_uplink_gpus GPUs behind an uplink to the CPU.
# TYPE gpulink_topology_uplink_gpus gauge
gpulink_topology_uplink_gpus{uplink_pci_bus_id="0000:00:06.0"} 1
gpulink_topology_uplink_gpus{uplink_pci_bus_id="0000:00:07.0"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"gpulink_numa_node_distance", "gpulink_numa_node_hit_pages_total", "gpulink_numa_node_memory_total_bytes",
		"gpulink_pcie_link_width", "gpulink_topology_gpu_host_bandwidth_bytes_per_second",
		"gpulink_topology_gpu_numa_info", "gpulink_topology_gpu_pair_pcie_path",
		"gpulink_topology_gpu_nearest_nic_path", "gpulink_topology_uplink_gpus"); err != nil {
		t.Error(err)
	}
	lintClean(t, c)
}

// The faults a dashboard must show: switch B's uplink at x8 of x16 (and
// the two GPUs behind it at half host bandwidth), and GPUs 4-7 with every
// NIC across the socket interconnect.
func TestTopologyMetricsDGXFaults(t *testing.T) {
	fs := fixtureFS(t, "dgx-h100-faults")
	topo, _ := numa.ReadTopology(fs)
	var ids identities
	for i, addr := range []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
		"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"} {
		ids = append(ids, nvml.Identity{Index: i, UUID: "GPU-" + itoa(i), PCIBusID: addr})
	}
	c := topologyCollector(t, fs, ids)
	lintClean(t, c)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string, match map[string]string) (float64, bool) {
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
		next:
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if v, ok := match[l.GetName()]; ok && v != l.GetValue() {
						continue next
					}
				}
				return m.GetGauge().GetValue(), true
			}
		}
		return 0, false
	}
	uplink := topo.Uplink(topo.Device("0000:3a:00.0")).Address
	if w, _ := get("gpulink_pcie_link_width", map[string]string{"pci_bus_id": uplink}); w != 8 {
		t.Errorf("switch B uplink %s width %v, want 8", uplink, w)
	}
	if w, _ := get("gpulink_pcie_link_max_width", map[string]string{"pci_bus_id": uplink}); w != 16 {
		t.Errorf("switch B uplink %s max width %v, want 16", uplink, w)
	}
	for gpuIndex, want := range map[string]float64{"0": 10, "3": 10, "4": 50, "7": 50} {
		if v, ok := get("gpulink_topology_gpu_nearest_nic_path", map[string]string{"gpu": gpuIndex}); !ok || v != want {
			t.Errorf("GPU%s nearest NIC path %v, want %v", gpuIndex, v, want)
		}
	}
	if v, _ := get("gpulink_topology_gpu_host_bandwidth_bytes_per_second", map[string]string{"gpu": "2", "state": "current"}); v < 31.5e9 || v > 31.51e9 {
		t.Errorf("GPU2 current host bandwidth %v, want 31.5e9 (Gen5 x8)", v)
	}
	if v, _ := get("gpulink_topology_uplink_gpus", map[string]string{"uplink_pci_bus_id": uplink}); v != 2 {
		t.Errorf("GPUs behind %s: %v, want 2", uplink, v)
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

func TestTopologyGPUDirectMetrics(t *testing.T) {
	fs := fixtureFS(t, "dgx-h100")
	dev := func(a string) string { return filepath.Join(fs.Sys, "bus", "pci", "devices", a) }
	// As the DGX is modelled (peermem loaded, the proprietary driver, ACS
	// redirect off, IOMMU passthrough), with GPU 0's downstream port's
	// redirect on and its IOMMU group (GPUs 0 and 1) translating.
	port, err := os.Readlink(dev("0000:18:00.0"))
	if err != nil {
		t.Fatal(err)
	}
	parent := filepath.Base(filepath.Dir(port))
	usp := filepath.Base(filepath.Dir(filepath.Dir(port)))
	b, err := os.ReadFile(filepath.Join("..", "internal", "pciconfig", "testdata", "acs-redirect-on.bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		os.WriteFile(filepath.Join(dev(parent), "config"), b, 0o444),
		os.WriteFile(filepath.Join(dev("0000:18:00.0"), "iommu_group", "type"), []byte("DMA\n"), 0o444),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	c := topologyCollector(t, fs, identities{{Index: 0, UUID: "GPU-a", PCIBusID: "0000:18:00.0"}})
	want := `
# HELP gpulink_gpudirect_dmabuf_supported 1 if the kernel and the NVIDIA driver offer dma-buf for GPU memory, GPUDirect RDMA without nvidia_peermem: the driver's open kernel module, branch R515 or later, on Linux 5.12 or later; 0 if one of these is missing; absent where no NVIDIA driver is loaded.
# TYPE gpulink_gpudirect_dmabuf_supported gauge
gpulink_gpudirect_dmabuf_supported 0
# HELP gpulink_gpudirect_peermem_loaded 1 if the nvidia_peermem module (GPUDirect RDMA through the RDMA core) is loaded.
# TYPE gpulink_gpudirect_peermem_loaded gauge
gpulink_gpudirect_peermem_loaded 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"gpulink_gpudirect_peermem_loaded", "gpulink_gpudirect_dmabuf_supported"); err != nil {
		t.Error(err)
	}
	values := gatherByLabels(t, c)
	for series, want := range map[string]float64{
		`gpulink_pcie_acs_capable{pci_bus_id="` + parent + `"}`:                        1,
		`gpulink_pcie_acs_redirect{kind="request",pci_bus_id="` + parent + `"}`:        1,
		`gpulink_pcie_acs_redirect{kind="completion",pci_bus_id="` + parent + `"}`:     1,
		`gpulink_pcie_acs_redirect{kind="egress_control",pci_bus_id="` + parent + `"}`: 0,
		`gpulink_pcie_acs_capable{pci_bus_id="` + usp + `"}`:                           0,
		`gpulink_pcie_acs_capable{pci_bus_id="0000:17:01.0"}`:                          1,
		`gpulink_pcie_acs_redirect{kind="request",pci_bus_id="0000:17:01.0"}`:          0,
		`gpulink_iommu_translated{gpu="0",pci_bus_id="0000:18:00.0",uuid="GPU-a"}`:     1,
		`gpulink_iommu_translated{gpu="",pci_bus_id="0000:2a:00.0",uuid=""}`:           1,
		`gpulink_iommu_translated{gpu="",pci_bus_id="0000:3a:00.0",uuid=""}`:           0,
	} {
		if got, ok := values[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	// An upstream port has no ACS: nothing to say of redirect.
	for series := range values {
		if strings.HasPrefix(series, "gpulink_pcie_acs_redirect{") && strings.Contains(series, usp) {
			t.Errorf("%s exported for an upstream port without ACS", series)
		}
	}
	var acs, iommu int
	for series := range values {
		switch {
		case strings.HasPrefix(series, "gpulink_pcie_acs_capable{"):
			acs++
		case strings.HasPrefix(series, "gpulink_iommu_translated{"):
			iommu++
		}
	}
	if acs != 20 || iommu != 8 {
		t.Errorf("%d bridges with an ACS reading, %d GPUs with an IOMMU mode; want 20 (4 switches' upstream port and 4 downstream ports on GPU paths) and 8", acs, iommu)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// gatherByLabels collects c and returns every series' value by its name
// and sorted labels, as the text format writes them.
func gatherByLabels(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

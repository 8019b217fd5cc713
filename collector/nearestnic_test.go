package collector_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/numa"
)

// dgxIdentities are a DGX H100 tree's GPUs in NVML index order.
func dgxIdentities() identities {
	var ids identities
	for i, addr := range []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
		"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"} {
		ids = append(ids, nvml.Identity{Index: i, UUID: "GPU-" + itoa(i), PCIBusID: addr})
	}
	return ids
}

// nearestNICs gathers c and gives, per GPU index, "names path" of the
// nearest_nic (usable false) or nearest_usable_nic (true) series: the
// info series' device names in order, then the path series' label and
// value.
func nearestNICs(t *testing.T, cs []prometheus.Collector, usable bool) map[string]string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cs...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	prefix := "gpulink_topology_gpu_nearest_nic"
	if usable {
		prefix = "gpulink_topology_gpu_nearest_usable_nic"
	}
	names, paths := map[string][]string{}, map[string]string{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			switch f.GetName() {
			case prefix + "_info":
				names[l["gpu"]] = append(names[l["gpu"]], l["device"]+"/"+l["path"])
			case prefix + "_path":
				paths[l["gpu"]] = fmt.Sprintf("%s %g", l["path"], m.GetGauge().GetValue())
			}
		}
	}
	out := map[string]string{}
	for gpu, n := range names {
		slices.Sort(n)
		out[gpu] = strings.Join(n, ",") + " " + paths[gpu]
	}
	for gpu, p := range paths {
		if _, ok := out[gpu]; !ok {
			out[gpu] = " " + p
		}
	}
	return out
}

func nearestNICCollectors(t *testing.T, profile string) []prometheus.Collector {
	t.Helper()
	fs := fixtureFS(t, profile)
	topo := sampler.New[*numa.Topology]("topology", &numa.TopologyReader{FS: fs}, sampler.Options{Interval: time.Hour})
	topo.SampleOnce(context.Background())
	nics := sampler.New[*nic.Snapshot]("nic", &nic.Reader{FS: fs}, sampler.Options{Interval: time.Hour})
	nics.SampleOnce(context.Background())
	if topo.Latest() == nil || nics.Latest() == nil {
		t.Fatalf("%s: no topology or NIC sample", profile)
	}
	near := collector.NewNearestNICCollector(nics, topo, dgxIdentities())
	lintClean(t, near)
	return []prometheus.Collector{collector.NewTopologyCollector(topo, dgxIdentities()), near}
}

// Issue 37: two sockets, a PCIe switch per GPU pair, one ConnectX-7 per
// socket, and socket 1's (mlx5_6, PIX from GPUs 6 and 7) down. Its
// nearest NIC stays what the machine is built with; the nearest usable
// one is across the sockets for GPUs 4-7, and still mlx5_2 for GPUs 0-3.
func TestNearestUsableNICHidden(t *testing.T) {
	cs := nearestNICCollectors(t, "dgx-h100-two-nics-faults")
	wantNearest := map[string]string{
		"0": "mlx5_2/NODE NODE 40", "1": "mlx5_2/NODE NODE 40", "2": "mlx5_2/PIX PIX 10", "3": "mlx5_2/PIX PIX 10",
		"4": "mlx5_6/NODE NODE 40", "5": "mlx5_6/NODE NODE 40", "6": "mlx5_6/PIX PIX 10", "7": "mlx5_6/PIX PIX 10",
	}
	wantUsable := map[string]string{
		"0": "mlx5_2/NODE NODE 40", "1": "mlx5_2/NODE NODE 40", "2": "mlx5_2/PIX PIX 10", "3": "mlx5_2/PIX PIX 10",
		"4": "mlx5_2/SYS SYS 50", "5": "mlx5_2/SYS SYS 50", "6": "mlx5_2/SYS SYS 50", "7": "mlx5_2/SYS SYS 50",
	}
	if got := nearestNICs(t, cs, false); fmt.Sprint(got) != fmt.Sprint(wantNearest) {
		t.Errorf("nearest NICs\n got %v\nwant %v", got, wantNearest)
	}
	if got := nearestNICs(t, cs, true); fmt.Sprint(got) != fmt.Sprint(wantUsable) {
		t.Errorf("nearest usable NICs\n got %v\nwant %v", got, wantUsable)
	}
}

// On the healthy DGX every NIC is usable: the two series agree. On the
// faulty one, mlx5_3 (down) leaves GPUs 2 and 3 mlx5_2 alone (at half
// rate, but up), and GPUs 4-7, built with every NIC across the sockets,
// stay there.
func TestNearestUsableNICDGX(t *testing.T) {
	cs := nearestNICCollectors(t, "dgx-h100")
	if a, b := nearestNICs(t, cs, false), nearestNICs(t, cs, true); fmt.Sprint(a) != fmt.Sprint(b) || len(a) != 8 {
		t.Errorf("healthy DGX: nearest %v, usable %v", a, b)
	}
	got := nearestNICs(t, nearestNICCollectors(t, "dgx-h100-faults"), true)
	for gpu, want := range map[string]string{
		"0": "mlx5_0/PIX,mlx5_1/PIX PIX 10", "2": "mlx5_2/PIX PIX 10", "3": "mlx5_2/PIX PIX 10",
		"4": "mlx5_0/SYS,mlx5_1/SYS,mlx5_2/SYS,mlx5_4/SYS,mlx5_5/SYS,mlx5_6/SYS,mlx5_7/SYS,mlx5_8/SYS SYS 50",
	} {
		if got[gpu] != want {
			t.Errorf("dgx-h100-faults GPU%s nearest usable %q, want %q", gpu, got[gpu], want)
		}
	}
}

// Without a topology sample the join renders nothing.
func TestNearestUsableNICWithoutTopology(t *testing.T) {
	fs := fixtureFS(t, "dgx-h100")
	nics := sampler.New[*nic.Snapshot]("nic", &nic.Reader{FS: fs}, sampler.Options{Interval: time.Hour})
	nics.SampleOnce(context.Background())
	c := collector.NewNearestNICCollector(nics, (*sampler.Sampler[*numa.Topology])(nil), nil)
	if got := nearestNICs(t, []prometheus.Collector{c}, true); len(got) != 0 {
		t.Errorf("without a topology: %v", got)
	}
}

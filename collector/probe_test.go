package collector_test

import (
	"maps"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/scrape/scrapetest"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

const (
	probePeer     = "0000:00:07.0"
	probeStranger = "0000:00:08.0"
	probeSize     = 64 << 20
	chaseSize     = 2 << 20
)

func nodePtr(n int) *int { return &n }

// probeRound is a round of the borrowed H200 pair's GPU 0, with figures
// near what it measured, one failed result and one result whose path is
// not known.
func probeRound() *probes.GPURound {
	bw := func(k probes.Kind, dir, peer string, node *int, v, expected float64) probes.Result {
		return probes.Result{Probe: k, Direction: dir, Peer: peer, HostNUMANode: node, SizeBytes: probeSize,
			Samples: 5, BytesPerSecond: v, ExpectedBytesPerSecond: expected}
	}
	lat := func(k probes.Kind, peer string, node *int, size int64, s float64) probes.Result {
		return probes.Result{Probe: k, Peer: peer, HostNUMANode: node, SizeBytes: size, Samples: 5, Seconds: s}
	}
	failed := bw(probes.DeviceToHost, probes.DirDeviceToHost, "", nodePtr(1), 0, 63e9)
	failed.Error = "mbind node 1: invalid argument"
	return &probes.GPURound{
		PCIBusID: "0000:00:06.0", Name: "NVIDIA H200",
		Results: []probes.Result{
			bw(probes.HostToDevice, probes.DirHostToDevice, "", nodePtr(0), 55e9, 63e9),
			bw(probes.DeviceToHost, probes.DirDeviceToHost, "", nodePtr(0), 55.2e9, 63e9),
			failed,
			bw(probes.HostBidirectional, probes.DirHostToDevice, "", nodePtr(0), 52e9, 63e9),
			bw(probes.HostBidirectional, probes.DirDeviceToHost, "", nodePtr(0), 52.1e9, 63e9),
			bw(probes.DeviceLocalCopy, probes.DirLocal, "", nil, 3.2e12, 4e12),
			bw(probes.PeerCopy, probes.DirToPeer, probePeer, nil, 385e9, 450e9),
			bw(probes.PeerCopy, probes.DirToPeer, probeStranger, nil, 50e9, 0),
			bw(probes.PeerBidirectional, probes.DirToPeer, probePeer, nil, 384e9, 450e9),
			bw(probes.PeerBidirectional, probes.DirFromPeer, probePeer, nil, 383e9, 450e9),
			lat(probes.HostLatency, "", nodePtr(0), chaseSize, 1.17e-6),
			lat(probes.PeerLatency, probePeer, nil, chaseSize, 0.83e-6),
			lat(probes.LaunchLatency, "", nil, 0, 10.5e-6),
		},
		LinkUnderLoad:     &probes.LinkUnderLoad{Generation: 5, Width: 16, Confirmed: true},
		BusySeconds:       0.4,
		ContextSeconds:    2.1,
		DeviceMemoryBytes: 384 << 20,
		HostMemoryBytes:   256 << 20,
	}
}

// probeStatus has GPU 0 probed, GPU 1 skipped and never probed.
func probeStatus() *schedule.Status {
	return &schedule.Status{Policy: "idle", GPUs: []schedule.GPUStatus{
		{Index: 0, UUID: "GPU-a", PCIBusID: "0000:00:06.0", Last: probeRound(),
			LastSuccess: time.Unix(1700000000, 500e6), LastRound: time.Unix(1700000600, 0), LastDuration: 2.5,
			Runs:        map[string]uint64{probes.RunSuccess: 3, probes.RunPartial: 1},
			Skips:       map[string]uint64{schedule.SkipBusyUtilization: 2},
			BusySeconds: 1.25, ContextSeconds: 7.5},
		{Index: 1, UUID: "GPU-b", PCIBusID: "0000:00:07.0",
			Skips: map[string]uint64{schedule.SkipMIG: 4}},
	}}
}

// gathered is every series of a collector by name and sorted labels, in
// the form labels() writes.
func gathered(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var kv []string
			for _, l := range m.GetLabel() {
				kv = append(kv, l.GetName(), l.GetValue())
			}
			key := mf.GetName() + labels(kv...)
			if _, dup := out[key]; dup {
				t.Errorf("duplicate series %s", key)
			}
			out[key] = value(m)
		}
	}
	return out
}

// seriesOf counts the series of family in what gathered returned.
func seriesOf(got map[string]float64, family string) int {
	n := 0
	for key := range got {
		if strings.HasPrefix(key, family+"{") {
			n++
		}
	}
	return n
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return math.NaN()
}

func g0(kv ...string) string {
	return labels(append([]string{"gpu", "0", "pci_bus_id", "0000:00:06.0", "uuid", "GPU-a"}, kv...)...)
}

func g1(kv ...string) string {
	return labels(append([]string{"gpu", "1", "pci_bus_id", "0000:00:07.0", "uuid", "GPU-b"}, kv...)...)
}

// bwLabels are a bandwidth series' labels on GPU 0.
func bwLabels(k probes.Kind, dir, peer, node string, size int) string {
	return g0("probe", string(k), "direction", dir, "peer", peer, "host_numa_node", node,
		"transfer_size_bytes", strconv.Itoa(size))
}

func TestProbeMetrics(t *testing.T) {
	c := collector.NewProbeCollector(fixed(probeStatus()))
	scrapetest.CheckText(t, c)
	// Exact exposition of the families whose every series is fixed here.
	want := `
# HELP gpulink_probe_policy_info The policy that decides when a GPU is probed; value 1.
# TYPE gpulink_probe_policy_info gauge
gpulink_probe_policy_info{policy="idle"} 1
# HELP gpulink_probe_runs_total Probe rounds of the GPU by result: success, partial (some probes failed), error (no probe could run), timeout (killed at the deadline), crash (the child died or printed no valid round).
# TYPE gpulink_probe_runs_total counter
gpulink_probe_runs_total` + g0("result", "success") + ` 3
gpulink_probe_runs_total` + g0("result", "partial") + ` 1
gpulink_probe_runs_total` + g0("result", "error") + ` 0
gpulink_probe_runs_total` + g0("result", "timeout") + ` 0
gpulink_probe_runs_total` + g0("result", "crash") + ` 0
gpulink_probe_runs_total` + g1("result", "success") + ` 0
gpulink_probe_runs_total` + g1("result", "partial") + ` 0
gpulink_probe_runs_total` + g1("result", "error") + ` 0
gpulink_probe_runs_total` + g1("result", "timeout") + ` 0
gpulink_probe_runs_total` + g1("result", "crash") + ` 0
# HELP gpulink_probe_skips_total Rounds that left the GPU alone, by reason (busy, compute mode, MIG, no NVML sample, lost).
# TYPE gpulink_probe_skips_total counter
gpulink_probe_skips_total` + g0("reason", "busy_utilization") + ` 2
gpulink_probe_skips_total` + g1("reason", "mig_enabled") + ` 4
# HELP gpulink_probe_last_success_timestamp_seconds When a round last gave every probe of the GPU a value; absent before the first.
# TYPE gpulink_probe_last_success_timestamp_seconds gauge
gpulink_probe_last_success_timestamp_seconds` + g0() + ` 1.7000000005e+09
# HELP gpulink_probe_last_round_timestamp_seconds When the GPU's latest probe run started, whatever its result; with the last success timestamp it shows a GPU whose probes keep failing.
# TYPE gpulink_probe_last_round_timestamp_seconds gauge
gpulink_probe_last_round_timestamp_seconds` + g0() + ` 1.7000006e+09
# HELP gpulink_probe_pcie_link_generation_under_load PCIe generation of the GPU's link read while a host-to-device copy was verifiably moving data. Idle GPUs lower their generation, so below the maximum only this reading shows a downtrained link.
# TYPE gpulink_probe_pcie_link_generation_under_load gauge
gpulink_probe_pcie_link_generation_under_load` + g0() + ` 5
# HELP gpulink_probe_pcie_link_width_under_load PCIe width of the GPU's link in lanes, read while a host-to-device copy was verifiably moving data.
# TYPE gpulink_probe_pcie_link_width_under_load gauge
gpulink_probe_pcie_link_width_under_load` + g0() + ` 16
# HELP gpulink_probe_failed Present, at 1, for each probe of the GPU's latest round that gave no value (the exporter log says why); a probe that gave one has its gpulink_probe_bandwidth_bytes_per_second or gpulink_probe_latency_seconds series instead. Rounds with failures count as partial in gpulink_probe_runs_total.
# TYPE gpulink_probe_failed gauge
gpulink_probe_failed` + g0("probe", "device_to_host", "direction", "device_to_host", "peer", "", "host_numa_node", "1") + ` 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "gpulink_probe_policy_info", "gpulink_probe_runs_total",
		"gpulink_probe_skips_total", "gpulink_probe_last_success_timestamp_seconds", "gpulink_probe_last_round_timestamp_seconds", "gpulink_probe_failed",
		"gpulink_probe_pcie_link_generation_under_load", "gpulink_probe_pcie_link_width_under_load"); err != nil {
		t.Error(err)
	}

	got := gathered(t, c)
	for key, v := range map[string]float64{
		"gpulink_probe_bandwidth_bytes_per_second" + bwLabels(probes.HostToDevice, "host_to_device", "", "0", probeSize):                         55e9,
		"gpulink_probe_expected_bandwidth_bytes_per_second" + g0("probe", "host_to_device", "peer", ""):                                          63e9,
		"gpulink_probe_expected_bandwidth_bytes_per_second" + g0("probe", "host_bidirectional", "peer", ""):                                      63e9,
		"gpulink_probe_bandwidth_bytes_per_second" + bwLabels(probes.DeviceLocalCopy, "local", "", "", probeSize):                                3.2e12,
		"gpulink_probe_expected_bandwidth_bytes_per_second" + g0("probe", "device_local_copy", "peer", ""):                                       4e12,
		"gpulink_probe_bandwidth_bytes_per_second" + bwLabels(probes.PeerBidirectional, "from_peer", probePeer, "", probeSize):                   383e9,
		"gpulink_probe_expected_bandwidth_bytes_per_second" + g0("probe", "peer_bidirectional", "peer", probePeer):                               450e9,
		"gpulink_probe_bandwidth_bytes_per_second" + bwLabels(probes.PeerCopy, "to_peer", probeStranger, "", probeSize):                          50e9,
		"gpulink_probe_latency_seconds" + g0("probe", "host_latency", "peer", "", "host_numa_node", "0", "transfer_size_bytes", "2097152"):       1.17e-6,
		"gpulink_probe_latency_seconds" + g0("probe", "peer_latency", "peer", probePeer, "host_numa_node", "", "transfer_size_bytes", "2097152"): 0.83e-6,
		"gpulink_probe_latency_seconds" + g0("probe", "launch_latency", "peer", "", "host_numa_node", "", "transfer_size_bytes", "0"):            10.5e-6,
		"gpulink_probe_round_duration_seconds" + g0():                                                                                            2.5,
		"gpulink_probe_busy_seconds_total" + g0():    1.25,
		"gpulink_probe_context_seconds_total" + g0(): 7.5,
		"gpulink_probe_busy_seconds_total" + g1():    0,
		"gpulink_probe_context_seconds_total" + g1(): 0,
		"gpulink_probe_device_memory_bytes" + g0():   384 << 20,
		"gpulink_probe_host_memory_bytes" + g0():     256 << 20,
	} {
		if g, ok := got[key]; !ok {
			t.Errorf("missing %s", key)
		} else if math.Abs(g-v) > math.Abs(v)*1e-12 {
			t.Errorf("%s = %g, want %g", key, g, v)
		}
	}

	for name, want := range map[string]int{
		// 10 bandwidth results, one failed.
		"gpulink_probe_bandwidth_bytes_per_second": 9,
		// One a probe and peer, whatever the direction and host node;
		// the stranger's path is not known: no expectation.
		"gpulink_probe_expected_bandwidth_bytes_per_second": 6,
		"gpulink_probe_latency_seconds":                     3,
		// The one that gave no value.
		"gpulink_probe_failed": 1,
		// Neither GPU 1, never probed, nor a context memory not measured.
		"gpulink_probe_device_memory_bytes":            1,
		"gpulink_probe_context_memory_bytes":           0,
		"gpulink_probe_round_duration_seconds":         1,
		"gpulink_probe_last_success_timestamp_seconds": 1,
		"gpulink_probe_last_round_timestamp_seconds":   1,
		// GPU 0's round had the GPU to itself: peer="" at 0, no peer
		// series, no contended rounds.
		"gpulink_probe_contended":              1,
		"gpulink_probe_contended_rounds_total": 0,
	} {
		if n := seriesOf(got, name); n != want {
			t.Errorf("%d series of %s, want %d", n, name, want)
		}
	}
	for key := range got {
		if strings.Contains(key, `host_numa_node="1"`) && !strings.HasPrefix(key, "gpulink_probe_failed{") {
			t.Errorf("the failed result has a value series: %s", key)
		}
	}

	lintClean(t, c)
}

func TestProbeMetricsPromtool(t *testing.T) {
	promtoolCheck(t, "probe", exposition(t, collector.NewProbeCollector(fixed(probeStatus()))))
}

// A result without a value is a failure, whatever its error says; an
// unconfirmed link reading is no evidence; a context memory measured is
// exported.
func TestProbeMetricsOmissions(t *testing.T) {
	s := probeStatus()
	r := s.GPUs[0].Last
	r.LinkUnderLoad.Confirmed = false
	r.ContextMemoryBytes = 540 << 20
	r.Results = []probes.Result{
		{Probe: probes.HostToDevice, Direction: probes.DirHostToDevice, HostNUMANode: nodePtr(-1), SizeBytes: probeSize},
		{Probe: probes.HostLatency, HostNUMANode: nodePtr(-1), SizeBytes: chaseSize, Seconds: 1.2e-6, Error: "timed out"},
	}
	s.GPUs[0].LastSuccess = time.Time{}
	s.GPUs[0].LastDuration = 0
	got := gathered(t, collector.NewProbeCollector(fixed(s)))
	for key, v := range map[string]float64{
		// Node -1 (no NUMA support) is an empty label, as elsewhere.
		"gpulink_probe_failed" + g0("probe", "host_to_device", "direction", "host_to_device", "peer", "", "host_numa_node", ""): 1,
		"gpulink_probe_failed" + g0("probe", "host_latency", "direction", "", "peer", "", "host_numa_node", ""):                 1,
		"gpulink_probe_context_memory_bytes" + g0(): 540 << 20,
	} {
		if g, ok := got[key]; !ok || g != v {
			t.Errorf("%s = %g (present %v), want %g", key, g, ok, v)
		}
	}
	for key := range got {
		for _, absent := range []string{"gpulink_probe_bandwidth_bytes_per_second", "gpulink_probe_latency_seconds",
			"gpulink_probe_pcie_link_", "gpulink_probe_last_success_timestamp_seconds", "gpulink_probe_round_duration_seconds",
			"gpulink_probe_expected_bandwidth_bytes_per_second"} {
			if strings.HasPrefix(key, absent) {
				t.Errorf("unexpected series %s", key)
			}
		}
	}
}

// The child's output is not trusted to be free of repeats: a repeated
// result costs its second copy, not the scrape.
func TestProbeMetricsDuplicateResults(t *testing.T) {
	s := probeStatus()
	r := s.GPUs[0].Last
	r.Results = append(r.Results, r.Results[0], r.Results[len(r.Results)-1])
	c := collector.NewProbeCollector(fixed(s))
	got := gathered(t, c)
	if v := got["gpulink_probe_bandwidth_bytes_per_second"+bwLabels(probes.HostToDevice, "host_to_device", "", "0", probeSize)]; v != 55e9 {
		t.Errorf("host_to_device = %g, want the first result's 55e9", v)
	}
	lintClean(t, c)
}

func TestProbeMetricsBeforeFirstSnapshot(t *testing.T) {
	c := collector.NewProbeCollector(fixedSource[*schedule.Status]{})
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("%d metrics before the first snapshot, want none", n)
	}
	// A scheduler that knows no GPU yet still says its policy.
	c = collector.NewProbeCollector(fixed(&schedule.Status{Policy: "off"}))
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP gpulink_probe_policy_info The policy that decides when a GPU is probed; value 1.
# TYPE gpulink_probe_policy_info gauge
gpulink_probe_policy_info{policy="off"} 1
`)); err != nil {
		t.Error(err)
	}
}

// Every family rendered is described, and nothing else.
func TestProbeDescribe(t *testing.T) {
	c := collector.NewProbeCollector(fixed(probeStatus()))
	ch := make(chan *prometheus.Desc, 64)
	c.Describe(ch)
	close(ch)
	described := map[string]bool{}
	for d := range ch {
		s := d.String()
		i := strings.Index(s, `fqName: "`) + len(`fqName: "`)
		described[s[i:i+strings.Index(s[i:], `"`)]] = true
	}
	var rendered []string
	for key := range gathered(t, c) {
		name, _, _ := strings.Cut(key, "{")
		rendered = append(rendered, name)
	}
	sort.Strings(rendered)
	for _, name := range rendered {
		if !described[name] {
			t.Errorf("%s rendered but not described", name)
		}
	}
	if len(described) != 21 {
		t.Errorf("%d families described, want 21", len(described))
	}
}

// A contended round: the GPU's own contention covers every result, a
// peer's only the results against it; the rounds are counted by reason.
func TestProbeMetricsContended(t *testing.T) {
	contended := func(kv ...string) string { return "gpulink_probe_contended" + g0(kv...) }
	for _, tc := range []struct {
		name       string
		contention *probes.Contention
		want       map[string]float64
	}{
		{"alone", &probes.Contention{ProcessChecks: 12}, map[string]float64{contended("peer", ""): 0}},
		{"peer shared", &probes.Contention{Peers: map[string][]string{probePeer: {probes.ContendedOtherProcess}}, ProcessChecks: 12},
			map[string]float64{contended("peer", ""): 0, contended("peer", probePeer): 1}},
		{"GPU shared", &probes.Contention{Reasons: []string{probes.ContendedOtherProcess, probes.ContendedUtilization}},
			map[string]float64{contended("peer", ""): 1, contended("peer", probePeer): 1, contended("peer", probeStranger): 1}},
		{"noisy stranger", &probes.Contention{Peers: map[string][]string{probeStranger: {probes.ContendedSampleSpread}}},
			map[string]float64{contended("peer", ""): 0, contended("peer", probeStranger): 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := probeStatus()
			s.GPUs[0].Last.Contention = tc.contention
			s.GPUs[0].Contended = map[string]uint64{probes.ContendedOtherProcess: 2, probes.ContendedSampleSpread: 1, probes.ContendedUtilization: 0}
			c := collector.NewProbeCollector(fixed(s))
			got := map[string]float64{}
			for key, v := range gathered(t, c) {
				if strings.HasPrefix(key, "gpulink_probe_contended") {
					got[key] = v
				}
			}
			want := maps.Clone(tc.want)
			// Reasons appear once counted; GPU 1 has no round and no count.
			want["gpulink_probe_contended_rounds_total"+g0("reason", "other_process")] = 2
			want["gpulink_probe_contended_rounds_total"+g0("reason", "sample_spread")] = 1
			if !maps.Equal(got, want) {
				t.Errorf("got  %v\nwant %v", got, want)
			}
			lintClean(t, c)
		})
	}
}

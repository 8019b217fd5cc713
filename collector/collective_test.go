package collector_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/scrape/scrapetest"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// The three GPUs of the collective status, in rank order.
var collGPUs = []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"}

func rank(n int) *int { return &n }

// collectiveStatus is a round over three GPUs with figures near a DGX
// H100's: every collective at both sizes, send/recv for each pair (1->2
// failed, 0->2 with no expectation), channels over p2p and one fallback to
// shm, a transport NCCL named that the label does not know, and one result
// given twice.
func collectiveStatus() *schedule.Status {
	const big, small = 256 << 20, 8 << 10
	coll := func(c probes.Collective, size int64, bus, alg, expected, seconds float64) probes.CollectiveResult {
		return probes.CollectiveResult{Collective: c, SizeBytes: size, Ranks: 3, Seconds: seconds,
			AlgBytesPerSecond: alg, BusBytesPerSecond: bus, ExpectedBusBytesPerSecond: expected}
	}
	sr := func(from, to int, size int64, bw, expected, seconds float64) probes.CollectiveResult {
		return probes.CollectiveResult{Collective: probes.SendRecv, SizeBytes: size, Ranks: 2, FromRank: rank(from), ToRank: rank(to),
			Seconds: seconds, AlgBytesPerSecond: bw, BusBytesPerSecond: bw, ExpectedBusBytesPerSecond: expected}
	}
	failed := sr(1, 2, big, 0, 450e9, 0)
	failed.Error = "ncclSend: unhandled cuda error"
	last := &probes.CollectiveRound{
		Version: probes.CollectiveContractVersion, NCCLVersion: 22703, GPUs: collGPUs, Ranks: 3,
		Results: []probes.CollectiveResult{
			coll(probes.AllReduce, big, 370e9, 277.5e9, 450e9, 9.7e-4),
			coll(probes.AllReduce, small, 0.5e9, 0.33e9, 450e9, 25e-6),
			coll(probes.AllReduce, big, 1, 1, 1, 1), // given twice: the first counts
			coll(probes.AllGather, big, 360e9, 540e9, 0, 5e-4),
			coll(probes.AllGather, small, 0.3e9, 0.4e9, 0, 18e-6),
			sr(0, 1, big, 365e9, 450e9, 7.35e-4),
			sr(0, 1, small, 0.8e9, 450e9, 10e-6),
			sr(0, 2, big, 360e9, 0, 7.45e-4),
			failed,
			sr(5, 1, big, 1e9, 1e9, 1), // a rank not in this round: left out
		},
		Transports: []probes.Transport{
			{Channel: 0, FromRank: 0, ToRank: 1, Kind: probes.TransportP2P},
			{Channel: 1, FromRank: 0, ToRank: 1, Kind: probes.TransportP2P},
			{Channel: 1, FromRank: 0, ToRank: 1, Kind: probes.TransportP2P}, // logged twice
			{Channel: 0, FromRank: 1, ToRank: 2, Kind: probes.TransportSHM},
			{Channel: 0, FromRank: 2, ToRank: 0, Kind: "warp"},
			// The network, with and without GPUDirect RDMA.
			{Channel: 2, FromRank: 1, ToRank: 2, Kind: probes.TransportNet, Detail: "NET/IB/1/GDRDMA", Network: "RoCE", GDR: true},
			{Channel: 3, FromRank: 1, ToRank: 2, Kind: probes.TransportNet, Detail: "NET/IB/1", Network: "RoCE"},
			{Channel: 4, FromRank: 1, ToRank: 2, Kind: probes.TransportNet, Detail: "NET/IB/0", Network: "RoCE"},
		},
		BusySeconds: 1.5, DeviceMemoryBytes: 512 << 20,
	}
	return &schedule.Status{Policy: "idle", Collective: &schedule.CollectiveStatus{
		Last: last, LastStarted: time.Unix(1700000000, 500e6), SizeBytes: big, SmallBytes: small,
		ExpectedTransports: []probes.PairTransport{
			{GPU: collGPUs[0], Peer: collGPUs[1], Kind: probes.TransportP2P},
			{GPU: collGPUs[1], Peer: collGPUs[2], Kind: probes.TransportP2P},
			{GPU: collGPUs[0], Peer: "0000:99:00.0", Kind: probes.TransportP2P}, // a GPU the status does not know
		},
		Runs:  map[string]uint64{probes.RunSuccess: 4, probes.RunTimeout: 1},
		Skips: map[string]uint64{schedule.SkipBusyProcess: 2, schedule.SkipNoLibrary: 0},
		GPUs: []schedule.CollectiveGPU{{Index: 0, PCIBusID: collGPUs[0], BusySeconds: 6}, {Index: 1, PCIBusID: collGPUs[1], BusySeconds: 6},
			{Index: 2, PCIBusID: collGPUs[2], BusySeconds: 6}, {Index: 5, PCIBusID: "0000:ba:00.0", BusySeconds: 1.5}},
	}}
}

func pairLabels(g, p int, kv ...string) string {
	return labels(append([]string{"gpu", itoaT(g), "pci_bus_id", collGPUs[g], "peer_gpu", itoaT(p), "peer_pci_bus_id", collGPUs[p]}, kv...)...)
}

func itoaT(i int) string { return string(rune('0' + i)) }

func TestCollectiveMetrics(t *testing.T) {
	c := collector.NewCollectiveCollector(fixed(collectiveStatus()))
	scrapetest.CheckText(t, c)
	want := `
# HELP gpulink_collective_runs_total Collective rounds by result: success, partial (some collectives failed), error (no communicator), timeout (killed at the deadline), crash (the child died or printed no valid round).
# TYPE gpulink_collective_runs_total counter
gpulink_collective_runs_total{result="success"} 4
gpulink_collective_runs_total{result="partial"} 0
gpulink_collective_runs_total{result="error"} 0
gpulink_collective_runs_total{result="timeout"} 1
gpulink_collective_runs_total{result="crash"} 0
# HELP gpulink_collective_skips_total Collective rounds due but not run, by reason: fewer_than_two_gpus, busy_other_process, busy_utilization (one busy GPU skips the round), no_library (NCCL could not be loaded), mig_enabled, compute_mode_exclusive_process, compute_mode_prohibited (left fewer than two GPUs). A reason appears when first counted.
# TYPE gpulink_collective_skips_total counter
gpulink_collective_skips_total{reason="busy_other_process"} 2
gpulink_collective_skips_total{reason="no_library"} 0
# HELP gpulink_collective_info The NCCL version the latest collective round loaded; value 1.
# TYPE gpulink_collective_info gauge
gpulink_collective_info{nccl_version="2.27.3"} 1
# HELP gpulink_collective_ranks GPUs (NCCL ranks) in the latest collective round.
# TYPE gpulink_collective_ranks gauge
gpulink_collective_ranks 3
# HELP gpulink_collective_last_round_timestamp_seconds When the latest collective round that gave results started; absent before the first.
# TYPE gpulink_collective_last_round_timestamp_seconds gauge
gpulink_collective_last_round_timestamp_seconds 1.7000000005e+09
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "gpulink_collective_runs_total", "gpulink_collective_skips_total",
		"gpulink_collective_info", "gpulink_collective_ranks", "gpulink_collective_last_round_timestamp_seconds"); err != nil {
		t.Error(err)
	}

	got := gathered(t, c)
	coll := func(name, c string) string { return "gpulink_collective_" + name + labels("collective", c) }
	gpu := func(name string, i int, bus string) string {
		return "gpulink_collective_" + name + labels("gpu", itoaT(i), "pci_bus_id", bus)
	}
	for key, v := range map[string]float64{
		coll("bus_bandwidth_bytes_per_second", "all_reduce"):                                                                370e9,
		coll("algorithm_bandwidth_bytes_per_second", "all_reduce"):                                                          277.5e9,
		coll("expected_bus_bandwidth_bytes_per_second", "all_reduce"):                                                       450e9,
		coll("bus_bandwidth_ratio", "all_reduce"):                                                                           370.0 / 450,
		coll("latency_seconds", "all_reduce"):                                                                               25e-6,
		coll("bus_bandwidth_bytes_per_second", "all_gather"):                                                                360e9,
		coll("latency_seconds", "all_gather"):                                                                               18e-6,
		"gpulink_collective_send_recv_bandwidth_bytes_per_second" + pairLabels(0, 1):                                        365e9,
		"gpulink_collective_send_recv_expected_bandwidth_bytes_per_second" + pairLabels(0, 1):                               450e9,
		"gpulink_collective_send_recv_bandwidth_ratio" + pairLabels(0, 1):                                                   365.0 / 450,
		"gpulink_collective_send_recv_latency_seconds" + pairLabels(0, 1):                                                   10e-6,
		"gpulink_collective_send_recv_bandwidth_bytes_per_second" + pairLabels(0, 2):                                        360e9,
		"gpulink_collective_channels" + pairLabels(0, 1, "transport", "p2p", "network", "", "plugin", "", "gdr", ""):        2,
		"gpulink_collective_channels" + pairLabels(1, 2, "transport", "shm", "network", "", "plugin", "", "gdr", ""):        1,
		"gpulink_collective_channels" + pairLabels(1, 2, "transport", "net", "network", "RoCE", "plugin", "IB", "gdr", "1"): 1,
		"gpulink_collective_channels" + pairLabels(1, 2, "transport", "net", "network", "RoCE", "plugin", "IB", "gdr", "0"): 2,
		"gpulink_collective_channels" + pairLabels(2, 0, "transport", "unknown", "network", "", "plugin", "", "gdr", ""):    1,
		"gpulink_collective_expected_transport_info" + pairLabels(0, 1, "transport", "p2p"):                                 1,
		"gpulink_collective_expected_transport_info" + pairLabels(1, 2, "transport", "p2p"):                                 1,
		gpu("busy_seconds_total", 0, collGPUs[0]):                                                                           6,
		gpu("busy_seconds_total", 5, "0000:ba:00.0"):                                                                        1.5,
		gpu("device_memory_bytes", 2, collGPUs[2]):                                                                          512 << 20,
	} {
		if g, ok := got[key]; !ok {
			t.Errorf("missing %s", key)
		} else if math.Abs(g-v) > math.Abs(v)*1e-12 {
			t.Errorf("%s = %g, want %g", key, g, v)
		}
	}
	for name, want := range map[string]int{
		"bus_bandwidth_bytes_per_second": 2,
		// all_gather's expectation is unknown: no expectation, no ratio.
		"expected_bus_bandwidth_bytes_per_second": 1,
		"bus_bandwidth_ratio":                     1,
		"latency_seconds":                         2,
		// 1->2 failed; rank 5 is in no GPU of the round.
		"send_recv_bandwidth_bytes_per_second":          2,
		"send_recv_expected_bandwidth_bytes_per_second": 1,
		"send_recv_latency_seconds":                     1,
		"channels":                                      5,
		// The pair with a GPU the status does not know is left out.
		"expected_transport_info": 2,
		// Every GPU a round ran on; memory of the latest round's.
		"busy_seconds_total":  4,
		"device_memory_bytes": 3,
	} {
		if n := seriesOf(got, "gpulink_collective_"+name); n != want {
			t.Errorf("%d series of gpulink_collective_%s, want %d", n, name, want)
		}
	}
	if v, ok := got["gpulink_collective_contended"+labels()]; !ok || v != 0 {
		t.Errorf("gpulink_collective_contended = %v (present %v), want 0 for a round nobody shared", v, ok)
	}
	if n := seriesOf(got, "gpulink_collective_contended_rounds_total"); n != 0 {
		t.Errorf("%d contended-round counters before any was counted", n)
	}
	lintClean(t, c)
}

// A round a job shared: contended, whatever its figures, and counted by
// reason.
func TestCollectiveContendedMetrics(t *testing.T) {
	st := collectiveStatus()
	last := *st.Collective.Last
	last.Contention = &probes.Contention{Reasons: []string{probes.ContendedOtherProcess},
		Processes: map[string][]int{collGPUs[1]: {777}}, ProcessChecks: 4}
	st.Collective.Last = &last
	st.Collective.Contended = map[string]uint64{probes.ContendedOtherProcess: 2, probes.ContendedUtilization: 0}
	c := collector.NewCollectiveCollector(fixed(st))
	got := gathered(t, c)
	if v := got["gpulink_collective_contended"+labels()]; v != 1 {
		t.Errorf("gpulink_collective_contended = %v, want 1", v)
	}
	if v := got["gpulink_collective_contended_rounds_total"+labels("reason", "other_process")]; v != 2 {
		t.Errorf("contended rounds by other_process = %v, want 2", v)
	}
	if n := seriesOf(got, "gpulink_collective_contended_rounds_total"); n != 1 {
		t.Errorf("%d contended-round counters, want the one counted", n)
	}
	lintClean(t, c)
}

// Before the first round: the counters, nothing of a round. With
// collectives off: nothing at all.
func TestCollectiveMetricsBeforeAndOff(t *testing.T) {
	st := collectiveStatus()
	st.Collective.Last, st.Collective.ExpectedTransports, st.Collective.GPUs = nil, nil, nil
	got := gathered(t, collector.NewCollectiveCollector(fixed(st)))
	for key := range got {
		if !strings.HasPrefix(key, "gpulink_collective_runs_total{") && !strings.HasPrefix(key, "gpulink_collective_skips_total{") {
			t.Errorf("before the first round: %s", key)
		}
	}
	if len(got) != 7 {
		t.Errorf("%d series before the first round, want 5 runs and 2 skips", len(got))
	}
	if got := gathered(t, collector.NewCollectiveCollector(fixed(&schedule.Status{Policy: "idle"}))); len(got) != 0 {
		t.Errorf("collectives off: %v", got)
	}
}

func TestNCCLVersion(t *testing.T) {
	for code, want := range map[int]string{22703: "2.27.3", 21803: "2.18.3", 2804: "2.8.4", 0: ""} {
		st := collectiveStatus()
		st.Collective.Last.NCCLVersion = code
		got := gathered(t, collector.NewCollectiveCollector(fixed(st)))
		_, ok := got["gpulink_collective_info"+labels("nccl_version", want)]
		if want != "" && !ok {
			t.Errorf("code %d: no series for %s", code, want)
		}
		for key := range got {
			if strings.HasPrefix(key, "gpulink_collective_info{") && want == "" {
				t.Errorf("code 0: %s", key)
			}
		}
	}
}

package collector_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/dcgm"
	"github.com/gpulink/gpulink_exporter/internal/kubelet"
	"github.com/gpulink/gpulink_exporter/internal/ncclcheck"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nodeprobe"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/internal/testwait"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// metricNamesFile lists every metric name the exporter can export: what the
// PromQL of deploy/prometheus and dashboards/ may name (checked in package
// deploy). It is written from the collectors, never by hand.
const metricNamesFile = "../deploy/metric-names.txt"

const metricNamesHeader = `# Every metric name gpulink_exporter can export, one a line: the names the
# PromQL of deploy/prometheus and dashboards/ may use (deploy's tests check
# them). Written from the collectors themselves by
#   go test ./collector -run TestMetricNamesFile -update
# after a change to what the exporter exports; do not edit by hand.
`

// -update may also be defined by another test file of the package; look it
// up rather than define it twice (a second definition panics).
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files from the code under test")
	}
}

func updateFlag() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// fqName reads a Desc's metric name: client_golang keeps it private, and
// its String form is stable ("Desc{fqName: \"name\", ...").
var fqName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

// describedNames are the names every collector says it may export, whether
// or not a given machine has the values (a lost GPU, Pascal's retired
// pages, DCGM's profiling fields).
func describedNames(t *testing.T, cs ...prometheus.Collector) []string {
	t.Helper()
	var names []string
	for _, c := range cs {
		ch := make(chan *prometheus.Desc)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the metric name of %s", d)
			}
			names = append(names, m[1])
		}
	}
	return names
}

// queryNames are the names PromQL sees for a gathered family: a histogram
// or summary adds its _bucket/_sum/_count series.
func queryNames(mf *dto.MetricFamily) []string {
	n := mf.GetName()
	switch mf.GetType() {
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		return []string{n, n + "_bucket", n + "_sum", n + "_count"}
	case dto.MetricType_SUMMARY:
		return []string{n, n + "_sum", n + "_count"}
	}
	return []string{n}
}

// simulatedDGX is the daemon's wiring (main.go) over a simulated DGX H100,
// every source on, stepped twice with a probe round (the first followed by
// a collective round), so that the scrape has every family the node's
// hardware gives values for.
func simulatedDGX(t *testing.T) []prometheus.Collector {
	t.Helper()
	n, err := sim.Start(sim.Config{Profile: "dgx-h100", FaultsFile: filepath.Join(t.TempDir(), "faults.yaml"), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	fsys := n.FS()
	reader := nvml.NewReader(n.NVML(), fsys.Sys, nil)
	t.Cleanup(reader.Shutdown)
	if err := reader.Init(); err != nil {
		t.Fatal(err)
	}
	opts := sampler.Options{Interval: time.Hour, Timeout: 10 * time.Second}
	nvmlS := sampler.New[*nvml.Snapshot]("nvml", reader, opts)
	topo := sampler.New[*numa.Topology]("topology", &numa.TopologyReader{FS: fsys}, opts)
	place := sampler.New[*process.Snapshot]("process", &process.Reader{
		FS: fsys, Processes: reader.ComputeProcesses, Topology: topo.LatestData, GPUs: reader.Identities}, opts)
	nic := sampler.New[*nic.Snapshot]("nic", &nic.Reader{FS: fsys}, opts)
	check := sampler.New[*ncclcheck.Report]("nccl", &ncclcheck.Source{Env: n.NCCLEnv("libnccl.so.2"),
		Topology: topo.LatestData, NICs: nic.LatestData}, opts)
	xid := nvml.NewXIDWatcher(reader, nil)
	xid.Wait = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go xid.Run(ctx, 10*time.Millisecond)
	sched, err := schedule.NewScheduler(schedule.SchedulerConfig{
		Policy: schedule.PolicyAlways, Runner: n.Runner(), GPUs: nvmlS.LatestData, Processes: reader.ComputeProcesses,
		Jitter: probes.DefaultJitter, MaxDuty: probes.DefaultMaxDuty, UtilizationThreshold: probes.DefaultUtilizationThreshold,
		Options:          probes.Options{SizeBytes: probes.DefaultSizeBytes, Samples: probes.DefaultSamples},
		HostNodes:        func(addr string) []int { return topo.LatestData().HostNodes(addr) },
		Annotate:         probes.Expectations{GPUs: nvmlS.LatestData, Topology: topo.LatestData}.Annotate,
		CollectiveRunner: n.Runner(),
		CollectiveOptions: probes.CollectiveOptions{SizeBytes: probes.DefaultCollectiveSizeBytes,
			SmallBytes: probes.DefaultCollectiveSmallBytes, Warmup: probes.DefaultCollectiveWarmup, Iterations: probes.DefaultCollectiveIterations,
			Samples: probes.DefaultCollectiveSamples},
		CollectiveAnnotate: probes.Expectations{GPUs: nvmlS.LatestData, Topology: topo.LatestData}.AnnotateCollective,
	})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, func() bool { return xid.Status().Up })
	now := time.Now()
	for range 2 {
		now = now.Add(time.Second)
		if err := n.Advance(now); err != nil {
			t.Fatal(err)
		}
		for _, s := range []interface{ SampleOnce(context.Context) }{nvmlS, topo, place, nic, check} {
			s.SampleOnce(context.Background())
		}
		sched.RunRound(context.Background())
	}
	// One XID, so that its per-code families have a series.
	n.Fake().SendXID(0, 79)
	testwait.Until(t, func() bool { return len(xid.Counts()) > 0 })
	return []prometheus.Collector{
		versioncollector.NewCollector("gpulink_exporter"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collector.NewNVMLCollector(nvmlS, collector.WithNVLinkSpeed(true)), collector.NewXIDCollector(xid, reader),
		collector.NewTopologyCollector(topo, reader), collector.NewNICCollector(nic),
		collector.NewNearestNICCollector(nic, topo, reader),
		collector.NewProcessCollector(place, true), collector.NewJobCollector(place, nil),
		collector.NewProbeCollector(sched), collector.NewCollectiveCollector(sched),
		collector.NewNCCLCheckCollector(check, reader),
		// No DCGM or kubelet on the simulated node: described, not gathered.
		collector.NewDCGMCollector(fixedSource[*dcgm.Snapshot]{}),
		collector.NewPodCollector(fixedSource[*kubelet.Snapshot]{}),
		collector.NewExporterCollector(nvmlS, xid, topo, place, nic, sched, check, n),
		// Node-to-node probes: the sessions counter on /metrics, and the
		// families of a /probe answer (its own registry), described.
		nodeprobe.New(nodeprobe.Config{}), nodeprobe.ProbeFamilies(),
	}
}

// TestMetricNamesFile keeps deploy/metric-names.txt equal to what the
// collectors export: every name they describe, and every name a full scrape
// of a simulated DGX H100 (every source, probes included) gathers.
func TestMetricNamesFile(t *testing.T) {
	cs := simulatedDGX(t)
	names := describedNames(t, cs...)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cs...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gathered := map[string]bool{}
	for _, mf := range mfs {
		gathered[mf.GetName()] = true
		names = append(names, queryNames(mf)...)
	}
	// Each source's families reached the scrape: the node really ran.
	for _, family := range []string{"gpulink_gpu_info", "gpulink_gpu_xid_errors_total", "gpulink_topology_gpu_numa_info",
		"gpulink_nic_port_up", "gpulink_gpu_processes", "gpulink_probe_bandwidth_bytes_per_second",
		"gpulink_probe_pcie_link_generation_under_load", "gpulink_collective_bus_bandwidth_ratio", "gpulink_collective_channels",
		"gpulink_collective_send_recv_bandwidth_ratio", "gpulink_collective_expected_network_info", "gpulink_collective_library_info",
		"gpulink_collective_network_ready", "gpulink_source_up", "gpulink_exporter_build_info"} {
		if !gathered[family] {
			t.Errorf("family %s missing from the simulated DGX H100's scrape", family)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	want := metricNamesHeader + strings.Join(names, "\n") + "\n"

	if updateFlag() {
		if err := os.WriteFile(metricNamesFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d names to %s", len(names), metricNamesFile)
		return
	}
	got, err := os.ReadFile(metricNamesFile)
	if err != nil {
		t.Fatalf("%v (write it with go test ./collector -run TestMetricNamesFile -update)", err)
	}
	if bytes.Equal(got, []byte(want)) {
		return
	}
	inFile := map[string]bool{}
	for _, l := range strings.Split(string(got), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			inFile[l] = true
		}
	}
	for _, n := range names {
		if !inFile[n] {
			t.Errorf("%s: exported, not listed", n)
		}
		delete(inFile, n)
	}
	for n := range inFile {
		t.Errorf("%s: listed, not exported", n)
	}
	t.Errorf("%s is out of date with the collectors; rewrite it with go test ./collector -run TestMetricNamesFile -update", metricNamesFile)
}

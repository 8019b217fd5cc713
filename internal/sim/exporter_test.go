package sim_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/internal/testwait"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// exporter is the daemon's wiring (main.go) over a simulated node, with
// the samplers stepped by the test instead of their tickers.
type exporter struct {
	node     *sim.Node
	faults   string
	nvml     *sampler.Sampler[*nvml.Snapshot]
	topo     *sampler.Sampler[*numa.Topology]
	place    *sampler.Sampler[*process.Snapshot]
	nic      *sampler.Sampler[*nic.Snapshot]
	xid      *nvml.XIDWatcher
	sched    *schedule.Scheduler
	handler  http.Handler
	reg      *scrape.Registry
	sources  []namedCollector // every collector, by the source it renders
	sampled  time.Time
	samplers []interface{ SampleOnce(context.Context) }
}

// newExporter probes under policy always: every GPU, busy or not.
func newExporter(t *testing.T, profile string) *exporter {
	t.Helper()
	return newExporterPolicy(t, profile, schedule.PolicyAlways)
}

func newExporterPolicy(t *testing.T, profile, policy string) *exporter {
	t.Helper()
	e := &exporter{faults: filepath.Join(t.TempDir(), "faults.yaml")}
	n, err := sim.Start(sim.Config{Profile: profile, FaultsFile: e.faults, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	e.node = n
	fsys := n.FS()
	reader := nvml.NewReader(n.NVML(), fsys.Sys, nil)
	t.Cleanup(reader.Shutdown)
	if err := reader.Init(); err != nil {
		t.Fatal(err)
	}
	opts := sampler.Options{Interval: time.Hour, Timeout: 10 * time.Second}
	e.nvml = sampler.New[*nvml.Snapshot]("nvml", reader, opts)
	e.topo = sampler.New[*numa.Topology]("topology", &numa.TopologyReader{FS: fsys}, opts)
	e.place = sampler.New[*process.Snapshot]("process", &process.Reader{
		FS: fsys, Processes: reader.ComputeProcesses, Topology: e.topo.LatestData, GPUs: reader.Identities}, opts)
	e.nic = sampler.New[*nic.Snapshot]("nic", &nic.Reader{FS: fsys}, opts)
	e.samplers = []interface{ SampleOnce(context.Context) }{e.nvml, e.topo, e.place, e.nic}
	e.xid = nvml.NewXIDWatcher(reader, nil)
	e.xid.Wait = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go e.xid.Run(ctx, 10*time.Millisecond)
	e.sched, err = schedule.NewScheduler(schedule.SchedulerConfig{
		Policy: policy, Runner: n.Runner(), GPUs: e.nvml.LatestData, Processes: reader.ComputeProcesses,
		Jitter: probes.DefaultJitter, MaxDuty: probes.DefaultMaxDuty, UtilizationThreshold: probes.DefaultUtilizationThreshold,
		Options:   probes.Options{SizeBytes: probes.DefaultSizeBytes, Samples: probes.DefaultSamples},
		HostNodes: func(addr string) []int { return e.topo.LatestData().HostNodes(addr) },
		Annotate:  probes.Expectations{GPUs: e.nvml.LatestData, Topology: e.topo.LatestData}.Annotate,
		// A collective round after the first pass; the tests run more
		// with RunCollectiveRound (the interval is an hour).
		CollectiveRunner: n.Runner(),
		CollectiveOptions: probes.CollectiveOptions{SizeBytes: probes.DefaultCollectiveSizeBytes,
			SmallBytes: probes.DefaultCollectiveSmallBytes, Warmup: probes.DefaultCollectiveWarmup, Iterations: probes.DefaultCollectiveIterations,
			Samples: probes.DefaultCollectiveSamples},
		CollectiveAnnotate: probes.Expectations{GPUs: e.nvml.LatestData, Topology: e.topo.LatestData}.AnnotateCollective,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.reg = scrape.NewPedanticRegistry()
	e.sources = []namedCollector{
		{"nvml", collector.NewNVMLCollector(e.nvml)},
		{"xid", collector.NewXIDCollector(e.xid, reader)},
		{"topology", collector.NewTopologyCollector(e.topo, reader)},
		{"nic", collector.NewNICCollector(e.nic)},
		{"nearest usable NIC", collector.NewNearestNICCollector(e.nic, e.topo, reader)},
		{"process", collector.NewProcessCollector(e.place, true)},
		{"job", collector.NewJobCollector(e.place, nil)},
		{"probe", collector.NewProbeCollector(e.sched)},
		{"collective", collector.NewCollectiveCollector(e.sched)},
		{"exporter", collector.NewExporterCollector(e.nvml, e.xid, e.topo, e.place, e.nic, e.sched, n)},
	}
	for _, c := range e.sources {
		e.reg.MustRegister(c.c)
	}
	e.handler = scrape.NewHandler(e.reg, []scrape.Versioned{e.nvml, e.xid, e.topo, e.place, e.nic, e.sched, n}, 0, nil)
	testwait.Until(t, func() bool { return e.xid.Status().Up })
	e.sampled = time.Now()
	return e
}

type namedCollector struct {
	name string
	c    prometheus.Collector
}

// tick moves the node d on, reads the fault file, samples every source
// and runs a probe round, as the daemon's tickers would.
func (e *exporter) tick(t *testing.T, d time.Duration) {
	t.Helper()
	if err := e.node.Reload(); err != nil {
		t.Fatal(err)
	}
	e.sampled = e.sampled.Add(d)
	if err := e.node.Advance(e.sampled); err != nil {
		t.Fatal(err)
	}
	for _, s := range e.samplers {
		s.SampleOnce(context.Background())
	}
	e.sched.RunRound(context.Background())
}

func (e *exporter) scrape(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(e.handler)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// value is the sample of family name whose labels include want; it fails
// the test unless exactly one matches.
// hostToDeviceRatio is GPU 0's host_to_device bandwidth from host node 0
// over its probe's expectation, as the recording rule
// gpu_probe:gpulink_probe_bandwidth:ratio divides them.
func hostToDeviceRatio(t *testing.T, body string) float64 {
	t.Helper()
	measured := value(t, body, "gpulink_probe_bandwidth_bytes_per_second", map[string]string{"gpu": "0", "probe": "host_to_device", "host_numa_node": "0"})
	return measured / value(t, body, "gpulink_probe_expected_bandwidth_bytes_per_second", map[string]string{"gpu": "0", "probe": "host_to_device"})
}

func value(t *testing.T, body, name string, want map[string]string) float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	mf := mfs[name]
	if mf == nil {
		t.Fatalf("no family %s", name)
	}
	var found []*dto.Metric
	for _, m := range mf.Metric {
		match := 0
		for _, l := range m.Label {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				match++
			}
		}
		if match == len(want) {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d series of %s match %v", len(found), name, want)
	}
	m := found[0]
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	t.Fatalf("%s is neither gauge nor counter", name)
	return 0
}

func promtoolCheck(t *testing.T, name, body string) {
	t.Helper()
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		t.Log("PROMTOOL not set (make test sets it): promtool check metrics skipped")
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("%s: promtool check metrics: %v\n%s", name, err, out.String())
	}
}

// TestSimulatedExporter runs the exporter's sources and collectors on each
// profile: the scrape passes promtool, every source is up, nothing is
// broken on the healthy node, and a fault file changes the metrics its
// faults are about.
func TestSimulatedExporter(t *testing.T) {
	for _, c := range []struct {
		profile, nic, nicIf string
		host                float64 // host_to_device of GPU 0 from its own node, bytes/s
	}{
		{"dgx-h100", "mlx5_1", "ibp41s0", 0.87 * 63.01538461538462e9},
		{"aws-p5", "rdmap76s0", "", 0.9 * 15.753846153846155e9},
	} {
		t.Run(c.profile, func(t *testing.T) {
			e := newExporter(t, c.profile)
			e.tick(t, time.Second)
			e.tick(t, time.Second)
			body := e.scrape(t)
			promtoolCheck(t, c.profile, body)
			for _, src := range []string{"nvml", "xid", "topology", "process", "nic", "probe", "sim"} {
				if v := value(t, body, "gpulink_source_up", map[string]string{"source": src}); v != 1 {
					t.Errorf("source %s down", src)
				}
			}
			gpu0 := map[string]string{"gpu": "0"}
			if v := value(t, body, "gpulink_gpu_nvlinks_active", gpu0); v != 18 {
				t.Errorf("GPU 0 has %g NVLinks up", v)
			}
			if v := value(t, body, "gpulink_process_misaffine", gpu0); v != 0 {
				t.Errorf("GPU 0's process misaffine %g", v)
			}
			h2d := map[string]string{"gpu": "0", "probe": "host_to_device", "host_numa_node": "0"}
			if v := value(t, body, "gpulink_probe_bandwidth_bytes_per_second", h2d); v < 0.99*c.host || v > 1.01*c.host {
				t.Errorf("GPU 0 host_to_device %g, want %g", v, c.host)
			}
			if v := value(t, body, "gpulink_probe_runs_total", map[string]string{"gpu": "7", "result": "success"}); v != 2 {
				t.Errorf("GPU 7 successful rounds %g, want 2", v)
			}
			energy := value(t, body, "gpulink_gpu_energy_joules_total", gpu0)
			// Both profiles are 8 H100 on NVSwitch.
			allReduce := map[string]string{"collective": "all_reduce"}
			if v := value(t, body, "gpulink_collective_bus_bandwidth_bytes_per_second", allReduce); v < 0.95*370e9 || v > 1.05*370e9 {
				t.Errorf("all_reduce bus bandwidth %g, want about 370e9", v)
			}
			if v := value(t, body, "gpulink_collective_bus_bandwidth_ratio", allReduce); v < 0.78 || v > 0.86 {
				t.Errorf("all_reduce ratio %g, want about 0.82", v)
			}
			if v := value(t, body, "gpulink_collective_runs_total", map[string]string{"result": "success"}); v != 1 {
				t.Errorf("collective rounds %g after two passes within the interval, want 1", v)
			}
			pair12 := map[string]string{"gpu": "1", "peer_gpu": "2"}
			with := func(m map[string]string, k, v string) map[string]string {
				out := map[string]string{k: v}
				for k, v := range m {
					out[k] = v
				}
				return out
			}
			if v := value(t, body, "gpulink_collective_channels", with(pair12, "transport", "p2p")); v != 16 {
				t.Errorf("GPU 1 to 2: %g P2P channels, want 16", v)
			}

			// A fault file, read while running.
			faults := `faults:
- {kind: pcie_width, gpu: 0, width: 2}
- {kind: nic_down, device: ` + c.nic + `}
- {kind: throttle, gpu: 4, reason: hw_thermal_slowdown}
- {kind: xid, gpu: 5, code: 79}
- {kind: process_far_socket, gpu: 3}
- {kind: nccl_transport, transport: shm, gpus: [1]}
`
			if err := os.WriteFile(e.faults, []byte(faults), 0o644); err != nil {
				t.Fatal(err)
			}
			e.tick(t, time.Second)
			e.sched.RunCollectiveRound(context.Background())
			testwait.Until(t, func() bool { return len(e.xid.Counts()) == 1 })
			body = e.scrape(t)
			promtoolCheck(t, c.profile+" with faults", body)
			if v := value(t, body, "gpulink_gpu_pcie_link_width", gpu0); v != 2 {
				t.Errorf("GPU 0 PCIe width %g, want 2", v)
			}
			if v := value(t, body, "gpulink_probe_pcie_link_width_under_load", gpu0); v != 2 {
				t.Errorf("GPU 0 width under load %g, want 2", v)
			}
			if v := hostToDeviceRatio(t, body); v > 0.5 {
				t.Errorf("GPU 0 at x2: host_to_device ratio %g", v)
			}
			if v := value(t, body, "gpulink_nic_port_up", map[string]string{"device": c.nic}); v != 0 {
				t.Errorf("%s up %g, want 0", c.nic, v)
			}
			if c.nicIf != "" {
				if v := value(t, body, "gpulink_net_interface_up", map[string]string{"device": c.nicIf}); v != 0 {
					t.Errorf("%s up %g, want 0", c.nicIf, v)
				}
			}
			if v := value(t, body, "gpulink_gpu_clock_event_reason_active", map[string]string{"gpu": "4", "reason": "hw_thermal_slowdown"}); v != 1 {
				t.Errorf("GPU 4 hw_thermal_slowdown %g", v)
			}
			if v := value(t, body, "gpulink_gpu_xid_errors_total", map[string]string{"gpu": "5", "xid": "79"}); v != 1 {
				t.Errorf("GPU 5 XID 79 count %g", v)
			}
			if v := value(t, body, "gpulink_gpu_misaffine_processes", map[string]string{"gpu": "3"}); v != 1 {
				t.Errorf("GPU 3 misaffine processes %g", v)
			}
			if v := value(t, body, "gpulink_gpu_energy_joules_total", gpu0); v <= energy {
				t.Errorf("energy did not grow: %g -> %g", energy, v)
			}
			// GPU 1's connections through host memory where P2P is
			// expected: what NCCLWrongTransport joins.
			if v := value(t, body, "gpulink_collective_channels", with(pair12, "transport", "shm")); v != 2 {
				t.Errorf("GPU 1 to 2: %g shm channels, want 2", v)
			}
			if v := value(t, body, "gpulink_collective_expected_transport_info", with(pair12, "transport", "p2p")); v != 1 {
				t.Errorf("GPU 1 to 2 expected transport p2p: %g", v)
			}
			if v := value(t, body, "gpulink_collective_send_recv_bandwidth_ratio", map[string]string{"gpu": "1", "peer_gpu": "5"}); v > 0.1 {
				t.Errorf("GPU 1 to 5 over shared memory: ratio %g", v)
			}
			if v := value(t, body, "gpulink_collective_bus_bandwidth_ratio", allReduce); v > 0.1 {
				t.Errorf("all_reduce over GPU 1's shared memory: ratio %g", v)
			}

			// Removing them restores health.
			if err := os.WriteFile(e.faults, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			e.tick(t, time.Second)
			e.sched.RunCollectiveRound(context.Background())
			body = e.scrape(t)
			if v := value(t, body, "gpulink_gpu_pcie_link_width", gpu0); v != 16 {
				t.Errorf("GPU 0 PCIe width %g after removal", v)
			}
			if v := value(t, body, "gpulink_nic_port_up", map[string]string{"device": c.nic}); v != 1 {
				t.Errorf("%s up %g after removal", c.nic, v)
			}
			if v := value(t, body, "gpulink_collective_channels", with(pair12, "transport", "p2p")); v != 16 {
				t.Errorf("GPU 1 to 2: %g P2P channels after removal, want 16", v)
			}
			if v := value(t, body, "gpulink_gpu_clock_event_reason_active", map[string]string{"gpu": "4", "reason": "hw_thermal_slowdown"}); v != 0 {
				t.Errorf("GPU 4 hw_thermal_slowdown %g after removal", v)
			}
			if v := value(t, body, "gpulink_gpu_misaffine_processes", map[string]string{"gpu": "3"}); v != 0 {
				t.Errorf("GPU 3 misaffine processes %g after removal", v)
			}
			if v := hostToDeviceRatio(t, body); v < 0.85 {
				t.Errorf("GPU 0 host_to_device ratio %g after removal", v)
			}
			if v := value(t, body, "gpulink_source_errors_total", map[string]string{"source": "sim"}); v != 0 {
				t.Errorf("sim errors %g", v)
			}
		})
	}
}

// The series budget of the simulated DGX H100 (8 GPUs, 18 NVLinks each,
// 10 RDMA ports, 2 NUMA nodes), with every default source on as the daemon
// runs them, the exporter's own go_* and process_* series included. The
// README's "Series budget" states it per source.
const (
	// nodeBudget bounds the whole node as the daemon runs it by default,
	// probe policy idle, after a round: issue 12's 3000 (2874 today; its
	// three GPUs with a job, and their pairs, are not probed). 2982 since
	// the GPUDirect readings and three more mlx5 counters (108) came;
	// 2988 with the collective source's (its runs from 0, and the skip of
	// a round beside the jobs); 2716 since each NVLink's data counters
	// (288) gave way to the GPU's totals (16).
	nodeBudget = 3000
	// beforeBudget bounds what the node serves before its first probe
	// round: every source but the probe results (2666 today: 2558 and
	// the GPUDirect readings, ACS of the bridges on GPU paths, IOMMU,
	// peermem and dma-buf, and three more mlx5 error counters; 2671 with
	// the collective runs from 0; 2399 with the GPUs' NVLink totals in
	// place of each link's counters). The per-link NVLink speed and data
	// counters (144 + 288 series) are off by default; the NVLink
	// version and the pairs' peer-to-peer capabilities are labels of
	// the per-link and per-pair info series, not series of their own.
	// 2469 since each GPU's nearest usable NIC (24) and the NVMe drives'
	// paths to the GPUs, their mounts and GPUDirect Storage's state (46)
	// came (issues 37 and 36).
	beforeBudget = 2500
	// probeBudget bounds what a round of every GPU adds under policy
	// always, the most a round can add: about 72 series a GPU (a value
	// for each host copy from each NUMA node, copy to and from each peer
	// and latency; one expectation per probe and peer; whether the round
	// was contended; the runs, skips and cost of probing). 574 today;
	// the node serves 2973 after such a round, and 3236 with a
	// collective round (collectiveBudget), over issue 12's 3000: what
	// remains is the measurements themselves.
	probeBudget = 600
	// collectiveBudget bounds the collective source: 268 series after a
	// collective round over the 8 GPUs under policy always, the 5 runs
	// counters of them there from the start (with the skips, all there is
	// under policy idle, where the node's busy GPUs skip every round). Per
	// ordered pair (56), the channels and the expected transport; per pair
	// sent to (28), send/recv bandwidth, expectation, ratio and latency;
	// per collective (4), bus and algorithm bandwidth, expectation, ratio
	// and latency; per GPU (8), busy seconds and memory; runs (5), ranks,
	// timestamp and NCCL version; a skip reason once counted. The round's
	// 263 come on top of the probe round's.
	collectiveBudget = 272
)

// TestSeriesBudget holds the simulated DGX H100 to its series budget.
// -v prints the README's table: series and text-format bytes by source,
// after a round under policy always.
func TestSeriesBudget(t *testing.T) {
	e := newExporter(t, "dgx-h100")
	before, total, body := e.budgetScrapes(t)

	var sum, collective int
	t.Logf("| source | series | bytes | families of 40 series or more |")
	t.Logf("|---|---|---|---|")
	for _, c := range e.sources {
		reg := prometheus.NewRegistry()
		reg.MustRegister(c.c)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
		var big []string
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
			if len(mf.Metric) >= 40 {
				big = append(big, fmt.Sprintf("%s %d", strings.TrimPrefix(mf.GetName(), "gpulink_"), len(mf.Metric)))
			}
		}
		n := countSeries(buf.String())
		if c.name == "collective" {
			collective = n
		}
		t.Logf("| %s | %d | %d | %s |", c.name, n, buf.Len(), strings.Join(big, ", "))
		sum += n
	}
	t.Logf("| total | %d | %d | |", total, len(body))
	t.Logf("before the first probe round: %d series", before)
	if sum != total {
		t.Errorf("the sources add up to %d series, the scrape has %d", sum, total)
	}
	if before > beforeBudget {
		t.Errorf("the simulated DGX H100 serves %d series before its first probe round, over the budget of %d", before, beforeBudget)
	}
	if collective > collectiveBudget {
		t.Errorf("the collective source serves %d series after a round over every GPU, over the budget of %d", collective, collectiveBudget)
	}
	if total-before > probeBudget+collectiveBudget {
		t.Errorf("a probe round of every GPU and a collective round add %d series, over the budget of %d", total-before, probeBudget+collectiveBudget)
	}

	_, idle, _ := newExporterPolicy(t, "dgx-h100", schedule.PolicyIdle).budgetScrapes(t)
	t.Logf("after a round under the default policy idle: %d series", idle)
	if idle > nodeBudget {
		t.Errorf("the simulated DGX H100 serves %d series after a round under policy idle, over the budget of %d", idle, nodeBudget)
	}
}

// budgetScrapes counts the series of the node, the daemon's own metrics
// included, with every source sampled before its first probe round, and
// after two rounds; body is the second scrape.
func (e *exporter) budgetScrapes(t *testing.T) (before, after int, body string) {
	t.Helper()
	// What the daemon adds to every scrape (main.go).
	e.sources = append(e.sources, namedCollector{"go_*, process_*, build_info", selfMetrics{}})
	e.reg.MustRegister(selfMetrics{})
	if err := e.node.Advance(e.sampled.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, s := range e.samplers {
		s.SampleOnce(context.Background())
	}
	before = countSeries(e.scrape(t))
	e.tick(t, time.Second)
	e.tick(t, time.Second)
	body = e.scrape(t)
	return before, countSeries(body), body
}

// selfMetrics are the collectors the daemon registers beside the sources.
type selfMetrics struct{}

var self = []prometheus.Collector{versioncollector.NewCollector("gpulink_exporter"), collectors.NewGoCollector(),
	collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}

func (selfMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range self {
		c.Describe(ch)
	}
}

func (selfMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range self {
		c.Collect(ch)
	}
}

// countSeries counts the sample lines of an exposition.
func countSeries(body string) int {
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			n++
		}
	}
	return n
}

// The simulated p5 runs its GPU processes as Slurm job steps, one job's
// cgroup named job_4242, the other's by its SLUID with SLURM_JOB_ID=4343
// in its environment: a scrape carries each job on its process's series
// and on its GPU's gpulink_gpu_job_info.
func TestSimulatedP5SlurmJobs(t *testing.T) {
	e := newExporter(t, "aws-p5")
	e.tick(t, time.Second)
	body := e.scrape(t)
	for _, c := range []struct {
		gpu, pid, job, sluid string
	}{
		{"0", "3131", "4242", ""},
		{"5", "3535", "4343", sim.P5JobSLUID},
	} {
		value(t, body, "gpulink_process_misaffine", map[string]string{"gpu": c.gpu, "pid": c.pid, "slurm_job_id": c.job, "slurm_step": "0"})
		value(t, body, "gpulink_gpu_job_info", map[string]string{"gpu": c.gpu, "job_id": c.job, "job_sluid": c.sluid, "source": "cgroup"})
	}
	if n := strings.Count(body, "\ngpulink_gpu_job_info{"); n != 2 {
		t.Errorf("%d gpulink_gpu_job_info series, want 2:\n%s", n, body)
	}
	promtoolCheck(t, "aws-p5 with jobs", body)
}

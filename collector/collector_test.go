package collector_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
	"github.com/gpulink/gpulink_exporter/internal/testwait"
)

// node is the daemon's NVML wiring over a fake machine.
type node struct {
	m       *nvmlmodel.Library
	reader  *nvml.Reader
	nvml    *sampler.Sampler[*nvml.Snapshot]
	xid     *nvml.XIDWatcher
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	metrics *collector.NVMLCollector
}

func newNode(t *testing.T, m *nvmlmodel.Library) *node {
	t.Helper()
	n := &node{m: m, reader: nvml.NewReader(m, "", nil)}
	n.nvml = sampler.New[*nvml.Snapshot]("nvml", n.reader, sampler.Options{Interval: time.Hour, Timeout: 200 * time.Millisecond})
	n.xid = nvml.NewXIDWatcher(n.reader, nil)
	n.xid.Wait = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	t.Cleanup(cancel)
	go n.xid.Run(ctx, 10*time.Millisecond)
	n.metrics = collector.NewNVMLCollector(n.nvml, collector.WithNVLinkSpeed(true))
	n.reg = prometheus.NewRegistry()
	n.reg.MustRegister(n.metrics, collector.NewXIDCollector(n.xid, n.reader),
		collector.NewExporterCollector(n.nvml, n.xid))
	n.nvml.SampleOnce(context.Background())
	return n
}

func (n *node) scrape(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape status %d: %s", resp.StatusCode, b)
	}
	return string(b)
}

func TestCollectorsLint(t *testing.T) {
	n := newNode(t, nvmlmodel.NewDGXH100())
	n.m.SendXID(2, 79)
	testwait.Until(t, func() bool { return len(n.xid.Counts()) == 1 })
	for name, c := range map[string]prometheus.Collector{
		"nvml":     n.metrics,
		"xid":      collector.NewXIDCollector(n.xid, n.reader),
		"exporter": collector.NewExporterCollector(n.nvml, n.xid),
	} {
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s: %s", name, p.Metric, p.Text)
		}
	}
}

func TestH200PairMetrics(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	m.Update(func() {
		m.GPUs[0].UUID = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
		m.GPUs[1].UUID = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
		m.GPUs[1].ClockReasons = 0x40
		m.GPUs[1].PCIeGen = 3
		m.GPUs[0].NVLinks[17].Up = false
		m.GPUs[1].NVLinks[17].Up = false
	})
	n := newNode(t, m)
	g0 := []string{"gpu", "0", "pci_bus_id", "0000:00:06.0", "uuid", "GPU-aaaaaaaa-0000-0000-0000-000000000000"}
	g1 := []string{"gpu", "1", "pci_bus_id", "0000:00:07.0", "uuid", "GPU-bbbbbbbb-0000-0000-0000-000000000000"}
	info := func(g []string, serial string) string {
		return labels(append([]string{"compute_capability", "9.0", "cuda_driver_version", "12.4", "driver_version", "550.54.15",
			"name", "NVIDIA H200 141GB HBM3e", "numa_node", "", "serial", serial, "vbios_version", "96.00.99.00.01"}, g...)...)
	}
	want := `
# HELP gpulink_gpu_info GPU identity; value 1. numa_node is empty where the platform does not say.
# TYPE gpulink_gpu_info gauge
gpulink_gpu_info` + info(g0, "1653220000000") + ` 1
gpulink_gpu_info` + info(g1, "1653220000001") + ` 1
# HELP gpulink_gpu_pcie_link_generation PCIe link generation now. Idle GPUs lower it to save power: compare under load.
# TYPE gpulink_gpu_pcie_link_generation gauge
gpulink_gpu_pcie_link_generation` + labels(g0...) + ` 5
gpulink_gpu_pcie_link_generation` + labels(g1...) + ` 3
# HELP gpulink_gpu_pair_info How two GPUs reach each other, as the nvidia-smi topo -m cell (NV#, PIX, PXB, PHB, NODE, SYS), and whether NVML supports peer-to-peer access of each kind between them: p2p_read, p2p_write, p2p_nvlink, p2p_atomics, 1 or 0 (empty where NVML does not say); value 1.
# TYPE gpulink_gpu_pair_info gauge
gpulink_gpu_pair_info{gpu="0",level="NV17",p2p_atomics="1",p2p_nvlink="1",p2p_read="1",p2p_write="1",peer_gpu="1"} 1
gpulink_gpu_pair_info{gpu="1",level="NV17",p2p_atomics="1",p2p_nvlink="1",p2p_read="1",p2p_write="1",peer_gpu="0"} 1
# HELP gpulink_gpu_nvlinks_active NVLinks that are up.
# TYPE gpulink_gpu_nvlinks_active gauge
gpulink_gpu_nvlinks_active` + labels(g0...) + ` 17
gpulink_gpu_nvlinks_active` + labels(g1...) + ` 17
# HELP gpulink_gpu_clock_event_reason_active 1 if this reason is holding clocks down now (nvidia-smi's Clocks Event Reasons).
# TYPE gpulink_gpu_clock_event_reason_active gauge
`
	for i, g := range [][]string{g0, g1} {
		for _, r := range nvml.ClockEventReasons {
			v := "0"
			if i == 1 && r.Name == "hw_thermal_slowdown" {
				v = "1"
			}
			want += "gpulink_gpu_clock_event_reason_active" + labels(append([]string{"reason", r.Name}, g...)...) + " " + v + "\n"
		}
	}
	err := testutil.GatherAndCompare(n.reg, strings.NewReader(want), "gpulink_gpu_info", "gpulink_gpu_pcie_link_generation",
		"gpulink_gpu_pair_info", "gpulink_gpu_nvlinks_active", "gpulink_gpu_clock_event_reason_active")
	if err != nil {
		t.Error(err)
	}

	// Every family the issue asks for is present on a healthy H200.
	body := n.scrape(t)
	for _, family := range []string{
		"gpulink_driver_info", "gpulink_gpu_lost", "gpulink_gpu_performance_state", "gpulink_gpu_clock_hertz",
		"gpulink_gpu_clock_max_hertz", "gpulink_gpu_clock_event_reason_seconds_total", "gpulink_gpu_temperature_celsius",
		"gpulink_gpu_power_watts", "gpulink_gpu_power_limit_watts", "gpulink_gpu_energy_joules_total",
		"gpulink_gpu_utilization_ratio", "gpulink_gpu_memory_utilization_ratio", "gpulink_gpu_memory_used_bytes",
		"gpulink_gpu_memory_total_bytes", "gpulink_gpu_ecc_errors_volatile_total", "gpulink_gpu_ecc_errors_aggregate_total",
		"gpulink_gpu_remapped_rows", "gpulink_gpu_row_remap_pending", "gpulink_gpu_row_remap_failed",
		"gpulink_gpu_pcie_link_max_generation", "gpulink_gpu_pcie_link_gpu_max_generation", "gpulink_gpu_pcie_link_width",
		"gpulink_gpu_pcie_link_max_width", "gpulink_gpu_pcie_replays_total", "gpulink_gpu_pcie_correctable_errors_total",
		"gpulink_gpu_memory_reserved_bytes", "gpulink_gpu_nvlinks",
		"gpulink_gpu_nvlink_up", "gpulink_gpu_nvlink_speed_bytes_per_second",
		"gpulink_gpu_nvlink_remote_info", "gpulink_gpu_nvlink_errors_total", "gpulink_gpu_nvlink_transmit_bytes_total",
		"gpulink_gpu_nvlink_receive_bytes_total", "gpulink_gpu_pair_nvlinks",
		"gpulink_gpu_compute_mode", "gpulink_gpu_mig_enabled",
		`gpulink_source_up{source="nvml"} 1`, `gpulink_source_last_success_timestamp_seconds{source="nvml"}`,
	} {
		if !strings.Contains(body, "\n"+family) {
			t.Errorf("scrape lacks %s", family)
		}
	}
	if !strings.Contains(body, `gpulink_source_sample_duration_seconds{source="nvml"}`) ||
		strings.Contains(body, `gpulink_source_sample_duration_seconds{source="xid"}`) {
		t.Error("sample duration must be there for the nvml sampler and absent for the XID watcher")
	}
	if !strings.Contains(body, `gpulink_gpu_nvlink_up`+labels(append([]string{"link", "17"}, g0...)...)+` 0`) {
		t.Error("the down link is not reported down")
	}
	if strings.Contains(body, `link="17",remote_pci_bus_id`) {
		t.Error("a down link reports a remote end")
	}
	// An active link's NVLink version is a label of its remote end.
	if !regexp.MustCompile(`\ngpulink_gpu_nvlink_remote_info\{gpu="0",link="0",[^}]*,version="\d+"\} 1\n`).MatchString(body) {
		t.Error("no NVLink version on link 0's remote end")
	}
}

// The peer-to-peer capabilities NVML does not support are 0 on the pair,
// those it does not answer for empty; a link whose version NVML does not
// give has an empty version.
func TestPairP2PAndLinkVersionLabels(t *testing.T) {
	snap := &nvml.Snapshot{
		GPUs: []nvml.GPUState{{Identity: nvml.Identity{Index: 0, UUID: "GPU-a", PCIBusID: "0000:00:06.0", NVLinkCount: 1},
			NVLinks: []nvml.NVLink{{Link: 0, Active: true, RemotePCIBusID: "0000:00:07.0", RemoteType: "gpu"}}}},
		Pairs: []nvml.Pair{{GPU: 0, Peer: 1, Level: "SYS", P2P: map[string]bool{"read": true, "write": false}}},
	}
	got := gathered(t, collector.NewNVMLCollector(fixed(snap)))
	for _, key := range []string{
		"gpulink_gpu_pair_info" + labels("gpu", "0", "level", "SYS", "p2p_atomics", "", "p2p_nvlink", "", "p2p_read", "1", "p2p_write", "0", "peer_gpu", "1"),
		"gpulink_gpu_nvlink_remote_info" + labels("gpu", "0", "link", "0", "pci_bus_id", "0000:00:06.0", "remote_pci_bus_id", "0000:00:07.0",
			"remote_type", "gpu", "uuid", "GPU-a", "version", ""),
	} {
		if v, ok := got[key]; !ok || v != 1 {
			t.Errorf("%s = %g (present %v), want 1", key, v, ok)
		}
	}
}

// Page retirement exists on GPUs before A100 only; model one.
func TestRetiredPages(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	m.Update(func() {
		m.GPUs[0].RetiredPages = map[gonvml.PageRetirementCause]int{
			gonvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: 2, gonvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: 1}
		m.GPUs[0].RetiredPending = true
	})
	body := newNode(t, m).scrape(t)
	g0 := `gpu="0",pci_bus_id="0000:00:06.0",uuid="` + m.GPUs[0].UUID + `"`
	for _, want := range []string{
		`gpulink_gpu_retired_pages{cause="double_bit_ecc",` + g0 + `} 1`,
		`gpulink_gpu_retired_pages{cause="multiple_single_bit_ecc",` + g0 + `} 2`,
		`gpulink_gpu_retired_pages_pending{` + g0 + `} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if strings.Contains(body, `gpulink_gpu_retired_pages{cause="double_bit_ecc",gpu="1"`) {
		t.Error("retired pages reported for a GPU that does not support them")
	}
}

func TestLostGPUIsReported(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	n := newNode(t, m)
	m.Update(func() { m.GPUs[1].Lost = true })
	m.SendXID(1, 79)
	n.nvml.SampleOnce(context.Background())
	testwait.Until(t, func() bool { return len(n.xid.Counts()) == 1 })
	body := n.scrape(t)
	g1 := `gpu="1",pci_bus_id="0000:00:07.0",uuid="` + m.GPUs[1].UUID + `"`
	for _, want := range []string{
		`gpulink_gpu_lost{` + g1 + `} 1`,
		`gpulink_gpu_xid_errors_total{` + g1 + `,xid="79"} 1`,
		`gpulink_gpu_xid_events_total{` + g1 + `} 1`,
		`gpulink_gpu_xid_events_total{gpu="0",pci_bus_id="0000:00:06.0",uuid="` + m.GPUs[0].UUID + `"} 0`,
		`gpulink_source_up{source="nvml"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if strings.Contains(body, `gpulink_gpu_power_watts{`+g1) {
		t.Error("a lost GPU still exports readings")
	}
	if !strings.Contains(body, `gpulink_gpu_power_watts{gpu="0"`) {
		t.Error("the healthy GPU lost its readings")
	}
}

// A hung NVML call must never hold up /metrics: the scrape answers from the
// last snapshot and says the source is down and stale.
func TestHungNVMLDoesNotBlockScrape(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	n := newNode(t, m)
	before := n.nvml.Status().LastSuccess

	hang := make(chan struct{})
	m.Update(func() { m.GPUs[1].Hang = hang })
	defer close(hang)
	n.nvml.SampleOnce(context.Background()) // returns at its 200ms deadline

	done := make(chan string, 1)
	go func() { done <- n.scrape(t) }()
	var body string
	select {
	case body = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("scrape blocked behind a hung NVML call")
	}
	if !strings.Contains(body, `gpulink_source_up{source="nvml"} 0`) {
		t.Error("source not reported down while its sample hangs")
	}
	if n.nvml.Status().LastSuccess != before {
		t.Error("last success moved while the source hung")
	}
	if !strings.Contains(body, `gpulink_gpu_power_watts{gpu="1"`) {
		t.Error("the last snapshot's readings were dropped while the source hung")
	}
}

func TestNoLibraryServesSelfMetrics(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	m.NoLibrary = true
	n := newNode(t, m)
	body := n.scrape(t)
	if !strings.Contains(body, `gpulink_source_up{source="nvml"} 0`) || !strings.Contains(body, `gpulink_source_up{source="xid"} 0`) {
		t.Error("sources not reported down without a library")
	}
	if strings.Contains(body, "gpulink_gpu_") {
		t.Error("GPU series without a library")
	}
}

// TestPromtoolCheckMetrics runs the real promtool over a full scrape of a
// DGX H100 with every source on: NVML and XIDs from the fake, topology, NICs
// and process placement from the faulted fixture tree. make test sets
// PROMTOOL; a plain go test skips it.
func TestPromtoolCheckMetrics(t *testing.T) {
	if os.Getenv("PROMTOOL") == "" {
		t.Skip("PROMTOOL not set (make test sets it)")
	}
	pn := newPlacementNode(t, "dgx-h100-faults")
	n := &node{m: pn.m, reader: pn.reader}
	n.nvml = sampler.New[*nvml.Snapshot]("nvml", n.reader, sampler.Options{Interval: time.Hour})
	n.nvml.SampleOnce(context.Background())
	n.xid = nvml.NewXIDWatcher(n.reader, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go n.xid.Run(ctx, 10*time.Millisecond)
	nic := sampler.New[*nic.Snapshot]("nic", &nic.Reader{FS: pn.fs}, sampler.Options{Interval: time.Hour})
	nic.SampleOnce(context.Background())
	n.reg = prometheus.NewRegistry()
	n.reg.MustRegister(collector.NewNVMLCollector(n.nvml), collector.NewXIDCollector(n.xid, n.reader),
		collector.NewTopologyCollector(pn.topo, n.reader), collector.NewNICCollector(nic),
		collector.NewNearestNICCollector(nic, pn.topo, n.reader),
		collector.NewProcessCollector(pn.place, true),
		collector.NewExporterCollector(n.nvml, n.xid, pn.topo, nic, pn.place))
	n.m.SendXID(0, 48)
	testwait.Until(t, func() bool { return len(n.xid.Counts()) == 1 })
	body := n.scrape(t)
	promtoolCheck(t, "dgx-h100-faults", body)
	for _, family := range []string{"gpulink_gpu_info", "gpulink_topology_gpu_nic_path", "gpulink_topology_gpu_nearest_usable_nic_path", "gpulink_nic_port_up",
		"gpulink_net_interface_up", "gpulink_process_misaffine", "gpulink_numa_node_distance", "gpulink_pcie_link_width"} {
		if !strings.Contains(body, "\n"+family+"{") {
			t.Errorf("family %s missing from the scrape", family)
		}
	}
	if lines := strings.Count(body, "\n"); lines < 2000 {
		t.Errorf("only %d lines in a DGX H100 scrape; families missing?", lines)
	}
}

// promtoolCheck runs the real promtool check metrics over an exposition.
// make test sets PROMTOOL; a plain go test skips.
func promtoolCheck(t *testing.T, name, body string) {
	t.Helper()
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		t.Skip("PROMTOOL not set (make test sets it)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("%s: promtool check metrics: %v\n%s", name, err, out.String())
	}
}

// exposition gathers collectors into the text format.
func exposition(t *testing.T, cs ...prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cs...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&body, mf); err != nil {
			t.Fatal(err)
		}
	}
	return body.String()
}

// labels formats name/value pairs as the text exposition does: sorted.
func labels(kv ...string) string {
	var pairs []string
	for i := 0; i+1 < len(kv); i += 2 {
		pairs = append(pairs, kv[i]+`="`+kv[i+1]+`"`)
	}
	sort.Strings(pairs)
	return "{" + strings.Join(pairs, ",") + "}"
}

// fixedSource serves one fixed snapshot, or none while snap is nil.
type fixedSource[T any] struct {
	snap *sampler.Snapshot[T]
}

func (s fixedSource[T]) Latest() *sampler.Snapshot[T] { return s.snap }

// fixed serves data as a snapshot taken at a fixed time.
func fixed[T any](data T) fixedSource[T] {
	return fixedSource[T]{&sampler.Snapshot[T]{Data: data, Taken: time.Unix(1700000000, 0)}}
}

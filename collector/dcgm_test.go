package collector_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/dcgm"
	"github.com/gpulink/gpulink_exporter/internal/dcgm/dcgmtest"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape/scrapetest"
)

var fakeDCGMOnce sync.Once

func dcgmSnapshot() *dcgm.Snapshot {
	health := func(bad string, r dcgm.HealthResult) []dcgm.SystemHealth {
		var out []dcgm.SystemHealth
		for _, s := range dcgm.HealthSystems() {
			h := dcgm.SystemHealth{System: s, Result: dcgm.HealthPass}
			if s == bad {
				h.Result, h.Incidents = r, 2
			}
			out = append(out, h)
		}
		return out
	}
	return &dcgm.Snapshot{
		Mode: "standalone", Version: "4.2.3", LibraryVersion: "4.1.1", Profiling: true,
		GPUs: []dcgm.GPU{
			{ID: 0, Index: 0, UUID: "GPU-a", PCIBusID: "0000:18:00.0", Health: health("nvlink", dcgm.HealthFail),
				Profiling: dcgm.Profiling{SMActive: sampler.Some(0.5), PCIeTransmit: sampler.Some(1.5e9), NVLinkReceive: sampler.Some(4e10)}},
			// No profiling values and no health (its check failed).
			{ID: 1, Index: 1, UUID: "GPU-b", PCIBusID: "0000:2a:00.0"},
		},
	}
}

func TestDCGMExposition(t *testing.T) {
	c := collector.NewDCGMCollector(fixed(dcgmSnapshot()))
	scrapetest.CheckText(t, c)
	g0 := labels("gpu", "0", "uuid", "GPU-a", "pci_bus_id", "0000:18:00.0")
	status := func(system, st string, v string) string {
		return "gpulink_dcgm_health_status" + labels("gpu", "0", "uuid", "GPU-a", "pci_bus_id", "0000:18:00.0",
			"system", system, "status", st) + " " + v + "\n"
	}
	var want strings.Builder
	want.WriteString(`# HELP gpulink_dcgm_health_status DCGM health watch verdict on one system of the GPU: 1 for the current status (pass, warn, fail), 0 for the others.
# TYPE gpulink_dcgm_health_status gauge
`)
	for _, s := range []string{"memory", "nvlink", "pcie", "power", "thermal"} {
		for _, st := range []string{"fail", "pass", "warn"} {
			v := "0"
			if (s == "nvlink" && st == "fail") || (s != "nvlink" && st == "pass") {
				v = "1"
			}
			want.WriteString(status(s, st, v))
		}
	}
	want.WriteString(`# HELP gpulink_dcgm_info DCGM the exporter reads; value 1. version is the host engine's, library_version the client library's; mode is standalone (nv-hostengine) or embedded.
# TYPE gpulink_dcgm_info gauge
gpulink_dcgm_info{library_version="4.1.1",mode="standalone",version="4.2.3"} 1
# HELP gpulink_dcgm_nvlink_receive_bytes_per_second NVLink traffic into the GPU over all its links, averaged over DCGM's update interval (DCGM_FI_PROF_NVLINK_RX_BYTES).
# TYPE gpulink_dcgm_nvlink_receive_bytes_per_second gauge
gpulink_dcgm_nvlink_receive_bytes_per_second` + g0 + ` 4e+10
# HELP gpulink_dcgm_pcie_transmit_bytes_per_second PCIe traffic from the GPU, headers included, averaged over DCGM's update interval (DCGM_FI_PROF_PCIE_TX_BYTES).
# TYPE gpulink_dcgm_pcie_transmit_bytes_per_second gauge
gpulink_dcgm_pcie_transmit_bytes_per_second` + g0 + ` 1.5e+09
# HELP gpulink_dcgm_sm_active_ratio Share of time at least one warp was resident on an SM, averaged over all SMs (DCGM_FI_PROF_SM_ACTIVE).
# TYPE gpulink_dcgm_sm_active_ratio gauge
gpulink_dcgm_sm_active_ratio` + g0 + ` 0.5
`)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want.String()),
		"gpulink_dcgm_health_status", "gpulink_dcgm_info", "gpulink_dcgm_nvlink_receive_bytes_per_second",
		"gpulink_dcgm_pcie_transmit_bytes_per_second", "gpulink_dcgm_sm_active_ratio",
		"gpulink_dcgm_tensor_active_ratio"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "gpulink_dcgm_health_incidents"); n != 5 {
		t.Errorf("health incident series: %d, want 5 (GPU 0's systems)", n)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	promtoolCheck(t, "dcgm", exposition(t, c))
}

// TestDCGMScrapeThroughFakeLibrary wires the source as the daemon does,
// over a fake libdcgm.so.4 through go-dcgm's cgo path, and checks that a
// scrape answers at once while the engine hangs, and reports the source
// down and back.
func TestDCGMScrapeThroughFakeLibrary(t *testing.T) {
	// A process keeps the libdcgm.so.4 it loaded first, and refuses
	// another: a later run of this test (-count) reaches it by name.
	lib := dcgm.DefaultLibrary
	fakeDCGMOnce.Do(func() { lib = dcgmtest.Build(t) })
	engine, err := dcgmtest.NewEngine(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.Set("gpus", "1", "uuid.0", "GPU-a", "value.1002.0", "0.25", "health.0.16", "10:DBE pending"); err != nil {
		t.Fatal(err)
	}
	r := dcgm.NewReader(dcgm.Config{Library: lib})
	t.Cleanup(r.Close)
	s := sampler.New[*dcgm.Snapshot]("dcgm", r, sampler.Options{Interval: time.Hour, Timeout: 100 * time.Millisecond})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector.NewDCGMCollector(s), collector.NewExporterCollector(s))
	n := &node{reg: reg}
	s.SampleOnce(context.Background())
	body := n.scrape(t)
	g := labels("gpu", "0", "uuid", "GPU-a", "pci_bus_id", "0000:18:00.0")
	for _, line := range []string{
		`gpulink_source_up{source="dcgm"} 1`,
		"gpulink_dcgm_sm_active_ratio" + g + " 0.25",
		`gpulink_dcgm_health_status{gpu="0",pci_bus_id="0000:18:00.0",status="warn",system="memory",uuid="GPU-a"} 1`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}

	if err := engine.Set("engine", "hang"); err != nil {
		t.Fatal(err)
	}
	s.SampleOnce(context.Background())
	start := time.Now()
	body = n.scrape(t)
	if took := time.Since(start); took > time.Second {
		t.Errorf("scrape took %v while the engine hung", took)
	}
	if !strings.Contains(body, `gpulink_source_up{source="dcgm"} 0`+"\n") ||
		!strings.Contains(body, "gpulink_dcgm_sm_active_ratio"+g+" 0.25\n") {
		t.Errorf("hung engine: want the source down with the last values, got\n%s", body)
	}

	// Gone, then back as a new engine.
	if err := engine.Set("engine", "down"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); s.Status().Stalled && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	s.SampleOnce(context.Background())
	if s.Status().Up {
		t.Errorf("engine down: source up")
	}
	if err := engine.Set("engine", "up", "generation", "2", "value.1002.0", "0.75"); err != nil {
		t.Fatal(err)
	}
	s.SampleOnce(context.Background())
	body = n.scrape(t)
	if !strings.Contains(body, `gpulink_source_up{source="dcgm"} 1`+"\n") ||
		!strings.Contains(body, "gpulink_dcgm_sm_active_ratio"+g+" 0.75\n") {
		t.Errorf("engine back: want the source up with new values, got\n%s", body)
	}
}

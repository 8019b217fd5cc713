package healthcheck

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpulink/gpulink_exporter/deploy"
)

// node is what a two-GPU node's exporter serves of its links, each GPU
// with four NVLinks; the fields break it.
type node struct {
	width      [2]int  // PCIe width now (max 16)
	linkDown   [2]int  // an NVLink down (-1 none)
	underLoad  int     // the width a probe read under load on GPU 1 (0: no probe result)
	nvmlUp     float64 // gpulink_source_up{source="nvml"}
	noNVMLUp   bool    // no gpulink_source_up{source="nvml"} at all
	extraLines string
}

func healthy() node { return node{width: [2]int{16, 16}, linkDown: [2]int{-1, -1}, nvmlUp: 1} }

func (n node) families(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	var b strings.Builder
	gauge := func(name string) { fmt.Fprintf(&b, "# TYPE %s gauge\n", name) }
	id := func(g int) string {
		return fmt.Sprintf(`gpu="%d",pci_bus_id="0000:%02x:00.0",uuid="GPU-%d"`, g, 0x18+g, g)
	}
	gauge("gpulink_gpu_pcie_link_width")
	for g := range 2 {
		fmt.Fprintf(&b, "gpulink_gpu_pcie_link_width{%s} %d\n", id(g), n.width[g])
	}
	gauge("gpulink_gpu_pcie_link_max_width")
	for g := range 2 {
		fmt.Fprintf(&b, "gpulink_gpu_pcie_link_max_width{%s} 16\n", id(g))
	}
	gauge("gpulink_gpu_pcie_link_generation")
	gauge("gpulink_gpu_pcie_link_max_generation")
	gauge("gpulink_gpu_utilization_ratio")
	for g := range 2 {
		// Idle: the generation is down to 1, which is no fault.
		fmt.Fprintf(&b, "gpulink_gpu_pcie_link_generation{%s} 1\n", id(g))
		fmt.Fprintf(&b, "gpulink_gpu_pcie_link_max_generation{%s} 5\n", id(g))
		fmt.Fprintf(&b, "gpulink_gpu_utilization_ratio{%s} 0\n", id(g))
	}
	if n.underLoad != 0 {
		gauge("gpulink_probe_pcie_link_width_under_load")
		fmt.Fprintf(&b, "gpulink_probe_pcie_link_width_under_load{%s} %d\n", id(1), n.underLoad)
	}
	gauge("gpulink_gpu_nvlink_up")
	gauge("gpulink_gpu_nvlinks_active")
	for g := range 2 {
		active := 0
		for l := range 4 {
			up := 1
			if l == n.linkDown[g] {
				up = 0
			}
			active += up
			fmt.Fprintf(&b, "gpulink_gpu_nvlink_up{%s,link=\"%d\"} %d\n", id(g), l, up)
		}
		fmt.Fprintf(&b, "gpulink_gpu_nvlinks_active{%s} %d\n", id(g), active)
	}
	if !n.noNVMLUp {
		gauge("gpulink_source_up")
		fmt.Fprintf(&b, "gpulink_source_up{source=\"nvml\"} %g\n", n.nvmlUp)
	}
	b.WriteString(n.extraLines)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func checker(t *testing.T) *Checker {
	t.Helper()
	rules, err := LoadRules("gpulink.rules.yml", deploy.Rules, DefaultAlerts)
	if err != nil {
		t.Fatal(err)
	}
	return &Checker{Rules: rules, Sources: []string{"nvml"}, Instance: "node1:9849", Job: "gpulink"}
}

// t0 is a time just after a 5-minute step, where the rules' [1d:5m]
// subqueries evaluate.
var t0 = time.Date(2026, 12, 7, 3, 0, 1, 0, time.UTC)

func TestHealthyNodeIsOK(t *testing.T) {
	c, h := checker(t), NewHistory()
	r := c.Check(context.Background(), h, healthy().families(t), t0)
	if r.Status != OK || r.Line() != "OK: links fit for jobs" {
		t.Fatalf("healthy node: %v %q", r.Status, r.Line())
	}
}

func TestPCIeWidthNamesGPUValueAndExpected(t *testing.T) {
	n := healthy()
	n.width[0] = 8
	r := checker(t).Check(context.Background(), NewHistory(), n.families(t), t0)
	// The comparison is in the recording rule the alert reads
	// (gpu_property:gpulink_gpu_pcie_link:below_max), found there.
	want := "NOT OK: GPUPCIeLinkDowntrained gpu=0 value=8 expected=16"
	if r.Status != NotOK || r.Line() != want {
		t.Fatalf("x8 link: %v %q, want %q", r.Status, r.Line(), want)
	}
	if d := r.Findings[0].Description; !strings.Contains(d, "GPU 0 (0000:18:00.0) on node1:9849 runs at width 8") {
		t.Errorf("description as Prometheus expands it: %q", d)
	}
}

// A link below max in both width and generation: the alert's value is the
// width, and what it is compared against is the width's maximum, not the
// generation's, even where the two readings are the same number.
func TestPCIeWidthAndGenerationExpectedIsWidths(t *testing.T) {
	n := healthy()
	n.width[0] = 4
	n.extraLines = "# TYPE gpulink_probe_pcie_link_generation_under_load gauge\n" +
		`gpulink_probe_pcie_link_generation_under_load{gpu="0",pci_bus_id="0000:18:00.0",uuid="GPU-0"} 4` + "\n"
	r := checker(t).Check(context.Background(), NewHistory(), n.families(t), t0)
	if want := "NOT OK: GPUPCIeLinkDowntrained gpu=0 value=4 expected=16"; r.Line() != want {
		t.Fatalf("x4 Gen4 link: %q, want %q", r.Line(), want)
	}
	if d := r.Findings[0].Description; !strings.Contains(d, "runs at generation 4 and width 4,") {
		t.Errorf("description names both: %q", d)
	}
}

// A link down that earlier checks saw up fires the alert's first branch,
// which names the link; on a node never seen healthy the second branch
// (fewer links than the node's best) fires, and the check names the link
// from the alert's own condition on its reading.
func TestNVLinkDownNamesLink(t *testing.T) {
	c, h := checker(t), NewHistory()
	for i := range 7 {
		if r := c.Check(context.Background(), h, healthy().families(t), t0.Add(time.Duration(i)*time.Minute)); r.Status != OK {
			t.Fatalf("healthy: %s", r.Line())
		}
	}
	n := healthy()
	n.linkDown[1] = 3
	r := c.Check(context.Background(), h, n.families(t), t0.Add(7*time.Minute))
	if want := "NOT OK: GPUNVLinkDown gpu=1 link=3 value=0"; r.Line() != want {
		t.Errorf("after a healthy history: %q, want %q", r.Line(), want)
	}

	r = c.Check(context.Background(), NewHistory(), n.families(t), t0)
	if want := "NOT OK: GPUNVLinkDown gpu=1 link=3 value=3 expected=4"; r.Line() != want {
		t.Errorf("no history: %q, want %q", r.Line(), want)
	}
}

// A reading the exporter stops serving ends, as a scrape marks it stale:
// a probe's x8 under load, then no probe result, is healthy at once and
// not for the five minutes an instant query would otherwise look back.
func TestSeriesGoneIsStale(t *testing.T) {
	c, h := checker(t), NewHistory()
	n := healthy()
	n.underLoad = 8
	if r := c.Check(context.Background(), h, n.families(t), t0); r.Status != NotOK {
		t.Fatalf("x8 under load: %s", r.Line())
	}
	if r := c.Check(context.Background(), h, healthy().families(t), t0.Add(10*time.Second)); r.Status != OK {
		t.Fatalf("probe result gone: %s", r.Line())
	}
}

func TestSourceDownIsUnknown(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    func(*node)
		why  string
	}{
		{"nvml down", func(n *node) { n.nvmlUp = 0 }, "source nvml (gpulink_source_up 0)"},
		{"no nvml", func(n *node) { n.noNVMLUp = true }, "source nvml (no gpulink_source_up)"},
	} {
		n := healthy()
		n.width[0] = 8 // a fault seen through a source that is down is not judged
		tc.n(&n)
		r := checker(t).Check(context.Background(), NewHistory(), n.families(t), t0)
		if r.Status != Unknown || !strings.Contains(r.Line(), tc.why) {
			t.Errorf("%s: %v %q, want unknown naming %q", tc.name, r.Status, r.Line(), tc.why)
		}
	}
}

func TestLoadRulesNamesWhatIsWrong(t *testing.T) {
	_, err := LoadRules("r.yml", deploy.Rules, []string{"GPUNVLinkDown", "GPULinkNoSuchAlert"})
	if err == nil || !strings.Contains(err.Error(), "r.yml has no alert GPULinkNoSuchAlert (it has GPULost,") {
		t.Errorf("unknown alert: %v", err)
	}
	bad := "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up ==\n"
	_, err = LoadRules("bad.yml", []byte(bad), []string{"A"})
	if err == nil || !strings.Contains(err.Error(), "bad.yml: group g, rule 1 (alert A): expr:") {
		t.Errorf("bad expression: %v", err)
	}
	r, err := LoadRules("gpulink.rules.yml", deploy.Rules, DefaultAlerts)
	if err != nil {
		t.Fatal(err)
	}
	// GPUNVLinkDown reads two recording rules: the node's best NVLink
	// count, and whether each link was seen up, which reads back its own
	// value of the last hour (issue 37: a recorded "was it ever up" in
	// place of a day's subquery). GPUPCIeLinkDowntrained reads its links'
	// readings below max by property (issue 37: one alert per GPU). The
	// history kept covers that hour.
	got := map[string]bool{}
	for _, rc := range r.records {
		got[rc.name] = true
	}
	if len(r.records) != 3 || !got["instance:gpulink_gpu_nvlinks_active:max"] || !got["gpu_link:gpulink_gpu_nvlink_up:seen_up"] ||
		!got["gpu_property:gpulink_gpu_pcie_link:below_max"] {
		t.Errorf("recording rules read: %v", r.records)
	}
	for _, a := range r.alerts {
		if want := map[string]int{"GPUPCIeLinkDowntrained": 1, "GPUNVLinkDown": 2}[a.name]; len(a.reads) != want {
			t.Errorf("%s reads %d recording rules, want %d", a.name, len(a.reads), want)
		}
	}
	if r.window < time.Hour {
		t.Errorf("window %v, less than the hour GPUNVLinkDown's seen_up looks back", r.window)
	}
}

// The history survives the state file, thinned to a sample a minute
// (the latest always kept) and to the rules' window.
func TestHistoryStateFile(t *testing.T) {
	c, h := checker(t), NewHistory()
	for i := range 30 {
		c.Check(context.Background(), h, healthy().families(t), t0.Add(time.Duration(i)*5*time.Second))
	}
	name := filepath.Join(t.TempDir(), "sub", "state")
	if err := h.Save(name); err != nil {
		t.Fatal(err)
	}
	h2, err := LoadHistory(name)
	if err != nil {
		t.Fatal(err)
	}
	s := h2.series[`{__name__="gpulink_gpu_nvlink_up", gpu="0", instance="node1:9849", job="gpulink", link="0", pci_bus_id="0000:18:00.0", uuid="GPU-0"}`]
	if s == nil {
		t.Fatalf("no nvlink_up series kept: %d series", len(h2.series))
	}
	// 0s, 60s, 120s and the latest, 145s.
	if want := []int64{0, 60_000, 120_000, 145_000}; len(s.t) != len(want) {
		t.Fatalf("times %v, want offsets %v", s.t, want)
	} else {
		for i := range want {
			if s.t[i]-t0.UnixMilli() != want[i] {
				t.Fatalf("times %v, want offsets %v", s.t, want)
			}
		}
	}
	if h2.series[`{__name__="gpulink_source_up", instance="node1:9849", job="gpulink", source="nvml"}`] != nil {
		t.Error("kept a series no rule reads")
	}
	// Older than the window: forgotten.
	c.Check(context.Background(), h2, healthy().families(t), t0.Add(c.Rules.window+time.Hour))
	if len(h2.series[s.labels.String()].t) != 1 {
		t.Errorf("samples older than the window kept: %v", h2.series[s.labels.String()].t)
	}
}

func nan() float64 { return math.NaN() }

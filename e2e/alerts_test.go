// Package e2e runs the exporter's simulated node under a real Prometheus and
// Alertmanager: the shipped alert and recording rules, time-compressed,
// must fire exactly the alerts each injected fault calls for, and nothing
// on a healthy node; every dashboard query must return data.
//
// It needs the Prometheus and Alertmanager binaries ($PROMETHEUS,
// $ALERTMANAGER; `make test` fetches Debian's into .tools/bin and sets
// them) and builds the exporter with the go command.
package e2e

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// injected is the fault file of the test (internal/sim's syntax) and the
// alerts each fault must fire on the dgx-h100 node, by alertKey without the
// instance (a node-wide alert is its name alone). Every fault sits on its
// own GPU, NIC or bridge, or on one whose other fault raises a different
// alert, so each alert names its fault.
var injected = []struct {
	fault  string
	alerts []string
}{
	// GPU 0 runs a job (the profile's pid 4242), so its probe rounds are
	// contended: the x8 link shows in the width read under load, and its
	// low host copies, which a job's own traffic would explain as well,
	// fire no GPUProbeHostBandwidthLow (the test fails on one that does).
	{`{kind: pcie_width, gpu: 0, width: 8}`, []string{"GPUPCIeLinkDowntrained gpu=0"}},
	{`{kind: pcie_generation, gpu: 1, generation: 3}`, []string{"GPUPCIeLinkDowntrained gpu=1", "GPUProbeHostBandwidthLow gpu=1"}},
	{`{kind: nvlink_down, gpu: 2, link: 5}`, []string{"GPUNVLinkDown gpu=2"}},
	{`{kind: nvlink_errors, gpu: 3, link: 2, per_second: 50}`, []string{"GPUNVLinkErrors gpu=3"}},
	{`{kind: process_far_socket, gpu: 3}`, []string{"GPUProcessCrossNUMA gpu=3"}},
	{`{kind: throttle, gpu: 4, reason: hw_thermal_slowdown}`, []string{"GPUThrottled gpu=4"}},
	{`{kind: xid, gpu: 5, code: 79}`, []string{"GPUXIDResetRequired gpu=5"}},
	{`{kind: probe_bandwidth, gpu: 5, probe: peer_copy, fraction: 0.5}`, []string{"GPUProbePeerBandwidthLow gpu=5"}},
	{`{kind: probe_bandwidth, gpu: 6, probe: host_to_device, fraction: 0.5}`, []string{"GPUProbeHostBandwidthLow gpu=6"}},
	{`{kind: probe_latency, gpu: 7, probe: host_latency, factor: 3}`, []string{"GPUProbeLatencyHigh gpu=7"}},
	{`{kind: fabric_down, gpu: 6}`, []string{"GPUFabricNotCompleted gpu=6"}},
	{`{kind: recovery_action, gpu: 7, action: 1}`, []string{"GPURecoveryActionRequired gpu=7"}},
	// GPU 1's downstream port (17:04.0) redirects peer traffic; the node
	// loses its only way into GPU memory for its InfiniBand ports.
	{`{kind: acs_redirect, gpu: 1}`, []string{"PCIeACSRedirectOnGPUPath pci_bus_id=0000:17:04.0"}},
	{`{kind: peermem_missing}`, []string{"GPUDirectRDMAUnavailable"}},
	{`{kind: nic_rate, device: mlx5_0, fraction: 0.5}`, []string{"NICPortRateDegraded device=mlx5_0"}},
	{`{kind: nic_down, device: mlx5_1}`, []string{"NICPortDown device=mlx5_1"}},
	{`{kind: nic_flapping, device: mlx5_2, period: 3s}`, []string{"NICPortFlapping device=mlx5_2"}},
	{`{kind: nic_symbol_errors, device: mlx5_3, per_second: 5}`, []string{"NICPortErrors device=mlx5_3"}},
}

const (
	// Sources sample every second; probes run every probeEvery.
	probeEvery = 5 * time.Second
	// A fault reaches the exporter within the sim's file poll and tick (1 s
	// each); an alert reaches the webhook within Prometheus's resend delay
	// and Alertmanager's group interval (1 s each).
	plumbing = 4 * time.Second
	// How long the healthy node runs before the faults (15 minutes of
	// production time at timeScale), and how long the test keeps watching
	// for stray alerts once every expected one fired.
	healthyFor = 30 * time.Second
	settleFor  = 15 * time.Second
)

func TestAlertsEndToEnd(t *testing.T) {
	prometheus, alertmanager := os.Getenv("PROMETHEUS"), os.Getenv("ALERTMANAGER")
	if prometheus == "" || alertmanager == "" {
		t.Skip("PROMETHEUS and ALERTMANAGER name the binaries to run (make test sets them from .tools/bin)")
	}
	if testing.Short() {
		t.Skip("about three minutes of real time")
	}
	dir := t.TempDir()
	root := repoRoot(t)
	bin := buildExporter(t, dir)
	timings := scaleRules(t, filepath.Join(root, "deploy/prometheus/gpulink.rules.yml"), filepath.Join(dir, "rules.yml"))

	// Two nodes: a DGX H100 that gets the faults, and an AWS p5 that stays
	// healthy throughout (its probes run too: both are busy and idle GPUs).
	faults := filepath.Join(dir, "faults.yml")
	writeFile(t, faults, "faults: []\n")
	dgx, p5 := freeAddr(t), freeAddr(t)
	common := []string{"--probe.policy=always", "--probe.interval=" + probeEvery.String(), "--probe.first-delay=0",
		"--probe.max-duty=1", "--nvml.interval=1s", "--nvml.slow-interval=1s", "--nic.interval=1s", "--topology.interval=1s", "--process.interval=1s"}
	start(t, dir, "exporter-dgx", bin, append([]string{"--sim=dgx-h100", "--sim.faults=" + faults, "--web.listen-address=" + dgx}, common...)...)
	start(t, dir, "exporter-p5", bin, append([]string{"--sim=aws-p5", "--web.listen-address=" + p5}, common...)...)
	waitHTTP(t, "http://"+dgx+"/metrics", 30*time.Second)
	waitHTTP(t, "http://"+p5+"/metrics", 30*time.Second)
	s := startStack(t, dir, prometheus, alertmanager, filepath.Join(dir, "rules.yml"), []string{dgx, p5})
	ctx := context.Background()

	// Healthy: both nodes run with probes, nothing may fire.
	waitFor(t, 30*time.Second, "both targets up and probed", func() (bool, error) {
		v, err := s.query(ctx, `count(up{job="gpulink"} == 1) == 2 and count(count by (instance) (gpulink_probe_bandwidth_bytes_per_second)) == 2`)
		return len(v) == 1, err
	})
	time.Sleep(healthyFor)
	if f, err := s.firing(ctx); err != nil || len(f) != 0 {
		t.Fatalf("healthy nodes fire %v (err %v)", keys(f), err)
	}
	if n := s.hook.snapshot(); len(n) != 0 {
		t.Fatalf("healthy nodes: the webhook got %d notifications: %v", len(n), n)
	}
	t.Run("DashboardQueriesReturnData", func(t *testing.T) { checkDashboards(t, s, dgx) })

	// Faults: each expected alert must fire within its for: plus two
	// source intervals, the plumbing and the time its short windows take
	// to fill (a rate over 10m, 20 s here).
	var text strings.Builder
	text.WriteString("faults:\n")
	want := map[string]time.Duration{}
	for _, f := range injected {
		text.WriteString("- " + f.fault + "\n")
		for _, a := range f.alerts {
			name := strings.Fields(a)[0]
			tm, ok := timings[name]
			if !ok {
				t.Fatalf("the rules have no alert %s", name)
			}
			key := name + " " + dgx + strings.TrimPrefix(a, name)
			want[key] = tm.For + tm.Fill + 2*probeEvery + plumbing
		}
	}
	injectedAt := time.Now()
	writeFile(t, faults, text.String())
	firedAt := map[string]time.Duration{}
	deadline := injectedAt
	for _, d := range want {
		deadline = maxTime(deadline, injectedAt.Add(d))
	}
	for len(firedAt) < len(want) && time.Now().Before(deadline.Add(time.Second)) {
		for _, n := range s.hook.snapshot() {
			k := alertKey(n.Labels)
			if _, ok := want[k]; ok && n.Status == "firing" {
				if _, seen := firedAt[k]; !seen {
					firedAt[k] = n.Received.Sub(injectedAt)
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(settleFor)

	var report []string
	for k, limit := range want {
		at, ok := firedAt[k]
		switch {
		case !ok:
			t.Errorf("%s never reached the webhook (limit %v)", k, limit)
		case at > limit:
			t.Errorf("%s fired after %v, limit %v", k, at.Round(time.Second), limit)
		}
		report = append(report, k+": "+at.Round(time.Second).String()+" (limit "+limit.String()+")")
	}
	sort.Strings(report)
	t.Logf("alert after fault, through Alertmanager:\n  %s", strings.Join(report, "\n  "))
	// Nothing else, in Prometheus or at the webhook.
	f, err := s.firing(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range f {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected alert firing: %s", k)
		}
	}
	for _, n := range s.hook.snapshot() {
		if _, ok := want[alertKey(n.Labels)]; !ok && n.Status == "firing" {
			t.Errorf("unexpected alert at the webhook: %s", alertKey(n.Labels))
		}
	}
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, error)) {
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last error %v)", what, within, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

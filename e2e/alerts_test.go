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
	"fmt"
	"io"
	"net/http"
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
//
// probed are the alerts of the node-to-node probe the DGX runs as prober,
// whose instance is the node it probes (the p5); the p5's probe of the
// DGX stays healthy, as the p5's model of its own side does not see the
// DGX's NICs. rounds is how many of the node's collective rounds (one
// after each probe pass) an alert needs after the fault; none: one.
var injected = []struct {
	fault  string
	alerts []string
	probed []string
	rounds int
}{
	// GPU 0 runs a job (the profile's pid 4242), so its probe rounds are
	// contended: the x8 link shows in the width read under load, and its
	// low host copies, which a job's own traffic would explain as well,
	// fire no GPUProbeHostBandwidthLow (the test fails on one that does).
	{`{kind: pcie_width, gpu: 0, width: 8}`, []string{"GPUPCIeLinkDowntrained gpu=0"}, nil, 0},
	{`{kind: pcie_generation, gpu: 1, generation: 3}`, []string{"GPUPCIeLinkDowntrained gpu=1", "GPUProbeHostBandwidthLow gpu=1"}, nil, 0},
	{`{kind: nvlink_down, gpu: 2, link: 5}`, []string{"GPUNVLinkDown gpu=2"}, nil, 0},
	{`{kind: nvlink_errors, gpu: 3, link: 2, per_second: 50}`, []string{"GPUNVLinkErrors gpu=3"}, nil, 0},
	{`{kind: process_far_socket, gpu: 3}`, []string{"GPUProcessCrossNUMA gpu=3"}, nil, 0},
	{`{kind: throttle, gpu: 4, reason: hw_thermal_slowdown}`, []string{"GPUThrottled gpu=4"}, nil, 0},
	{`{kind: xid, gpu: 5, code: 79}`, []string{"GPUXIDResetRequired gpu=5"}, nil, 0},
	{`{kind: probe_bandwidth, gpu: 5, probe: peer_copy, fraction: 0.5}`, []string{"GPUProbePeerBandwidthLow gpu=5"}, nil, 0},
	{`{kind: probe_bandwidth, gpu: 6, probe: host_to_device, fraction: 0.5}`, []string{"GPUProbeHostBandwidthLow gpu=6"}, nil, 0},
	{`{kind: probe_latency, gpu: 7, probe: host_latency, factor: 3}`, []string{"GPUProbeLatencyHigh gpu=7"}, nil, 0},
	{`{kind: fabric_down, gpu: 6}`, []string{"GPUFabricNotCompleted gpu=6"}, nil, 0},
	{`{kind: recovery_action, gpu: 7, action: 1}`, []string{"GPURecoveryActionRequired gpu=7"}, nil, 0},
	// GPU 1's downstream port (17:04.0) redirects peer traffic; the node
	// loses its only way into GPU memory for its InfiniBand ports.
	{`{kind: acs_redirect, gpu: 1}`, []string{"PCIeACSRedirectOnGPUPath pci_bus_id=0000:17:04.0"}, nil, 0},
	{`{kind: peermem_missing}`, []string{"GPUDirectRDMAUnavailable"}, nil, 0},
	// GPU 1's rail NIC: GPU 1 is not in the node-to-node session, which
	// takes GPU 0 (the first the policy allows), so no probe notices.
	{`{kind: nic_rate, device: mlx5_1, fraction: 0.5}`, []string{"NICPortRateDegraded device=mlx5_1"}, nil, 0},
	// GPU 0's rail NIC: what GPU 0 sends to the p5 has no path, and the
	// DGX's probes of the p5 fail (nccl_error on the prober's side) until
	// none in the window succeeded; so do the p5's probes of the DGX,
	// whose side of the session fails (a failure on either side fails it
	// for both).
	// Every session of either node is with the other, so both nodes'
	// node-to-node probing is starved too.
	{`{kind: nic_down, device: mlx5_0}`, []string{"NICPortDown device=mlx5_0", "NodeProbeFailing", "NodeProbeStarved"},
		[]string{"NodeProbeFailing", "NodeProbeStarved"}, 0},
	{`{kind: nic_flapping, device: mlx5_2, period: 3s}`, []string{"NICPortFlapping device=mlx5_2"}, nil, 0},
	// Every NIC on socket 1 (mlx5_4 and mlx5_5 under switch C, mlx5_6
	// and mlx5_7 under switch D, the Ethernet port mlx5_9) down: GPUs 4-7
	// have no usable NIC on their side of the machine. Socket 0 keeps
	// mlx5_1 and mlx5_3 up beside its faults.
	{`{kind: nic_down, device: mlx5_4}`, []string{"NICPortDown device=mlx5_4", "GPUUsableNICAcrossSockets gpu=4"}, nil, 0},
	{`{kind: nic_down, device: mlx5_5}`, []string{"NICPortDown device=mlx5_5", "GPUUsableNICAcrossSockets gpu=5"}, nil, 0},
	{`{kind: nic_down, device: mlx5_6}`, []string{"NICPortDown device=mlx5_6", "GPUUsableNICAcrossSockets gpu=6"}, nil, 0},
	{`{kind: nic_down, device: mlx5_7}`, []string{"NICPortDown device=mlx5_7", "GPUUsableNICAcrossSockets gpu=7"}, nil, 0},
	{`{kind: nic_down, device: mlx5_9}`, []string{"NICPortDown device=mlx5_9"}, nil, 0},
	{`{kind: nic_symbol_errors, device: mlx5_3, per_second: 5}`, []string{"NICPortErrors device=mlx5_3"}, nil, 0},
	// Storage: nvidia-fs unloaded where GDS is installed, so cuFile would
	// read the data RAID (/raid, XFS) through a host bounce buffer, which
	// the storage probes (--probe.storage-dir=/raid) now report too; they
	// stay quiet as the mount form names nvidia-fs. Drive 1a:00.0, a
	// member of that RAID, trains x2 of x4.
	{`{kind: nvidia_fs_missing}`, []string{"GPUDirectStorageCompatMode"}, nil, 0},
	{`{kind: pcie_width, device: "0000:1a:00.0", width: 2}`, []string{"StorageDriveLinkDowntrained pci_bus_id=0000:1a:00.0"}, nil, 0},
	// NCCL's transports and collective bandwidth are
	// TestNCCLNetworkAlertsEndToEnd's (nccl_transport there): here the
	// profile's jobs hold GPUs 0, 2 and 4 (and process_far_socket starts
	// one on GPU 3), so every collective round is contended.
}

// injectedP5 are the faults of the p5, whose GPU processes are Slurm job
// steps, and the alerts each must fire there, with what their summary
// must say of the job.
var injectedP5 = []struct {
	fault, alert, summary string
}{
	// pid 3131, task 0 of step 0 of job 4242 (cgroup job_4242), on GPU 0.
	{`{kind: process_far_socket, gpu: 0, pid: 3131}`, "GPUProcessCrossNUMA gpu=0", "(Slurm job 4242, step 0)"},
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
	r := startRing(t, "about three minutes of real time")
	s, dgx, p5, ctx := r.stack, r.dgx, r.p5, context.Background()
	t.Run("DashboardQueriesReturnData", func(t *testing.T) { checkDashboards(t, s, dgx) })
	t.Run("RingMemberWithoutTokenRefused", func(t *testing.T) { r.checkStranger(t) })
	// How often the ring's probes met: a probe that did took more than
	// one try (for the log: whether they meet depends on Prometheus'
	// offsets for the two targets).
	if v, err := s.query(ctx, `max by (instance) (max_over_time(gpulink_node_probe_attempts{job="gpulink-node-probe"}[1m]))`); err == nil {
		t.Logf("most tries of a node-to-node probe while healthy, by target: %v", v)
	}

	// Faults: each expected alert must fire within its for: plus two
	// source intervals (one more for each collective round past the
	// first it needs: a round runs after a probe pass), the plumbing and
	// the time its short windows take to fill (a rate over 10m, 20 s
	// here; the node-to-node probes' 30m, 60 s).
	var text strings.Builder
	text.WriteString("faults:\n")
	want := map[string]time.Duration{}
	for _, f := range injected {
		text.WriteString("- " + f.fault + "\n")
		for instance, alerts := range map[string][]string{dgx: f.alerts, p5: f.probed} {
			for _, a := range alerts {
				r.expect(t, want, a, instance, f.rounds)
			}
		}
	}
	var textP5 strings.Builder
	textP5.WriteString("faults:\n")
	summaries := map[string]string{}
	for _, f := range injectedP5 {
		textP5.WriteString("- " + f.fault + "\n")
		summaries[r.expect(t, want, f.alert, p5, 0)] = f.summary
	}
	injectedAt := time.Now()
	writeFile(t, r.dgxFaults, text.String())
	writeFile(t, r.p5Faults, textP5.String())
	r.checkFired(t, want, summaries, injectedAt)
}

// The network NCCL takes between the nodes (issue 26), on two nodes
// healthy but for it: the DGX's container loses /dev/infiniband, so its
// side of every session goes over sockets though its ports are up
// (nccl_net_socket), and the p5's side goes over EFA without GPUDirect
// RDMA, which its dma-buf calls for (nccl_gdr_off). Each session carries
// both sides, and each node's NICs call for RDMA with GPUDirect: each
// fault fires its alert for both targets of the ring, and nothing else
// fires (NodeProbeBandwidthLow stays quiet while sockets explain the
// bandwidth). TestAlertsEndToEnd's faults would hide the DGX's side (its
// rail port down fails it), hence a ring of its own.
//
// The DGX's collectives are tested here too, as this ring leaves its GPUs
// healthy: NCCL connects GPU 7 through host memory (dgxCollectiveFaults).
func TestNCCLNetworkAlertsEndToEnd(t *testing.T) {
	r := startRing(t, "about two minutes of real time")
	want := map[string]time.Duration{}
	for _, instance := range []string{r.dgx, r.p5} {
		r.expect(t, want, "NCCLNetworkSocketFallback", instance, 0)
		r.expect(t, want, "NCCLGPUDirectRDMAMissing", instance, 0)
	}
	for _, a := range dgxCollectiveAlerts {
		r.expect(t, want, a, r.dgx, 3)
	}
	injectedAt := time.Now()
	writeFile(t, r.dgxFaults, "faults:\n- {kind: nccl_net_socket}\n"+dgxCollectiveFaults)
	writeFile(t, r.p5Faults, "faults:\n- {kind: nccl_gdr_off}\n")
	r.checkFired(t, want, nil, injectedAt)
}

// dgxCollectiveFaults: NCCL connects GPU 7 through host memory, and the
// jobs of the DGX profile end (pid 4242 on GPU 0, 5151 on GPU 4, the MPS
// server 6161 on GPU 2), so that its collective rounds over all eight GPUs
// share them with nothing and are not contended: a contended round is
// left out of NCCLBusBandwidthLow and NCCLSendRecvPairSlow, as it measured
// the job. dgxCollectiveAlerts are what they fire: every pair with GPU 7
// on the wrong transport (each from-GPU names its alerts: 7 sends to
// every GPU, every GPU to 7 in the all-to-all), its send/recv pairs (lower
// GPU to higher) far below the node's median pair, and every collective
// over the eight GPUs at 20 GB/s, in two uncontended rounds running (the
// round the jobs end in may still see them: three rounds' time). Ending
// the jobs fires nothing of its own.
const dgxCollectiveFaults = `- {kind: nccl_transport, transport: shm, gpus: [7]}
- {kind: process_exit, pid: 4242}
- {kind: process_exit, pid: 5151}
- {kind: process_exit, pid: 6161}
`

var dgxCollectiveAlerts = []string{
	"NCCLWrongTransport gpu=0", "NCCLWrongTransport gpu=1", "NCCLWrongTransport gpu=2",
	"NCCLWrongTransport gpu=3", "NCCLWrongTransport gpu=4", "NCCLWrongTransport gpu=5",
	"NCCLWrongTransport gpu=6", "NCCLWrongTransport gpu=7",
	"NCCLSendRecvPairSlow gpu=0", "NCCLSendRecvPairSlow gpu=1", "NCCLSendRecvPairSlow gpu=2", "NCCLSendRecvPairSlow gpu=3",
	"NCCLSendRecvPairSlow gpu=4", "NCCLSendRecvPairSlow gpu=5", "NCCLSendRecvPairSlow gpu=6",
	"NCCLBusBandwidthLow",
}

// ring is a DGX H100 and an AWS p5, simulated, each probing the other,
// under Prometheus and Alertmanager with the shipped rules scaled.
type ring struct {
	stack               *stack
	dgx, p5             string // host:port
	dgxFaults, p5Faults string // their fault files
	dir, bin            string // the test's directory and the exporter
	timings             map[string]alertTiming
}

// startRing starts the ring with no faults and waits until it has been
// healthy for healthyFor without an alert. cost is the test's real time,
// for the skip message.
func startRing(t *testing.T, cost string) *ring {
	prometheus, alertmanager := os.Getenv("PROMETHEUS"), os.Getenv("ALERTMANAGER")
	if prometheus == "" || alertmanager == "" {
		t.Skip("PROMETHEUS and ALERTMANAGER name the binaries to run (make test sets them from .tools/bin)")
	}
	if testing.Short() {
		t.Skip(cost)
	}
	dir := t.TempDir()
	root := repoRoot(t)
	bin := buildExporter(t, dir)
	r := &ring{timings: scaleRules(t, filepath.Join(root, "deploy/prometheus/gpulink.rules.yml"), filepath.Join(dir, "rules.yml")),
		dir: dir, bin: bin}
	// The ring's shared token: the exporters require it on /probe,
	// reserve and join, and Prometheus sends it to /probe.
	tokenFile := filepath.Join(dir, "node-probe-token")
	writeFile(t, tokenFile, "e2e-ring-token-0123456789abcdef0123456789\n")

	// Two nodes: a DGX H100, and an AWS p5 whose GPU processes are Slurm
	// job steps, each with its fault file (their probes run too: both
	// are busy and idle GPUs).
	r.dgxFaults, r.p5Faults = filepath.Join(dir, "faults.yml"), filepath.Join(dir, "faults-p5.yml")
	writeFile(t, r.dgxFaults, "faults: []\n")
	writeFile(t, r.p5Faults, "faults: []\n")
	r.dgx, r.p5 = freeAddr(t), freeAddr(t)
	// A collective round after every probe pass: the interval shorter
	// than a pass's, and each round's GPU time too (a round is followed
	// by at least its GPU time over --probe.max-duty): one sample of 5
	// iterations, where a round over host memory would otherwise take
	// 10 s of each GPU's time at the default 5 warm-up, 20 iterations
	// and 3 samples. Node-to-node sessions as often as Prometheus asks;
	// what NCCL between nodes would use checked every second.
	common := []string{"--probe.policy=always", "--probe.interval=" + probeEvery.String(), "--probe.first-delay=0",
		"--probe.max-duty=1", "--nvml.interval=1s", "--nvml.slow-interval=1s", "--nic.interval=1s", "--topology.interval=1s", "--process.interval=1s",
		"--collective.interval=1s", "--collective.warmup=1", "--collective.iterations=5", "--collective.samples=1",
		"--node-probe.enabled", "--node-probe.min-interval=1s", "--nccl.interval=1s", "--node-probe.token-file=" + tokenFile}
	// The storage probes read each profile's data drives: natively on the
	// DGX (GDS installed), through compatibility mode on the p5 (none).
	start(t, dir, "exporter-dgx", bin, append([]string{"--sim=dgx-h100", "--sim.faults=" + r.dgxFaults, "--web.listen-address=" + r.dgx,
		"--probe.storage-dir=/raid"}, common...)...)
	start(t, dir, "exporter-p5", bin, append([]string{"--sim=aws-p5", "--sim.faults=" + r.p5Faults, "--web.listen-address=" + r.p5,
		"--probe.storage-dir=/opt/dlami/nvme"}, common...)...)
	waitHTTP(t, "http://"+r.dgx+"/metrics", 30*time.Second)
	waitHTTP(t, "http://"+r.p5+"/metrics", 30*time.Second)
	// A ring of two: each node probes the other, both every 3 s in one
	// job, as the shipped config's ring (see startStack).
	r.stack = startStack(t, dir, prometheus, alertmanager, filepath.Join(dir, "rules.yml"), []string{r.dgx, r.p5},
		[]probePair{{prober: r.dgx, target: r.p5}, {prober: r.p5, target: r.dgx}}, 3*time.Second, tokenFile)
	s, ctx := r.stack, context.Background()

	// Healthy: both nodes run with probes, collective rounds and
	// node-to-node probes; nothing may fire.
	waitFor(t, 30*time.Second, "both targets up and probed", func() (bool, error) {
		v, err := s.query(ctx, `count(up{job="gpulink"} == 1) == 2 and count(count by (instance) (gpulink_probe_bandwidth_bytes_per_second)) == 2
			and count(count by (instance) (gpulink_collective_bus_bandwidth_bytes_per_second)) == 2
			and count(max_over_time(probe_success{job="gpulink-node-probe"}[10s]) == 1) == 2`)
		return len(v) == 1, err
	})
	time.Sleep(healthyFor)
	if f, err := s.firing(ctx); err != nil || len(f) != 0 {
		t.Fatalf("healthy nodes fire %v (err %v)", keys(f), err)
	}
	if n := s.hook.snapshot(); len(n) != 0 {
		t.Fatalf("healthy nodes: the webhook got %d notifications: %v", len(n), n)
	}
	return r
}

// expect adds to want the alert a ("name label=value...", alertKey's form
// without the instance) on instance, with the time it may take: its for:
// and windows' fill, the source intervals and collective rounds, the
// plumbing. It returns the alert's key.
func (r *ring) expect(t *testing.T, want map[string]time.Duration, a, instance string, rounds int) string {
	t.Helper()
	name := strings.Fields(a)[0]
	tm, ok := r.timings[name]
	if !ok {
		t.Fatalf("the rules have no alert %s", name)
	}
	key := name + " " + instance + strings.TrimPrefix(a, name)
	want[key] = tm.For + tm.Fill + time.Duration(1+max(rounds, 1))*probeEvery + plumbing
	return key
}

// checkFired waits for every alert of want to reach the webhook, each
// within its time from injectedAt, with its runbook_url and, where
// summaries has its key, that text in its summary; then for settleFor.
// It fails on one that did not, and on any other firing in Prometheus or
// at the webhook.
func (r *ring) checkFired(t *testing.T, want map[string]time.Duration, summaries map[string]string, injectedAt time.Time) {
	t.Helper()
	s := r.stack
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
					// What Alertmanager templates and kube-prometheus
					// link to: runbook_url, to the alert's section.
					if u, anchor := n.Annotations["runbook_url"], "#alert-"+strings.ToLower(n.Labels["alertname"]); !strings.HasSuffix(u, anchor) {
						t.Errorf("%s reached the webhook with runbook_url %q, want a link ending in %s", k, u, anchor)
					}
					if job := summaries[k]; job != "" && !strings.Contains(n.Annotations["summary"], job) {
						t.Errorf("%s: summary %q does not name the job: want %q in it", k, n.Annotations["summary"], job)
					}
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
	f, err := s.firing(context.Background())
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

// checkStranger starts a third exporter of the ring without the token
// and has it probe the DGX: the DGX refuses its reservation before it
// takes anything (the stranger's answer says unauthorized, on the
// target's side) and counts it, which Prometheus reads from its
// /metrics. The stranger stops when this check ends.
func (r *ring) checkStranger(t *testing.T) {
	addr := freeAddr(t)
	start(t, r.dir, "exporter-stranger", r.bin, "--sim=dgx-h100", "--probe.policy=off", "--web.listen-address="+addr,
		"--node-probe.enabled", "--node-probe.min-interval=0s")
	waitHTTP(t, "http://"+addr+"/metrics", 30*time.Second)
	resp, err := http.Get("http://" + addr + "/probe?target=" + r.dgx)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `gpulink_node_probe_failure_info{reason="unauthorized",side="target"} 1`; !strings.Contains(string(body), want) {
		t.Errorf("the stranger's probe of the DGX lacks %s:\n%s", want, body)
	}
	waitFor(t, 10*time.Second, "the DGX's count of the refused reservation", func() (bool, error) {
		v, err := r.stack.query(context.Background(), fmt.Sprintf(
			`gpulink_node_probe_unauthenticated_requests_total{instance=%q,path="/node-probe/reserve",reason="missing"} >= 1`, r.dgx))
		return len(v) == 1, err
	})
}

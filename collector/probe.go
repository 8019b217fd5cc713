package collector

import (
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// probeRunResults are the run results every GPU reports from the start, at
// 0 until they happen, so that rate() and increase() see the first one.
// Skip reasons are many and most never occur on a given machine: they
// appear when first counted.
var probeRunResults = []string{probes.RunSuccess, probes.RunPartial, probes.RunError, probes.RunTimeout, probes.RunCrash}

// ProbeCollector renders the probe scheduler's status: each GPU's latest
// results beside what its path should give, and what probing cost.
type ProbeCollector struct {
	scrape.Rendered[*schedule.Status]
	d probeDescs
	s probeStorageDescs
}

type probeDescs struct {
	bandwidth, expected, latency, failed            *prometheus.Desc
	linkGen, linkWidth                              *prometheus.Desc
	lastSuccess, lastRound, duration                *prometheus.Desc
	runs, skips, busy, context                      *prometheus.Desc
	deviceMemory, contextMemory, hostMemory, policy *prometheus.Desc
	contended, contendedRounds                      *prometheus.Desc
}

// NewProbeCollector renders the snapshots of the probe scheduler.
func NewProbeCollector(src scrape.Source[*schedule.Status]) *ProbeCollector {
	bw := []string{"probe", "direction", "peer", "host_numa_node", "transfer_size_bytes"}
	c := &ProbeCollector{d: probeDescs{
		bandwidth: gpuDesc("probe", "bandwidth_bytes_per_second",
			"Bytes per second a probe moved in the GPU's latest round, median of its samples. direction: host_to_device and device_to_host "+
				"are copy-engine copies with pinned host memory on host_numa_node; in host_bidirectional and peer_bidirectional each direction "+
				"is reported on its own, measured while the other runs; local is a device_local_copy counting every byte read and every byte written; "+
				"to_peer is written by this GPU into peer, from_peer by peer into this GPU.", bw...),
		// One per probe and peer, not per result: every direction, host
		// NUMA node and transfer size of a probe compares with the same
		// path, and a value repeated per result was a third of a round's
		// series. Measured over expected is a division in PromQL.
		expected: gpuDesc("probe", "expected_bandwidth_bytes_per_second",
			"What the probe's path should give at most, from the discovered hardware, never the GPU model: for host copies the slowest "+
				"PCIe hop to the CPU at its best supported speed and width, one direction; for peer copies the NVLinks joining the pair "+
				"(or PCIe through the host where none do), one direction; for local copies the memory's peak, max memory clock x bus width "+
				"x 2, reads and writes together. One series per probe and peer the latest round measured, which each of its bandwidth "+
				"results (every direction, host NUMA node and transfer size) compares with: measured over expected is "+
				"gpulink_probe_bandwidth_bytes_per_second / ignoring (direction, host_numa_node, transfer_size_bytes) group_left "+
				"gpulink_probe_expected_bandwidth_bytes_per_second (recorded as gpu_probe:gpulink_probe_bandwidth:ratio). Absent where unknown.",
			"probe", "peer"),
		latency: gpuDesc("probe", "latency_seconds",
			"Latency in the GPU's latest round, median of its samples. host_latency and peer_latency: one dependent load of a pointer "+
				"chase by one GPU thread through transfer_size_bytes of pinned host memory on host_numa_node, or of peer's memory; "+
				"launch_latency: an empty kernel from launch to completion seen by the host.",
			"probe", "peer", "host_numa_node", "transfer_size_bytes"),
		// Only failures: a result that gave a value is its bandwidth or
		// latency series, and a 1 beside each of those was a quarter of a
		// round's series saying it again.
		failed: gpuDesc("probe", "failed",
			"Present, at 1, for each probe of the GPU's latest round that gave no value (the exporter log says why); a probe that "+
				"gave one has its gpulink_probe_bandwidth_bytes_per_second or gpulink_probe_latency_seconds series instead. Rounds "+
				"with failures count as partial in gpulink_probe_runs_total.", "probe", "direction", "peer", "host_numa_node"),
		linkGen: gpuDesc("probe", "pcie_link_generation_under_load",
			"PCIe generation of the GPU's link read while a host-to-device copy was verifiably moving data. Idle GPUs lower their generation, "+
				"so below the maximum only this reading shows a downtrained link."),
		linkWidth: gpuDesc("probe", "pcie_link_width_under_load",
			"PCIe width of the GPU's link in lanes, read while a host-to-device copy was verifiably moving data."),
		lastRound: gpuDesc("probe", "last_round_timestamp_seconds",
			"When the GPU's latest probe run started, whatever its result; with the last success timestamp it shows a GPU whose probes keep failing."),
		lastSuccess: gpuDesc("probe", "last_success_timestamp_seconds",
			"When a round last gave every probe of the GPU a value; absent before the first."),
		duration: gpuDesc("probe", "round_duration_seconds",
			"Wall time of the latest probe child run for the GPU, context creation and teardown included."),
		runs: gpuDesc("probe", "runs_total",
			"Probe rounds of the GPU by result: success, partial (some probes failed), error (no probe could run), timeout (killed at "+
				"the deadline), crash (the child died or printed no valid round).", "result"),
		skips: gpuDesc("probe", "skips_total",
			"Rounds that left the GPU alone, by reason (busy, compute mode, MIG, no NVML sample, lost).", "reason"),
		busy: gpuDesc("probe", "busy_seconds_total",
			"GPU time the probes' timed work took; its rate is the probe's duty cycle on the GPU."),
		context: gpuDesc("probe", "context_seconds_total",
			"Time the probe child held a CUDA context on the GPU: while it does, the probe is a process on the GPU holding device memory."),
		deviceMemory: gpuDesc("probe", "device_memory_bytes",
			"Most device memory the probes allocated on the GPU at once in its latest round."),
		contextMemory: gpuDesc("probe", "context_memory_bytes",
			"Device memory in use on the GPU, every process's, at the peak of its latest probe round (context and buffers in place); under the idle policy, the probe's own footprint."),
		hostMemory: gpuDesc("probe", "host_memory_bytes",
			"Most pinned host memory the probes held at once in the GPU's latest round."),
		policy: newDesc("probe", "policy_info", "The policy that decides when a GPU is probed; value 1.", "policy"),
		contended: gpuDesc("probe", "contended",
			"1 if other work shared the GPU while its latest round measured, so those results say nothing of the link: another compute "+
				"process on the GPU (or on the peer, for results against it) before, during or after the round, NVML utilisation above "+
				"the idle threshold right before it, or a copy's samples spread over 10% of their median (healthy links agree to well "+
				"under 1%). peer=\"\" covers the results with no peer and is always present, 0 or 1; a series for a peer appears, at 1, "+
				"while the results against that peer were contended. The probe alerts skip contended results.", "peer"),
		contendedRounds: gpuDesc("probe", "contended_rounds_total",
			"Probe rounds of the GPU with contended results, by the first reason: other_process, utilization or sample_spread, the "+
				"GPU's own before a peer's. A reason appears when first counted.", "reason"),
	}, s: newProbeStorageDescs()}
	c.Init(src, rendering(c.render))
	return c
}

// Describe implements prometheus.Collector.
func (c *ProbeCollector) Describe(ch chan<- *prometheus.Desc) {
	c.s.describe(ch)
	d := &c.d
	for _, desc := range []*prometheus.Desc{d.bandwidth, d.expected, d.latency, d.failed, d.linkGen,
		d.linkWidth, d.lastSuccess, d.lastRound, d.duration, d.runs, d.skips, d.busy, d.context, d.deviceMemory,
		d.contextMemory, d.hostMemory, d.policy, d.contended, d.contendedRounds} {
		ch <- desc
	}
}

// probeOut drops a second series with the labels of one already rendered.
// Results come from a child process; one duplicate in them must cost that
// series, not fail every scrape of the registry.
type probeOut struct {
	*out
	seen map[seriesKey]bool
}

type seriesKey struct {
	desc   *prometheus.Desc
	labels string
}

func (o *probeOut) once(d *prometheus.Desc, t prometheus.ValueType, v float64, extra ...string) {
	key := seriesKey{d, strings.Join(o.Labels, "\xff") + "\xff" + strings.Join(extra, "\xff")}
	if o.seen[key] {
		return
	}
	o.seen[key] = true
	o.Add(d, t, v, extra...)
}

func (c *ProbeCollector) render(out *out, s *schedule.Status) {
	d := &c.d
	o := &probeOut{out: out, seen: map[seriesKey]bool{}}
	o.gauge(d.policy, 1, s.Policy)
	for i := range s.GPUs {
		g := &s.GPUs[i]
		o.Labels = []string{itoa(g.Index), g.UUID, g.PCIBusID}
		c.renderCounters(o, g)
		if !g.LastSuccess.IsZero() {
			o.gauge(d.lastSuccess, float64(g.LastSuccess.UnixNano())/1e9)
		}
		if !g.LastRound.IsZero() {
			o.gauge(d.lastRound, float64(g.LastRound.UnixNano())/1e9)
		}
		if g.LastDuration > 0 {
			o.gauge(d.duration, g.LastDuration)
		}
		if g.Last != nil {
			c.renderRound(o, g.Last)
		}
	}
}

func (c *ProbeCollector) renderCounters(o *probeOut, g *schedule.GPUStatus) {
	d := &c.d
	for _, r := range probeRunResults {
		o.once(d.runs, prometheus.CounterValue, float64(g.Runs[r]), r)
	}
	// Results the scheduler counts beyond the known ones, and skip
	// reasons, in a stable order.
	for _, r := range sortedKeys(g.Runs) {
		o.once(d.runs, prometheus.CounterValue, float64(g.Runs[r]), r)
	}
	for _, r := range sortedKeys(g.Skips) {
		o.once(d.skips, prometheus.CounterValue, float64(g.Skips[r]), r)
	}
	for _, r := range sortedKeys(g.Contended) {
		if n := g.Contended[r]; n > 0 {
			o.once(d.contendedRounds, prometheus.CounterValue, float64(n), r)
		}
	}
	o.Add(d.busy, prometheus.CounterValue, g.BusySeconds)
	o.Add(d.context, prometheus.CounterValue, g.ContextSeconds)
}

func (c *ProbeCollector) renderRound(o *probeOut, g *probes.GPURound) {
	d := &c.d
	for _, r := range g.Results {
		node := ""
		if r.HostNUMANode != nil {
			node = numaLabel(*r.HostNUMANode)
		}
		size := strconv.FormatInt(r.SizeBytes, 10)
		if c.s.render(o, r) {
			continue
		}
		ok := r.Error == "" && (r.BytesPerSecond > 0 || r.Seconds > 0)
		if !ok {
			o.once(d.failed, prometheus.GaugeValue, 1, string(r.Probe), r.Direction, r.Peer, node)
			continue
		}
		if r.BytesPerSecond > 0 {
			o.once(d.bandwidth, prometheus.GaugeValue, r.BytesPerSecond, string(r.Probe), r.Direction, r.Peer, node, size)
			if r.ExpectedBytesPerSecond > 0 {
				// Path.Expect gives every result of a probe and peer the
				// same value; the first stands for them.
				o.once(d.expected, prometheus.GaugeValue, r.ExpectedBytesPerSecond, string(r.Probe), r.Peer)
			}
			continue
		}
		o.once(d.latency, prometheus.GaugeValue, r.Seconds, string(r.Probe), r.Peer, node, size)
	}
	shared := g.Contention
	o.once(d.contended, prometheus.GaugeValue, boolFloat(len(shared.For("")) > 0), "")
	for _, r := range g.Results {
		if r.Peer != "" && len(shared.For(r.Peer)) > 0 {
			o.once(d.contended, prometheus.GaugeValue, 1, r.Peer)
		}
	}
	if l := g.LinkUnderLoad; l != nil && l.Confirmed {
		o.gauge(d.linkGen, float64(l.Generation))
		o.gauge(d.linkWidth, float64(l.Width))
	}
	o.gauge(d.deviceMemory, float64(g.DeviceMemoryBytes))
	if g.ContextMemoryBytes > 0 {
		o.gauge(d.contextMemory, float64(g.ContextMemoryBytes))
	}
	o.gauge(d.hostMemory, float64(g.HostMemoryBytes))
}

func sortedKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

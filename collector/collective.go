package collector

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// CollectiveCollector renders the node's collective rounds from the probe
// scheduler's status: the latest round's bandwidths and latencies as
// nccl-tests reports them, beside what the links should give, the
// transports NCCL chose against the ones the links call for, and what the
// rounds cost.
type CollectiveCollector struct {
	scrape.Rendered[*schedule.Status]
	d collectiveDescs
}

type collectiveDescs struct {
	busBW, algBW, expected, ratio, latency, ranks    *prometheus.Desc
	srBW, srExpected, srRatio, srLatency             *prometheus.Desc
	channels, expectedTransport                      *prometheus.Desc
	runs, skips, lastRound, busy, deviceMemory, info *prometheus.Desc
	contended, contendedRounds                       *prometheus.Desc
}

// NewCollectiveCollector renders the collective part of the probe
// scheduler's snapshots; nothing while collective rounds are off.
func NewCollectiveCollector(src scrape.Source[*schedule.Status]) *CollectiveCollector {
	pair := []string{"gpu", "pci_bus_id", "peer_gpu", "peer_pci_bus_id"}
	gpu := []string{"gpu", "pci_bus_id"}
	c := &CollectiveCollector{d: collectiveDescs{
		busBW: newDesc("collective", "bus_bandwidth_bytes_per_second",
			"Bus bandwidth of a collective over every GPU of the node's latest collective round, at the default size, as nccl-tests "+
				"reports it: the operation's size over its time (algorithm bandwidth) times the collective's bus factor (all_reduce 2(n-1)/n, "+
				"all_gather, reduce_scatter and all_to_all (n-1)/n): what each GPU's link carried. Compare with one direction of the slowest link.",
			"collective"),
		algBW: newDesc("collective", "algorithm_bandwidth_bytes_per_second",
			"Algorithm bandwidth of a collective in the latest collective round at the default size: its size over the time of one operation.",
			"collective"),
		expected: newDesc("collective", "expected_bus_bandwidth_bytes_per_second",
			"What the slowest link the collective crosses should carry, one direction, from the discovered hardware: the slowest pair's NVLinks, "+
				"or PCIe through the host where a pair has none. nccl-tests reaches about 0.8 of it on healthy H100 nodes. Absent where unknown.",
			"collective"),
		ratio: newDesc("collective", "bus_bandwidth_ratio",
			"Measured over expected bus bandwidth; about 0.8 on a healthy node.", "collective"),
		latency: newDesc("collective", "latency_seconds",
			"Time of one operation of the collective at the small size, in the latest collective round.", "collective"),
		ranks: newDesc("collective", "ranks", "GPUs (NCCL ranks) in the latest collective round."),
		srBW: newDesc("collective", "send_recv_bandwidth_bytes_per_second",
			"Bytes per second gpu sent to peer_gpu with NCCL send/recv at the default size in the latest collective round (bus bandwidth, "+
				"equal to algorithm bandwidth for send/recv). Each pair is measured once, from the lower rank to the higher.", pair...),
		srExpected: newDesc("collective", "send_recv_expected_bandwidth_bytes_per_second",
			"What the pair's link should carry one direction: their NVLinks, or PCIe through the host. Absent where unknown.", pair...),
		srRatio: newDesc("collective", "send_recv_bandwidth_ratio", "Measured over expected send/recv bandwidth of the pair.", pair...),
		srLatency: newDesc("collective", "send_recv_latency_seconds",
			"Time of one send/recv from gpu to peer_gpu at the small size in the latest collective round.", pair...),
		channels: newDesc("collective", "channels",
			"Channels NCCL connected from gpu to peer_gpu in the latest collective round, by transport: p2p (NVLink, or PCIe peer to peer), "+
				"shm (through host memory), net (the network), collnet, nvls, unknown. For net and collnet, network is the fabric that carried "+
				"them (Socket, IB, RoCE, EFA, or other where NCCL's log does not tell), plugin the network plugin's own name (IB, gIB, "+
				"Libfabric, Socket...; other where it is no plain name) and gdr 1 where GPUDirect RDMA did, 0 where the data went through "+
				"host memory; all three empty for the others. A pair without a series had no connection.",
			append(slices.Clone(pair), "transport", "network", "plugin", "gdr")...),
		expectedTransport: newDesc("collective", "expected_transport_info",
			"The transport NCCL should connect gpu to peer_gpu with, from the links: p2p where NVLink joins them or NVML reports PCIe peer "+
				"to peer writes, else shm; value 1. A channel on another transport is a fallback.", append(slices.Clone(pair), "transport")...),
		runs: newDesc("collective", "runs_total",
			"Collective rounds by result: success, partial (some collectives failed), error (no communicator), timeout (killed at the "+
				"deadline), crash (the child died or printed no valid round).", "result"),
		skips: newDesc("collective", "skips_total",
			"Collective rounds due but not run, by reason: fewer_than_two_gpus, busy_other_process, busy_utilization (one busy GPU skips "+
				"the round), no_library (NCCL could not be loaded), mig_enabled, compute_mode_exclusive_process, compute_mode_prohibited "+
				"(left fewer than two GPUs). A reason appears when first counted.", "reason"),
		lastRound: newDesc("collective", "last_round_timestamp_seconds",
			"When the latest collective round that gave results started; absent before the first."),
		busy: newDesc("collective", "busy_seconds_total",
			"GPU time collective rounds took on the GPU: warm-up and timed operations; with gpulink_probe_busy_seconds_total, the probes' duty cycle.",
			gpu...),
		deviceMemory: newDesc("collective", "device_memory_bytes",
			"Most device memory the latest collective round's buffers took on the GPU at once.", gpu...),
		info: newDesc("collective", "info", "The NCCL version the latest collective round loaded; value 1.", "nccl_version"),
		contended: newDesc("collective", "contended",
			"1 if other work shared the latest collective round's GPUs, so none of its results says anything of the links: another "+
				"compute process on any of its GPUs before, during or after the round, or NVML utilisation above the idle threshold "+
				"right before it; else 0. The collective alerts skip contended rounds."),
		contendedRounds: newDesc("collective", "contended_rounds_total",
			"Collective rounds with contended results, by the first reason: other_process or utilization. A reason appears when first counted.", "reason"),
	}}
	c.Init(src, rendering(c.render))
	return c
}

// Describe implements prometheus.Collector.
func (c *CollectiveCollector) Describe(ch chan<- *prometheus.Desc) {
	d := &c.d
	for _, desc := range []*prometheus.Desc{d.busBW, d.algBW, d.expected, d.ratio, d.latency, d.ranks, d.srBW,
		d.srExpected, d.srRatio, d.srLatency, d.channels, d.expectedTransport, d.runs, d.skips, d.lastRound, d.busy,
		d.deviceMemory, d.info, d.contended, d.contendedRounds} {
		ch <- desc
	}
}

func (c *CollectiveCollector) render(out *out, s *schedule.Status) {
	st := s.Collective
	if st == nil {
		return
	}
	d := &c.d
	o := &probeOut{out: out, seen: map[seriesKey]bool{}}
	for _, r := range collectiveRunResults(st) {
		o.once(d.runs, prometheus.CounterValue, float64(st.Runs[r]), r)
	}
	for _, r := range sortedKeys(st.Skips) {
		o.once(d.skips, prometheus.CounterValue, float64(st.Skips[r]), r)
	}
	for _, r := range sortedKeys(st.Contended) {
		if n := st.Contended[r]; n > 0 {
			o.once(d.contendedRounds, prometheus.CounterValue, float64(n), r)
		}
	}
	index := map[string]int{}
	for _, g := range st.GPUs {
		index[g.PCIBusID] = g.Index
		o.once(d.busy, prometheus.CounterValue, g.BusySeconds, itoa(g.Index), g.PCIBusID)
	}
	if st.Last != nil {
		c.renderRound(o, st, index)
	}
}

// collectiveRunResults are the results every collective counter shows
// from 0, then any other the scheduler counted.
func collectiveRunResults(st *schedule.CollectiveStatus) []string {
	out := slices.Clone(probeRunResults)
	for _, r := range sortedKeys(st.Runs) {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

func (c *CollectiveCollector) renderRound(o *probeOut, st *schedule.CollectiveStatus, index map[string]int) {
	d := &c.d
	r := st.Last
	// gpuOf is a rank's GPU labels; ok false for a rank another process
	// held or a GPU the status does not know.
	gpuOf := func(rank int) (idx, bus string, ok bool) {
		i, held := r.Local(rank)
		if !held {
			return "", "", false
		}
		n, known := index[r.GPUs[i]]
		return itoa(n), r.GPUs[i], known
	}
	o.gauge(d.ranks, float64(r.Ranks))
	o.gauge(d.contended, boolFloat(r.Contention.Contended()))
	if !st.LastStarted.IsZero() {
		o.gauge(d.lastRound, float64(st.LastStarted.UnixNano())/1e9)
	}
	if v := ncclVersion(r.NCCLVersion); v != "" {
		o.gauge(d.info, 1, v)
	}
	for _, res := range r.Results {
		if res.Error != "" || res.Seconds <= 0 {
			continue
		}
		bandwidth, latency := res.SizeBytes == st.SizeBytes, res.SizeBytes == st.SmallBytes
		if res.Collective != probes.SendRecv {
			name := string(res.Collective)
			if bandwidth {
				o.once(d.busBW, prometheus.GaugeValue, res.BusBytesPerSecond, name)
				o.once(d.algBW, prometheus.GaugeValue, res.AlgBytesPerSecond, name)
				if res.ExpectedBusBytesPerSecond > 0 {
					o.once(d.expected, prometheus.GaugeValue, res.ExpectedBusBytesPerSecond, name)
					o.once(d.ratio, prometheus.GaugeValue, res.BusBytesPerSecond/res.ExpectedBusBytesPerSecond, name)
				}
			}
			if latency {
				o.once(d.latency, prometheus.GaugeValue, res.Seconds, name)
			}
			continue
		}
		if res.FromRank == nil || res.ToRank == nil {
			continue
		}
		g, gBus, ok1 := gpuOf(*res.FromRank)
		p, pBus, ok2 := gpuOf(*res.ToRank)
		if !ok1 || !ok2 {
			continue
		}
		if bandwidth {
			o.once(d.srBW, prometheus.GaugeValue, res.BusBytesPerSecond, g, gBus, p, pBus)
			if res.ExpectedBusBytesPerSecond > 0 {
				o.once(d.srExpected, prometheus.GaugeValue, res.ExpectedBusBytesPerSecond, g, gBus, p, pBus)
				o.once(d.srRatio, prometheus.GaugeValue, res.BusBytesPerSecond/res.ExpectedBusBytesPerSecond, g, gBus, p, pBus)
			}
		}
		if latency {
			o.once(d.srLatency, prometheus.GaugeValue, res.Seconds, g, gBus, p, pBus)
		}
	}
	c.renderTransports(o, st, gpuOf, index)
	for _, bus := range r.GPUs {
		if n, ok := index[bus]; ok {
			o.once(d.deviceMemory, prometheus.GaugeValue, float64(r.DeviceMemoryBytes), itoa(n), bus)
		}
	}
}

type channelKey struct {
	from, to                   int
	kind, network, plugin, gdr string
}

func (c *CollectiveCollector) renderTransports(o *probeOut, st *schedule.CollectiveStatus,
	gpuOf func(rank int) (string, string, bool), index map[string]int) {
	d := &c.d
	// Channels by pair and transport, each channel once, in the order
	// NCCL connected them.
	var order []channelKey
	channels := map[channelKey]map[int]bool{}
	for _, t := range st.Last.Transports {
		kind, network, plugin, gdr := t.Labels()
		k := channelKey{t.FromRank, t.ToRank, kind, network, plugin, gdr}
		if channels[k] == nil {
			channels[k] = map[int]bool{}
			order = append(order, k)
		}
		channels[k][t.Channel] = true
	}
	for _, k := range order {
		g, gBus, ok1 := gpuOf(k.from)
		p, pBus, ok2 := gpuOf(k.to)
		if ok1 && ok2 {
			o.once(d.channels, prometheus.GaugeValue, float64(len(channels[k])), g, gBus, p, pBus, k.kind, k.network, k.plugin, k.gdr)
		}
	}
	for _, t := range st.ExpectedTransports {
		g, ok1 := index[t.GPU]
		p, ok2 := index[t.Peer]
		if ok1 && ok2 && slices.Contains(probes.TransportKinds, t.Kind) {
			o.once(d.expectedTransport, prometheus.GaugeValue, 1, itoa(g), t.GPU, itoa(p), t.Peer, t.Kind)
		}
	}
}

// ncclVersion writes ncclGetVersion's code as NCCL's own version string:
// 22703 is 2.27.3 (codes of 2.9 on are major*10000 + minor*100 + patch,
// older ones major*1000 + minor*100 + patch). "" for 0.
func ncclVersion(code int) string {
	switch {
	case code <= 0:
		return ""
	case code >= 10000:
		return fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/1000, code%1000/100, code%100)
}

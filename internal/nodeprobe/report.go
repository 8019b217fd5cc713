package nodeprobe

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/units"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// The families of a /probe answer. Every series of a collective carries
// collective and gpu: for send_recv the prober's GPU (NVML index) that
// sent to the target's GPU of the same place in the session, for the
// collectives over both nodes gpu="all".
var (
	successDesc = prometheus.NewDesc("probe_success",
		"1 when the node-to-node session ran and every result has a value, as blackbox_exporter's probe_success.", nil, nil)
	durationDesc = prometheus.NewDesc("probe_duration_seconds",
		"Wall time of the whole node-to-node probe, both children and the join included.", nil, nil)
	busBandwidthDesc = prometheus.NewDesc("gpulink_node_probe_bus_bandwidth_bytes_per_second",
		"Bus bandwidth of a collective between this node and the target at the module's size, as nccl-tests reports it (for "+
			"send_recv the same as the algorithm bandwidth), median of the module's samples.", []string{"collective", "gpu"}, nil)
	expectedDesc = prometheus.NewDesc("gpulink_node_probe_expected_bus_bandwidth_bytes_per_second",
		"What the path should carry at most: the slower of the two nodes' NICs nearest the GPUs involved, one direction, at the "+
			"rate the link trained at. Absent when either node does not know it.", []string{"collective", "gpu"}, nil)
	ratioDesc = prometheus.NewDesc("gpulink_node_probe_bus_bandwidth_ratio",
		"Measured over expected bus bandwidth.", []string{"collective", "gpu"}, nil)
	latencyDesc = prometheus.NewDesc("gpulink_node_probe_latency_seconds",
		"Time of one operation of the collective at the module's small size, median of its samples.", []string{"collective", "gpu"}, nil)
	channelsDesc = prometheus.NewDesc("gpulink_node_probe_channels",
		"Connections NCCL made in the session, both nodes' ranks, by transport (p2p, shm, net, collnet, nvls, unknown); "+
			"between two nodes anything but net is a misconfiguration. For net and collnet, network is the fabric that carried them "+
			"(Socket, IB, RoCE, EFA, or other where NCCL's log does not tell), plugin the network plugin's own name (IB, gIB, Libfabric, "+
			"Socket...; other where it is no plain name) and gdr 1 where GPUDirect RDMA did, 0 where the data went through host memory; "+
			"all three empty for the others.", []string{"transport", "network", "plugin", "gdr"}, nil)
	attemptsDesc = prometheus.NewDesc("gpulink_node_probe_attempts",
		"Tries the probe took: 1, or more where either node was in another session (declined_session) and the prober "+
			"waited and tried again within its budget.", nil, nil)
	failureDesc = prometheus.NewDesc("gpulink_node_probe_failure_info",
		"Why probe_success is 0; value 1. reason: declined_busy, declined_session, declined_rate_limited, declined_unavailable, "+
			"declined_disabled (either node declined), unauthorized, unreachable, timeout, nccl_error, bad_response, refused, bad_module. "+
			"side: the node whose decline or failure ended the session (prober, target, or both when each failed on its own).",
		[]string{"reason", "side"}, nil)
)

// ProbeFamilies describes every family a /probe answer may hold and
// collects nothing: for the lists of metric names.
func ProbeFamilies() prometheus.Collector { return &outcome{describeOnly: true} }

// outcome is one session as the prober saw it, rendered as the answer's
// registry.
type outcome struct {
	module        Module
	gpus          []schedule.SessionGPU // this node's, in rank order
	local, remote *probes.CollectiveRound
	// localRates and remoteRates are what the NIC nearest each node's
	// GPUs carries, in rank order (0 unknown).
	localRates, remoteRates []float64
	// reason is "" for a success; side is the node whose failure or
	// decline it is (Side*).
	reason, detail, side string
	duration             time.Duration
	attempts             int // tries at a session, the last of which this is

	describeOnly bool
}

// Describe implements prometheus.Collector.
func (o *outcome) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{successDesc, durationDesc, busBandwidthDesc, expectedDesc, ratioDesc,
		latencyDesc, channelsDesc, attemptsDesc, failureDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (o *outcome) Collect(ch chan<- prometheus.Metric) {
	if o.describeOnly {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	success := 0.0
	if o.reason == "" {
		success = 1
	}
	gauge(successDesc, success)
	gauge(durationDesc, o.duration.Seconds())
	gauge(attemptsDesc, float64(o.attempts))
	if o.reason != "" {
		gauge(failureDesc, 1, o.reason, o.side)
	}
	if o.local == nil {
		return
	}
	ms, _ := o.measured()
	for _, m := range ms {
		if m.bandwidth > 0 {
			gauge(busBandwidthDesc, m.bandwidth, m.collective, m.gpu)
			if m.expected > 0 {
				gauge(expectedDesc, m.expected, m.collective, m.gpu)
				gauge(ratioDesc, m.bandwidth/m.expected, m.collective, m.gpu)
			}
		}
		if m.latency > 0 {
			gauge(latencyDesc, m.latency, m.collective, m.gpu)
		}
	}
	for l, n := range o.channels() {
		gauge(channelsDesc, float64(n), l.transport, l.network, l.plugin, l.gdr)
	}
}

// measurement is what the answer says of one collective between the two
// nodes; 0 is no value.
type measurement struct {
	collective, gpu              string
	bandwidth, expected, latency float64
}

// measured is every collective of the module between the two nodes: for
// send_recv each of this node's GPUs i to the target's i, the others over
// both nodes; and the first result that has no value, "" when all do.
func (o *outcome) measured() (ms []measurement, missing string) {
	k := len(o.gpus)
	note := func(what string) {
		if missing == "" {
			missing = what
		}
	}
	for _, c := range o.module.Collectives {
		type pair struct {
			from, to *int
			gpu      string
			expected float64
		}
		var pairs []pair
		if c == probes.SendRecv {
			for i := range k {
				from, to := i, k+i
				pairs = append(pairs, pair{&from, &to, strconv.Itoa(o.gpus[i].Index), slowest(rate(o.localRates, i), rate(o.remoteRates, i))})
			}
		} else {
			pairs = append(pairs, pair{gpu: "all", expected: slowest(append(slices.Clone(o.localRates), o.remoteRates...)...)})
		}
		for _, p := range pairs {
			m := measurement{collective: string(c), gpu: p.gpu}
			what := string(c)
			if p.from != nil {
				what = fmt.Sprintf("%s %d->%d", c, *p.from, *p.to)
			}
			if r, why := o.result(c, int64(o.module.Size), p.from, p.to); r != nil {
				m.bandwidth = r.BusBytesPerSecond
				m.expected = p.expected
			} else {
				note(fmt.Sprintf("%s at %s: %s", what, o.module.Size, why))
			}
			if r, why := o.result(c, int64(o.module.SmallSize), p.from, p.to); r != nil {
				m.latency = r.Seconds
			} else {
				note(fmt.Sprintf("%s at %s: %s", what, o.module.SmallSize, why))
			}
			ms = append(ms, m)
		}
	}
	return ms, missing
}

// result is the result of c at size (from and to for send_recv) with a
// value, or why there is none: the slower of the two nodes' sides, each
// timed over its own ranks (probes.SlowerSide).
func (o *outcome) result(c probes.Collective, size int64, from, to *int) (*probes.CollectiveResult, string) {
	r := probes.SlowerSide(find(o.local, c, size, from, to), find(o.remote, c, size, from, to))
	switch {
	case r == nil:
		return nil, "no result"
	case r.Error != "":
		return nil, r.Error
	case r.Seconds <= 0 || r.BusBytesPerSecond <= 0:
		return nil, "no value"
	}
	return r, ""
}

// spreads is every timed result of both rounds with its samples' spread,
// "prober: send_recv 0->1 64MiB 18.9ms [16.2ms-21.0ms], ...; target: ...",
// for the debug log of a probe that succeeded: /probe exports the median
// alone, and a figure that moves from probe to probe is told by this from
// one whose samples move inside a probe. A slog.LogValuer: written out
// only when debug is on.
type spreads struct{ o *outcome }

// LogValue implements slog.LogValuer.
func (s spreads) LogValue() slog.Value {
	o := s.o
	var sides []string
	for _, side := range []struct {
		name  string
		round *probes.CollectiveRound
	}{{"prober", o.local}, {"target", o.remote}} {
		if side.round == nil {
			continue
		}
		var each []string
		for _, r := range side.round.Results {
			if r.Seconds <= 0 {
				continue
			}
			each = append(each, fmt.Sprintf("%s %s %s [%s-%s]", resultName(r), units.Base2Bytes(r.SizeBytes),
				seconds(r.Seconds), seconds(r.SampleMin), seconds(r.SampleMax)))
		}
		sides = append(sides, side.name+": "+strings.Join(each, ", "))
	}
	return slog.StringValue(strings.Join(sides, "; "))
}

// resultName names a result in a log or an error: its collective, and
// for a send/recv its ranks, "send_recv 0->1".
func resultName(r probes.CollectiveResult) string {
	if r.FromRank != nil && r.ToRank != nil {
		return fmt.Sprintf("%s %d->%d", r.Collective, *r.FromRank, *r.ToRank)
	}
	return string(r.Collective)
}

// seconds is s in the unit that reads best in a log: 18.9ms, 21.4µs.
func seconds(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.3gs", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.3gms", s*1e3)
	}
	return fmt.Sprintf("%.3gµs", s*1e6)
}

// find is round's result of c at size between from and to (nil for a
// collective over every rank).
func find(round *probes.CollectiveRound, c probes.Collective, size int64, from, to *int) *probes.CollectiveResult {
	if round == nil {
		return nil
	}
	for i := range round.Results {
		r := &round.Results[i]
		if r.Collective != c || r.SizeBytes != size {
			continue
		}
		if from == nil || (r.FromRank != nil && r.ToRank != nil && *r.FromRank == *from && *r.ToRank == *to) {
			return r
		}
	}
	return nil
}

// rate is rates[i], 0 where there is none.
func rate(rates []float64, i int) float64 {
	if i < len(rates) {
		return rates[i]
	}
	return 0
}

// channels counts the session's connections by transport: each
// connection once, whether one node or both reported it.
func (o *outcome) channels() map[channelLabels]int {
	seen := map[probes.Transport]bool{}
	out := map[channelLabels]int{}
	for _, round := range []*probes.CollectiveRound{o.local, o.remote} {
		if round == nil {
			continue
		}
		for _, t := range round.Transports {
			key := probes.Transport{Channel: t.Channel, FromRank: t.FromRank, ToRank: t.ToRank, Kind: t.Kind}
			if seen[key] {
				continue
			}
			seen[key] = true
			var l channelLabels
			l.transport, l.network, l.plugin, l.gdr = t.Labels()
			out[l]++
		}
	}
	return out
}

// channelLabels are a gpulink_node_probe_channels series' labels.
type channelLabels struct{ transport, network, plugin, gdr string }

// Sides of a session: gpulink_node_probe_failure_info's side label.
const (
	SideProber = "prober"
	SideTarget = "target"
	SideBoth   = "both"
)

// fail ends the session for reason, on side.
func (o *outcome) fail(reason, side, detail string) {
	o.reason, o.side, o.detail = reason, side, detail
}

// check fails a session in which a result of either node has no value:
// a failure on the target's side fails the session as one on the
// prober's does, and the answer says whose it was.
func (o *outcome) check() {
	local, remote := roundFailure(o.local), roundFailure(o.remote)
	if remote == "" {
		remote = o.remoteMissing()
	}
	switch {
	case local != "" && remote != "":
		o.fail(ReasonNCCLError, SideBoth, "this node: "+local+"; target: "+remote)
		return
	case remote != "":
		o.fail(ReasonNCCLError, SideTarget, "target: "+remote)
		return
	case local != "":
		o.fail(ReasonNCCLError, SideProber, "this node: "+local)
		return
	}
	if _, missing := o.measured(); missing != "" {
		o.fail(ReasonNCCLError, SideProber, "this node: "+missing)
	}
}

// remoteMissing is the first collective over both nodes the target's
// round has no result of; "" when it has every one.
func (o *outcome) remoteMissing() string {
	for _, c := range o.module.Collectives {
		if c == probes.SendRecv {
			continue // the prober's side stands alone where a target older than both sides reporting sends none
		}
		for _, size := range []int64{int64(o.module.Size), int64(o.module.SmallSize)} {
			if find(o.remote, c, size, nil, nil) == nil {
				return fmt.Sprintf("%s at %s: no result", c, units.Base2Bytes(size))
			}
		}
	}
	return ""
}

// roundFailure is why round did not give every result it has a value:
// its error, or its first result with one; "" when none failed. The
// prober judges both nodes' rounds by it, and the target its own.
func roundFailure(round *probes.CollectiveRound) string {
	if round == nil {
		return ""
	}
	if round.Error != "" {
		return round.Error
	}
	for _, r := range round.Results {
		if r.Error == "" {
			continue
		}
		return fmt.Sprintf("%s at %s: %s", resultName(r), units.Base2Bytes(r.SizeBytes), r.Error)
	}
	return ""
}

package probes

import (
	"slices"

	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
)

// A probe measures a path only when nothing else uses it. Two processes
// on one GPU time-slice it: with policy always, one GPU's host-to-device
// probe read 0.878 of expected in one round and 0.398 a minute later while
// a pinned copy loop ran in another process (issue 12). A low reading
// from a job's own traffic is not a degraded link, so the scheduler
// records what shared the GPU while a round measured, and such results
// are exported as contended and kept out of the alerts.

// Contention reasons, in the order a round is counted under the first of
// them.
const (
	// ContendedOtherProcess: another compute process was on the GPU (or
	// on the peer) before, during or after the run.
	ContendedOtherProcess = "other_process"
	// ContendedUtilization: NVML reported the GPU (or the peer) busier
	// than the idle threshold right before the run.
	ContendedUtilization = "utilization"
	// ContendedSampleSpread: a result's samples spread wider than
	// NoisySpread.
	ContendedSampleSpread = "sample_spread"
)

// ContentionReasons lists the reasons in order.
var ContentionReasons = []string{ContendedOtherProcess, ContendedUtilization, ContendedSampleSpread}

// Contention is what shared a GPU with one round, as the daemon saw it.
type Contention struct {
	// Reasons the GPU itself was shared, in ContentionReasons order:
	// every result of the round is disturbed. Empty when it was not.
	Reasons []string `json:"reasons,omitempty"`
	// Peers holds, by peer address, why the results against that peer
	// were disturbed besides Reasons: the peer was shared, or those
	// results' samples spread wide.
	Peers map[string][]string `json:"peers,omitempty"`
	// Processes are the PIDs of other compute processes seen, by GPU
	// address (the GPU's own and its peers').
	Processes map[string][]int `json:"processes,omitempty"`
	// ProcessChecks is how many process listings were read before, during
	// and after the run; ProcessCheckFailures how many could not be (an
	// error, or NVML too slow to answer). With none read, only
	// utilisation and the samples say anything.
	ProcessChecks        int `json:"process_checks"`
	ProcessCheckFailures int `json:"process_check_failures,omitempty"`
	// ProcessNames are the processes' command names (/proc/<pid>/comm)
	// by PID, where the commands could read them.
	ProcessNames map[int]string `json:"process_names,omitempty"`
}

// Contended reports whether any result of the round was disturbed.
func (c *Contention) Contended() bool {
	return c != nil && (len(c.Reasons) > 0 || len(c.Peers) > 0)
}

// For is why the results against peer ("" for results with no peer) were
// disturbed; empty when they were not.
func (c *Contention) For(peer string) []string {
	if c == nil {
		return nil
	}
	p := c.Peers[pciaddr.Normalize(peer)]
	if peer == "" || len(p) == 0 {
		return c.Reasons
	}
	return mergeReasons(c.Reasons, p)
}

// First is the reason a contended round is counted under: the GPU's own
// before any peer's, each in ContentionReasons order. "" when the round
// was not contended.
func (c *Contention) First() string {
	if c == nil {
		return ""
	}
	if len(c.Reasons) > 0 {
		return c.Reasons[0]
	}
	var all []string
	for _, r := range c.Peers {
		all = mergeReasons(all, r)
	}
	if len(all) == 0 {
		return ""
	}
	return all[0]
}

// mergeReasons is the union of a and b in ContentionReasons order.
func mergeReasons(a, b []string) []string {
	var out []string
	for _, r := range ContentionReasons {
		if slices.Contains(a, r) || slices.Contains(b, r) {
			out = append(out, r)
		}
	}
	return out
}

// AddReason adds r to list, in ContentionReasons order.
func AddReason(list []string, r string) []string {
	if slices.Contains(list, r) {
		return list
	}
	return mergeReasons(list, []string{r})
}

// NoisySpread is the widest spread, (max - min) / median, of a result's
// samples that a link to itself gives. Healthy copies agree to well under
// 1%: samples of one copy move less than 0.7% (bench/RESULTS.md,
// 2026-11-22) and the 56 NVLink pairs of an 8x H100 agree to 0.05%. A job
// time-slicing the GPU beside the probe moves a copy by far more (0.878
// and 0.398 of expected in two rounds of one GPU). 10% is more than ten
// times the healthy movement and well inside what sharing does.
const NoisySpread = 0.10

// Spread is (max - min) / median of the result's samples; 0 when the
// samples are not known.
func (r *Result) Spread() float64 {
	v := r.BytesPerSecond
	if v == 0 {
		v = r.Seconds
	}
	if v <= 0 || r.SampleMin <= 0 || r.SampleMax < r.SampleMin {
		return 0
	}
	return (r.SampleMax - r.SampleMin) / v
}

// Noisy reports whether the samples spread wider than NoisySpread, for
// the probes whose samples agree on healthy hardware: one-direction host
// copies, local copies, and peer copies. Not judged: host_bidirectional,
// whose host-to-device direction moved 40.7-49.8 GB/s within one command
// of the reference on an idle H100, and the latencies (launch latency
// moved 9-14% between the reference's own runs; single host chase runs
// 7%).
func (r *Result) Noisy() bool {
	if r.Error != "" || r.BytesPerSecond <= 0 {
		return false
	}
	switch r.Probe {
	case HostToDevice, DeviceToHost, DeviceLocalCopy, PeerCopy, PeerBidirectional:
		return r.Spread() > NoisySpread
	}
	return false
}

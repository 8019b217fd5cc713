package schedule

import (
	"time"

	"github.com/gpulink/gpulink_exporter/probes"
)

// Skip reasons: why a round left a GPU (or one of its peers) alone.
const (
	SkipLost             = "gpu_lost"
	SkipMIG              = "mig_enabled"
	SkipExclusiveProcess = "compute_mode_exclusive_process"
	SkipProhibited       = "compute_mode_prohibited"
	SkipBusyProcess      = "busy_other_process"
	SkipBusyUtilization  = "busy_utilization"

	// Why a collective round did not run, beside the reasons above that
	// one of its GPUs gives.

	// SkipFewerThanTwo: fewer than two GPUs could take part, and none was
	// left out for one of the reasons above (a node with one GPU, or GPUs
	// lost).
	SkipFewerThanTwo = "fewer_than_two_gpus"
	// SkipNoLibrary: the child could not load the NCCL library.
	SkipNoLibrary = "no_library"
)

// GPUStatus is what the scheduler knows of one GPU: its latest results and
// counters. The collector renders it; nothing in it touches hardware.
type GPUStatus struct {
	Index    int
	UUID     string
	PCIBusID string

	// Last is the GPU's part of its latest round that produced results;
	// nil before the first. Its Contention says what shared the GPU
	// while it measured.
	Last *probes.GPURound
	// LastSuccess is when a round last gave every probe a value.
	LastSuccess time.Time
	// LastRound is when the latest child run for this GPU started,
	// whatever its result.
	LastRound time.Time
	// LastDuration is the wall time of the latest child run, in seconds.
	LastDuration float64

	Runs  map[string]uint64 // by Run* result
	Skips map[string]uint64 // by Skip* reason
	// Contended counts rounds with results that shared the GPU or a peer
	// with other work, each under its first reason (Contention.First).
	Contended map[string]uint64
	// BusySeconds and ContextSeconds accumulate GPURound's over all rounds.
	BusySeconds, ContextSeconds float64
}

// CollectiveStatus is what the scheduler knows of the node's collective
// rounds: the latest results and the counters.
type CollectiveStatus struct {
	// Last is the latest round that gave results, annotated with what
	// each should give; nil before the first. LastStarted is when the
	// scheduler started it.
	Last        *probes.CollectiveRound
	LastStarted time.Time
	// ExpectedTransports are the transports each ordered pair of Last's
	// GPUs should use (CollectiveAnnotate's answer).
	ExpectedTransports []probes.PairTransport
	// SizeBytes and SmallBytes are the sizes Last took its bandwidths and
	// its latencies at.
	SizeBytes, SmallBytes int64

	Runs map[string]uint64 // by Run* result
	// Skips counts rounds due but not run by reason: SkipFewerThanTwo,
	// SkipBusyProcess, SkipBusyUtilization, SkipNoLibrary, or the reason
	// of the GPUs whose staticSkip left fewer than two. A reason is there
	// once counted: most never happen on a given node.
	Skips map[string]uint64
	// Contended counts rounds with contended results by the first reason
	// (Contention.First): a job that started on one of the GPUs during
	// the round, or one busy right before it.
	Contended map[string]uint64
	// GPUs are the GPUs collective rounds have run on, in index order,
	// with what the rounds cost each.
	GPUs []CollectiveGPU
}

// CollectiveGPU is one GPU collective rounds ran on.
type CollectiveGPU struct {
	Index    int
	PCIBusID string
	// BusySeconds accumulates the rounds' GPU time on this GPU.
	BusySeconds float64
}

// Status is the scheduler's view, one entry per GPU in NVML index order.
type Status struct {
	Policy string
	GPUs   []GPUStatus
	// Collective is nil when collective rounds are off (no runner).
	Collective *CollectiveStatus
}

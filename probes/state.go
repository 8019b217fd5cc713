package probes

import "time"

// Skip reasons: why a round left a GPU (or one of its peers) alone.
const (
	SkipLost             = "gpu_lost"
	SkipMIG              = "mig_enabled"
	SkipExclusiveProcess = "compute_mode_exclusive_process"
	SkipProhibited       = "compute_mode_prohibited"
	SkipBusyProcess      = "busy_other_process"
	SkipBusyUtilization  = "busy_utilization"
)

// Run results, one counter each.
const (
	RunSuccess = "success" // every probe gave a value
	RunPartial = "partial" // some probes failed
	RunError   = "error"   // the child ran but the GPU could not be probed
	RunTimeout = "timeout" // killed at the round's deadline
	RunCrash   = "crash"   // exited abnormally or printed no valid round
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
	Last *GPURound
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

// Status is the scheduler's view, one entry per GPU in NVML index order.
type Status struct {
	Policy string
	GPUs   []GPUStatus
}

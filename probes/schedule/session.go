package schedule

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
)

// Node-to-node sessions (internal/nodeprobe) run an NCCL child on this
// node's GPUs at a time the scheduler did not choose. They take the
// scheduler's round lock, so that a session and a probe round never
// measure each other, and they pick GPUs by the same judgement a round
// applies to each GPU.

// SessionGPU is one GPU a session holds.
type SessionGPU struct {
	Index    int    // NVML's
	PCIBusID string // as NVML gives it
}

// Why TryAcquire gives no GPUs, besides a GPU's own skip reason (the
// first one met, in PCI address order, among the GPUs it could not take).
const (
	SessionRoundRunning = "probe_round_running" // a probe round, or another session, holds the lock
	SessionPolicyOff    = "policy_off"          // --probe.policy=off: the exporter puts no work on the GPUs
	SessionNoSample     = "no_nvml_sample"      // no NVML sample with a GPU yet
	SessionTooFewGPUs   = "too_few_gpus"        // fewer GPUs than asked for, busy or not
)

// TryAcquire takes the round lock without waiting and picks the first n
// GPUs in PCI address order, among only (PCI addresses; empty: every GPU),
// that a round would probe now: not lost, not
// MIG, in a compute mode that lets another context in, and under the idle
// policy with no other compute process (from a fresh listing) and low
// utilisation. On success the caller holds the lock until it calls
// release (once; later calls do nothing), and no round starts before. On
// failure reason says why and nothing is held.
func (s *Scheduler) TryAcquire(n int, only []string) (gpus []SessionGPU, release func(), reason string) {
	if s.cfg.Policy == PolicyOff {
		return nil, nil, SessionPolicyOff
	}
	if !s.roundMu.TryLock() {
		return nil, nil, SessionRoundRunning
	}
	held := false
	defer func() {
		if !held {
			s.roundMu.Unlock()
		}
	}()
	snap := s.cfg.GPUs()
	if snap == nil || len(snap.GPUs) == 0 {
		return nil, nil, SessionNoSample
	}
	if n < 1 || len(snap.GPUs) < n {
		return nil, nil, SessionTooFewGPUs
	}
	var procs []nvml.Process
	procsOK := true
	if s.lister != nil {
		var err error
		if procs, err = s.lister.Call(); err != nil {
			procsOK = false
			s.logger.Warn("cannot list GPU processes for a node-to-node session", "err", err)
		}
	}
	order := make([]*nvml.GPUState, 0, len(snap.GPUs))
	for i := range snap.GPUs {
		if len(only) == 0 || slices.ContainsFunc(only, func(a string) bool {
			return pciaddr.Normalize(a) == pciaddr.Normalize(snap.GPUs[i].PCIBusID)
		}) {
			order = append(order, &snap.GPUs[i])
		}
	}
	if len(order) < n {
		return nil, nil, SessionTooFewGPUs
	}
	slices.SortFunc(order, func(a, b *nvml.GPUState) int {
		return cmp.Compare(pciaddr.Normalize(a.PCIBusID), pciaddr.Normalize(b.PCIBusID))
	})
	// A sample read while a round or the session before this one ran on
	// a GPU, or just after, shows that work's kernels, not another's.
	var taken time.Time
	if s.cfg.GPUsTaken != nil {
		taken = s.cfg.GPUsTaken()
	}
	var picked []*nvml.GPUState
	for _, g := range order {
		if len(picked) == n {
			break
		}
		why := staticSkip(g)
		if why == "" {
			why = s.busy(s.withoutOwnUtilization(g, taken), procs, procsOK)
		}
		if why != "" {
			reason = cmp.Or(reason, why)
			continue
		}
		picked = append(picked, g)
	}
	if len(picked) < n {
		return nil, nil, cmp.Or(reason, SessionTooFewGPUs)
	}
	for _, g := range picked {
		gpus = append(gpus, SessionGPU{Index: g.Index, PCIBusID: g.PCIBusID})
	}
	held = true
	return gpus, sync.OnceFunc(func() {
		// The session's kernels may show in NVML's utilisation for up to
		// a second: the next round's contention judgement treats them as
		// it treats a round's own.
		s.mu.Lock()
		ended := s.now()
		for _, g := range picked {
			s.probedUntil[gpuKey(g)] = ended
		}
		s.mu.Unlock()
		s.roundMu.Unlock()
	}), ""
}

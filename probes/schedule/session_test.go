package schedule

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/probes"
)

func sessionBusIDs(gpus []SessionGPU) []string {
	var out []string
	for _, g := range gpus {
		out = append(out, g.PCIBusID)
	}
	return out
}

// TryAcquire picks the first idle GPUs in PCI address order (not NVML's
// index order), and says why when it cannot pick enough.
func TestTryAcquirePicksIdleGPUsInAddressOrder(t *testing.T) {
	gpus := []nvml.GPUState{idleGPU(0), idleGPU(1), idleGPU(2), idleGPU(3)}
	// NVML's order need not be the address order.
	gpus[0].PCIBusID, gpus[3].PCIBusID = busID(3), busID(0)
	gpus[1].Utilization = sampler.Some(0.9)
	for _, tc := range []struct {
		name   string
		policy string
		n      int
		only   []string
		procs  []nvml.Process
		err    error
		want   []string
		reason string
	}{
		{"first idle two", PolicyIdle, 2, nil, nil, nil, []string{busID(0), busID(2)}, ""},
		{"a process on the first", PolicyIdle, 1, nil, []nvml.Process{{PCIBusID: busID(0), PID: 7}}, nil, []string{busID(2)}, ""},
		{"always takes the busy one", PolicyAlways, 2, nil, nil, nil, []string{busID(0), busID(1)}, ""},
		{"not enough idle", PolicyIdle, 4, nil, nil, nil, nil, SkipBusyUtilization},
		{"more than the node has", PolicyAlways, 5, nil, nil, nil, nil, SessionTooFewGPUs},
		{"process list fails", PolicyIdle, 1, nil, nil, errors.New("NVML: Unknown Error"), nil, SkipBusyProcess},
		{"policy off", PolicyOff, 1, nil, nil, nil, nil, SessionPolicyOff},
		// --node-probe.gpu: only the GPUs named, in whatever form NVML's
		// 8-digit domain or upper case gives them.
		{"only the third", PolicyIdle, 1, []string{"0000" + strings.ToUpper(busID(2))}, nil, nil, []string{busID(2)}, ""},
		{"only a busy one", PolicyIdle, 1, []string{busID(1)}, nil, nil, nil, SkipBusyUtilization},
		{"fewer named than asked", PolicyAlways, 2, []string{busID(3)}, nil, nil, nil, SessionTooFewGPUs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSched(t, &nvml.Snapshot{GPUs: slices.Clone(gpus)}, func(c *SchedulerConfig) { c.Policy = tc.policy })
			f.procs, f.procsErr = tc.procs, tc.err
			got, release, reason := f.s.TryAcquire(tc.n, tc.only)
			if reason != tc.reason || !slices.Equal(sessionBusIDs(got), tc.want) {
				t.Fatalf("got %v %q, want %v %q", sessionBusIDs(got), reason, tc.want, tc.reason)
			}
			if reason != "" {
				if release != nil {
					t.Error("a refusal returned a release")
				}
				if !f.s.roundMu.TryLock() {
					t.Fatal("a refused session left the round lock held")
				}
				f.s.roundMu.Unlock()
				return
			}
			if got[0].PCIBusID == busID(0) && got[0].Index != 3 {
				t.Errorf("first GPU's NVML index %d, want 3 (the one at %s)", got[0].Index, busID(0))
			}
			release()
			release() // a second call does nothing
		})
	}
}

// A session and a round never overlap: a session is refused while a round
// runs, and a round waits for the session's release.
func TestTryAcquireExcludesRounds(t *testing.T) {
	f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}}, nil)
	inRound := make(chan struct{})
	finish := make(chan struct{})
	f.runner.respond = func(o probes.Options) (*probes.Round, error) {
		close(inRound)
		<-finish
		return okRound(o), nil
	}
	done := make(chan struct{})
	go func() { f.s.RunRound(context.Background()); close(done) }()
	<-inRound
	if _, _, reason := f.s.TryAcquire(1, nil); reason != SessionRoundRunning {
		t.Errorf("during a round: reason %q, want %q", reason, SessionRoundRunning)
	}
	close(finish)
	<-done

	gpus, release, reason := f.s.TryAcquire(1, nil)
	if reason != "" || len(gpus) != 1 {
		t.Fatalf("after the round: %v %q", gpus, reason)
	}
	if _, _, again := f.s.TryAcquire(1, nil); again != SessionRoundRunning {
		t.Errorf("a second session: reason %q, want %q", again, SessionRoundRunning)
	}
	f.runner.respond = nil
	waited := make(chan struct{})
	go func() { f.s.RunRound(context.Background()); close(waited) }()
	select {
	case <-waited:
		t.Fatal("a round ran during the session")
	case <-time.After(50 * time.Millisecond):
	}
	release()
	<-waited
	if n := len(f.runner.gpus()); n != 2 {
		t.Errorf("the round did not run after the release: %d runs", n)
	}
	// The release marks the GPUs as just measured, as a round does.
	f.s.mu.Lock()
	_, marked := f.s.probedUntil[gpuKey(&f.snap.GPUs[0])]
	f.s.mu.Unlock()
	if !marked {
		t.Error("the session's GPU is not marked as measured")
	}
}

// The utilisation a session leaves in NVML's next sample is its own: a
// sample read within a second of the release does not decline the next
// session as busy; a later one that shows work does. (On two H100s a
// /probe one second after another was declined busy_utilization.)
func TestTryAcquireIgnoresTheSessionsOwnUtilization(t *testing.T) {
	var taken time.Time
	busy := idleGPU(0)
	busy.Utilization = sampler.Some(0.8)
	f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}}, func(c *SchedulerConfig) {
		c.GPUsTaken = func() time.Time { return taken }
	})
	_, release, reason := f.s.TryAcquire(1, nil)
	if reason != "" {
		t.Fatalf("first session: %q", reason)
	}
	release()
	f.s.mu.Lock()
	ended := f.s.probedUntil[gpuKey(&f.snap.GPUs[0])]
	f.s.mu.Unlock()

	f.setSnap(&nvml.Snapshot{GPUs: []nvml.GPUState{busy}})
	taken = ended.Add(utilizationWindow / 2)
	_, release, reason = f.s.TryAcquire(1, nil)
	if reason != "" {
		t.Fatalf("a sample read half a second after the session: declined %q", reason)
	}
	release()
	f.s.mu.Lock()
	ended = f.s.probedUntil[gpuKey(&f.snap.GPUs[0])]
	f.s.mu.Unlock()
	taken = ended.Add(2 * utilizationWindow)
	if _, _, reason = f.s.TryAcquire(1, nil); reason != SkipBusyUtilization {
		t.Errorf("a sample read well after the session that shows work: %q, want %q", reason, SkipBusyUtilization)
	}
}

package schedule

import (
	"bytes"
	"context"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/probes"
)

const ownPID = 4242 // the probe child's, in these tests

// ownRound is okRound measured by the child ownPID.
func ownRound(o probes.Options) *probes.Round {
	r := okRound(o)
	r.PID = ownPID
	return r
}

// setProcs replaces what the fake process list answers.
func (f *schedFixture) setProcs(ps ...nvml.Process) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs = ps
}

func (f *schedFixture) listings() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procsN
}

func proc(gpu, pid int) nvml.Process {
	return nvml.Process{GPU: gpu, UUID: idleGPU(gpu).UUID, PCIBusID: busID(gpu), PID: pid}
}

// lastContention is GPU i's latest round's contention.
func (f *schedFixture) lastContention(t *testing.T, i int) *probes.Contention {
	t.Helper()
	st := f.gpuStatus(t, i)
	if st.Last == nil {
		t.Fatalf("GPU %d has no round: %+v", i, st)
	}
	return st.Last.Contention
}

// Under policy idle a job that starts after the check before the run and
// is gone by the check after it is seen by the poll: the round is
// contended, not skipped and not low. The child's own context is no
// contention.
func TestSchedulerJobMidRoundIsContended(t *testing.T) {
	f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}}, nil)
	f.s.pollEvery = 2 * time.Millisecond
	midRound := true
	f.runner.respond = func(o probes.Options) (*probes.Round, error) {
		// The child's context is on the GPU throughout.
		f.setProcs(proc(0, ownPID))
		if midRound {
			// A job starts, is listed by the poll, and ends before the
			// child does.
			f.setProcs(proc(0, ownPID), proc(0, 777))
			for n := f.listings(); f.listings() < n+2; {
				time.Sleep(time.Millisecond)
			}
			f.setProcs(proc(0, ownPID))
		}
		return ownRound(o), nil
	}
	f.s.RunRound(context.Background())

	st := f.gpuStatus(t, 0)
	if st.Runs[probes.RunSuccess] != 1 || len(nonZero(st.Skips)) != 0 {
		t.Fatalf("want one successful run, got runs %v skips %v", nonZero(st.Runs), nonZero(st.Skips))
	}
	c := f.lastContention(t, 0)
	if !c.Contended() || !slices.Equal(c.Reasons, []string{probes.ContendedOtherProcess}) ||
		!reflect.DeepEqual(c.Processes, map[string][]int{busID(0): {777}}) {
		t.Errorf("contention %+v, want other_process by pid 777 alone", c)
	}
	if c.ProcessChecks < 3 {
		t.Errorf("%d process listings, want before, during and after", c.ProcessChecks)
	}
	if got := nonZero(st.Contended); !reflect.DeepEqual(got, map[string]uint64{probes.ContendedOtherProcess: 1}) {
		t.Errorf("contended rounds %v", got)
	}

	// The next round has the GPU to itself.
	midRound = false
	f.setProcs()
	f.s.RunRound(context.Background())
	if c := f.lastContention(t, 0); c.Contended() || c.ProcessChecks < 2 {
		t.Errorf("a round alone: contention %+v", c)
	}
	if got := nonZero(f.gpuStatus(t, 0).Contended); !reflect.DeepEqual(got, map[string]uint64{probes.ContendedOtherProcess: 1}) {
		t.Errorf("contended rounds after a clean one %v", got)
	}
}

// A job still there after the run is seen by the listing after it, even
// when the run is too short for a poll.
func TestSchedulerJobAfterRunIsContended(t *testing.T) {
	f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}}, nil)
	f.runner.respond = func(o probes.Options) (*probes.Round, error) {
		f.setProcs(proc(0, 777))
		return ownRound(o), nil
	}
	f.s.RunRound(context.Background())
	if c := f.lastContention(t, 0); !slices.Equal(c.Reasons, []string{probes.ContendedOtherProcess}) {
		t.Errorf("contention %+v", c)
	}
}

// A process on a peer disturbs only the results against that peer; one
// on the GPU itself, all of them. Under always both are probed.
func TestSchedulerContendedPeer(t *testing.T) {
	gpus := []nvml.GPUState{idleGPU(0), idleGPU(1), idleGPU(2)}
	f := newSched(t, &nvml.Snapshot{GPUs: gpus, Pairs: nvswitch(gpus)}, func(c *SchedulerConfig) { c.Policy = PolicyAlways })
	f.setProcs(proc(1, 99))
	f.s.RunRound(context.Background())

	c0 := f.lastContention(t, 0)
	if len(c0.Reasons) != 0 || !reflect.DeepEqual(c0.Peers, map[string][]string{busID(1): {probes.ContendedOtherProcess}}) {
		t.Errorf("GPU 0: contention %+v, want peer %s alone", c0, busID(1))
	}
	if len(c0.For("")) != 0 || len(c0.For(busID(2))) != 0 || !slices.Equal(c0.For(busID(1)), []string{probes.ContendedOtherProcess}) {
		t.Errorf("GPU 0: for host %v, peer 2 %v, peer 1 %v", c0.For(""), c0.For(busID(2)), c0.For(busID(1)))
	}
	if c1 := f.lastContention(t, 1); !slices.Equal(c1.Reasons, []string{probes.ContendedOtherProcess}) || !slices.Equal(c1.For(busID(0)), []string{probes.ContendedOtherProcess}) {
		t.Errorf("GPU 1: contention %+v", c1)
	}
	for i, want := range []uint64{1, 1, 1} {
		if got := f.gpuStatus(t, i).Contended[probes.ContendedOtherProcess]; got != want {
			t.Errorf("GPU %d: %d contended rounds, want %d", i, got, want)
		}
	}
}

// Utilisation above the idle threshold before the run is another's work,
// unless the NVML sample may show the GPU's own probes.
func TestSchedulerContendedUtilization(t *testing.T) {
	busy := idleGPU(0)
	busy.Utilization = sampler.Some(0.6)
	var taken time.Time
	f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{busy}}, func(c *SchedulerConfig) {
		c.Policy = PolicyAlways
		c.GPUsTaken = func() time.Time { return taken }
	})
	f.s.RunRound(context.Background())
	if c := f.lastContention(t, 0); !slices.Equal(c.Reasons, []string{probes.ContendedUtilization}) {
		t.Fatalf("first round: contention %+v", c)
	}
	f.s.mu.Lock()
	ranUntil := f.s.probedUntil[gpuKey(&busy)]
	f.s.mu.Unlock()

	// A sample taken half a second after the probes ended: their kernels
	// may be what it shows.
	taken = ranUntil.Add(500 * time.Millisecond)
	f.s.RunRound(context.Background())
	if c := f.lastContention(t, 0); c.Contended() {
		t.Errorf("sample right after the GPU's own run: contention %+v", c)
	}
	f.s.mu.Lock()
	ranUntil = f.s.probedUntil[gpuKey(&busy)]
	f.s.mu.Unlock()
	taken = ranUntil.Add(2 * time.Second)
	f.s.RunRound(context.Background())
	if c := f.lastContention(t, 0); !slices.Equal(c.Reasons, []string{probes.ContendedUtilization}) {
		t.Errorf("sample two seconds after: contention %+v", c)
	}
}

// A GPU measured as a peer in one run may show that run's work in the
// utilisation read before its own: a sample taken within a second of it is
// not taken for another's work.
func TestSchedulerUtilizationAfterPeerProbes(t *testing.T) {
	gpus := []nvml.GPUState{idleGPU(0), idleGPU(1)}
	gpus[1].Utilization = sampler.Some(0.6)
	var f *schedFixture
	f = newSched(t, &nvml.Snapshot{GPUs: gpus, Pairs: nvswitch(gpus)}, func(c *SchedulerConfig) {
		c.Policy = PolicyAlways
		c.GPUsTaken = func() time.Time {
			f.s.mu.Lock()
			defer f.s.mu.Unlock()
			if until, ok := f.s.probedUntil[gpuKey(&gpus[1])]; ok {
				return until.Add(500 * time.Millisecond)
			}
			return time.Time{} // not known: judged
		}
	})
	f.s.RunRound(context.Background())
	if c := f.lastContention(t, 0); len(c.Reasons) != 0 || !reflect.DeepEqual(c.Peers, map[string][]string{busID(1): {probes.ContendedUtilization}}) {
		t.Errorf("GPU 0: contention %+v, want its results against the busy GPU 1 alone", c)
	}
	if c := f.lastContention(t, 1); c.Contended() {
		t.Errorf("GPU 1 right after GPU 0's probes wrote into it: contention %+v", c)
	}
}

// Samples that spread wider than a healthy link allows mark their result
// contended: on the GPU for results with no peer, on the peer for peer
// results. Bidirectional host copies and latencies are not judged.
func TestSchedulerContendedSampleSpread(t *testing.T) {
	gpus := []nvml.GPUState{idleGPU(0), idleGPU(1)}
	spread := func(k probes.Kind, dir, peer string, v, lo, hi float64) probes.Result {
		return probes.Result{Probe: k, Direction: dir, Peer: peer, SizeBytes: 1 << 20, Samples: 3, BytesPerSecond: v, SampleMin: lo, SampleMax: hi}
	}
	for _, tc := range []struct {
		name    string
		results []probes.Result
		reasons []string
		peers   map[string][]string
	}{
		{"tight", []probes.Result{spread(probes.HostToDevice, probes.DirHostToDevice, "", 50e9, 49.8e9, 50.1e9)}, nil, nil},
		{"host copy wide", []probes.Result{spread(probes.HostToDevice, probes.DirHostToDevice, "", 40e9, 20e9, 50e9)}, []string{probes.ContendedSampleSpread}, nil},
		{"peer copy wide", []probes.Result{spread(probes.PeerCopy, probes.DirToPeer, busID(1), 300e9, 150e9, 380e9)}, nil,
			map[string][]string{busID(1): {probes.ContendedSampleSpread}}},
		{"bidirectional host wide", []probes.Result{spread(probes.HostBidirectional, probes.DirHostToDevice, "", 45e9, 40e9, 50e9)}, nil, nil},
		{"latency wide", []probes.Result{{Probe: probes.LaunchLatency, Samples: 900, Seconds: 10e-6, SampleMin: 8e-6, SampleMax: 2e-3}}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSched(t, &nvml.Snapshot{GPUs: gpus[:1]}, nil)
			f.runner.respond = func(o probes.Options) (*probes.Round, error) {
				r := ownRound(o)
				r.GPUs[0].Results = tc.results
				return r, nil
			}
			f.s.RunRound(context.Background())
			c := f.lastContention(t, 0)
			if !slices.Equal(c.Reasons, tc.reasons) || !reflect.DeepEqual(c.Peers, tc.peers) {
				t.Errorf("contention %+v, want reasons %v peers %v", c, tc.reasons, tc.peers)
			}
		})
	}
}

// A process listing that hangs (NVML on a failing GPU) holds a round up by
// at most the listing limit at each end, and the poll not at all; the
// round says it could not look.
func TestSchedulerHungProcessListing(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}}, func(c *SchedulerConfig) {
		c.Policy = PolicyAlways
		c.Processes = func() ([]nvml.Process, error) {
			<-release
			return nil, nil
		}
	})
	f.s.lister = probes.NewProcessLister(f.s.cfg.Processes, 20*time.Millisecond)
	f.s.pollEvery = time.Millisecond
	f.runner.respond = func(o probes.Options) (*probes.Round, error) {
		time.Sleep(50 * time.Millisecond)
		return ownRound(o), nil
	}
	start := time.Now()
	f.s.RunRound(context.Background())
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("round took %s with NVML hung", took)
	}
	st := f.gpuStatus(t, 0)
	if st.Runs[probes.RunSuccess] != 1 {
		t.Fatalf("runs %v", nonZero(st.Runs))
	}
	if c := st.Last.Contention; c.ProcessChecks != 0 || c.ProcessCheckFailures < 2 || c.Contended() {
		t.Errorf("contention %+v, want no listing read and the failures counted", c)
	}

	// Under idle the same hang is a busy GPU, as a failed listing is.
	g := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}}, func(c *SchedulerConfig) {
		c.Processes = func() ([]nvml.Process, error) {
			<-release
			return nil, nil
		}
	})
	g.s.lister = probes.NewProcessLister(g.s.cfg.Processes, 20*time.Millisecond)
	g.s.RunRound(context.Background())
	if got := nonZero(g.gpuStatus(t, 0).Skips); !reflect.DeepEqual(got, map[string]uint64{SkipBusyProcess: 1}) {
		t.Errorf("idle with NVML hung: skips %v", got)
	}
}

// A pass logs one line at INFO whatever shares its GPUs (issue 38: a
// line per contended GPU per pass filled the log of a busy node); each
// GPU's detail is at DEBUG.
func TestSchedulerLogsOneLinePerPass(t *testing.T) {
	var log bytes.Buffer
	gpus := []nvml.GPUState{idleGPU(0), idleGPU(1), idleGPU(2)}
	f := newSched(t, &nvml.Snapshot{GPUs: gpus}, func(c *SchedulerConfig) {
		c.Policy = PolicyAlways
		c.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	f.setProcs(proc(0, 99), proc(2, 98))
	f.s.RunRound(context.Background())

	var info, shared []string
	for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		if strings.Contains(l, "level=INFO") {
			info = append(info, l)
		}
		if strings.Contains(l, "shared the GPU") {
			shared = append(shared, l)
			if !strings.Contains(l, "level=DEBUG") {
				t.Errorf("per GPU line above DEBUG: %s", l)
			}
		}
	}
	if len(info) != 1 || !strings.Contains(info[0], `msg="probe round"`) ||
		!strings.Contains(info[0], "gpus=3 probed=3") || !strings.Contains(info[0], `contended_gpus="[0 2]"`) {
		t.Errorf("INFO lines of a pass with GPUs 0 and 2 shared:\n%s\nwant one probe round line naming them", strings.Join(info, "\n"))
	}
	if len(shared) != 2 {
		t.Errorf("%d per GPU lines of sharing at DEBUG, want 2:\n%s", len(shared), log.String())
	}
}

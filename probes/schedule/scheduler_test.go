package schedule

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/probes"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
)

// fakeRunner records its calls and answers with respond, or a one-result
// successful round. It notices two runs at once.
type fakeRunner struct {
	respond func(o probes.Options) (*probes.Round, error)

	mu        sync.Mutex
	calls     []probes.Options
	active    int
	maxActive int
}

func (f *fakeRunner) Run(ctx context.Context, o probes.Options) (*probes.Round, error) {
	f.mu.Lock()
	f.calls = append(f.calls, o)
	f.active++
	f.maxActive = max(f.maxActive, f.active)
	f.mu.Unlock()
	time.Sleep(time.Millisecond) // long enough for an overlapping run to show
	f.mu.Lock()
	f.active--
	f.mu.Unlock()
	if f.respond != nil {
		return f.respond(o)
	}
	return okRound(o), nil
}

func (f *fakeRunner) gpus() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		out = append(out, c.GPU)
	}
	return out
}

func okRound(o probes.Options) *probes.Round {
	return &probes.Round{Version: probes.ContractVersion, GPUs: []probes.GPURound{{PCIBusID: o.GPU,
		Results:     []probes.Result{{Probe: probes.HostToDevice, Direction: probes.DirHostToDevice, SizeBytes: o.SizeBytes, Samples: o.Samples, BytesPerSecond: 50e9}},
		BusySeconds: 0.25, ContextSeconds: 2}}}
}

func busID(i int) string { return fmt.Sprintf("0000:%02x:00.0", 0x18+0x10*i) }

// idleGPU is an idle, probe-able GPU as NVML reports it.
func idleGPU(i int) nvml.GPUState {
	return nvml.GPUState{
		Identity:    nvml.Identity{Index: i, UUID: fmt.Sprintf("GPU-%d", i), PCIBusID: busID(i)},
		Utilization: sampler.Some(0.0),
		ComputeMode: sampler.Some("default"),
		MIGEnabled:  sampler.Some(false),
	}
}

// nvswitch joins every pair of GPUs both ways, as on an HGX board.
func nvswitch(gpus []nvml.GPUState) []nvml.Pair {
	var out []nvml.Pair
	for _, a := range gpus {
		for _, b := range gpus {
			if a.Index != b.Index {
				out = append(out, nvml.Pair{GPU: a.Index, Peer: b.Index, Level: "NV18", NVLinks: 18,
					P2P: map[string]bool{"read": true, "write": true, "nvlink": true}})
			}
		}
	}
	return out
}

// defaultOptions are the daemon's flags' defaults.
var defaultOptions = probes.Options{SizeBytes: probes.DefaultSizeBytes, Samples: probes.DefaultSamples}

// fakeClock advances a second every time it is read, so durations are
// whole seconds and every timestamp differs.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

type schedFixture struct {
	s      *Scheduler
	runner *fakeRunner
	clock  *fakeClock

	mu       sync.Mutex
	snap     *nvml.Snapshot
	procs    []nvml.Process
	procsErr error
	procsN   int
}

func (f *schedFixture) setSnap(snap *nvml.Snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snap = snap
}

// newSched returns a scheduler over snap with a fake runner and clock;
// edit adjusts the config first.
func newSched(t *testing.T, snap *nvml.Snapshot, edit func(*SchedulerConfig)) *schedFixture {
	t.Helper()
	f := &schedFixture{runner: &fakeRunner{}, clock: &fakeClock{t: time.Unix(1700000000, 0)}, snap: snap}
	cfg := SchedulerConfig{
		Runner:  f.runner,
		Options: defaultOptions,
		Jitter:  probes.DefaultJitter, MaxDuty: probes.DefaultMaxDuty, UtilizationThreshold: probes.DefaultUtilizationThreshold,
		GPUs: func() *nvml.Snapshot {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.snap
		},
		Processes: func() ([]nvml.Process, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.procsN++
			return f.procs, f.procsErr
		},
	}
	if edit != nil {
		edit(&cfg)
	}
	s, err := NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.now = f.clock.now
	s.pollEvery = time.Hour // tests of the poll set their own
	f.s = s
	return f
}

// gpuStatus is GPU i's entry in the latest published status.
func (f *schedFixture) gpuStatus(t *testing.T, i int) GPUStatus {
	t.Helper()
	for _, g := range f.s.Latest().Data.GPUs {
		if g.Index == i {
			return g
		}
	}
	t.Fatalf("GPU %d not in status %+v", i, f.s.Latest().Data)
	return GPUStatus{}
}

// nonZero drops the zero counts every entry starts with.
func nonZero(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

func TestSchedulerSkipReasons(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(*nvml.GPUState)
		procs    []nvml.Process
		procsErr error
		idle     string // skip reason under idle, "" for a run
		always   string // under always
	}{
		{"idle GPU", func(*nvml.GPUState) {}, nil, nil, "", ""},
		{"lost", func(g *nvml.GPUState) { g.Lost = true }, nil, nil, SkipLost, SkipLost},
		{"no PCI address", func(g *nvml.GPUState) { g.PCIBusID = "" }, nil, nil, SkipLost, SkipLost},
		{"MIG", func(g *nvml.GPUState) { g.MIGEnabled = sampler.Some(true) }, nil, nil, SkipMIG, SkipMIG},
		{"prohibited", func(g *nvml.GPUState) { g.ComputeMode = sampler.Some("prohibited") }, nil, nil, SkipProhibited, SkipProhibited},
		{"exclusive process", func(g *nvml.GPUState) { g.ComputeMode = sampler.Some("exclusive_process") }, nil, nil, SkipExclusiveProcess, SkipExclusiveProcess},
		{"exclusive thread", func(g *nvml.GPUState) { g.ComputeMode = sampler.Some("exclusive_thread") }, nil, nil, SkipExclusiveProcess, SkipExclusiveProcess},
		{"lost beats MIG", func(g *nvml.GPUState) { g.Lost, g.MIGEnabled = true, sampler.Some(true) }, nil, nil, SkipLost, SkipLost},
		{"MIG beats compute mode", func(g *nvml.GPUState) { g.MIGEnabled, g.ComputeMode = sampler.Some(true), sampler.Some("prohibited") }, nil, nil, SkipMIG, SkipMIG},
		{"unknown compute mode and MIG", func(g *nvml.GPUState) { g.ComputeMode, g.MIGEnabled = sampler.Opt[string]{}, sampler.Opt[bool]{} }, nil, nil, "", ""},
		{"busy process", func(*nvml.GPUState) {}, []nvml.Process{{GPU: 0, PCIBusID: strings.ToUpper(busID(0)), PID: 4242}}, nil, SkipBusyProcess, ""},
		{"busy process by UUID", func(*nvml.GPUState) {}, []nvml.Process{{GPU: 0, UUID: "GPU-0", PID: 4242}}, nil, SkipBusyProcess, ""},
		{"process on another GPU", func(*nvml.GPUState) {}, []nvml.Process{{GPU: 1, UUID: "GPU-1", PCIBusID: busID(1), PID: 4242}}, nil, "", ""},
		{"process list fails", func(*nvml.GPUState) {}, nil, errors.New("NVML: Unknown Error"), SkipBusyProcess, ""},
		{"busy utilization", func(g *nvml.GPUState) { g.Utilization = sampler.Some(0.5) }, nil, nil, SkipBusyUtilization, ""},
		{"utilization at threshold", func(g *nvml.GPUState) { g.Utilization = sampler.Some(0.05) }, nil, nil, "", ""},
		{"utilization unknown", func(g *nvml.GPUState) { g.Utilization = sampler.Opt[float64]{} }, nil, nil, "", ""},
		{"process beats utilization", func(g *nvml.GPUState) { g.Utilization = sampler.Some(1.0) }, []nvml.Process{{PCIBusID: busID(0)}}, nil, SkipBusyProcess, ""},
	} {
		for _, policy := range []string{PolicyIdle, PolicyAlways} {
			want := tc.idle
			if policy == PolicyAlways {
				want = tc.always
			}
			t.Run(tc.name+"/"+policy, func(t *testing.T) {
				g := idleGPU(0)
				tc.edit(&g)
				f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{g}}, func(c *SchedulerConfig) { c.Policy = policy })
				f.procs, f.procsErr = tc.procs, tc.procsErr
				f.s.RunRound(context.Background())

				st := f.s.Latest().Data.GPUs[0]
				calls := len(f.runner.gpus())
				if want == "" {
					if calls != 1 || len(nonZero(st.Skips)) != 0 || st.Runs[probes.RunSuccess] != 1 {
						t.Errorf("want one run, got %d calls, skips %v, runs %v", calls, nonZero(st.Skips), nonZero(st.Runs))
					}
				} else {
					if calls != 0 || !reflect.DeepEqual(nonZero(st.Skips), map[string]uint64{want: 1}) || len(nonZero(st.Runs)) != 0 {
						t.Errorf("want skip %q, got %d calls, skips %v, runs %v", want, calls, nonZero(st.Skips), nonZero(st.Runs))
					}
				}
				// Every policy lists the processes around a run, to tell a
				// contended round; only idle skips for them.
				if want == "" && f.procsN < 2 {
					t.Errorf("process list asked %d times around the run, want before and after", f.procsN)
				}
				if !f.s.Status().Up {
					t.Errorf("not up after a round that ran or skipped: %+v", f.s.Status())
				}
			})
		}
	}
}

// A threshold of 0 makes any utilisation busy, and only that: a GPU at 0
// is probed.
func TestSchedulerZeroUtilizationThreshold(t *testing.T) {
	for _, tc := range []struct {
		util float64
		want string // skip reason, "" for a run
	}{{0, ""}, {0.01, SkipBusyUtilization}} {
		g := idleGPU(0)
		g.Utilization = sampler.Some(tc.util)
		f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{g}}, func(c *SchedulerConfig) { c.UtilizationThreshold = 0 })
		f.s.RunRound(context.Background())
		st := f.s.Latest().Data.GPUs[0]
		if tc.want == "" && st.Runs[probes.RunSuccess] != 1 {
			t.Errorf("utilisation %g: not probed, skips %v", tc.util, nonZero(st.Skips))
		}
		if tc.want != "" && !reflect.DeepEqual(nonZero(st.Skips), map[string]uint64{tc.want: 1}) {
			t.Errorf("utilisation %g: skips %v, want %s", tc.util, nonZero(st.Skips), tc.want)
		}
	}
}

func TestSchedulerProcessesAskedPerGPU(t *testing.T) {
	gpus := []nvml.GPUState{idleGPU(0), idleGPU(1), idleGPU(2)}
	gpus[2].ComputeMode = sampler.Some("prohibited")
	f := newSched(t, &nvml.Snapshot{GPUs: gpus}, nil)
	f.s.RunRound(context.Background())
	// Fresh before and after each GPU that could be probed (no run here
	// lasts a poll); not for one that cannot.
	if f.procsN != 4 {
		t.Errorf("process list asked %d times, want 4", f.procsN)
	}
}

func TestSchedulerGoneGPUCountsLost(t *testing.T) {
	f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0), idleGPU(1)}}, nil)
	f.s.RunRound(context.Background())
	f.setSnap(&nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}})
	f.s.RunRound(context.Background())
	if got := f.gpuStatus(t, 1); got.Skips[SkipLost] != 1 || got.Runs[probes.RunSuccess] != 1 {
		t.Errorf("GPU gone from the sample: skips %v runs %v, want one lost skip after one run", nonZero(got.Skips), nonZero(got.Runs))
	}
	if got := f.gpuStatus(t, 0); got.Runs[probes.RunSuccess] != 2 || len(nonZero(got.Skips)) != 0 {
		t.Errorf("GPU 0: skips %v runs %v", nonZero(got.Skips), nonZero(got.Runs))
	}
}

func TestSchedulerNoSnapshot(t *testing.T) {
	for _, snap := range []*nvml.Snapshot{nil, {}} {
		f := newSched(t, snap, nil)
		v := f.s.Version()
		f.s.RunRound(context.Background())
		if n := len(f.runner.gpus()); n != 0 || f.procsN != 0 {
			t.Errorf("snapshot %v: %d runs, %d process lists", snap, n, f.procsN)
		}
		if st := f.s.Status(); st.Up || !st.LastSuccess.IsZero() {
			t.Errorf("snapshot %v: status %+v after a round that did nothing", snap, st)
		}
		if got := f.s.Latest().Data; len(got.GPUs) != 0 || got.Policy != PolicyIdle || f.s.Version() != v {
			t.Errorf("snapshot %v: published %+v (version %d -> %d)", snap, got, v, f.s.Version())
		}
	}
}

func TestSchedulerOneGPUAtATimeInSnapshotOrder(t *testing.T) {
	// NVML's order is the sample's; the status is in index order.
	gpus := []nvml.GPUState{idleGPU(2), idleGPU(0), idleGPU(3), idleGPU(1)}
	f := newSched(t, &nvml.Snapshot{GPUs: gpus, Pairs: nvswitch(gpus)}, nil)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { f.s.RunRound(context.Background()) })
	}
	wg.Wait()
	if f.runner.maxActive != 1 {
		t.Errorf("%d runs at once, want 1", f.runner.maxActive)
	}
	calls := f.runner.gpus()
	want := []string{busID(2), busID(0), busID(3), busID(1)}
	if len(calls) != 12 || !slices.Equal(calls[:4], want) || !slices.Equal(calls[4:8], want) {
		t.Errorf("runs %q, want %q three times", calls, want)
	}
	var idx []int
	for _, g := range f.s.Latest().Data.GPUs {
		idx = append(idx, g.Index)
	}
	if !slices.Equal(idx, []int{0, 1, 2, 3}) {
		t.Errorf("status order %v", idx)
	}
}

func TestSchedulerPeers(t *testing.T) {
	gpus := []nvml.GPUState{idleGPU(0), idleGPU(1), idleGPU(2), idleGPU(3), idleGPU(4), idleGPU(5)}
	gpus[4].ComputeMode = sampler.Some("exclusive_process")
	gpus[5].Utilization = sampler.Some(0.9)
	pair := func(a, b, nvlinks int, write bool) nvml.Pair {
		return nvml.Pair{GPU: a, Peer: b, NVLinks: nvlinks, P2P: map[string]bool{"write": write}}
	}
	pairs := []nvml.Pair{
		pair(0, 1, 4, false), // NVLink
		pair(2, 0, 0, true),  // PCIe peer to peer, listed the other way round
		pair(0, 3, 0, false), // no peer access: never a peer, never counted
		pair(0, 4, 4, true),  // reachable, exclusive
		pair(0, 5, 4, true),  // reachable, busy
	}
	// A process on GPU 2 and one on GPU 3.
	procs := []nvml.Process{{GPU: 2, PCIBusID: busID(2), PID: 10}, {GPU: 3, PCIBusID: busID(3), PID: 11}}

	for _, tc := range []struct {
		policy    string
		peers     []string
		peerSkips map[string]uint64
	}{
		{PolicyIdle, []string{busID(1)}, map[string]uint64{
			"peer_" + SkipBusyProcess: 1, "peer_" + SkipExclusiveProcess: 1, "peer_" + SkipBusyUtilization: 1}},
		{PolicyAlways, []string{busID(1), busID(2), busID(5)}, map[string]uint64{"peer_" + SkipExclusiveProcess: 1}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			f := newSched(t, &nvml.Snapshot{GPUs: gpus, Pairs: pairs}, func(c *SchedulerConfig) {
				c.Policy = tc.policy
				c.HostNodes = func(bus string) []int {
					if bus == busID(0) {
						return []int{1, 0}
					}
					return nil
				}
				c.Options = probes.Options{Probes: []probes.Kind{probes.PeerCopy, probes.HostToDevice}, SizeBytes: 1 << 20, Samples: 3,
					GPU: "ignored", Peers: []string{"ignored"}}
			})
			f.procs = procs
			f.s.RunRound(context.Background())
			f.runner.mu.Lock()
			o := f.runner.calls[0]
			f.runner.mu.Unlock()
			want := probes.Options{GPU: busID(0), Peers: tc.peers, HostNodes: []int{1, 0}, Probes: []probes.Kind{probes.PeerCopy, probes.HostToDevice}, SizeBytes: 1 << 20, Samples: 3}
			if !reflect.DeepEqual(o, want) {
				t.Errorf("GPU 0 run with %+v\nwant          %+v", o, want)
			}
			got := map[string]uint64{}
			for k, v := range nonZero(f.gpuStatus(t, 0).Skips) {
				if strings.HasPrefix(k, "peer_") {
					got[k] = v
				}
			}
			if !reflect.DeepEqual(got, tc.peerSkips) {
				t.Errorf("GPU 0 peer skips %v, want %v", got, tc.peerSkips)
			}
		})
	}
}

func TestSchedulerRunsItsOptions(t *testing.T) {
	f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}}, func(c *SchedulerConfig) {
		c.Options = probes.Options{SizeBytes: 8 << 20, Samples: 7}
	})
	f.s.RunRound(context.Background())
	o := f.runner.calls[0]
	if o.SizeBytes != 8<<20 || o.Samples != 7 || o.Probes != nil || o.Peers != nil || o.HostNodes != nil {
		t.Errorf("run with %+v, want the configured size and samples, all probes, no peers, unbound", o)
	}
}

func TestSchedulerClassifiesRuns(t *testing.T) {
	crashRound := func(o probes.Options) *probes.Round { r := okRound(o); r.GPUs[0].BusySeconds = 1; return r }
	outcomes := map[string]func(o probes.Options) (*probes.Round, error){
		busID(0): func(o probes.Options) (*probes.Round, error) { return okRound(o), nil },
		busID(1): func(o probes.Options) (*probes.Round, error) {
			r := okRound(o)
			r.GPUs[0].Results = append(r.GPUs[0].Results, probes.Result{Probe: probes.PeerCopy, Peer: busID(2), Error: "cuMemcpyPeerAsync: CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"})
			return r, nil
		},
		busID(2): func(o probes.Options) (*probes.Round, error) {
			return &probes.Round{Version: probes.ContractVersion, GPUs: []probes.GPURound{{PCIBusID: o.GPU, Error: "cuCtxCreate: CUDA_ERROR_OUT_OF_MEMORY", ContextSeconds: 0.5}}}, nil
		},
		busID(3): func(o probes.Options) (*probes.Round, error) {
			return nil, &probes.RunFailure{GPU: o.GPU, Result: probes.RunTimeout, Err: errors.New("no round within 1m0s; child killed")}
		},
		busID(4): func(o probes.Options) (*probes.Round, error) {
			// A child killed by a signal after printing its round.
			return crashRound(o), &probes.RunFailure{GPU: o.GPU, Result: probes.RunCrash, Err: errors.New("child signal: segmentation fault")}
		},
		busID(5): func(o probes.Options) (*probes.Round, error) { return nil, errors.New("simulated runner broke") },
		busID(6): func(o probes.Options) (*probes.Round, error) {
			return &probes.Round{Version: probes.ContractVersion}, nil
		}, // not the GPU asked for
	}
	var gpus []nvml.GPUState
	for i := range 7 {
		gpus = append(gpus, idleGPU(i))
	}
	f := newSched(t, &nvml.Snapshot{GPUs: gpus}, nil)
	f.runner.respond = func(o probes.Options) (*probes.Round, error) { return outcomes[o.GPU](o) }
	for range 2 {
		f.s.RunRound(context.Background())
	}

	for _, tc := range []struct {
		gpu      int
		result   string
		keepLast bool
		busy     float64
	}{
		{0, probes.RunSuccess, true, 0.5},
		{1, probes.RunPartial, true, 0.5},
		{2, probes.RunError, false, 0},
		{3, probes.RunTimeout, false, 0},
		{4, probes.RunCrash, true, 2},
		{5, probes.RunError, false, 0},
		{6, probes.RunError, false, 0},
	} {
		st := f.gpuStatus(t, tc.gpu)
		if got := nonZero(st.Runs); !reflect.DeepEqual(got, map[string]uint64{tc.result: 2}) {
			t.Errorf("GPU %d: runs %v, want 2 %s", tc.gpu, got, tc.result)
		}
		if (st.Last != nil) != tc.keepLast {
			t.Errorf("GPU %d: Last = %v, want kept: %v", tc.gpu, st.Last, tc.keepLast)
		}
		if st.BusySeconds != tc.busy {
			t.Errorf("GPU %d: busy %gs, want %g", tc.gpu, st.BusySeconds, tc.busy)
		}
		// The fake clock ticks once at the start of a run and once at its end.
		if st.LastDuration != 1 || st.LastRound.IsZero() {
			t.Errorf("GPU %d: last run at %v took %gs", tc.gpu, st.LastRound, st.LastDuration)
		}
		if (tc.result == probes.RunSuccess) != !st.LastSuccess.IsZero() {
			t.Errorf("GPU %d (%s): last success %v", tc.gpu, tc.result, st.LastSuccess)
		}
	}
	if st := f.gpuStatus(t, 2); st.ContextSeconds != 1 {
		t.Errorf("GPU 2: context %gs over two rounds, want 1", st.ContextSeconds)
	}

	// Two rounds of an error, a timeout, a crash and two more errors.
	st := f.s.Status()
	if st.Name != "probe" || st.Up || st.Errors != 10 || !st.LastSuccess.IsZero() || st.LastDuration <= 0 {
		t.Errorf("status %+v: want down, 10 errors, no successful round", st)
	}

	// A round where every run works brings it up.
	f.runner.respond = nil
	f.s.RunRound(context.Background())
	if st := f.s.Status(); !st.Up || st.Errors != 10 || st.LastSuccess.IsZero() {
		t.Errorf("status %+v after a clean round", st)
	}
}

func TestSchedulerUpFollowsLatestRunOfEachGPU(t *testing.T) {
	gpus := []nvml.GPUState{idleGPU(0), idleGPU(1)}
	f := newSched(t, &nvml.Snapshot{GPUs: gpus}, nil)
	crash := true
	f.runner.respond = func(o probes.Options) (*probes.Round, error) {
		if o.GPU == busID(0) && crash {
			return nil, &probes.RunFailure{GPU: o.GPU, Result: probes.RunCrash, Err: errors.New("exit status 3")}
		}
		return okRound(o), nil
	}
	if f.s.Status().Up {
		t.Error("up before any round")
	}
	f.s.RunRound(context.Background())
	// GPU 1 ran fine after GPU 0 crashed: still down.
	if f.s.Status().Up {
		t.Error("up with GPU 0's latest run a crash")
	}
	crash = false
	f.s.RunRound(context.Background())
	if !f.s.Status().Up {
		t.Error("down after GPU 0 ran fine again")
	}
}

func TestSchedulerAnnotate(t *testing.T) {
	shared := okRound(probes.Options{GPU: busID(0)})
	f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}}, func(c *SchedulerConfig) {
		c.Annotate = func(g *probes.GPURound) {
			for i := range g.Results {
				g.Results[i].ExpectedBytesPerSecond = 64e9
			}
		}
	})
	// A runner that hands out the same round every time (a simulated one
	// might): annotating must not write into it.
	f.runner.respond = func(probes.Options) (*probes.Round, error) { return shared, nil }
	f.s.RunRound(context.Background())
	last := f.gpuStatus(t, 0).Last
	if last == nil || last.Results[0].ExpectedBytesPerSecond != 64e9 {
		t.Fatalf("Last = %+v, want annotated", last)
	}
	if shared.GPUs[0].Results[0].ExpectedBytesPerSecond != 0 {
		t.Error("Annotate wrote into the runner's round")
	}
}

func TestSchedulerCancelledRunNotCounted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0), idleGPU(1)}}, nil)
	f.runner.respond = func(o probes.Options) (*probes.Round, error) {
		cancel() // the daemon shuts down mid-run
		return nil, &probes.RunFailure{GPU: o.GPU, Result: probes.RunError, Err: errors.New("cancelled")}
	}
	f.s.RunRound(ctx)
	if n := len(f.runner.gpus()); n != 1 {
		t.Errorf("%d runs after cancel, want 1", n)
	}
	if st := f.s.Status(); st.Errors != 0 {
		t.Errorf("a shutdown counted as %d errors", st.Errors)
	}
}

func TestSchedulerRunTimeout(t *testing.T) {
	f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}}, func(c *SchedulerConfig) { c.Timeout = 42 * time.Second })
	var left time.Duration
	f.runner.respond = nil
	f.s.cfg.Runner = runnerFunc(func(ctx context.Context, o probes.Options) (*probes.Round, error) {
		dl, ok := ctx.Deadline()
		if ok {
			left = time.Until(dl)
		}
		return okRound(o), nil
	})
	f.s.RunRound(context.Background())
	if left <= 40*time.Second || left > 42*time.Second {
		t.Errorf("run's deadline %s away, want 42s", left)
	}
}

// runnerFunc adapts a function to RoundRunner.
type runnerFunc func(ctx context.Context, o probes.Options) (*probes.Round, error)

func (f runnerFunc) Run(ctx context.Context, o probes.Options) (*probes.Round, error) {
	return f(ctx, o)
}

func TestSchedulerJitter(t *testing.T) {
	f := newSched(t, nil, func(c *SchedulerConfig) { c.Jitter = 0.2 })
	for _, tc := range []struct {
		u    float64
		want time.Duration
	}{{0, 8 * time.Minute}, {0.5, 10 * time.Minute}, {0.75, 11 * time.Minute}} {
		f.s.rand = func() float64 { return tc.u }
		if got := f.s.jittered(10 * time.Minute); got != tc.want {
			t.Errorf("u=%g: %s, want %s", tc.u, got, tc.want)
		}
	}
	f.s.rand = func() float64 { return 0.9999999 }
	if got := f.s.jittered(10 * time.Minute); got >= 12*time.Minute || got < 11*time.Minute+59*time.Second {
		t.Errorf("u->1: %s, want just under 12m", got)
	}
	// Jitter 0 is none.
	f = newSched(t, nil, func(c *SchedulerConfig) { c.Jitter = 0 })
	for _, u := range []float64{0, 0.3, 0.9999999} {
		f.s.rand = func() float64 { return u }
		if got := f.s.jittered(10 * time.Minute); got != 10*time.Minute {
			t.Errorf("jitter 0, u=%g: %s, want 10m", u, got)
		}
	}
	// The real source stays within the bounds.
	f = newSched(t, nil, nil)
	for range 10000 {
		if got := f.s.jittered(time.Minute); got < 54*time.Second || got > 66*time.Second {
			t.Fatalf("jittered 1m to %s with jitter 0.1", got)
		}
	}
}

func TestSchedulerRunLoop(t *testing.T) {
	f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}}, func(c *SchedulerConfig) {
		c.FirstDelay = 30 * time.Second
		c.Interval = 5 * time.Minute
	})
	f.s.rand = func() float64 { return 1 } // the top of the range
	var slept []time.Duration
	f.s.sleep = func(ctx context.Context, d time.Duration) bool {
		slept = append(slept, d)
		return len(slept) < 3
	}
	f.s.Run(context.Background())
	want := []time.Duration{33 * time.Second, 330 * time.Second, 330 * time.Second}
	if !slices.Equal(slept, want) {
		t.Errorf("slept %v, want %v", slept, want)
	}
	if n := len(f.runner.gpus()); n != 2 {
		t.Errorf("%d rounds, want 2 (after the first delay and after the first interval)", n)
	}

	// A zero first delay is none, not a default.
	f = newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}}, func(c *SchedulerConfig) { c.Interval = 5 * time.Minute })
	f.s.rand = func() float64 { return 1 }
	slept = nil
	f.s.sleep = func(ctx context.Context, d time.Duration) bool {
		slept = append(slept, d)
		return len(slept) < 2
	}
	f.s.Run(context.Background())
	if want := []time.Duration{0, 330 * time.Second}; !slices.Equal(slept, want) {
		t.Errorf("no first delay: slept %v, want %v", slept, want)
	}

	// Real sleeping: a cancelled context ends Run.
	f = newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}}, func(c *SchedulerConfig) { c.FirstDelay = time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	f.runner.respond = func(o probes.Options) (*probes.Round, error) { cancel(); return okRound(o), nil }
	done := make(chan struct{})
	go func() { f.s.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// With no sample yet the first round waits for one, polling less often
// as it waits, instead of probing nothing and waiting an interval.
func TestSchedulerWaitsForTheFirstSample(t *testing.T) {
	f := newSched(t, nil, func(c *SchedulerConfig) { c.Interval = 5 * time.Minute })
	f.s.rand = func() float64 { return 0.5 } // no jitter
	var slept []time.Duration
	f.s.sleep = func(ctx context.Context, d time.Duration) bool {
		slept = append(slept, d)
		switch len(slept) {
		case 4:
			f.setSnap(&nvml.Snapshot{}) // a sample without a GPU: nothing to probe yet
		case 7:
			if n := len(f.runner.gpus()); n != 0 {
				t.Errorf("%d runs before the sample with a GPU", n)
			}
			f.setSnap(&nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}})
		}
		return len(slept) < 8
	}
	f.s.Run(context.Background())
	ms := time.Millisecond
	want := []time.Duration{0, 50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, 5 * time.Minute}
	if !slices.Equal(slept, want) {
		t.Errorf("slept %v, want %v", slept, want)
	}
	if n := len(f.runner.gpus()); n != 1 {
		t.Errorf("%d runs, want the first round as soon as the sample came", n)
	}

	// Ready (the topology's first sample, in the daemon) holds the first
	// round back after the GPUs are there, until it says so.
	var ready atomic.Bool
	f = newSched(t, nil, func(c *SchedulerConfig) { c.Interval = 5 * time.Minute; c.Ready = ready.Load })
	f.s.rand = func() float64 { return 0.5 }
	f.setSnap(&nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}})
	slept = nil
	f.s.sleep = func(ctx context.Context, d time.Duration) bool {
		slept = append(slept, d)
		if len(slept) == 3 {
			if n := len(f.runner.gpus()); n != 0 {
				t.Errorf("%d runs before Ready", n)
			}
			ready.Store(true)
		}
		return len(slept) < 4
	}
	f.s.Run(context.Background())
	if want := []time.Duration{0, 50 * ms, 100 * ms, 5 * time.Minute}; !slices.Equal(slept, want) {
		t.Errorf("with Ready: slept %v, want %v", slept, want)
	}
	if n := len(f.runner.gpus()); n != 1 {
		t.Errorf("%d runs, want the first round once Ready", n)
	}

	// Shut down while waiting: no round.
	f = newSched(t, nil, nil)
	f.s.sleep = func(ctx context.Context, d time.Duration) bool { return d == 0 }
	f.s.Run(context.Background())
	if n := len(f.runner.gpus()); n != 0 || f.s.Status().Up {
		t.Errorf("%d runs after shutting down in the wait", n)
	}
}

func TestSchedulerPolicyOff(t *testing.T) {
	// Off needs neither a runner nor the samples.
	s, err := NewScheduler(SchedulerConfig{Policy: PolicyOff, Options: defaultOptions, MaxDuty: probes.DefaultMaxDuty})
	if err != nil {
		t.Fatal(err)
	}
	s.sleep = func(context.Context, time.Duration) bool { t.Error("off policy slept"); return false }
	s.Run(context.Background())
	s.RunRound(context.Background())
	if st := s.Latest().Data; st.Policy != PolicyOff || len(st.GPUs) != 0 {
		t.Errorf("status %+v", st)
	}

	f := newSched(t, &nvml.Snapshot{GPUs: []nvml.GPUState{idleGPU(0)}}, func(c *SchedulerConfig) { c.Policy = PolicyOff })
	f.s.Run(context.Background())
	f.s.RunRound(context.Background())
	if n := len(f.runner.gpus()); n != 0 {
		t.Errorf("off policy ran %d probes", n)
	}
}

func TestSchedulerConfig(t *testing.T) {
	ok := SchedulerConfig{Runner: &fakeRunner{}, GPUs: func() *nvml.Snapshot { return nil },
		Processes: func() ([]nvml.Process, error) { return nil, nil }, Options: defaultOptions,
		Jitter: probes.DefaultJitter, MaxDuty: probes.DefaultMaxDuty, UtilizationThreshold: probes.DefaultUtilizationThreshold}
	for _, tc := range []struct {
		name string
		edit func(*SchedulerConfig)
		want string
	}{
		{"unknown policy", func(c *SchedulerConfig) { c.Policy = "sometimes" }, "--probe.policy=sometimes: want one of idle, always, off"},
		{"negative interval", func(c *SchedulerConfig) { c.Interval = -time.Second }, "--probe.interval=-1s: want a duration above 0"},
		{"negative timeout", func(c *SchedulerConfig) { c.Timeout = -time.Second }, "--probe.timeout=-1s: want a duration above 0"},
		{"negative first delay", func(c *SchedulerConfig) { c.FirstDelay = -time.Second }, "--probe.first-delay=-1s: want 0 (no wait) or more"},
		{"jitter too big", func(c *SchedulerConfig) { c.Jitter = 0.6 }, "--probe.jitter=0.6: want 0 (none) to 0.5"},
		{"negative jitter", func(c *SchedulerConfig) { c.Jitter = -0.1 }, "--probe.jitter=-0.1: want 0 (none) to 0.5"},
		{"threshold", func(c *SchedulerConfig) { c.UtilizationThreshold = 5 }, "--probe.utilization-threshold=5: want 0 (any utilisation is busy) to 1"},
		{"negative threshold", func(c *SchedulerConfig) { c.UtilizationThreshold = -0.1 }, "--probe.utilization-threshold=-0.1: want"},
		{"NaN threshold", func(c *SchedulerConfig) { c.UtilizationThreshold = math.NaN() }, "--probe.utilization-threshold=NaN: want"},
		{"NaN jitter", func(c *SchedulerConfig) { c.Jitter = math.NaN() }, "--probe.jitter=NaN: want"},
		// No default: a zero duty would put the next round off for ever.
		{"no max duty", func(c *SchedulerConfig) { c.MaxDuty = 0 }, "--probe.max-duty=0: want more than 0 and at most 1 (no bound)"},
		{"NaN max duty", func(c *SchedulerConfig) { c.MaxDuty = math.NaN() }, "--probe.max-duty=NaN: want"},
		{"unknown probe", func(c *SchedulerConfig) { c.Options.Probes = []probes.Kind{"warp_drive"} }, "--probe.kind=warp_drive: unknown probe; known: host_to_device,"},
		{"size too big", func(c *SchedulerConfig) { c.Options.SizeBytes = 8 << 30 }, "--probe.size=8GiB: want 1MiB to 4GiB"},
		{"no samples", func(c *SchedulerConfig) { c.Options.Samples = 0 }, "--probe.samples=0: want 1 to 100"},
		{"options checked when off", func(c *SchedulerConfig) { c.Policy, c.Options.SizeBytes = PolicyOff, 0 }, "--probe.size=0B: want 1MiB"},
		{"no runner", func(c *SchedulerConfig) { c.Runner = nil }, "no runner"},
		{"no NVML sample", func(c *SchedulerConfig) { c.GPUs = nil }, "no NVML sample"},
		{"idle without processes", func(c *SchedulerConfig) { c.Processes = nil }, "idle needs the GPU process list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			_, err := NewScheduler(c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}

	// always needs no process list.
	c := ok
	c.Policy, c.Processes = PolicyAlways, nil
	if _, err := NewScheduler(c); err != nil {
		t.Errorf("always without a process list: %v", err)
	}
	s, err := NewScheduler(ok)
	if err != nil {
		t.Fatal(err)
	}
	got := s.cfg
	if got.Policy != PolicyIdle || got.Interval != 10*time.Minute || got.FirstDelay != 0 ||
		got.Timeout != time.Minute || s.Policy() != PolicyIdle {
		t.Errorf("defaults: %+v", got)
	}
	// Zero jitter and threshold are settings, kept as given.
	c = ok
	c.Jitter, c.UtilizationThreshold = 0, 0
	if s, err = NewScheduler(c); err != nil {
		t.Fatal(err)
	}
	if s.cfg.Jitter != 0 || s.cfg.UtilizationThreshold != 0 {
		t.Errorf("zero jitter and threshold became %g and %g", s.cfg.Jitter, s.cfg.UtilizationThreshold)
	}
}

func TestSchedulerPublishedSnapshotsAreImmutable(t *testing.T) {
	gpus := []nvml.GPUState{idleGPU(0), idleGPU(1), idleGPU(2)}
	gpus[2].ComputeMode = sampler.Some("prohibited")
	f := newSched(t, &nvml.Snapshot{GPUs: gpus, Pairs: nvswitch(gpus)}, nil)
	f.s.RunRound(context.Background())
	first := f.s.Latest()
	firstRuns := maps.Clone(first.Data.GPUs[0].Runs)
	v := f.s.Version()

	// The collector reads while rounds run.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			snap := f.s.Latest()
			for _, g := range snap.Data.GPUs {
				for range maps.All(g.Runs) {
				}
				for range maps.All(g.Skips) {
				}
				if g.Last != nil {
					_ = len(g.Last.Results)
				}
			}
			_ = f.s.Status()
			_ = f.s.Version()
		}
	})
	for range 20 {
		f.s.RunRound(context.Background())
	}
	cancel()
	wg.Wait()

	if !maps.Equal(first.Data.GPUs[0].Runs, firstRuns) {
		t.Errorf("an old snapshot changed: %v, was %v", first.Data.GPUs[0].Runs, firstRuns)
	}
	// Published after every GPU and at the end of every round.
	if got := f.s.Version() - v; got != 20*4 {
		t.Errorf("version moved %d times over 20 rounds of 3 GPUs, want 80", got)
	}
	if got := f.s.Latest().Data.GPUs[0].Runs[probes.RunSuccess]; got != 21 {
		t.Errorf("GPU 0 ran %d times, want 21", got)
	}
}

// OnPublish's functions run after each new status, which Latest already
// returns, and without the scheduler's lock: they may read it.
func TestSchedulerOnPublish(t *testing.T) {
	gpus := []nvml.GPUState{idleGPU(0), idleGPU(1)}
	f := newSched(t, &nvml.Snapshot{GPUs: gpus}, nil)
	var seen []uint64 // GPU 1's successful runs in each status published
	f.s.OnPublish(func() {
		_ = f.s.Status() // takes the lock: a deadlock if held
		var runs uint64
		for _, g := range f.s.Latest().Data.GPUs {
			if g.Index == 1 {
				runs = g.Runs[probes.RunSuccess]
			}
		}
		seen = append(seen, runs)
	})
	f.s.RunRound(context.Background())
	// After GPU 0, after GPU 1, at the end of the round.
	if want := []uint64{0, 1, 1}; !slices.Equal(seen, want) {
		t.Errorf("GPU 1's runs in each published status: %v, want %v", seen, want)
	}
}

// A round's cost to its most loaded GPU, its own probes and its peers'
// probes against it, sets a floor under the next interval.
func TestSchedulerKeepsTheDutyCycle(t *testing.T) {
	gpus := []nvml.GPUState{idleGPU(0), idleGPU(1)}
	f := newSched(t, &nvml.Snapshot{GPUs: gpus, Pairs: nvswitch(gpus)}, func(c *SchedulerConfig) {
		c.FirstDelay = time.Second
		c.Interval = 5 * time.Minute
	})
	busy := map[string][2]float64{busID(0): {0.3, 0.2}, busID(1): {0.25, 0.1}} // own, against the peer
	f.runner.respond = func(o probes.Options) (*probes.Round, error) {
		r := okRound(o)
		r.GPUs[0].BusySeconds = busy[o.GPU][0]
		r.GPUs[0].PeerBusySeconds = map[string]float64{o.Peers[0]: busy[o.GPU][1]}
		return r, nil
	}
	f.s.rand = func() float64 { return 0.5 } // no jitter
	var slept []time.Duration
	f.s.sleep = func(ctx context.Context, d time.Duration) bool {
		slept = append(slept, d)
		return len(slept) < 2
	}
	f.s.Run(context.Background())
	// GPU 1: 0.25 s of its own and 0.2 s of GPU 0's peer probes; at 0.1%
	// that is 450 s, over the 300 s interval.
	if want := []time.Duration{time.Second, 450 * time.Second}; !slices.Equal(slept, want) {
		t.Errorf("slept %v, want %v", slept, want)
	}
	if _, err := NewScheduler(SchedulerConfig{Policy: PolicyIdle, MaxDuty: 2, Runner: f.runner, Options: defaultOptions}); err == nil || !strings.Contains(err.Error(), "--probe.max-duty=2") {
		t.Errorf("MaxDuty 2: %v", err)
	}
}

// One check serves the flags and the scheduler: Validate refuses a zero
// interval (a flag given 0s) naming the flag, and NewScheduler first
// gives a config that leaves it zero the default the flag shows.
func TestSchedulerConfigValidate(t *testing.T) {
	c := SchedulerConfig{Options: defaultOptions, MaxDuty: probes.DefaultMaxDuty}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--probe.policy=: want one of idle") {
		t.Errorf("no policy: %v, want --probe.policy named", err)
	}
	c.Policy = PolicyIdle
	if err := c.Validate(); err == nil || err.Error() != "--probe.interval=0s: want a duration above 0" {
		t.Errorf("zero interval: %v, want --probe.interval named", err)
	}
	c.withDefaults()
	if err := c.Validate(); err != nil {
		t.Errorf("with the defaults: %v", err)
	}
	if c.Interval != DefaultInterval || c.Timeout != DefaultTimeout ||
		c.CollectiveInterval != DefaultCollectiveInterval || c.CollectiveTimeout != DefaultCollectiveTimeout {
		t.Errorf("defaults: %+v", c)
	}
	var oe *probes.OptionError
	c.Jitter = 0.7
	if err := c.Validate(); !errors.As(err, &oe) || oe.Flag != "--probe.jitter" {
		t.Errorf("jitter 0.7: %v, want a probes.OptionError for --probe.jitter", err)
	}
}

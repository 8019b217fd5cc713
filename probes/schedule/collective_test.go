package schedule

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/probes"
)

// fakeCollectives records the collective rounds asked for and answers
// with respond, or a successful round of one all-reduce and one
// send/recv. It notes whether a probe child was running at the time.
type fakeCollectives struct {
	probes  *fakeRunner
	respond func(ctx context.Context, o probes.CollectiveOptions) (*probes.CollectiveRound, error)

	mu      sync.Mutex
	calls   []probes.CollectiveOptions
	overlap bool
}

func (f *fakeCollectives) RunCollectives(ctx context.Context, o probes.CollectiveOptions, _ chan<- string) (*probes.CollectiveRound, error) {
	f.probes.mu.Lock()
	busy := f.probes.active > 0
	f.probes.mu.Unlock()
	f.mu.Lock()
	f.calls = append(f.calls, o)
	f.overlap = f.overlap || busy
	f.mu.Unlock()
	if f.respond != nil {
		return f.respond(ctx, o)
	}
	return okCollectiveRound(o), nil
}

func (f *fakeCollectives) runs() []probes.CollectiveOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func okCollectiveRound(o probes.CollectiveOptions) *probes.CollectiveRound {
	from, to := 0, 1
	return &probes.CollectiveRound{Version: probes.CollectiveContractVersion, GPUs: slices.Clone(o.GPUs), Ranks: o.Ranks, NCCLVersion: 22703,
		Results: []probes.CollectiveResult{
			{Collective: probes.AllReduce, SizeBytes: o.SizeBytes, Ranks: o.Ranks, Seconds: 1e-3, BusBytesPerSecond: 370e9},
			{Collective: probes.SendRecv, SizeBytes: o.SizeBytes, Ranks: 2, FromRank: &from, ToRank: &to, Seconds: 1e-3, BusBytesPerSecond: 365e9},
		},
		Transports:  []probes.Transport{{Channel: 0, FromRank: 0, ToRank: 1, Kind: probes.TransportP2P}},
		BusySeconds: 1.5, DeviceMemoryBytes: 512 << 20}
}

// newCollectiveSched is newSched with collective rounds on, no jitter.
func newCollectiveSched(t *testing.T, snap *nvml.Snapshot, edit func(*SchedulerConfig)) (*schedFixture, *fakeCollectives) {
	t.Helper()
	coll := &fakeCollectives{}
	f := newSched(t, snap, func(c *SchedulerConfig) {
		c.CollectiveRunner = coll
		c.CollectiveOptions = probes.DefaultCollectiveOptions()
		if edit != nil {
			edit(c)
		}
	})
	coll.probes = f.runner
	f.s.rand = func() float64 { return 0.5 }
	return f, coll
}

func (f *schedFixture) collective(t *testing.T) *CollectiveStatus {
	t.Helper()
	st := f.s.Latest().Data.Collective
	if st == nil {
		t.Fatal("no collective status with a collective runner")
	}
	return st
}

// advance moves the fake clock on by d.
func (f *schedFixture) advance(d time.Duration) {
	f.clock.mu.Lock()
	defer f.clock.mu.Unlock()
	f.clock.t = f.clock.t.Add(d)
}

func fourIdle() *nvml.Snapshot {
	gpus := []nvml.GPUState{idleGPU(0), idleGPU(1), idleGPU(2), idleGPU(3)}
	return &nvml.Snapshot{GPUs: gpus, Pairs: nvswitch(gpus)}
}

func TestCollectiveRoundAfterThePass(t *testing.T) {
	f, coll := newCollectiveSched(t, fourIdle(), nil)
	f.s.RunRound(context.Background())

	runs := coll.runs()
	if len(runs) != 1 {
		t.Fatalf("%d collective rounds, want 1", len(runs))
	}
	if n := len(f.runner.gpus()); n != 4 {
		t.Errorf("%d probe runs before it, want the whole pass of 4", n)
	}
	if coll.overlap {
		t.Error("the collective round ran beside a probe child")
	}
	want := probes.DefaultCollectiveOptions()
	want.GPUs, want.Ranks = []string{busID(0), busID(1), busID(2), busID(3)}, 4
	if !reflect.DeepEqual(runs[0], want) {
		t.Errorf("ran with %+v\nwant        %+v", runs[0], want)
	}
	st := f.collective(t)
	if !maps.Equal(nonZero(st.Runs), map[string]uint64{probes.RunSuccess: 1}) || len(nonZero(st.Skips)) != 0 {
		t.Errorf("runs %v skips %v", nonZero(st.Runs), nonZero(st.Skips))
	}
	// Every result is there from 0; a skip reason once counted.
	if len(st.Runs) != 5 || len(st.Skips) != 0 {
		t.Errorf("runs not all there from 0, or skips not counted: runs %v, skips %v", st.Runs, st.Skips)
	}
	if st.Last == nil || len(st.Last.Results) != 2 || st.LastStarted.IsZero() || st.SizeBytes != 256<<20 || st.SmallBytes != 8<<10 {
		t.Errorf("latest round not kept: %+v", st)
	}
	if len(st.GPUs) != 4 || st.GPUs[3] != (CollectiveGPU{Index: 3, PCIBusID: busID(3), BusySeconds: 1.5}) {
		t.Errorf("cost per GPU %+v", st.GPUs)
	}
	// Its kernels are not another's work on the next pass.
	for i := range 4 {
		if until := f.s.probedUntil[busID(i)]; !until.After(st.LastStarted) {
			t.Errorf("GPU %d's probed-until %v not past the collective round at %v", i, until, st.LastStarted)
		}
	}
	if !f.s.Status().Up || f.s.Status().LastSuccess.IsZero() {
		t.Errorf("status %+v after a good round", f.s.Status())
	}
}

func TestCollectiveRoundSkips(t *testing.T) {
	lost := func(g *nvml.GPUState) { g.Lost = true }
	mig := func(g *nvml.GPUState) { g.MIGEnabled = sampler.Some(true) }
	for _, tc := range []struct {
		name     string
		gpus     int
		edit     map[int]func(*nvml.GPUState)
		procs    []nvml.Process
		procsErr error
		idle     string // the skip reason under idle, "" for a run
		always   string
		ranks    int // of the run, when it runs
	}{
		{"all idle", 3, nil, nil, nil, "", "", 3},
		{"one GPU", 1, nil, nil, nil, SkipFewerThanTwo, SkipFewerThanTwo, 0},
		{"one left, one lost", 2, map[int]func(*nvml.GPUState){1: lost}, nil, nil, SkipFewerThanTwo, SkipFewerThanTwo, 0},
		{"one left, one in MIG", 2, map[int]func(*nvml.GPUState){0: mig}, nil, nil, SkipMIG, SkipMIG, 0},
		{"all prohibited", 2, map[int]func(*nvml.GPUState){
			0: func(g *nvml.GPUState) { g.ComputeMode = sampler.Some("prohibited") },
			1: func(g *nvml.GPUState) { g.ComputeMode = sampler.Some("exclusive_process") }}, nil, nil, SkipProhibited, SkipProhibited, 0},
		{"MIG GPU left out of three", 3, map[int]func(*nvml.GPUState){1: mig}, nil, nil, "", "", 2},
		{"one busy process", 3, nil, []nvml.Process{{GPU: 2, PCIBusID: busID(2), PID: 4242}}, nil, SkipBusyProcess, "", 3},
		{"one busy GPU", 3, map[int]func(*nvml.GPUState){1: func(g *nvml.GPUState) { g.Utilization = sampler.Some(0.6) }}, nil, nil, SkipBusyUtilization, "", 3},
		{"process list fails", 3, nil, nil, errors.New("NVML: Unknown Error"), SkipBusyProcess, "", 3},
	} {
		for _, policy := range []string{PolicyIdle, PolicyAlways} {
			t.Run(tc.name+"/"+policy, func(t *testing.T) {
				var gpus []nvml.GPUState
				for i := range tc.gpus {
					g := idleGPU(i)
					if e := tc.edit[i]; e != nil {
						e(&g)
					}
					gpus = append(gpus, g)
				}
				f, coll := newCollectiveSched(t, &nvml.Snapshot{GPUs: gpus, Pairs: nvswitch(gpus)}, func(c *SchedulerConfig) { c.Policy = policy })
				f.procs, f.procsErr = tc.procs, tc.procsErr
				f.s.RunRound(context.Background())
				want := tc.idle
				if policy == PolicyAlways {
					want = tc.always
				}
				st, runs := f.collective(t), coll.runs()
				if want != "" {
					if len(runs) != 0 || !maps.Equal(nonZero(st.Skips), map[string]uint64{want: 1}) || len(nonZero(st.Runs)) != 0 || st.Last != nil {
						t.Errorf("want skip %q: %d runs, skips %v, runs %v", want, len(runs), nonZero(st.Skips), nonZero(st.Runs))
					}
					return
				}
				if len(runs) != 1 || runs[0].Ranks != tc.ranks || len(runs[0].GPUs) != tc.ranks || len(nonZero(st.Skips)) != 0 {
					t.Errorf("want a run over %d GPUs: %+v, skips %v", tc.ranks, runs, nonZero(st.Skips))
				}
			})
		}
	}
}

// A skipped round stays due: the next pass tries again, not an interval
// later. A round that ran waits the interval.
func TestCollectiveRoundInterval(t *testing.T) {
	busy := []nvml.Process{{GPU: 1, PCIBusID: busID(1), PID: 4242}}
	f, coll := newCollectiveSched(t, fourIdle(), func(c *SchedulerConfig) { c.CollectiveInterval = time.Hour })
	f.procs = busy
	f.s.RunRound(context.Background())
	f.procs = nil
	f.s.RunRound(context.Background())
	if n := len(coll.runs()); n != 1 {
		t.Fatalf("%d rounds after a skip and an idle pass, want 1", n)
	}
	started := f.collective(t).LastStarted
	// Passes within the hour: not due, neither run nor skipped.
	f.advance(50 * time.Minute)
	f.s.RunRound(context.Background())
	st := f.collective(t)
	if n := len(coll.runs()); n != 1 || st.Skips[SkipBusyProcess] != 1 || st.Runs[probes.RunSuccess] != 1 {
		t.Errorf("within the interval: %d rounds, runs %v, skips %v", n, nonZero(st.Runs), nonZero(st.Skips))
	}
	f.advance(10 * time.Minute)
	f.s.RunRound(context.Background())
	st = f.collective(t)
	if n := len(coll.runs()); n != 2 || st.Runs[probes.RunSuccess] != 2 {
		t.Fatalf("an hour on: %d rounds, runs %v", n, nonZero(st.Runs))
	}
	if d := st.LastStarted.Sub(started); d < time.Hour {
		t.Errorf("second round %s after the first", d)
	}
	if got := st.GPUs[0].BusySeconds; got != 3 {
		t.Errorf("GPU 0's busy seconds %g after two rounds of 1.5", got)
	}
}

// A round that cost each GPU B seconds is followed by at least B /
// MaxDuty, even past the interval; jitter moves both.
func TestCollectiveRoundKeepsTheDutyCycle(t *testing.T) {
	f, coll := newCollectiveSched(t, fourIdle(), func(c *SchedulerConfig) {
		c.CollectiveInterval, c.MaxDuty = time.Hour, 0.001
	})
	coll.respond = func(_ context.Context, o probes.CollectiveOptions) (*probes.CollectiveRound, error) {
		r := okCollectiveRound(o)
		r.BusySeconds = 7.2 // 2 h at 0.1%
		return r, nil
	}
	f.s.RunRound(context.Background())
	f.advance(90 * time.Minute)
	f.s.RunRound(context.Background())
	if n := len(coll.runs()); n != 1 {
		t.Errorf("%d rounds 90 minutes after one that cost 7.2 s a GPU, want 1", n)
	}
	f.advance(31 * time.Minute)
	f.s.RunRound(context.Background())
	if n := len(coll.runs()); n != 2 {
		t.Errorf("%d rounds two hours on, want 2", n)
	}
	f.s.rand = func() float64 { return 0 } // the most jitter takes off
	if d := f.s.collectiveDelay(7.2); d != 108*time.Minute {
		t.Errorf("delay with jitter 0.1 down %s, want 1h48m", d)
	}
	if d := f.s.collectiveDelay(0.5); d != 54*time.Minute {
		t.Errorf("delay of a cheap round, jitter 0.1 down: %s, want 54m", d)
	}
}

func TestCollectiveRoundResults(t *testing.T) {
	crashed := func(_ context.Context, o probes.CollectiveOptions) (*probes.CollectiveRound, error) {
		return okCollectiveRound(o), &probes.RunFailure{GPU: strings.Join(o.GPUs, ","), Result: probes.RunCrash, Err: errors.New("child signal: segmentation fault")}
	}
	for _, tc := range []struct {
		name    string
		respond func(ctx context.Context, o probes.CollectiveOptions) (*probes.CollectiveRound, error)
		result  string // "" for a skip
		skip    string
		last    bool // the round becomes Last
		up      bool
		errors  uint64
	}{
		{"success", nil, probes.RunSuccess, "", true, true, 0},
		{"partial", func(_ context.Context, o probes.CollectiveOptions) (*probes.CollectiveRound, error) {
			r := okCollectiveRound(o)
			r.Results = append(r.Results, probes.CollectiveResult{Collective: probes.AllToAll, SizeBytes: o.SizeBytes, Error: "ncclAllToAll: unhandled cuda error"})
			return r, nil
		}, probes.RunPartial, "", true, true, 0},
		{"no communicator", func(_ context.Context, o probes.CollectiveOptions) (*probes.CollectiveRound, error) {
			return &probes.CollectiveRound{Version: probes.CollectiveContractVersion, GPUs: o.GPUs, Error: "ncclCommInitAll: unhandled system error"}, nil
		}, probes.RunError, "", false, true, 1},
		{"no library", func(_ context.Context, o probes.CollectiveOptions) (*probes.CollectiveRound, error) {
			return &probes.CollectiveRound{Version: probes.CollectiveContractVersion, GPUs: o.GPUs,
				Error: "loading NCCL: libnccl.so.2: cannot open shared object file", NoLibrary: true}, nil
		}, "", SkipNoLibrary, false, true, 0},
		// The mark, not the text, makes a skip: an error that merely reads
		// like the binding's is a failed round.
		{"load error text unmarked", func(_ context.Context, o probes.CollectiveOptions) (*probes.CollectiveRound, error) {
			return &probes.CollectiveRound{Version: probes.CollectiveContractVersion, GPUs: o.GPUs,
				Error: "loading NCCL: libnccl.so.2: cannot open shared object file"}, nil
		}, probes.RunError, "", false, true, 1},
		{"timeout", func(ctx context.Context, o probes.CollectiveOptions) (*probes.CollectiveRound, error) {
			return nil, &probes.RunFailure{GPU: strings.Join(o.GPUs, ","), Result: probes.RunTimeout, Err: errors.New("no round within 5m0s; child killed")}
		}, probes.RunTimeout, "", false, false, 1},
		{"crash after printing", crashed, probes.RunCrash, "", true, false, 1},
		{"runner error", func(context.Context, probes.CollectiveOptions) (*probes.CollectiveRound, error) {
			return nil, errors.New("simulated runner broke")
		}, probes.RunError, "", false, true, 1},
		{"no round", func(context.Context, probes.CollectiveOptions) (*probes.CollectiveRound, error) { return nil, nil }, probes.RunError, "", false, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, coll := newCollectiveSched(t, fourIdle(), nil)
			coll.respond = tc.respond
			f.s.RunRound(context.Background())
			st := f.collective(t)
			switch {
			case tc.result != "" && !maps.Equal(nonZero(st.Runs), map[string]uint64{tc.result: 1}):
				t.Errorf("runs %v, want one %s", nonZero(st.Runs), tc.result)
			case tc.skip != "" && (!maps.Equal(nonZero(st.Skips), map[string]uint64{tc.skip: 1}) || len(nonZero(st.Runs)) != 0):
				t.Errorf("runs %v, skips %v, want one %s skip", nonZero(st.Runs), nonZero(st.Skips), tc.skip)
			}
			if (st.Last != nil) != tc.last {
				t.Errorf("Last %+v, want kept: %v", st.Last, tc.last)
			}
			if s := f.s.Status(); s.Up != tc.up || s.Errors != tc.errors || s.LastSuccess.IsZero() != (tc.errors > 0) {
				t.Errorf("source status %+v, want up %v with %d errors", s, tc.up, tc.errors)
			}
			// Waits the interval whatever happened: a node without NCCL
			// does not start a child every pass.
			f.s.RunRound(context.Background())
			if n := len(coll.runs()); n != 1 {
				t.Errorf("%d rounds on the next pass, want 1", n)
			}
		})
	}
}

// A timed-out round puts the source down until the next one runs.
func TestCollectiveTimeoutDownUntilNextRound(t *testing.T) {
	f, coll := newCollectiveSched(t, fourIdle(), func(c *SchedulerConfig) { c.CollectiveTimeout = 90 * time.Second })
	var left time.Duration
	coll.respond = func(ctx context.Context, o probes.CollectiveOptions) (*probes.CollectiveRound, error) {
		if dl, ok := ctx.Deadline(); ok {
			left = time.Until(dl)
		}
		return nil, &probes.RunFailure{GPU: strings.Join(o.GPUs, ","), Result: probes.RunTimeout, Err: errors.New("killed")}
	}
	f.s.RunRound(context.Background())
	if left <= 85*time.Second || left > 90*time.Second {
		t.Errorf("the run's deadline %s away, want 90s", left)
	}
	if f.s.Status().Up {
		t.Error("up after a collective timeout")
	}
	coll.respond = nil
	f.advance(2 * time.Hour)
	f.s.RunRound(context.Background())
	if st := f.collective(t); !f.s.Status().Up || st.Runs[probes.RunTimeout] != 1 || st.Runs[probes.RunSuccess] != 1 {
		t.Errorf("after a good round: up %v, runs %v", f.s.Status().Up, nonZero(st.Runs))
	}
}

// Annotate works on a copy: a runner may hand out one round twice.
func TestCollectiveAnnotate(t *testing.T) {
	shared := okCollectiveRound(probes.CollectiveOptions{GPUs: []string{busID(0), busID(1)}, Ranks: 2, SizeBytes: 256 << 20})
	expected := []probes.PairTransport{{GPU: busID(0), Peer: busID(1), Kind: probes.TransportP2P}}
	f, coll := newCollectiveSched(t, fourIdle(), func(c *SchedulerConfig) {
		c.CollectiveAnnotate = func(r *probes.CollectiveRound) []probes.PairTransport {
			for i := range r.Results {
				r.Results[i].ExpectedBusBytesPerSecond = 450e9
			}
			return expected
		}
	})
	coll.respond = func(context.Context, probes.CollectiveOptions) (*probes.CollectiveRound, error) { return shared, nil }
	f.s.RunRound(context.Background())
	st := f.collective(t)
	if st.Last == nil || st.Last.Results[0].ExpectedBusBytesPerSecond != 450e9 || !reflect.DeepEqual(st.ExpectedTransports, expected) {
		t.Fatalf("not annotated: %+v", st)
	}
	if shared.Results[0].ExpectedBusBytesPerSecond != 0 {
		t.Error("Annotate wrote into the runner's round")
	}
}

// The pass's own probes are not another's work: a fresh sample read while
// they ran may show their utilisation.
func TestCollectiveRoundIgnoresOwnUtilization(t *testing.T) {
	for _, tc := range []struct {
		name   string
		during bool // the sample was taken while the pass probed
		want   string
	}{{"sample during the pass", true, ""}, {"sample after", false, SkipBusyUtilization}} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var taken time.Time
			f, coll := newCollectiveSched(t, fourIdle(), func(c *SchedulerConfig) {
				c.GPUsTaken = func() time.Time { mu.Lock(); defer mu.Unlock(); return taken }
			})
			f.runner.respond = func(o probes.Options) (*probes.Round, error) {
				if o.GPU == busID(3) { // the pass's last run: NVML sees it
					busy := fourIdle()
					busy.GPUs[3].Utilization = sampler.Some(0.9)
					f.setSnap(busy)
					mu.Lock()
					taken = f.clock.now()
					if !tc.during {
						taken = taken.Add(time.Hour)
					}
					mu.Unlock()
				}
				return okRound(o), nil
			}
			f.s.RunRound(context.Background())
			st := f.collective(t)
			if got := len(coll.runs()); tc.want == "" && got != 1 {
				t.Errorf("%d rounds, want 1; skips %v", got, nonZero(st.Skips))
			}
			if tc.want != "" && st.Skips[tc.want] != 1 {
				t.Errorf("skips %v, want %s", nonZero(st.Skips), tc.want)
			}
		})
	}
}

func TestCollectivesOff(t *testing.T) {
	f := newSched(t, fourIdle(), nil)
	f.s.RunRound(context.Background())
	if st := f.s.Latest().Data.Collective; st != nil {
		t.Errorf("collective status %+v without a runner", st)
	}
	for _, tc := range []struct {
		edit func(*SchedulerConfig)
		want string
	}{
		{func(c *SchedulerConfig) { c.CollectiveInterval = -time.Hour }, "--collective.interval=-1h0m0s: want a duration above 0"},
		{func(c *SchedulerConfig) { c.CollectiveTimeout = -time.Second }, "--collective.timeout=-1s: want a duration above 0"},
		{func(c *SchedulerConfig) {
			c.CollectiveRunner, c.CollectiveOptions = &fakeCollectives{}, probes.DefaultCollectiveOptions()
			c.CollectiveOptions.Iterations = 0
		}, "--collective.iterations=0: want 1 to"},
	} {
		c := SchedulerConfig{Runner: &fakeRunner{}, GPUs: func() *nvml.Snapshot { return nil }, Policy: PolicyAlways, Options: defaultOptions,
			MaxDuty: probes.DefaultMaxDuty}
		tc.edit(&c)
		if _, err := NewScheduler(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
	s, err := NewScheduler(SchedulerConfig{Runner: &fakeRunner{}, GPUs: func() *nvml.Snapshot { return nil }, Policy: PolicyAlways,
		Options: defaultOptions, MaxDuty: probes.DefaultMaxDuty, CollectiveRunner: &fakeCollectives{}, CollectiveOptions: probes.DefaultCollectiveOptions()})
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.CollectiveInterval != time.Hour || s.cfg.CollectiveTimeout != 5*time.Minute {
		t.Errorf("collective defaults %s, %s", s.cfg.CollectiveInterval, s.cfg.CollectiveTimeout)
	}
}

// RunCollectiveRound runs one now, whatever the interval, and sets the
// next one's time as a round after a pass does.
func TestRunCollectiveRoundNow(t *testing.T) {
	f, coll := newCollectiveSched(t, fourIdle(), nil)
	f.s.RunRound(context.Background())
	v := f.s.Version()
	f.s.RunCollectiveRound(context.Background())
	if n := len(coll.runs()); n != 2 || f.collective(t).Runs[probes.RunSuccess] != 2 || f.s.Version() == v {
		t.Errorf("%d rounds, runs %v, version %d -> %d: want a second round, published", n, nonZero(f.collective(t).Runs), v, f.s.Version())
	}
	if n := len(f.runner.gpus()); n != 4 {
		t.Errorf("%d probe runs, want only the pass's 4", n)
	}
	f.s.RunRound(context.Background())
	if n := len(coll.runs()); n != 2 {
		t.Errorf("%d rounds: the pass after ran one within the interval", n)
	}
	// Busy: skipped and counted, as after a pass.
	f.procs = []nvml.Process{{GPU: 0, PCIBusID: busID(0), PID: 4242}}
	f.s.RunCollectiveRound(context.Background())
	if st := f.collective(t); len(coll.runs()) != 2 || st.Skips[SkipBusyProcess] != 1 {
		t.Errorf("busy: %d rounds, skips %v", len(coll.runs()), nonZero(st.Skips))
	}

	for name, edit := range map[string]func(*SchedulerConfig){
		"policy off": func(c *SchedulerConfig) { c.Policy = PolicyOff },
		"no runner":  func(c *SchedulerConfig) { c.CollectiveRunner = nil },
	} {
		off, offColl := newCollectiveSched(t, fourIdle(), edit)
		off.s.RunCollectiveRound(context.Background())
		if n := len(offColl.runs()); n != 0 {
			t.Errorf("%s: %d rounds", name, n)
		}
	}
	none, noneColl := newCollectiveSched(t, nil, nil)
	none.s.RunCollectiveRound(context.Background())
	if n := len(noneColl.runs()); n != 0 {
		t.Errorf("no NVML sample: %d rounds", n)
	}
}

// A job that starts on one of the round's GPUs while the collective child
// runs, and is gone before it ends, is seen by the poll: the round's
// results are contended (every one: a collective crosses every GPU), not
// low, and counted by reason. The child's own contexts are no contention.
func TestCollectiveJobMidRoundIsContended(t *testing.T) {
	f, coll := newCollectiveSched(t, fourIdle(), nil)
	f.s.pollEvery = 2 * time.Millisecond
	midRound := true
	coll.respond = func(_ context.Context, o probes.CollectiveOptions) (*probes.CollectiveRound, error) {
		own := []nvml.Process{proc(0, ownPID), proc(1, ownPID), proc(2, ownPID), proc(3, ownPID)}
		f.setProcs(own...)
		if midRound {
			f.setProcs(append(slices.Clone(own), proc(2, 777))...)
			for n := f.listings(); f.listings() < n+2; {
				time.Sleep(time.Millisecond)
			}
			f.setProcs(own...)
		}
		r := okCollectiveRound(o)
		r.PID = ownPID
		return r, nil
	}
	f.s.RunCollectiveRound(context.Background())

	st := f.collective(t)
	if st.Runs[probes.RunSuccess] != 1 || st.Last == nil {
		t.Fatalf("want one successful round, got runs %v", st.Runs)
	}
	c := st.Last.Contention
	if !c.Contended() || !slices.Equal(c.Reasons, []string{probes.ContendedOtherProcess}) ||
		!reflect.DeepEqual(c.Processes, map[string][]int{busID(2): {777}}) || len(c.Peers) != 0 {
		t.Errorf("contention %+v, want other_process on GPU 2 by pid 777 alone, for every result", c)
	}
	if c.ProcessChecks < 3 {
		t.Errorf("%d process listings, want before, during and after", c.ProcessChecks)
	}
	if !reflect.DeepEqual(st.Contended, map[string]uint64{probes.ContendedOtherProcess: 1}) {
		t.Errorf("contended rounds %v", st.Contended)
	}

	// The next round has the GPUs to itself.
	midRound = false
	f.setProcs()
	f.advance(2 * DefaultCollectiveInterval)
	f.s.RunCollectiveRound(context.Background())
	st = f.collective(t)
	if c := st.Last.Contention; c.Contended() || c.ProcessChecks < 2 {
		t.Errorf("a round alone: contention %+v", c)
	}
	if !reflect.DeepEqual(st.Contended, map[string]uint64{probes.ContendedOtherProcess: 1}) {
		t.Errorf("contended rounds after a clean one %v", st.Contended)
	}
}

// The listing a collective round is decided on is the watch's "before":
// under policy always a job listed then, gone once the round runs, makes
// the round contended, and the round lists the processes twice (before
// and after; no poll here), not a third time.
func TestCollectiveRoundWatchesFromTheListingItDecidedOn(t *testing.T) {
	f, coll := newCollectiveSched(t, fourIdle(), func(c *SchedulerConfig) { c.Policy = PolicyAlways })
	f.setProcs(proc(1, 777))
	coll.respond = func(_ context.Context, o probes.CollectiveOptions) (*probes.CollectiveRound, error) {
		f.setProcs() // the job ended as the round started
		return okCollectiveRound(o), nil
	}
	f.s.RunCollectiveRound(context.Background())

	last := f.collective(t).Last
	if last == nil {
		t.Fatal("no round")
	}
	if c := last.Contention; !reflect.DeepEqual(c.Processes, map[string][]int{busID(1): {777}}) || c.ProcessChecks != 2 {
		t.Errorf("contention %+v, want pid 777 on GPU 1 from 2 listings", c)
	}
	if n := f.listings(); n != 2 {
		t.Errorf("process list asked %d times for one collective round, want 2", n)
	}
}

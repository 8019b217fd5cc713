package collectives

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda/cudatest"
	"github.com/gpulink/gpulink_exporter/probes/internal/childtest"
	"github.com/gpulink/gpulink_exporter/probes/nccl/nccltest"
)

// The fake libnccl's model (see nccltest) with no fixed latency: every
// collective's bus bandwidth, and each send/recv's, is the rate of the
// transport between the ranks.
const (
	gpu0, gpu1   = "0000:00:06.0", "0000:00:07.0" // the borrowed VM's, as the fake libcuda shows them
	fakeP2PRate  = 370e9
	fakeNetRate  = 45e9
	busTolerance = 0.02
)

// collectivesMachine builds the fake libcuda (two GPUs) and libnccl and
// returns a runner of the real collectives child over them, this test
// binary (childtest.Self), with the flags given (which may name
// other libraries).
func collectivesMachine(t *testing.T, timeout time.Duration, flags ...string) *probes.ChildRunner {
	t.Helper()
	t.Setenv("FAKE_CUDA_BUSIDS", gpu0+","+gpu1)
	t.Setenv("FAKE_NCCL_LAT_US", "0")
	cudaLib, ncclLib := cudatest.Build(t), nccltest.Build(t)
	cmd := []string{childtest.Self(t), "collectives"}
	for _, lib := range []string{"--cuda.library=" + cudaLib, "--library=" + ncclLib} {
		name, _, _ := strings.Cut(lib, "=")
		if !slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(f, name+"=") }) {
			cmd = append(cmd, lib)
		}
	}
	return &probes.ChildRunner{Command: append(cmd, flags...), Timeout: timeout}
}

// quickOptions are a round over both fake GPUs, small enough to be quick.
func quickOptions(collectives ...probes.Collective) probes.CollectiveOptions {
	return probes.CollectiveOptions{GPUs: []string{gpu0, gpu1}, Ranks: 2, Collectives: collectives,
		SizeBytes: 1 << 20, SmallBytes: 8 << 10, Warmup: 2, Iterations: 3, Samples: 2}
}

func TestCollectiveRoundOverTheFakes(t *testing.T) {
	r := collectivesMachine(t, time.Minute)
	o := quickOptions()
	round, err := r.RunCollectives(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if round.Error != "" || round.NCCLVersion != 22703 || round.Ranks != 2 || !slices.Equal(round.GPUs, o.GPUs) || round.PID <= 0 {
		t.Fatalf("round header %+v", round)
	}
	// Four collectives and one pair, at two sizes.
	if len(round.Results) != 10 {
		t.Fatalf("%d results, want 10: %+v", len(round.Results), round.Results)
	}
	var wantBusy float64
	for _, res := range round.Results {
		if res.Error != "" || res.Seconds <= 0 {
			t.Errorf("%s at %d: %+v", res.Collective, res.SizeBytes, res)
			continue
		}
		// Every operation ran Warmup times and Iterations times a sample,
		// on both GPUs at once.
		wantBusy += float64(o.Warmup+o.Samples*o.Iterations) * res.Seconds
		if res.SizeBytes != o.SizeBytes {
			continue // the latency size's time is all the fake's launch cost
		}
		if math.Abs(res.BusBytesPerSecond-fakeP2PRate) > busTolerance*fakeP2PRate {
			t.Errorf("%s: bus bandwidth %.4g, want the fake's %.4g", res.Collective, res.BusBytesPerSecond, fakeP2PRate)
		}
	}
	if math.Abs(round.BusySeconds-wantBusy) > 0.01*wantBusy {
		t.Errorf("busy %g s, want %g s: every operation timed, warm-up included", round.BusySeconds, wantBusy)
	}
	if round.DeviceMemoryBytes != 2<<20 || round.ContextSeconds <= 0 {
		t.Errorf("cost: %d bytes, context %g s", round.DeviceMemoryBytes, round.ContextSeconds)
	}
	checkTransports(t, round, probes.TransportP2P)
}

// checkTransports wants connections both ways between ranks 0 and 1, all
// of one kind.
func checkTransports(t *testing.T, round *probes.CollectiveRound, kind string) {
	t.Helper()
	ways := map[[2]int]bool{}
	for _, tr := range round.Transports {
		if tr.Kind != kind {
			t.Errorf("transport %+v, want %s", tr, kind)
		}
		ways[[2]int{tr.FromRank, tr.ToRank}] = true
	}
	if !ways[[2]int{0, 1}] || !ways[[2]int{1, 0}] {
		t.Errorf("transports %+v, want 0 -> 1 and 1 -> 0", round.Transports)
	}
}

// The operator's NCCL_* settings reach NCCL, and the transport it falls
// back to is reported; the operator's debug settings do not take the log
// away from the probe.
func TestCollectiveTransportsFollowTheOperatorsSettings(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		kind string
	}{
		{[]string{"NCCL_P2P_DISABLE", "1"}, probes.TransportSHM},
		{[]string{"NCCL_P2P_DISABLE", "1", "NCCL_SHM_DISABLE", "1"}, probes.TransportNet},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			r := collectivesMachine(t, time.Minute)
			for i := 0; i < len(tc.env); i += 2 {
				t.Setenv(tc.env[i], tc.env[i+1])
			}
			operatorLog := filepath.Join(t.TempDir(), "operator.log")
			t.Setenv("NCCL_DEBUG", "WARN")
			t.Setenv("NCCL_DEBUG_SUBSYS", "COLL")
			t.Setenv("NCCL_DEBUG_FILE", operatorLog)
			round, err := r.RunCollectives(context.Background(), quickOptions(probes.AllReduce, probes.SendRecv), nil)
			if err != nil || round.Error != "" {
				t.Fatalf("round %+v, %v", round, err)
			}
			checkTransports(t, round, tc.kind)
			if _, err := os.Stat(operatorLog); err == nil {
				t.Errorf("NCCL wrote to the operator's debug file %s", operatorLog)
			}
		})
	}
}

// NVLS stays off unless the flag turns it on, whatever the environment
// says: the fake marks every communicator made with NVLS on.
func TestCollectiveChildKeepsNVLSOff(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "nvls")
	t.Setenv("FAKE_NCCL_NVLS_MARK", mark)
	t.Setenv("NCCL_NVLS_ENABLE", "1")
	r := collectivesMachine(t, time.Minute)
	if round, err := r.RunCollectives(context.Background(), quickOptions(probes.AllReduce), nil); err != nil || round.Error != "" {
		t.Fatalf("round %+v, %v", round, err)
	}
	if data, err := os.ReadFile(mark); err == nil {
		t.Fatalf("NVLS was on without --nvls: %q", data)
	}
	// The mark works: with --nvls, the operator's setting stands.
	r.Command = append(r.Command, "--nvls")
	if round, err := r.RunCollectives(context.Background(), quickOptions(probes.AllReduce), nil); err != nil || round.Error != "" {
		t.Fatalf("round %+v, %v", round, err)
	}
	if data, err := os.ReadFile(mark); err != nil || strings.Count(string(data), "\n") != 2 {
		t.Errorf("with --nvls: mark %q, %v; want one line per rank", data, err)
	}
}

// Without NCCL the round says why. (The probe child, in probes/cuda/probe,
// does not link NCCL: its own process tests run with no libnccl at all.)
func TestCollectiveChildWithoutNCCL(t *testing.T) {
	r := collectivesMachine(t, time.Minute, "--library=/nonexistent/libnccl.so.2")
	round, err := r.RunCollectives(context.Background(), quickOptions(), nil)
	if err != nil {
		t.Fatalf("RunCollectives: %v, want a round saying why", err)
	}
	if !strings.Contains(round.Error, "/nonexistent/libnccl.so.2") || len(round.Results) != 0 || !slices.Equal(round.GPUs, []string{gpu0, gpu1}) {
		t.Errorf("round %+v, want an error naming the library", round)
	}
}

func TestCollectiveChildWithoutCUDA(t *testing.T) {
	r := collectivesMachine(t, time.Minute, "--cuda.library=/nonexistent/libcuda.so.1")
	round, err := r.RunCollectives(context.Background(), quickOptions(), nil)
	if err != nil || !strings.Contains(round.Error, "/nonexistent/libcuda.so.1") || !slices.Equal(round.GPUs, []string{gpu0, gpu1}) {
		t.Errorf("round %+v, %v; want an error naming the driver", round, err)
	}
}

// An operation that fails aborts the communicator: its result says why,
// and every later one is reported, as not run.
func TestCollectiveOperationFailsMidRound(t *testing.T) {
	t.Setenv("FAKE_NCCL_FAIL", "ncclAllGather:5:1")
	round, err := collectivesMachine(t, time.Minute).RunCollectives(context.Background(), quickOptions(), nil)
	if err != nil || round.Error != "" {
		t.Fatalf("round %+v, %v", round, err)
	}
	if len(round.Results) != 10 {
		t.Fatalf("%d results, want all 10", len(round.Results))
	}
	for i, res := range round.Results {
		switch {
		case i < 2:
			if res.Collective != probes.AllReduce || res.Error != "" {
				t.Errorf("result %d before the failure: %+v", i, res)
			}
		case i == 2:
			if res.Collective != probes.AllGather || !strings.Contains(res.Error, "ncclAllGather") || !strings.Contains(res.Error, "ncclInvalidUsage") {
				t.Errorf("the failed all_gather: %+v", res)
			}
		default:
			if !strings.HasPrefix(res.Error, "not run: all_gather: ") {
				t.Errorf("result %d after the failure: %+v", i, res)
			}
		}
	}
}

// A rank whose peer failed learns it from NCCL's asynchronous error, not
// from its stream, which never completes: the communicator is aborted at
// the error, long before the deadline.
func TestCollectiveAsyncErrorEndsAHungOperation(t *testing.T) {
	t.Setenv("FAKE_NCCL_HANG", "ncclReduceScatter")
	t.Setenv("FAKE_NCCL_FAIL", "ncclCommGetAsyncError:6:60")
	r := collectivesMachine(t, time.Minute)
	start := time.Now()
	round, err := r.RunCollectives(context.Background(), quickOptions(probes.AllReduce, probes.ReduceScatter, probes.AllToAll), nil)
	if err != nil || round.Error != "" {
		t.Fatalf("round %+v, %v", round, err)
	}
	rs := round.Results[2]
	if rs.Collective != probes.ReduceScatter || !strings.Contains(rs.Error, "ncclRemoteError") {
		t.Errorf("reduce_scatter: %+v, want the asynchronous error", rs)
	}
	if last := round.Results[len(round.Results)-1]; last.Collective != probes.AllToAll || !strings.HasPrefix(last.Error, "not run: ") {
		t.Errorf("last result %+v", last)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v: the error was not acted on", d)
	}
}

// A hung operation is aborted at the child's own deadline, ahead of the
// runner's kill, and the round still comes back. The communicator is
// blocking: the child's thread is inside NCCL's group end (the fake's
// hung launch) until the watchdog's abort from another goroutine.
func TestCollectiveHangIsAbortedAtTheChildsDeadline(t *testing.T) {
	t.Setenv("FAKE_NCCL_HANG", "ncclAllGather")
	r := collectivesMachine(t, 8*time.Second)
	start := time.Now()
	round, err := r.RunCollectives(context.Background(), quickOptions(), nil)
	if err != nil {
		t.Fatalf("RunCollectives: %v, want the round", err)
	}
	if n := len(round.Results); n != 3 || round.Results[0].Error != "" || !strings.Contains(round.Results[2].Error, "not done by the deadline") {
		t.Errorf("results %+v, want all_reduce twice and the all_gather cut at the deadline", round.Results)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("took %v, past the runner's limit", d)
	}
}

// The round's operations run on blocking communicators: the fake refuses
// any operation on a non-blocking one (FAKE_NCCL_REQUIRE_BLOCKING), and
// every result comes back. Under the operator's NCCL_COMM_BLOCKING=0 the
// same check fails them, so the test can fail.
func TestCollectiveOperationsRunOnBlockingCommunicators(t *testing.T) {
	t.Setenv("FAKE_NCCL_REQUIRE_BLOCKING", "1")
	round, err := collectivesMachine(t, time.Minute).RunCollectives(context.Background(), quickOptions(), nil)
	if err != nil || round.Error != "" || len(round.Results) != 10 {
		t.Fatalf("round %+v, %v", round, err)
	}
	for _, res := range round.Results {
		if res.Error != "" {
			t.Errorf("%s at %d: %s", res.Collective, res.SizeBytes, res.Error)
		}
	}

	t.Setenv("NCCL_COMM_BLOCKING", "0")
	round, err = collectivesMachine(t, time.Minute).RunCollectives(context.Background(), quickOptions(probes.AllReduce), nil)
	if err != nil || len(round.Results) == 0 || !strings.Contains(round.Results[0].Error, "FAKE_NCCL_REQUIRE_BLOCKING") {
		t.Fatalf("round on non-blocking communicators %+v, %v; want the fake's refusal", round, err)
	}
}

// An operator's NCCL_COMM_BLOCKING=0 makes the communicators non-blocking
// again: the round still runs (each group's ncclInProgress is polled).
func TestCollectiveRoundOnNonBlockingCommunicators(t *testing.T) {
	t.Setenv("NCCL_COMM_BLOCKING", "0")
	t.Setenv("FAKE_NCCL_CONNECT_POLLS", "3")
	round, err := collectivesMachine(t, time.Minute).RunCollectives(context.Background(), quickOptions(), nil)
	if err != nil || round.Error != "" || len(round.Results) != 10 {
		t.Fatalf("round %+v, %v", round, err)
	}
	for _, res := range round.Results {
		if res.Error != "" || res.Seconds <= 0 {
			t.Errorf("%s at %d: %+v", res.Collective, res.SizeBytes, res)
		}
	}
}

// A blocking init that never completes (a rank that never joins: here
// NCCL's init hangs) cannot be aborted: the child gives it up at its own
// deadline, reports the round with the cause, and exits ahead of the
// runner's kill, its stuck thread and NCCL's going with the process.
func TestCollectiveChildGivesUpAHungInitAtItsDeadline(t *testing.T) {
	t.Setenv("FAKE_NCCL_HANG", "ncclCommInitRankConfig")
	r := collectivesMachine(t, 6*time.Second)
	start := time.Now()
	round, err := r.RunCollectives(context.Background(), quickOptions(), nil)
	if err != nil {
		t.Fatalf("RunCollectives: %v, want the round", err)
	}
	for _, want := range []string{"initialising the communicator: not done by the deadline", "init of ranks 0..1 of 2 never returned", "exits"} {
		if !strings.Contains(round.Error, want) {
			t.Errorf("round error %q does not say %q", round.Error, want)
		}
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("took %v, past the runner's limit", d)
	}
}

// A finalize that never returns (blocking communicators wait for what is
// in flight) does not cost the round: the child leaves it to its exit and
// prints what it measured.
func TestCollectiveRoundSurvivesAHungFinalize(t *testing.T) {
	t.Setenv("FAKE_NCCL_HANG", "ncclCommFinalize")
	start := time.Now()
	round, err := collectivesMachine(t, 20*time.Second).RunCollectives(context.Background(), quickOptions(probes.AllReduce), nil)
	if err != nil || round.Error != "" || len(round.Results) != 2 || round.Results[0].Error != "" {
		t.Fatalf("round %+v, %v", round, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}

// A child stuck before it can watch anything (here in the driver's
// init) is killed by the runner.
func TestCollectiveChildStuckInTheDriverIsKilled(t *testing.T) {
	t.Setenv("FAKE_CUDA_HANG", "cuInit")
	_, err := collectivesMachine(t, 3*time.Second).RunCollectives(context.Background(), quickOptions(), nil)
	var rf *probes.RunFailure
	if !errors.As(err, &rf) || rf.Result != probes.RunTimeout || !rf.Collectives {
		t.Errorf("err = %v, want a timeout", err)
	}
}

// Two children, one rank each, meet as two nodes do: the first makes the
// unique id and hands it out, the second joins with it, and NCCL connects
// them through the network.
func TestTwoCollectiveChildrenMeetAsNodes(t *testing.T) {
	r0 := collectivesMachine(t, time.Minute)
	// The second plays another host: the fake connects ranks on two hosts
	// through its network. env(1) keeps the process (and its group).
	r1 := &probes.ChildRunner{Command: append([]string{"/usr/bin/env", "FAKE_NCCL_HOSTNAME=node-b"}, r0.Command...), Timeout: time.Minute}
	o0 := quickOptions(probes.AllReduce, probes.SendRecv)
	o0.GPUs, o0.Peer = []string{gpu0}, "node-b"
	o1 := o0
	o1.GPUs, o1.FirstRank, o1.Peer = []string{gpu1}, 1, "node-a"

	type result struct {
		round *probes.CollectiveRound
		err   error
	}
	ids := make(chan string, 1)
	first := make(chan result, 1)
	go func() {
		round, err := r0.RunCollectives(context.Background(), o0, ids)
		first <- result{round, err}
	}()
	select {
	case o1.UniqueID = <-ids:
	case res := <-first:
		t.Fatalf("rank 0 ended without handing out the id: %+v, %v", res.round, res.err)
	}
	round1, err := r1.RunCollectives(context.Background(), o1, nil)
	res0 := <-first
	if err != nil || res0.err != nil || round1.Error != "" || res0.round.Error != "" {
		t.Fatalf("rank 0: %+v, %v\nrank 1: %+v, %v", res0.round, res0.err, round1, err)
	}
	for i, round := range []*probes.CollectiveRound{res0.round, round1} {
		checkTransports(t, round, probes.TransportNet)
		for _, res := range round.Results {
			if res.Error != "" {
				t.Errorf("rank %d: %+v", i, res)
			}
			if res.SizeBytes == o0.SizeBytes && math.Abs(res.BusBytesPerSecond-fakeNetRate) > busTolerance*fakeNetRate {
				t.Errorf("rank %d %s: bus bandwidth %.4g, want the fake network's %.4g", i, res.Collective, res.BusBytesPerSecond, fakeNetRate)
			}
		}
		if round.Peer != []string{"node-b", "node-a"}[i] || round.FirstRank != i {
			t.Errorf("rank %d's round: %+v", i, round)
		}
	}
	// Each rank reports its side of the send/recv 0 -> 1, at both sizes.
	count := func(round *probes.CollectiveRound) (n int) {
		for _, res := range round.Results {
			if res.Collective == probes.SendRecv {
				n++
			}
		}
		return n
	}
	if count(res0.round) != 2 || count(round1) != 2 {
		t.Errorf("send/recv results: %d from rank 0, %d from rank 1; want 2 and 2", count(res0.round), count(round1))
	}
}

package nccl

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestInitRanksMakesLocalRanks(t *testing.T) {
	r := newRig(t, 2)
	comms := r.init(t)
	if len(comms) != 2 || comms[0].Rank() != 0 || comms[1].Rank() != 1 {
		t.Fatalf("InitRanks gave %d communicators", len(comms))
	}
	for _, c := range comms {
		if err := c.AsyncError(); err != nil {
			t.Errorf("rank %d after init: %v", c.Rank(), err)
		}
		if err := c.Destroy(); err != nil {
			t.Errorf("Destroy of rank %d: %v", c.Rank(), err)
		}
		if err := c.AsyncError(); !errors.Is(err, errGone) {
			t.Errorf("AsyncError after Destroy = %v", err)
		}
	}
	// The last rank to leave takes the rendezvous directory with it.
	if left := glob(t, filepath.Join(r.rdv, "fakenccl-*")); len(left) != 0 {
		t.Errorf("rendezvous directories left behind: %v", left)
	}
}

func TestInitRanksRefusesRanksThatDoNotFit(t *testing.T) {
	r := newRig(t, 1)
	var id UniqueID
	for _, tc := range []struct{ nranks, first, local int }{{0, 0, 1}, {2, 1, 2}, {2, -1, 1}, {2, 0, 0}} {
		if _, err := r.lib.InitRanks(context.Background(), id, tc.nranks, tc.first, tc.local, r.makeCurrent); err == nil {
			t.Errorf("InitRanks(nranks %d, first %d, local %d) succeeded", tc.nranks, tc.first, tc.local)
		}
	}
}

// A rank that never joins, on communicators the operator made
// non-blocking: init must end at the deadline, say so with the deadline's
// cause, and leave no communicator behind. (A blocking init cannot be cut
// short: the collectives child gives it up at its deadline, tested there.)
func TestInitWaitingForAnAbsentRankEndsAtTheDeadline(t *testing.T) {
	t.Setenv("NCCL_COMM_BLOCKING", "0")
	r := newRig(t, 2)
	id, err := r.lib.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("the peer exporter never started its child")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, cause)
	defer cancel()
	start := time.Now()
	comms, err := r.lib.InitRanks(ctx, id, 3, 0, 2, r.makeCurrent)
	if err == nil || comms != nil {
		t.Fatalf("InitRanks with rank 2 absent = %v, %v", comms, err)
	}
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), "did not finish") || !strings.Contains(err.Error(), "2 of 2 communicators still in progress") {
		t.Errorf("error %q: want init not finished, both ranks waiting, and the cause", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("init took %v to give up", d)
	}
}

func TestNonBlockingInitHangIsAbortedAtTheDeadline(t *testing.T) {
	t.Setenv("NCCL_COMM_BLOCKING", "0")
	t.Setenv("FAKE_NCCL_HANG", "ncclCommInitRankConfig")
	r := newRig(t, 2)
	id, err := r.lib.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = r.lib.InitRanks(ctx, id, 2, 0, 2, r.makeCurrent)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "NCCL init of ranks 0..1 of 2 did not finish") {
		t.Fatalf("InitRanks with a hung init: %v", err)
	}
	// Both ranks were aborted: they left, and took the rendezvous with them.
	if left := glob(t, filepath.Join(r.rdv, "fakenccl-*")); len(left) != 0 {
		t.Errorf("hung ranks were not aborted: %v left", left)
	}
}

// NCCL refuses two ranks on one GPU: makeCurrent must really be called
// before each rank's init.
func TestInitRanksOnOneGPUIsRefused(t *testing.T) {
	r := newRig(t, 2)
	id, err := r.lib.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = r.lib.InitRanks(ctx, id, 2, 0, 2, func(int) error { return r.makeCurrent(0) })
	var ne *Error
	if !errors.As(err, &ne) || ne.Name != "ncclInvalidUsage" || !strings.Contains(ne.Last, "Duplicate GPU detected") {
		t.Fatalf("InitRanks with both ranks on GPU 0: %v", err)
	}
}

func TestInitStopsWhenMakeCurrentFails(t *testing.T) {
	r := newRig(t, 2)
	id, err := r.lib.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("no such GPU")
	_, err = r.lib.InitRanks(context.Background(), id, 2, 0, 2, func(i int) error {
		if i == 1 {
			return boom
		}
		return r.makeCurrent(i)
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("InitRanks with GPU 1 failing: %v", err)
	}
}

func TestInitFailureCarriesNCCLText(t *testing.T) {
	t.Setenv("FAKE_NCCL_FAIL", "ncclCommInitRankConfig:2:2")
	r := newRig(t, 2)
	id, err := r.lib.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.lib.InitRanks(context.Background(), id, 2, 0, 2, r.makeCurrent)
	var ne *Error
	if !errors.As(err, &ne) || ne.Call != "ncclCommInitRankConfig" || ne.Code != 2 ||
		!strings.Contains(err.Error(), "unhandled system error") || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("InitRanks with rank 1's init failing: %v", err)
	}
}

// A communicator broken after init (a peer gone: ncclRemoteError) reports
// it through AsyncError, with NCCL's words.
func TestAsyncErrorReportsABrokenCommunicator(t *testing.T) {
	// The 5th call breaks the communicator it is asked about: init polls
	// fewer times than that.
	t.Setenv("FAKE_NCCL_FAIL", "ncclCommGetAsyncError:6:5")
	r := newRig(t, 2)
	comms := r.init(t)
	var broken error
	for i := 0; i < 10 && broken == nil; i++ {
		broken = comms[0].AsyncError()
	}
	var ne *Error
	if !errors.As(broken, &ne) || ne.Name != "ncclRemoteError" || !strings.Contains(ne.Text, "remote process exited") {
		t.Fatalf("AsyncError of a broken communicator: %v", broken)
	}
	if err := comms[0].AsyncError(); !errors.As(err, &ne) || ne.Code != 6 {
		t.Errorf("a broken communicator recovered: %v", err)
	}
}

func TestDestroyWithoutFinalize(t *testing.T) {
	r := newRig(t, 2, "OMIT_ncclCommFinalize", "OMIT_ncclGetLastError")
	for _, c := range r.init(t) {
		if err := c.Destroy(); err != nil {
			t.Errorf("Destroy without ncclCommFinalize: %v", err)
		}
	}
}

func TestAbortTwiceAndAfterDestroy(t *testing.T) {
	r := newRig(t, 2)
	comms := r.init(t)
	if err := comms[0].Abort(); err != nil {
		t.Fatal(err)
	}
	if err := comms[0].Abort(); err != nil {
		t.Errorf("second Abort: %v", err)
	}
	if err := comms[1].Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := comms[1].Abort(); err != nil {
		t.Errorf("Abort after Destroy: %v", err)
	}
	if err := comms[1].Destroy(); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
}

func TestNVLSIsRecordedUnlessTurnedOff(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "nvls")
	t.Setenv("FAKE_NCCL_NVLS_MARK", mark)
	t.Setenv("NCCL_NVLS_ENABLE", "0")
	r := newRig(t, 2)
	r.init(t)
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Errorf("NVLS was used with NCCL_NVLS_ENABLE=0 (%v)", err)
	}

	if err := os.Unsetenv("NCCL_NVLS_ENABLE"); err != nil { // t.Setenv restores it
		t.Fatal(err)
	}
	r = newRig(t, 2)
	r.init(t)
	data, err := os.ReadFile(mark)
	if err != nil || strings.Count(string(data), "\n") != 2 {
		t.Errorf("NVLS on by default: mark %q, %v; want a line per rank", data, err)
	}
}

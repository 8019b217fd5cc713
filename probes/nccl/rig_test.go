package nccl

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/probes/cuda"
	"github.com/gpulink/gpulink_exporter/probes/cuda/cudatest"
	"github.com/gpulink/gpulink_exporter/probes/nccl/nccltest"
)

// rig is a fake machine: the fake libcuda with some GPUs, a context and a
// stream on each, and the fake libnccl over it. The test's goroutine is
// locked to its thread, as the collective child locks its own.
type rig struct {
	lib     *Library
	drv     *cuda.Driver
	ctx     []*cuda.Context
	streams []*cuda.Stream
	rdv     string // $TMPDIR, where unique ids make their rendezvous directories
	// The fakes' files, for another process to load.
	cudaPath, ncclPath string
}

// newRig sets the environment both fakes read at their first call, so a
// test sets its FAKE_* and NCCL_* variables before calling it.
func newRig(t *testing.T, gpus int, defines ...string) *rig {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	r := &rig{rdv: t.TempDir()}
	t.Setenv("TMPDIR", r.rdv)
	t.Setenv("FAKE_CUDA_DEVICES", strconv.Itoa(gpus))
	r.cudaPath, r.ncclPath = fakeCUDA(t), nccltest.Build(t, defines...)
	drv, err := cuda.Open(r.cudaPath)
	if err != nil {
		t.Fatalf("opening the fake libcuda: %v", err)
	}
	r.drv = drv
	t.Cleanup(drv.Close)
	lib, err := Open(r.ncclPath)
	if err != nil {
		t.Fatalf("opening the fake libnccl: %v", err)
	}
	r.lib = lib
	t.Cleanup(lib.Close)
	for i := range gpus {
		dev, err := drv.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		ctx, err := dev.RetainPrimaryContext()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ctx.Release() })
		if err := ctx.SetCurrent(); err != nil {
			t.Fatal(err)
		}
		s, err := ctx.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		r.ctx = append(r.ctx, ctx)
		r.streams = append(r.streams, s)
	}
	return r
}

// fakeCUDA is a fresh copy of the fake libcuda: compiled once, copied for
// each test, so each loads anew and reads its environment anew.
func fakeCUDA(t *testing.T) string {
	t.Helper()
	builtCUDA.once.Do(func() {
		builtCUDA.so, builtCUDA.err = os.ReadFile(cudatest.Build(t))
	})
	if builtCUDA.err != nil {
		t.Fatalf("building the fake libcuda: %v", builtCUDA.err)
	}
	path := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.WriteFile(path, builtCUDA.so, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

var builtCUDA struct {
	once sync.Once
	so   []byte
	err  error
}

func (r *rig) makeCurrent(i int) error { return r.ctx[i].SetCurrent() }

// init makes all the rig's GPUs ranks 0..n-1 of one communicator.
func (r *rig) init(t *testing.T) []*Comm {
	t.Helper()
	id, err := r.lib.NewUniqueID()
	if err != nil {
		t.Fatalf("NewUniqueID: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms, err := r.lib.InitRanks(ctx, id, len(r.ctx), 0, len(r.ctx), r.makeCurrent)
	if err != nil {
		t.Fatalf("InitRanks: %v", err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Abort()
		}
	})
	return comms
}

// alloc is n bytes of device memory on GPU i.
func (r *rig) alloc(t *testing.T, i int, n int64) cuda.DevicePtr {
	t.Helper()
	if err := r.ctx[i].SetCurrent(); err != nil {
		t.Fatal(err)
	}
	p, err := r.ctx[i].Alloc(n)
	if err != nil {
		t.Fatalf("Alloc(%d) on GPU %d: %v", n, i, err)
	}
	return p
}

// timed records an event on every stream, runs work (which queues NCCL
// operations), records a second and returns each stream's GPU time
// between the two.
func (r *rig) timed(t *testing.T, work func()) []time.Duration {
	t.Helper()
	var start, end []*cuda.Event
	for i, c := range r.ctx {
		if err := c.SetCurrent(); err != nil {
			t.Fatal(err)
		}
		a, err := c.NewEvent()
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.NewEvent()
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Record(r.streams[i]); err != nil {
			t.Fatal(err)
		}
		start, end = append(start, a), append(end, b)
	}
	work()
	var out []time.Duration
	for i := range r.ctx {
		if err := end[i].Record(r.streams[i]); err != nil {
			t.Fatal(err)
		}
		if err := end[i].Synchronize(); err != nil {
			t.Fatal(err)
		}
		d, err := end[i].Since(start[i])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// group runs ops between GroupStart and GroupEnd and, when GroupEnd says
// NCCL is still at it, waits for the communicators as a caller must.
func group(t *testing.T, lib *Library, comms []*Comm, ops func() error) {
	t.Helper()
	if err := lib.GroupStart(); err != nil {
		t.Fatalf("GroupStart: %v", err)
	}
	opErr := ops()
	err := lib.GroupEnd()
	if opErr != nil {
		t.Fatalf("operation: %v", opErr)
	}
	if errors.Is(err, ErrInProgress) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = WaitReady(ctx, comms...)
	}
	if err != nil {
		t.Fatalf("GroupEnd: %v", err)
	}
}

// The model the fake implements, from the same defaults it documents.
const (
	defaultLatNs  = 10e3
	defaultP2PGBs = 370.0
	defaultSHMGBs = 20.0
	defaultNetGBs = 45.0
)

// modelNs is one operation of size bytes moving busFactor x size over a
// link of gbps: bytes / (GB/s) = ns.
func modelNs(size, busFactor, gbps float64) float64 { return defaultLatNs + size*busFactor/gbps }

func within1pc(t *testing.T, what string, got time.Duration, wantNs float64) {
	t.Helper()
	if math.Abs(float64(got.Nanoseconds())-wantNs) > 0.01*wantNs {
		t.Errorf("%s took %v, the model says %v", what, got, time.Duration(wantNs))
	}
}

func glob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

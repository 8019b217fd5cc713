package nvml_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
)

// blockedProcesses makes GPU 0's process list wait for release, and says
// on entered when a call has begun. It counts nvmlShutdown calls.
func blockedProcesses(t *testing.T) (m *nvmlmodel.Library, entered, release chan struct{}, shutdowns *atomic.Int32) {
	t.Helper()
	m = nvmlmodel.NewH200Pair()
	entered, release = make(chan struct{}, 1), make(chan struct{})
	shutdowns = new(atomic.Int32)
	m.GPUs[0].Device.Device.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
		entered <- struct{}{}
		<-release
		return nil, gonvml.SUCCESS
	}
	shutdown := m.ShutdownFunc
	m.ShutdownFunc = func() gonvml.Return {
		shutdowns.Add(1)
		return shutdown()
	}
	return m, entered, release, shutdowns
}

// A process list in flight when the exporter stops (the process source's
// sampler abandons it at its deadline) keeps NVML loaded until it returns:
// nvmlShutdown under it crashed the exporter on an H200.
func TestShutdownWaitsForCallsInFlight(t *testing.T) {
	m, entered, release, shutdowns := blockedProcesses(t)
	r := nvml.NewReader(m, "", nil)
	if err := r.Init(); err != nil {
		t.Fatal(err)
	}
	listed := make(chan error, 1)
	go func() {
		_, err := r.ComputeProcesses()
		listed <- err
	}()
	<-entered
	done := make(chan struct{})
	go func() {
		r.Shutdown()
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("Shutdown returned while a process list was in NVML")
	case <-time.After(100 * time.Millisecond):
	}
	if n := shutdowns.Load(); n != 0 {
		t.Fatalf("nvmlShutdown called %d times under a call in flight", n)
	}
	close(release)
	<-done
	if err := <-listed; err != nil {
		t.Errorf("the list in flight: %v", err)
	}
	if n := shutdowns.Load(); n != 1 {
		t.Errorf("nvmlShutdown called %d times, want 1", n)
	}
	// Nothing reaches NVML afterwards.
	if _, err := r.ComputeProcesses(); !errors.Is(err, nvml.ErrShutDown) {
		t.Errorf("ComputeProcesses after Shutdown: %v, want ErrShutDown", err)
	}
	if _, err := r.Sample(t.Context()); !errors.Is(err, nvml.ErrShutDown) {
		t.Errorf("Sample after Shutdown: %v, want ErrShutDown", err)
	}
	if err := r.Init(); !errors.Is(err, nvml.ErrShutDown) {
		t.Errorf("Init after Shutdown: %v, want ErrShutDown", err)
	}
}

// A call hung in the driver does not hang the exporter's exit: Shutdown
// gives up after its wait and leaves NVML loaded.
func TestShutdownLeavesNVMLLoadedUnderAHungCall(t *testing.T) {
	m, entered, release, shutdowns := blockedProcesses(t)
	defer close(release)
	r := nvml.NewReader(m, "", nil)
	nvml.SetShutdownWait(r, 50*time.Millisecond)
	go func() { _, _ = r.ComputeProcesses() }()
	<-entered
	start := time.Now()
	r.Shutdown()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Shutdown took %v", d)
	}
	if n := shutdowns.Load(); n != 0 {
		t.Errorf("nvmlShutdown called %d times under a hung call, want 0", n)
	}
}

// The XID watcher's event wait is a call in flight too: Shutdown waits for
// the watch to end after its context does, so NVML is shut down only once
// the watcher has stopped (and freed its event set).
func TestShutdownWaitsForTheXIDWatch(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	r := nvml.NewReader(m, "", nil)
	w := nvml.NewXIDWatcher(r, nil)
	w.Wait = 20 * time.Millisecond
	var shutdowns atomic.Int32
	var watching atomic.Bool // the watcher's state when NVML was shut down
	shutdown := m.ShutdownFunc
	m.ShutdownFunc = func() gonvml.Return {
		shutdowns.Add(1)
		watching.Store(w.Status().Up)
		return shutdown()
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan struct{})
	go func() {
		w.Run(ctx, time.Millisecond)
		close(ran)
	}()
	for !w.Status().Up {
		time.Sleep(time.Millisecond)
	}
	cancel()
	r.Shutdown()
	if n := shutdowns.Load(); n != 1 {
		t.Fatalf("nvmlShutdown called %d times, want 1", n)
	}
	if watching.Load() {
		t.Error("NVML was shut down while the XID watch was still running")
	}
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Error("the XID watch did not end")
	}
}

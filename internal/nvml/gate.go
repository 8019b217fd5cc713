package nvml

import (
	"errors"
	"sync"
	"time"
)

// ErrShutDown is returned by a Reader's calls once Shutdown has begun.
var ErrShutDown = errors.New("NVML reader is shut down")

// defaultShutdownWait bounds how long Shutdown waits for NVML calls in
// flight: the XID watcher's event wait (a second) and a sample's last GPU.
// A call still running past it is hung in the driver; NVML is then left
// loaded for the process's exit to release.
const defaultShutdownWait = 5 * time.Second

// gate counts the NVML calls in flight, so that Shutdown never unloads
// NVML under one: a call that runs during or after nvmlShutdown crashes
// the process (seen on an H200: SIGSEGV in
// nvmlDeviceGetComputeRunningProcesses_v3 when the exporter shut down
// with the process source mid-sample). The samplers abandon a call that
// overruns its deadline rather than wait on it, so their goroutines may
// still be in NVML when the exporter stops.
type gate struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{} // closed when n reaches 0 after drain
}

// enter admits a call; false once the gate is closed.
func (g *gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.n++
	return true
}

// leave ends a call enter admitted.
func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 && g.closed {
		close(g.idle)
	}
}

// drain admits no more calls and waits up to timeout for those in flight
// to leave; it says whether they all did. Draining twice waits again.
func (g *gate) drain(timeout time.Duration) bool {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		g.idle = make(chan struct{})
		if g.n == 0 {
			close(g.idle)
		}
	}
	idle := g.idle
	g.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}

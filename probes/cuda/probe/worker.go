package probe

import (
	"runtime"
	"time"

	"github.com/gpulink/gpulink_exporter/probes/cuda"
)

// worker owns one GPU's primary context on one locked OS thread. CUDA makes
// a context current per thread; keeping every call for a GPU on the same
// thread keeps that binding true without juggling cuCtxSetCurrent.
type worker struct {
	dev  cuda.Device
	ctx  *cuda.Context
	jobs chan func()
	done chan struct{}
	// since is when the context was retained, for ContextSeconds.
	since time.Time
}

func startWorker(dev cuda.Device) (*worker, error) {
	w := &worker{dev: dev, jobs: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		// Never unlocked: the thread exits with the goroutine, and with it
		// whatever the driver bound to it.
		runtime.LockOSThread()
		defer close(w.done)
		ctx, err := dev.RetainPrimaryContext()
		if err != nil {
			ready <- err
			return
		}
		if err := ctx.SetCurrent(); err != nil {
			ctx.Release()
			ready <- err
			return
		}
		w.ctx, w.since = ctx, time.Now()
		ready <- nil
		for job := range w.jobs {
			job()
		}
		ctx.Release()
	}()
	if err := <-ready; err != nil {
		<-w.done
		return nil, err
	}
	return w, nil
}

// do runs f on the worker's thread with its context current.
func (w *worker) do(f func(c *cuda.Context) error) error {
	errc := make(chan error, 1)
	w.jobs <- func() { errc <- f(w.ctx) }
	return <-errc
}

// stop releases the context and ends the thread; it returns how long the
// context was held.
func (w *worker) stop() time.Duration {
	close(w.jobs)
	<-w.done
	return time.Since(w.since)
}

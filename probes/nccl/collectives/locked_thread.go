package collectives

import "runtime"

// lockedThread runs functions one at a time on one OS thread. NCCL's group
// calls (ncclGroupStart to ncclGroupEnd) and CUDA's current context are
// both per thread, and a communicator over several GPUs switches contexts
// inside one group: every call for it must come from the same thread.
// Unlike probes/cuda/probe's worker, it holds no context of its own.
type lockedThread struct {
	jobs chan func()
	done chan struct{}
}

func startLockedThread() *lockedThread {
	t := &lockedThread{jobs: make(chan func()), done: make(chan struct{})}
	go func() {
		// Never unlocked: the thread exits with the goroutine, and with it
		// whatever the driver bound to it.
		runtime.LockOSThread()
		defer close(t.done)
		for job := range t.jobs {
			job()
		}
	}()
	return t
}

// start queues f and returns at once; f's result comes on the channel
// (buffered, so an abandoned f still finishes and exits).
func (t *lockedThread) start(f func() error) <-chan error {
	errc := make(chan error, 1)
	t.jobs <- func() { errc <- f() }
	return errc
}

// stop ends the thread once the job it runs, if any, is done.
func (t *lockedThread) stop() {
	close(t.jobs)
	<-t.done
}

// Package sampler runs each hardware source on its own schedule and keeps the
// latest immutable snapshot, so that a scrape never waits on hardware.
//
// A source's Sample may block for ever (a hung NVML call on a failing GPU).
// The sampler gives each sample a deadline; past it the source is reported
// down and stale, and no second sample is started until the hung one returns,
// so a wedged driver costs one goroutine, not one per tick.
package sampler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Source reads one kind of hardware into a typed snapshot.
type Source[T any] interface {
	// Sample reads the hardware. It returns a *PartialError alongside valid
	// data when some values could not be read; any other error means the
	// data is unusable.
	Sample(ctx context.Context) (T, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc[T any] func(ctx context.Context) (T, error)

// Sample calls f.
func (f SourceFunc[T]) Sample(ctx context.Context) (T, error) { return f(ctx) }

// PartialError says that a sample is usable but some values were dropped.
type PartialError struct {
	Count int   // values that could not be read
	First error // the first of them, for the log
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("%d values could not be read, first: %v", e.Count, e.First)
}

func (e *PartialError) Unwrap() error { return e.First }

// Tally counts the values one sample had to drop, keeping the first error
// for the log; every source builds its PartialError with one.
type Tally struct {
	Count int
	First error
}

// Add counts err; nil is no error.
func (t *Tally) Add(err error) {
	if err == nil {
		return
	}
	t.Count++
	if t.First == nil {
		t.First = err
	}
}

// Merge adds what a nested read returned: its PartialError's count, or one
// for any other error.
func (t *Tally) Merge(err error) {
	var p *PartialError
	if errors.As(err, &p) {
		t.Count += p.Count
		if t.First == nil {
			t.First = p.First
		}
		return
	}
	t.Add(err)
}

// Err is nil when nothing was dropped, else a *PartialError.
func (t *Tally) Err() error {
	if t.Count == 0 {
		return nil
	}
	return &PartialError{Count: t.Count, First: t.First}
}

// Status is what the exporter says about a source itself.
type Status struct {
	Name string
	// Up is true when the last sample finished in time without a fatal error.
	Up bool
	// LastSuccess is when the newest usable snapshot was taken.
	LastSuccess time.Time
	// LastDuration is how long the last finished sample took.
	LastDuration time.Duration
	// Errors counts failed or late samples and values dropped from samples.
	Errors uint64
	// Stalled is true while a sample is past its deadline and still running.
	Stalled bool
}

// StatusReporter is anything whose health the exporter reports.
type StatusReporter interface {
	Status() Status
}

// Snapshot is the latest usable result of a source.
type Snapshot[T any] struct {
	Data  T
	Taken time.Time
}

// Sampler samples one source on an interval.
type Sampler[T any] struct {
	name     string
	src      Source[T]
	interval time.Duration
	timeout  time.Duration
	logger   *slog.Logger
	now      func() time.Time

	latest atomic.Pointer[Snapshot[T]]
	// version counts finished, failed and stalled samples: whatever the
	// exporter says of this source can only change when it moves.
	version atomic.Uint64

	mu     sync.Mutex
	status Status
	// busy is non-nil while a sample is running; it is closed when it ends.
	busy chan struct{}
	// sampled is closed once the first sample has ended, well or not, or
	// passed its deadline.
	sampled     chan struct{}
	sampledOnce sync.Once
	// published are called after each new snapshot.
	published []func()
}

// Options configures a Sampler. New panics on options that Validate
// refuses: a bad interval is reported where it was set (the daemon checks
// its flags at start), never replaced by another.
type Options struct {
	// Interval is the time between samples; it must be above zero.
	Interval time.Duration
	// Timeout is the deadline of one sample: above zero and at most the
	// interval. Zero means the interval.
	Timeout time.Duration
	// Logger hears about failed and late samples; nil discards.
	Logger *slog.Logger
}

// OptionError is an Options field out of its range.
type OptionError struct {
	Field string // "Interval" or "Timeout"
	Value time.Duration
	Want  string // what the field takes
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("sampler %s %s: want %s", e.Field, e.Value, e.Want)
}

// Validate reports the first field out of its range as an *OptionError.
func (o Options) Validate() error {
	if o.Interval <= 0 {
		return &OptionError{Field: "Interval", Value: o.Interval, Want: "more than 0"}
	}
	if o.Timeout < 0 || o.Timeout > o.Interval {
		return &OptionError{Field: "Timeout", Value: o.Timeout,
			Want: fmt.Sprintf("more than 0 and at most the interval (%s), or 0 for the interval", o.Interval)}
	}
	return nil
}

// New returns a sampler; call Run to start it. It panics if o fails
// Validate.
func New[T any](name string, src Source[T], o Options) *Sampler[T] {
	if err := o.Validate(); err != nil {
		panic(fmt.Sprintf("sampler %q: %v", name, err))
	}
	if o.Timeout == 0 {
		o.Timeout = o.Interval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sampler[T]{
		name:     name,
		src:      src,
		interval: o.Interval,
		timeout:  o.Timeout,
		logger:   o.Logger.With("source", name),
		now:      time.Now,
		status:   Status{Name: name},
		sampled:  make(chan struct{}),
	}
}

// Sampled reports whether the first sample has ended (with or without a
// usable snapshot) or passed its deadline: from then on Latest is what
// readers of this source will get, so waiting longer gains nothing.
func (s *Sampler[T]) Sampled() bool {
	select {
	case <-s.sampled:
		return true
	default:
		return false
	}
}

// FirstSampled is closed when Sampled turns true, for a reader that waits
// on it.
func (s *Sampler[T]) FirstSampled() <-chan struct{} { return s.sampled }

func (s *Sampler[T]) markSampled() { s.sampledOnce.Do(func() { close(s.sampled) }) }

// Name is the source's name as exported in the source label.
func (s *Sampler[T]) Name() string { return s.name }

// Latest returns the newest usable snapshot, or nil before the first one.
func (s *Sampler[T]) Latest() *Snapshot[T] { return s.latest.Load() }

// LatestData is the data of the latest snapshot, the zero T before the
// first: for a source that reads another's results.
func (s *Sampler[T]) LatestData() T {
	if snap := s.latest.Load(); snap != nil {
		return snap.Data
	}
	var zero T
	return zero
}

// OnPublish has f called after every new snapshot, on the goroutine that
// took it: for work that would otherwise wait for the first reader of the
// snapshot (rendering it for a scrape).
func (s *Sampler[T]) OnPublish(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.published = append(s.published, f)
}

// Version changes whenever the snapshot or the status may have changed.
func (s *Sampler[T]) Version() uint64 { return s.version.Load() }

// Status reports the source's health.
func (s *Sampler[T]) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Run samples once at once, then every interval (with a little jitter so
// sources do not line up), until ctx ends.
func (s *Sampler[T]) Run(ctx context.Context) {
	s.SampleOnce(ctx)
	t := time.NewTimer(s.jittered())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.SampleOnce(ctx)
			t.Reset(s.jittered())
		}
	}
}

func (s *Sampler[T]) jittered() time.Duration {
	j := s.interval / 20
	if j <= 0 {
		return s.interval
	}
	return s.interval - j + rand.N(2*j)
}

// SampleOnce takes one sample and waits at most the timeout for it. If an
// earlier sample is still running, it does not start another.
func (s *Sampler[T]) SampleOnce(ctx context.Context) {
	s.mu.Lock()
	if s.busy != nil {
		s.status.Up = false
		s.status.Stalled = true
		s.status.Errors++
		s.mu.Unlock()
		s.version.Add(1)
		s.logger.Debug("previous sample still running, skipping this one")
		return
	}
	done := make(chan struct{})
	s.busy = done
	s.mu.Unlock()

	sctx, cancel := context.WithTimeout(ctx, s.timeout)
	go func() {
		// done first, then cancel: cancelling first would wake the
		// select below through sctx.Done for a sample that finished in
		// time, and report it late.
		defer cancel()
		defer close(done)
		defer s.markSampled()
		s.sample(sctx)
	}()

	select {
	case <-done:
	case <-sctx.Done():
		select {
		case <-done: // finished at the deadline
		default:
			s.mu.Lock()
			late := s.busy == done // else it ended while we took the lock
			if late {
				s.status.Up = false
				s.status.Stalled = true
				s.status.Errors++
			}
			s.mu.Unlock()
			s.markSampled()
			s.version.Add(1)
			if late {
				s.logger.Warn("sample exceeded its deadline; source reported down until it returns", "timeout", s.timeout)
			}
		}
	}
}

func (s *Sampler[T]) sample(ctx context.Context) {
	start := s.now()
	data, err := s.src.Sample(ctx)
	took := s.now().Sub(start)

	var partial *PartialError
	usable := err == nil || errors.As(err, &partial)
	late := ctx.Err() != nil

	s.mu.Lock()
	s.busy = nil
	s.status.Stalled = false
	s.status.LastDuration = took
	switch {
	case !usable:
		s.status.Up = false
		s.status.Errors++
		s.version.Add(1)
		s.mu.Unlock()
		s.logger.Debug("sample failed", "err", err)
		return
	case partial != nil:
		s.status.Errors += uint64(partial.Count)
		s.logger.Debug("sample dropped values", "count", partial.Count, "first", partial.First)
	}
	// A late sample still holds real readings: keep them, but the source
	// stays down until one finishes inside its deadline.
	s.status.Up = !late
	s.status.LastSuccess = start
	s.latest.Store(&Snapshot[T]{Data: data, Taken: start})
	s.version.Add(1)
	published := s.published
	s.mu.Unlock()
	for _, f := range published {
		f()
	}
}

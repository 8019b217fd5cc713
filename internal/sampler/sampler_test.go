package sampler

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/testwait"
)

// scripted is a source whose next answer the test sets.
type scripted struct {
	calls atomic.Int32
	next  func(ctx context.Context) (int, error)
}

func (s *scripted) Sample(ctx context.Context) (int, error) {
	s.calls.Add(1)
	return s.next(ctx)
}

func TestSamplePublishesSnapshot(t *testing.T) {
	src := &scripted{next: func(context.Context) (int, error) { return 42, nil }}
	s := New[int]("test", src, Options{Interval: time.Second})
	if s.Latest() != nil {
		t.Fatal("snapshot before the first sample")
	}
	s.SampleOnce(context.Background())
	snap := s.Latest()
	if snap == nil || snap.Data != 42 {
		t.Fatalf("snapshot = %+v, want data 42", snap)
	}
	st := s.Status()
	if !st.Up || st.Errors != 0 || st.LastSuccess.IsZero() || st.Stalled {
		t.Fatalf("status = %+v, want up, no errors, a last success", st)
	}
}

func TestOnPublishAfterEachNewSnapshot(t *testing.T) {
	src := &scripted{next: func(context.Context) (int, error) { return 1, nil }}
	s := New[int]("test", src, Options{Interval: time.Second})
	var seen []int
	s.OnPublish(func() { seen = append(seen, s.Latest().Data) })
	s.SampleOnce(context.Background())
	src.next = func(context.Context) (int, error) { return 0, errors.New("broken") }
	s.SampleOnce(context.Background())
	src.next = func(context.Context) (int, error) { return 2, nil }
	s.SampleOnce(context.Background())
	if len(seen) != 2 || seen[0] != 1 || seen[1] != 2 {
		t.Fatalf("published %v, want [1 2]: after each usable sample, with it stored", seen)
	}
}

func TestFailedSampleKeepsLastSnapshot(t *testing.T) {
	src := &scripted{next: func(context.Context) (int, error) { return 1, nil }}
	s := New[int]("test", src, Options{Interval: time.Second})
	s.SampleOnce(context.Background())
	first := s.Latest()

	src.next = func(context.Context) (int, error) { return 0, errors.New("broken") }
	s.SampleOnce(context.Background())
	if s.Latest() != first {
		t.Fatal("a failed sample replaced the snapshot")
	}
	st := s.Status()
	if st.Up || st.Errors != 1 || !st.LastSuccess.Equal(first.Taken) {
		t.Fatalf("status = %+v, want down, 1 error, last success at the first sample", st)
	}
}

func TestPartialErrorCountsDroppedValues(t *testing.T) {
	src := &scripted{next: func(context.Context) (int, error) {
		return 7, &PartialError{Count: 3, First: errors.New("one field")}
	}}
	s := New[int]("test", src, Options{Interval: time.Second})
	s.SampleOnce(context.Background())
	st := s.Status()
	if !st.Up || st.Errors != 3 {
		t.Fatalf("status = %+v, want up with 3 errors", st)
	}
	if s.Latest() == nil || s.Latest().Data != 7 {
		t.Fatal("partial sample was not published")
	}
}

func TestHungSampleReportsStaleAndDoesNotPileUp(t *testing.T) {
	release := make(chan struct{})
	src := &scripted{next: func(context.Context) (int, error) { return 1, nil }}
	s := New[int]("test", src, Options{Interval: time.Second, Timeout: 50 * time.Millisecond})
	s.SampleOnce(context.Background())
	good := s.Latest()

	// The source ignores its context, as a hung C call does.
	src.next = func(context.Context) (int, error) { <-release; return 2, nil }
	done := make(chan struct{})
	go func() { s.SampleOnce(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("SampleOnce waited on a hung source past its deadline")
	}
	st := s.Status()
	if st.Up || !st.Stalled || st.Errors != 1 {
		t.Fatalf("status while hung = %+v, want down, stalled, 1 error", st)
	}
	if s.Latest() != good {
		t.Fatal("snapshot changed while the source hung")
	}

	// Ticks while the first call hangs start nothing new.
	s.SampleOnce(context.Background())
	s.SampleOnce(context.Background())
	if n := src.calls.Load(); n != 2 {
		t.Fatalf("source called %d times, want 2 (no new call while one hangs)", n)
	}
	if st := s.Status(); st.Errors != 3 {
		t.Fatalf("errors = %d, want 3 (each skipped tick counts)", st.Errors)
	}

	// The late answer is real data, but the source is not up until a
	// sample finishes in time.
	close(release)
	testwait.Until(t, func() bool { return !s.Status().Stalled })
	if s.Latest().Data != 2 || s.Status().Up {
		t.Fatalf("after late return: data %d up %v, want 2 and down", s.Latest().Data, s.Status().Up)
	}
	src.next = func(context.Context) (int, error) { return 3, nil }
	s.SampleOnce(context.Background())
	if st := s.Status(); !st.Up || s.Latest().Data != 3 {
		t.Fatalf("after recovery: %+v data %d, want up with 3", st, s.Latest().Data)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	src := &scripted{next: func(context.Context) (int, error) { return 1, nil }}
	s := New[int]("test", src, Options{Interval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	testwait.Until(t, func() bool { return src.calls.Load() >= 3 })
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// A sample that finishes in time must never be reported late. The goroutine
// running it used to cancel the sample's context before marking it done, so
// SampleOnce could see the deadline's channel fire first and log "exceeded
// its deadline" for a sample that took microseconds (seen on the H200 VM: 15
// warnings in 30 one-second samples, none of them late).
func TestFastSampleIsNeverLate(t *testing.T) {
	var logged bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The sample blocks briefly, as an NVML or file read does, so that it
	// ends on another thread than the one waiting for it.
	src := &scripted{next: func(context.Context) (int, error) { time.Sleep(100 * time.Microsecond); return 1, nil }}
	s := New[int]("test", src, Options{Interval: time.Hour, Timeout: time.Hour, Logger: logger})
	for range 3000 {
		s.SampleOnce(context.Background())
	}
	if logged.Len() > 0 {
		t.Errorf("fast samples reported late:\n%s", logged.String())
	}
	if st := s.Status(); !st.Up || st.Errors != 0 || st.Stalled {
		t.Errorf("status %+v, want up with no errors", st)
	}
}

func TestTally(t *testing.T) {
	var inner, outer Tally
	inner.Add(errors.New("a"))
	inner.Add(nil)
	inner.Add(errors.New("b"))
	outer.Add(errors.New("c"))
	outer.Merge(inner.Err())
	outer.Merge(errors.New("d"))
	outer.Merge(nil)
	var p *PartialError
	if !errors.As(outer.Err(), &p) || p.Count != 4 || p.First.Error() != "c" {
		t.Errorf("outer = %v, want 4 values dropped, first c", outer.Err())
	}
	var empty Tally
	if empty.Err() != nil {
		t.Error("an empty tally is an error")
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		o     Options
		field string // "" for valid
	}{
		{Options{Interval: 5 * time.Second}, ""},
		{Options{Interval: 5 * time.Second, Timeout: 4 * time.Second}, ""},
		{Options{Interval: 5 * time.Second, Timeout: 5 * time.Second}, ""},
		{Options{}, "Interval"},
		{Options{Interval: -5 * time.Second}, "Interval"},
		{Options{Interval: 5 * time.Second, Timeout: 10 * time.Second}, "Timeout"},
		{Options{Interval: 5 * time.Second, Timeout: -time.Second}, "Timeout"},
	} {
		err := c.o.Validate()
		var oe *OptionError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%+v: %v", c.o, err)
		case c.field != "" && (!errors.As(err, &oe) || oe.Field != c.field):
			t.Errorf("%+v: got %v, want an OptionError for %s", c.o, err, c.field)
		}
	}
}

// New refuses what Validate refuses instead of putting another value in
// its place.
func TestNewPanicsOnInvalidOptions(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New took a timeout above the interval")
		}
	}()
	New[int]("test", &scripted{}, Options{Interval: time.Second, Timeout: 2 * time.Second})
}

func TestSampledAfterTheFirstSampleEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  SourceFunc[int]
	}{
		{"success", func(context.Context) (int, error) { return 1, nil }},
		{"failure", func(context.Context) (int, error) { return 0, errors.New("no sysfs") }},
		{"past its deadline", func(ctx context.Context) (int, error) {
			<-ctx.Done()
			time.Sleep(10 * time.Millisecond)
			return 0, ctx.Err()
		}},
	} {
		s := New[int]("t", tc.src, Options{Interval: time.Hour, Timeout: 5 * time.Millisecond})
		if s.Sampled() || closed(s.FirstSampled()) {
			t.Fatalf("%s: sampled before any sample", tc.name)
		}
		s.SampleOnce(context.Background())
		if !s.Sampled() || !closed(s.FirstSampled()) {
			t.Errorf("%s: not sampled after the first sample", tc.name)
		}
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

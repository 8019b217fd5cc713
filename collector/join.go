package collector

import (
	"reflect"
	"sync"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
)

// pair is the latest data of two sources; a source that is off or has
// no snapshot yet gives its zero value.
type pair[A, B any] struct {
	A A
	B B
}

// joined serves two sources as one, for a collector that renders both
// together: its snapshot is new whenever either's is, and it says when
// either publishes. Either source may be nil.
type joined[A, B any] struct {
	a scrape.Source[A]
	b scrape.Source[B]

	mu    sync.Mutex
	lastA *sampler.Snapshot[A]
	lastB *sampler.Snapshot[B]
	cur   *sampler.Snapshot[pair[A, B]]
}

// join makes a source of a and b; a nil source (or a typed nil
// pointer in one) is a source that is off.
func join[A, B any](a scrape.Source[A], b scrape.Source[B]) *joined[A, B] {
	return &joined[A, B]{a: a, b: b}
}

// Latest returns the two sources' latest data, taken when the later of
// the two was; nil before either has a snapshot.
func (j *joined[A, B]) Latest() *sampler.Snapshot[pair[A, B]] {
	sa, sb := latestOf(j.a), latestOf(j.b)
	if sa == nil && sb == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cur == nil || sa != j.lastA || sb != j.lastB {
		next := &sampler.Snapshot[pair[A, B]]{}
		if sa != nil {
			next.Data.A, next.Taken = sa.Data, sa.Taken
		}
		if sb != nil {
			next.Data.B = sb.Data
			if sb.Taken.After(next.Taken) {
				next.Taken = sb.Taken
			}
		}
		j.cur, j.lastA, j.lastB = next, sa, sb
	}
	return j.cur
}

// OnPublish has f called after either source publishes a new snapshot.
func (j *joined[A, B]) OnPublish(f func()) {
	for _, s := range []any{j.a, j.b} {
		if p, ok := s.(scrape.Publisher); ok && !isNil(s) {
			p.OnPublish(f)
		}
	}
}

func latestOf[T any](l scrape.Source[T]) *sampler.Snapshot[T] {
	if isNil(l) {
		return nil
	}
	return l.Latest()
}

// isNil reports whether v is nil or holds a nil pointer: wiring passes a
// source that is off as its nil *sampler.Sampler.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

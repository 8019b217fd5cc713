package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// transition is one change of a goroutine's state.
type transition struct {
	at       trace.Time
	from, to trace.GoState
	reason   string
	stack    string // the innermost frames, innermost first
}

// goroutine is one goroutine's transitions, named after the function it
// started in.
type goroutine struct {
	id    trace.GoID
	name  string
	trans []transition
}

// connServe names the goroutines that serve an HTTP connection.
const connServe = "net/http.(*conn).serve"

// cycle is one request on a connection: from the moment the network
// poller found its bytes (ready) to the moment the serving goroutine waits
// for the next request (end), with the time spent in each state between.
type cycle struct {
	ready, end                          trace.Time
	runnable, running, waiting, syscall time.Duration
}

// span is a stretch of time in the trace.
type span struct{ from, to trace.Time }

// analysis is what a trace says about the exporter's goroutines.
type analysis struct {
	first, last trace.Time
	gs          map[trace.GoID]*goroutine
	gcs         []span // concurrent mark phases
	clock       *trace.ClockSnapshot
	cycles      []cycle
}

// analyze reads an execution trace and splits every HTTP connection's
// goroutine into request cycles, a new one after each wait of at least
// idle.
func analyze(r io.Reader, idle time.Duration) (*analysis, error) {
	tr, err := trace.NewReader(bufio.NewReader(r))
	if err != nil {
		return nil, err
	}
	a := &analysis{gs: map[trace.GoID]*goroutine{}}
	var gcStart trace.Time
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if a.first == 0 {
			a.first = ev.Time()
		}
		a.last = ev.Time()
		switch ev.Kind() {
		case trace.EventSync:
			if s := ev.Sync(); s.ClockSnapshot != nil && a.clock == nil {
				a.clock = s.ClockSnapshot
			}
		case trace.EventRangeBegin:
			if ev.Range().Name == "GC concurrent mark phase" {
				gcStart = ev.Time()
			}
		case trace.EventRangeEnd:
			if ev.Range().Name == "GC concurrent mark phase" {
				a.gcs = append(a.gcs, span{gcStart, ev.Time()})
			}
		case trace.EventStateTransition:
			a.add(ev)
		}
	}
	a.split(idle)
	return a, nil
}

func (a *analysis) add(ev trace.Event) {
	st := ev.StateTransition()
	if st.Resource.Kind != trace.ResourceGoroutine {
		return
	}
	id := st.Resource.Goroutine()
	g := a.gs[id]
	if g == nil {
		g = &goroutine{id: id}
		a.gs[id] = g
	}
	from, to := st.Goroutine()
	if from == to {
		// A state restated (at the start of a trace generation), not a
		// change: it must not split a wait in two.
		return
	}
	var frames []string
	for f := range st.Stack.Frames() {
		frames = append(frames, f.Func)
	}
	if n := len(frames); n > 0 && (g.name == "" || from == trace.GoNotExist) {
		g.name = frames[n-1]
	}
	if slices.Contains(frames, connServe) {
		g.name = connServe
	}
	g.trans = append(g.trans, transition{at: ev.Time(), from: from, to: to, reason: st.Reason,
		stack: strings.Join(frames[:min(3, len(frames))], " < ")})
}

// split makes the request cycles of every connection's goroutine.
func (a *analysis) split(idle time.Duration) {
	for _, g := range a.gs {
		if g.name != connServe {
			continue
		}
		tt := g.trans
		for i := 0; i < len(tt); i++ {
			// A request wakes the connection's goroutine, or the first
			// one on a new connection starts it.
			woke := (tt[i].from == trace.GoWaiting || tt[i].from == trace.GoNotExist) && tt[i].to == trace.GoRunnable
			if !woke || i > 0 && time.Duration(tt[i].at-tt[i-1].at) < idle {
				continue
			}
			c := cycle{ready: tt[i].at}
			j := i
			for ; j+1 < len(tt); j++ {
				d := time.Duration(tt[j+1].at - tt[j].at)
				if tt[j].to == trace.GoWaiting && d >= idle {
					break
				}
				switch tt[j].to {
				case trace.GoRunnable:
					c.runnable += d
				case trace.GoRunning:
					c.running += d
				case trace.GoWaiting:
					c.waiting += d
				case trace.GoSyscall:
					c.syscall += d
				}
			}
			c.end = tt[j].at
			a.cycles = append(a.cycles, c)
			i = j
		}
	}
	slices.SortFunc(a.cycles, func(x, y cycle) int { return int(x.ready - y.ready) })
}

// scrape is one line of scrapebench's latencies, placed in the trace.
type scrape struct {
	sent    trace.Time
	latency time.Duration
	cycle   *cycle // nil when no request cycle fits
}

// readLatencies reads scrapebench's -latencies file; lines without the
// unix time (written before it was added) are skipped.
func readLatencies(file string) ([]float64, []time.Duration, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	var sent []float64
	var lat []time.Duration
	for n, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || strings.HasPrefix(line, "#") {
			continue
		}
		ms, err1 := strconv.ParseFloat(f[1], 64)
		unix, err2 := strconv.ParseFloat(f[3], 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, nil, fmt.Errorf("%s:%d: %w", file, n+1, err)
		}
		sent = append(sent, unix)
		lat = append(lat, time.Duration(ms*float64(time.Millisecond)))
	}
	return sent, lat, nil
}

// place puts scrapes sent at the given unix times in the trace, each with
// the request cycle that became ready while it was under way.
func (a *analysis) place(sent []float64, lat []time.Duration) ([]scrape, error) {
	if a.clock == nil {
		return nil, errors.New("the trace has no clock snapshot (written before Go 1.25?): scrapes cannot be placed in it")
	}
	var out []scrape
	slack := trace.Time(time.Millisecond)
	for i, unix := range sent {
		wall := time.Unix(0, int64(unix*1e9))
		t := a.clock.Trace + trace.Time(wall.Sub(a.clock.Wall))
		if t < a.first || t > a.last {
			continue
		}
		s := scrape{sent: t, latency: lat[i]}
		for k := range a.cycles {
			if c := &a.cycles[k]; c.ready >= t-slack && c.ready <= t+trace.Time(lat[i])+slack {
				s.cycle = c
				break
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// overlaps reports whether a GC mark phase overlaps from..to.
func (a *analysis) overlaps(from, to trace.Time) bool {
	for _, g := range a.gcs {
		if g.from < to && g.to > from {
			return true
		}
	}
	return false
}

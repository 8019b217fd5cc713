// Command tracelat says where the exporter's slow scrapes spent their time,
// from an execution trace of the exporter and scrapebench's latencies of
// the same scrapes (bench/scrape.sh with TRACE=1 writes both):
//
//	tracelat -lat OUT/latencies.txt OUT/trace.out
//
// For each scrape it finds the request on the exporter's side and splits
// the client's latency into the time before the exporter's network poller
// saw the request (send -> ready: the machine's loopback, and an exporter
// whose only P was held by a goroutine that did not block), the time the
// serving goroutine waited to run (runnable), ran, waited on something
// else (waiting) and spent in system calls. The slowest scrapes are listed
// with what else was in a system call or cgo call meanwhile, and -dump
// prints every goroutine transition around them.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"

	"github.com/gpulink/gpulink_exporter/bench/internal/latency"
)

func main() {
	latFile := flag.String("lat", "", "scrapebench's -latencies file for the same scrapes (with the unix time column)")
	idle := flag.Duration("idle", 20*time.Millisecond, "a wait this long on a connection ends a request")
	top := flag.Int("top", 20, "how many of the slowest scrapes to list")
	dump := flag.Int("dump", 0, "print every goroutine transition around this many of the slowest scrapes")
	at := flag.Float64("at", -1, "instead, dump the scrape sent this many seconds into the trace")
	busy := flag.String("busy", "", "also print how long goroutines whose starting function contains this ran before blocking")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: tracelat [-lat LATENCIES] [flags] TRACE")
		os.Exit(2)
	}
	if err := run(os.Stdout, flag.Arg(0), *latFile, *idle, *top, *dump, *at, *busy); err != nil {
		fmt.Fprintln(os.Stderr, "tracelat:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, traceFile, latFile string, idle time.Duration, top, dump int, at float64, busy string) error {
	f, err := os.Open(traceFile)
	if err != nil {
		return err
	}
	defer f.Close()
	a, err := analyze(f, idle)
	if err != nil {
		return fmt.Errorf("%s: %w", traceFile, err)
	}
	fmt.Fprintf(w, "trace %.1f s, %d goroutines, %d GC mark phases, %d requests\n",
		seconds(a.last-a.first), len(a.gs), len(a.gcs), len(a.cycles))
	a.writeSyscalls(w)
	if busy != "" {
		a.writeBusy(w, busy)
	}
	if latFile == "" {
		return nil
	}
	sent, lat, err := readLatencies(latFile)
	if err != nil {
		return err
	}
	scrapes, err := a.place(sent, lat)
	if err != nil {
		return err
	}
	a.writeScrapes(w, scrapes, top)
	slices.SortFunc(scrapes, func(x, y scrape) int { return int(y.latency - x.latency) })
	if at >= 0 {
		for _, s := range scrapes {
			if d := seconds(s.sent-a.first) - at; d > -0.05 && d < 0.05 {
				a.writeAround(w, s)
				return nil
			}
		}
		return fmt.Errorf("no scrape sent at %.3f s into the trace", at)
	}
	for _, s := range scrapes[:min(dump, len(scrapes))] {
		a.writeAround(w, s)
	}
	return nil
}

func seconds(t trace.Time) float64 { return float64(t) / 1e9 }

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := latency.SpreadOf(slices.Clone(ds))
	return fmt.Sprintf("p50 %.3f  p90 %.3f  p99 %.3f  max %.3f ms", ms(s.P50), ms(s.P90), ms(s.P99), ms(s.Max))
}

// writeSyscalls sums system and cgo calls by goroutine, with how many
// took under 20 us, 100 us, 500 us, 2 ms, 10 ms and longer.
func (a *analysis) writeSyscalls(w io.Writer) {
	type sum struct {
		name       string
		n          int
		total, max time.Duration
		hist       [6]int
	}
	by := map[string]*sum{}
	bounds := []time.Duration{20 * time.Microsecond, 100 * time.Microsecond, 500 * time.Microsecond, 2 * time.Millisecond, 10 * time.Millisecond}
	for _, g := range a.gs {
		for i, t := range g.trans {
			if t.to != trace.GoSyscall || i+1 == len(g.trans) {
				continue
			}
			d := time.Duration(g.trans[i+1].at - t.at)
			s := by[g.name]
			if s == nil {
				s = &sum{name: g.name}
				by[g.name] = s
			}
			s.n++
			s.total += d
			s.max = max(s.max, d)
			k := 0
			for k < len(bounds) && d >= bounds[k] {
				k++
			}
			s.hist[k]++
		}
	}
	var all []*sum
	for _, s := range by {
		all = append(all, s)
	}
	slices.SortFunc(all, func(x, y *sum) int { return int(y.total - x.total) })
	fmt.Fprintln(w, "system and cgo calls by goroutine: calls, total, longest, [<20us <100us <500us <2ms <10ms longer]")
	for _, s := range all[:min(8, len(all))] {
		fmt.Fprintf(w, "  %-70.70s %6d %10v %9v %v\n", s.name, s.n, s.total.Round(time.Microsecond), s.max.Round(time.Microsecond), s.hist)
	}
}

// writeBusy prints how long the goroutines named like sub ran (or stayed
// runnable, or in calls) between waking and blocking again: at
// GOMAXPROCS 1, how long each could hold off a scrape.
func (a *analysis) writeBusy(w io.Writer, sub string) {
	by := map[string][]time.Duration{}
	for _, g := range a.gs {
		if !strings.Contains(g.name, sub) {
			continue
		}
		var woke trace.Time
		for _, t := range g.trans {
			switch {
			case t.from == trace.GoWaiting && t.to == trace.GoRunnable:
				woke = t.at
			case t.to == trace.GoWaiting && woke != 0:
				by[g.name] = append(by[g.name], time.Duration(t.at-woke))
				woke = 0
			}
		}
	}
	for name, ds := range by {
		fmt.Fprintf(w, "busy %s: %d stretches, %s\n", name, len(ds), percentiles(ds))
	}
}

func (a *analysis) writeScrapes(w io.Writer, scrapes []scrape, top int) {
	var lat, gap, wait, srv []time.Duration
	for _, s := range scrapes {
		lat = append(lat, s.latency)
		if c := s.cycle; c != nil {
			gap = append(gap, time.Duration(c.ready-s.sent))
			wait = append(wait, c.runnable)
			srv = append(srv, time.Duration(c.end-c.ready))
		}
	}
	fmt.Fprintf(w, "scrapes in the trace %d, %d of them found on the exporter's side\n", len(scrapes), len(gap))
	fmt.Fprintf(w, "  client latency     %s\n", percentiles(lat))
	fmt.Fprintf(w, "  send -> ready      %s\n", percentiles(gap))
	fmt.Fprintf(w, "  runnable           %s\n", percentiles(wait))
	fmt.Fprintf(w, "  ready -> answered  %s\n", percentiles(srv))
	byLatency := slices.Clone(scrapes)
	slices.SortFunc(byLatency, func(x, y scrape) int { return int(y.latency - x.latency) })
	fmt.Fprintln(w, "slowest: sent at (s), latency | send->ready, runnable, running, waiting, in calls (ms) | during GC")
	for _, s := range byLatency[:min(top, len(byLatency))] {
		c := s.cycle
		if c == nil {
			fmt.Fprintf(w, "  %8.3f %7.3f | not found on the exporter's side\n", seconds(s.sent-a.first), ms(s.latency))
			continue
		}
		fmt.Fprintf(w, "  %8.3f %7.3f | %7.3f %7.3f %7.3f %7.3f %7.3f | %v\n", seconds(s.sent-a.first), ms(s.latency),
			ms(time.Duration(c.ready-s.sent)), ms(c.runnable), ms(c.running), ms(c.waiting), ms(c.syscall), a.overlaps(s.sent, c.end))
	}
}

// writeAround prints what every goroutine did from just before a scrape
// was sent to when its answer arrived, and the calls under way meanwhile.
func (a *analysis) writeAround(w io.Writer, s scrape) {
	from, to := s.sent-trace.Time(300*time.Microsecond), s.sent+trace.Time(s.latency)
	rel := func(t trace.Time) float64 { return ms(time.Duration(t - s.sent)) }
	fmt.Fprintf(w, "\n== scrape sent at %.3f s, %.3f ms; times in ms from its sending\n", seconds(s.sent-a.first), ms(s.latency))
	type line struct {
		at   trace.Time
		text string
	}
	var lines []line
	for _, g := range a.gs {
		for i, t := range g.trans {
			if t.at >= from && t.at <= to {
				lines = append(lines, line{t.at, fmt.Sprintf("%+9.3f %-9s -> %-9s g%-6d %-50.50s %s %s", rel(t.at), t.from, t.to, g.id, g.name, t.reason, t.stack)})
			}
			if t.to == trace.GoSyscall && i+1 < len(g.trans) && t.at < from && g.trans[i+1].at > from {
				fmt.Fprintf(w, "  in a call from %+.3f to %+.3f: g%d %s: %s\n", rel(t.at), rel(g.trans[i+1].at), g.id, g.name, t.stack)
			}
		}
	}
	slices.SortFunc(lines, func(x, y line) int { return int(x.at - y.at) })
	for i, l := range lines {
		if len(lines) > 120 && i == 60 {
			fmt.Fprintf(w, "  ... %d more ...\n", len(lines)-120)
		}
		if len(lines) > 120 && i >= 60 && i < len(lines)-60 {
			continue
		}
		fmt.Fprintln(w, " ", l.text)
	}
}

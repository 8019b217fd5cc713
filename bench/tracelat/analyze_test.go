package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/trace"
	"strings"
	"testing"
	"time"
)

// A real trace of a server whose third request runs 30 ms: every request
// is found on the server's side, the slow one with its 30 ms as running
// time and more than any other, and the report lists it first.
func TestAnalyzeFindsTheSlowRequest(t *testing.T) {
	const n, slow, spin = 6, 2, 30 * time.Millisecond
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls++; calls == slow+1 {
			for start := time.Now(); time.Since(start) < spin; {
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	}))
	defer srv.Close()

	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	var lines strings.Builder
	client := srv.Client()
	for i := range n {
		sent := time.Now()
		resp, err := client.Get(srv.URL)
		if err != nil {
			trace.Stop()
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(sent)
		fmt.Fprintf(&lines, "%.3f %.3f 1 %.6f\n", float64(i)*0.05, ms(took), float64(sent.UnixNano())/1e9)
		time.Sleep(50 * time.Millisecond) // longer than idle: one request per cycle
	}
	trace.Stop()
	latFile := filepath.Join(t.TempDir(), "latencies.txt")
	if err := os.WriteFile(latFile, []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	a, err := analyze(bytes.NewReader(buf.Bytes()), 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	sent, lat, err := readLatencies(latFile)
	if err != nil {
		t.Fatal(err)
	}
	scrapes, err := a.place(sent, lat)
	if err != nil {
		t.Fatal(err)
	}
	if len(scrapes) != n {
		t.Fatalf("%d scrapes placed in the trace, want %d", len(scrapes), n)
	}
	for i, s := range scrapes {
		if s.cycle == nil {
			t.Fatalf("scrape %d not found on the server's side; cycles: %+v", i, a.cycles)
		}
		if busy := s.cycle.running + s.cycle.runnable; i == slow && busy < spin*9/10 {
			t.Errorf("the slow request ran %v, want at least %v", busy, spin*9/10)
		} else if i != slow && busy >= scrapes[slow].cycle.running+scrapes[slow].cycle.runnable {
			t.Errorf("request %d ran %v, no less than the slow one", i, busy)
		}
		if s.cycle.end < s.cycle.ready || s.cycle.ready < s.sent-1e6 {
			t.Errorf("request %d: ready %d, answered %d, sent %d: out of order", i, s.cycle.ready, s.cycle.end, s.sent)
		}
	}

	var out bytes.Buffer
	a.writeScrapes(&out, scrapes, 1)
	first := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := first[len(first)-1]; !strings.HasPrefix(strings.TrimSpace(last), fmt.Sprintf("%.3f", seconds(scrapes[slow].sent-a.first))) {
		t.Errorf("the slowest listed is %q, want the one sent at %.3f s:\n%s", last, seconds(scrapes[slow].sent-a.first), out.String())
	}
}

func TestReadLatenciesNamesTheBadLine(t *testing.T) {
	f := filepath.Join(t.TempDir(), "latencies.txt")
	if err := os.WriteFile(f, []byte("0.000 1.0 0 1795650762.85\n0.200 x 1 1795650763.05\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readLatencies(f); err == nil || !strings.Contains(err.Error(), "latencies.txt:2") {
		t.Errorf("error %v, want one naming latencies.txt:2", err)
	}
}

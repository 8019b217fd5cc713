// Command scrapebench measures what a Prometheus exporter costs per scrape.
//
// It waits for the exporter to come up (optionally for a given metric line),
// measures the exporter's idle CPU use, then scrapes it n times the way
// Prometheus does (OpenMetrics preferred, gzip) and reports latency
// percentiles, CPU time per scrape (net of the idle rate), memory and the
// size of one scrape. CPU and memory are read from /proc/PID, so -pid must
// name the exporter process and it must run on the same Linux host.
//
// Latency is from sending a request to the last byte of the answer; the
// body is gunzipped and checked after that, outside the time.
//
// Scrapes go back to back unless -every paces them. Back to back, most
// scrapes find the response the previous one left; a real Prometheus
// scrapes every 15-30 s and every scrape finds new snapshots. Paced at the
// exporter's sample interval (-every equal to --nvml.interval), nearly every
// scrape meets a new snapshot: that is the pattern whose tail matters.
// Each scrape's body is compared with the one before it: a scrape whose
// body changed is "fresh", and the fresh scrapes get percentiles of their
// own.
//
// With -reference, a server that answers with the exporter's own response
// and does nothing else is scraped between the exporter's scrapes, by the
// same client: the floor the machine sets at that moment, so that a tail
// the machine makes is not taken for the exporter's (see reference.go).
//
// It uses the standard library only (and bench/internal/latency, which
// does too), so it builds into a static binary that can be carried to a
// machine without Go (see bench/scrape.sh).
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpulink/gpulink_exporter/bench/internal/latency"
)

// Prometheus 2.x/3.x style scrape request headers.
const (
	acceptScrape = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
	acceptText   = "text/plain;version=0.0.4"
)

// clkTck is USER_HZ, the unit of utime/stime in /proc/PID/stat. It is 100 on
// every Linux architecture Go supports; reading it via sysconf would need cgo.
const clkTck = 100

// Result is what gets printed and written as JSON.
type Result struct {
	URL               string  `json:"url"`
	PID               int     `json:"pid,omitempty"`
	Scrapes           int     `json:"scrapes"`
	Errors            int     `json:"errors"`
	EveryMs           float64 `json:"every_ms"`      // pacing; 0: back to back
	Fresh             int     `json:"fresh_scrapes"` // scrapes whose body differed from the one before
	FreshP50Ms        float64 `json:"fresh_p50_ms"`
	FreshP99Ms        float64 `json:"fresh_p99_ms"`
	FreshMaxMs        float64 `json:"fresh_max_ms"`
	P50Ms             float64 `json:"p50_ms"`
	P90Ms             float64 `json:"p90_ms"`
	P99Ms             float64 `json:"p99_ms"`
	MaxMs             float64 `json:"max_ms"`
	MeanMs            float64 `json:"mean_ms"`
	ScrapeWindowS     float64 `json:"scrape_window_s"`
	ScrapeCPURate     float64 `json:"scrape_cpu_rate"` // CPU seconds per wall second while scraped
	IdleWindowS       float64 `json:"idle_window_s"`
	IdleCPURate       float64 `json:"idle_cpu_rate"`         // CPU seconds per wall second while idle
	CPUMsPerScrape    float64 `json:"cpu_ms_per_scrape"`     // net of the idle rate
	RawCPUMsPerScrape float64 `json:"raw_cpu_ms_per_scrape"` // not subtracted
	RSSMiB            float64 `json:"rss_mib"`
	HWMMiB            float64 `json:"hwm_mib"`
	Series            int     `json:"series"`
	TextBodyBytes     int64   `json:"text_body_bytes"`   // one uncompressed text-format scrape
	ScrapeBodyBytes   int64   `json:"scrape_body_bytes"` // one scrape as measured, decompressed
	ScrapeWireBytes   int64   `json:"scrape_wire_bytes"` // the same on the wire (gzip)
	ContentType       string  `json:"content_type"`
	WaitedFor         string  `json:"waited_for,omitempty"` // the line that matched -wait-metric
	// The reference server (-reference), scraped between the exporter's
	// scrapes: the latency of the same bytes with no exporter behind them.
	RefP50Ms float64 `json:"reference_p50_ms,omitempty"`
	RefP90Ms float64 `json:"reference_p90_ms,omitempty"`
	RefP99Ms float64 `json:"reference_p99_ms,omitempty"`
	RefMaxMs float64 `json:"reference_max_ms,omitempty"`
	// The exporter's latency over the reference's, at the median and the
	// 99th percentile: what the exporter costs a scrape beyond the bytes.
	RefGOMAXPROCS int     `json:"reference_gomaxprocs,omitempty"`
	P50OverRef    float64 `json:"p50_over_reference,omitempty"`
	P99OverRef    float64 `json:"p99_over_reference,omitempty"`
}

// options are what one measurement runs with: the flags.
type options struct {
	url                                  string
	pid, n                               int
	every, idle, waitLimit, timeout      time.Duration
	waitMetric                           string
	jsonOut, saveBody, latFile, traceOut string
	withRef                              bool
	refProcs                             int
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "http://127.0.0.1:9849/metrics", "exporter metrics URL")
	flag.IntVar(&o.pid, "pid", 0, "exporter PID, for CPU and memory from /proc (0: skip)")
	flag.IntVar(&o.n, "n", 1000, "number of sequential scrapes to measure")
	flag.DurationVar(&o.every, "every", 0, "start a scrape every this long (0: back to back); set it to the exporter's sample interval for the pattern a real Prometheus makes, each scrape meeting a new snapshot")
	flag.DurationVar(&o.idle, "idle", 10*time.Second, "idle window (no scrapes) for the baseline CPU rate")
	flag.StringVar(&o.waitMetric, "wait-metric", "", "substring to wait for in the scrape output before measuring (empty: only wait until reachable)")
	flag.StringVar(&o.jsonOut, "json", "", "also write the result as JSON to this file")
	flag.StringVar(&o.latFile, "latencies", "", "write every measured scrape to this file, one line each: seconds since the first, latency in ms, 1 if it met a new body, the unix time it was sent (to match it with an execution trace of the exporter), and with -reference the reference's latency in ms")
	flag.StringVar(&o.saveBody, "save-body", "", "write one uncompressed text-format scrape, taken after the measured ones, to this file")
	flag.StringVar(&o.traceOut, "trace", "", "also fetch an execution trace of the exporter over the measured scrapes (at most a minute of them) into this file, from /debug/pprof/trace (the exporter needs --web.enable-pprof)")
	flag.BoolVar(&o.withRef, "reference", false, "also scrape a reference server between the exporter's scrapes: this program again, in a process of its own at -reference-gomaxprocs, answering every request with the exporter's first measured response and doing nothing else; its latencies are the floor this machine, loopback, net/http and this client set at that moment")
	flag.IntVar(&o.refProcs, "reference-gomaxprocs", 1, "the reference server's GOMAXPROCS: the exporter's, so that both are served by as many threads")
	serveFile := flag.String("serve-file", "", "be the reference server: answer every request with this file's bytes (used by -reference)")
	serveType := flag.String("serve-type", "", "the reference server's Content-Type (used by -reference)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Second, "per-scrape timeout")
	flag.DurationVar(&o.waitLimit, "wait-timeout", 60*time.Second, "how long to wait for the exporter (and -wait-metric)")
	flag.Parse()

	if *serveFile != "" {
		if err := serveFixed(*serveFile, *serveType); err != nil {
			fmt.Fprintln(os.Stderr, "scrapebench reference:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "scrapebench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.n < 1 {
		return errors.New("-n must be at least 1")
	}
	// One client with keep-alive, as Prometheus reuses its connection.
	// DisableCompression: we set Accept-Encoding ourselves and gunzip
	// explicitly, so the wire size is visible.
	client := &http.Client{
		Timeout:   o.timeout,
		Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 1},
	}
	res := Result{URL: o.url, PID: o.pid, Scrapes: o.n, EveryMs: ms(o.every)}

	text, err := waitReady(client, o.url, o.pid, o.waitMetric, o.waitLimit)
	if err != nil {
		return err
	}
	res.WaitedFor = matchingLine(text, o.waitMetric)

	var cpuIdle0, cpuIdle1, cpuScr0, cpuScr1 float64
	if o.pid > 0 {
		if cpuIdle0, err = procCPU(o.pid); err != nil {
			return err
		}
	}
	idleStart := time.Now()
	time.Sleep(o.idle)
	res.IdleWindowS = time.Since(idleStart).Seconds()
	if o.pid > 0 {
		if cpuIdle1, err = procCPU(o.pid); err != nil {
			return err
		}
		res.IdleCPURate = (cpuIdle1 - cpuIdle0) / res.IdleWindowS
		cpuScr0 = cpuIdle1
	}

	lat := make([]time.Duration, 0, o.n)
	var fresh []time.Duration
	var lastErr error
	var prev uint32
	var buf bytes.Buffer
	var lines bytes.Buffer // for -latencies
	var ref *reference
	var refLat []time.Duration
	if o.withRef {
		// One unmeasured scrape gives the bytes the reference serves.
		if _, _, _, ctype, _, err := scrape(client, o.url, acceptScrape, true, &buf); err != nil {
			return err
		} else if ref, err = startReference(bytes.Clone(buf.Bytes()), ctype, o.refProcs); err != nil {
			return err
		}
		defer ref.stop()
	}
	traced := make(chan error, 1)
	if o.traceOut != "" {
		go func() { traced <- fetchTrace(o.url, o.traceOut, o.every*time.Duration(o.n)) }()
	} else {
		traced <- nil
	}
	scrStart := time.Now()
	for i := 0; i < o.n; i++ {
		if o.every > 0 {
			time.Sleep(time.Until(scrStart.Add(time.Duration(i) * o.every)))
		}
		sent := time.Now()
		at := sent.Sub(scrStart)
		d, body, wire, ctype, sum, err := scrape(client, o.url, acceptScrape, true, &buf)
		if err != nil {
			res.Errors++
			lastErr = err
			continue
		}
		lat = append(lat, d)
		isFresh := i > 0 && sum != prev
		if isFresh {
			fresh = append(fresh, d)
		}
		fmt.Fprintf(&lines, "%.3f %.3f %d %.6f", at.Seconds(), ms(d), b2i(isFresh), float64(sent.UnixNano())/1e9)
		prev = sum
		res.ScrapeBodyBytes, res.ScrapeWireBytes, res.ContentType = body, wire, ctype
		if ref != nil {
			// Halfway to the next scrape, or straight after this one.
			if o.every > 0 {
				time.Sleep(time.Until(scrStart.Add(time.Duration(i)*o.every + o.every/2)))
			}
			rd, _, _, _, _, err := scrape(client, ref.url, acceptScrape, true, &buf)
			if err != nil {
				return fmt.Errorf("reference: %w", err)
			}
			refLat = append(refLat, rd)
			fmt.Fprintf(&lines, " %.3f", ms(rd))
		}
		lines.WriteByte('\n')
	}
	res.ScrapeWindowS = time.Since(scrStart).Seconds()
	if err := <-traced; err != nil {
		return err
	}
	res.Fresh = len(fresh)
	if o.pid > 0 {
		if cpuScr1, err = procCPU(o.pid); err != nil {
			return err
		}
		raw := cpuScr1 - cpuScr0
		res.ScrapeCPURate = raw / res.ScrapeWindowS
		res.RawCPUMsPerScrape = raw / float64(o.n) * 1e3
		res.CPUMsPerScrape = (raw - res.IdleCPURate*res.ScrapeWindowS) / float64(o.n) * 1e3
		if res.RSSMiB, res.HWMMiB, err = procMem(o.pid); err != nil {
			return err
		}
	}

	if o.latFile != "" {
		if err := os.WriteFile(o.latFile, lines.Bytes(), 0o644); err != nil {
			return err
		}
	}
	// The exporter as it was measured, not as it was when it came up:
	// sources that sample slowly may not have been in yet.
	if text, err = scrapeBody(client, o.url, acceptText); err != nil {
		return err
	}
	res.TextBodyBytes = int64(len(text))
	res.Series = countSeries(text)
	if o.saveBody != "" {
		if err := os.WriteFile(o.saveBody, text, 0o644); err != nil {
			return err
		}
	}
	// SpreadOf gives zeros for none, which the JSON leaves out.
	f := latency.SpreadOf(fresh)
	res.FreshP50Ms, res.FreshP99Ms, res.FreshMaxMs = ms(f.P50), ms(f.P99), ms(f.Max)
	r := latency.SpreadOf(refLat)
	res.RefP50Ms, res.RefP90Ms, res.RefP99Ms, res.RefMaxMs = ms(r.P50), ms(r.P90), ms(r.P99), ms(r.Max)
	l := latency.SpreadOf(lat)
	res.P50Ms, res.P90Ms, res.P99Ms, res.MaxMs, res.MeanMs = ms(l.P50), ms(l.P90), ms(l.P99), ms(l.Max), ms(l.Mean)
	if ref != nil && r.P50 > 0 && r.P99 > 0 {
		res.RefGOMAXPROCS = o.refProcs
		res.P50OverRef, res.P99OverRef = float64(l.P50)/float64(r.P50), float64(l.P99)/float64(r.P99)
	}

	printTable(os.Stdout, &res)
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(&res, "", "  ")
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if res.Errors > 0 {
		return fmt.Errorf("%d of %d scrapes failed, last error: %v", res.Errors, o.n, lastErr)
	}
	return nil
}

// fetchTrace saves an execution trace of the exporter behind metricsURL,
// taken over the next window (one second to a minute).
func fetchTrace(metricsURL, file string, window time.Duration) error {
	u, err := neturl.Parse(metricsURL)
	if err != nil {
		return err
	}
	secs := int(min(max(window, time.Second), time.Minute) / time.Second)
	u.Path, u.RawQuery = "/debug/pprof/trace", "seconds="+strconv.Itoa(secs)
	resp, err := (&http.Client{Timeout: time.Duration(secs+30) * time.Second}).Get(u.String())
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("trace: %s answered %s (is --web.enable-pprof on?)", u, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("trace: %w", err)
	}
	return f.Close()
}

// waitReady polls the exporter until it answers (and, if waitMetric is set,
// until its text output contains waitMetric), for up to waitLimit. It returns
// the last uncompressed text-format body.
func waitReady(client *http.Client, url string, pid int, waitMetric string, waitLimit time.Duration) ([]byte, error) {
	deadline := time.Now().Add(waitLimit)
	for {
		body, err := scrapeBody(client, url, acceptText)
		if err == nil && (waitMetric == "" || bytes.Contains(body, []byte(waitMetric))) {
			return body, nil
		}
		if pid > 0 && !alive(pid) {
			return nil, fmt.Errorf("exporter process %d exited (see its log)", pid)
		}
		if time.Now().After(deadline) {
			if err != nil {
				return nil, fmt.Errorf("exporter unreachable at %s after %s: %v", url, waitLimit, err)
			}
			return nil, fmt.Errorf("exporter at %s did not expose %q within %s", url, waitMetric, waitLimit)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie (exited, not reaped).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// scrape does one GET and reads the whole body into buf; it returns the
// time from sending the request to the last byte, which is what the
// exporter costs its scraper, then gunzips the body where needed (outside
// that time) for its decompressed size and hash.
func scrape(client *http.Client, url, accept string, gz bool, buf *bytes.Buffer) (took time.Duration, body, wire int64, ctype string, sum uint32, err error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, 0, "", 0, err
	}
	req.Header.Set("Accept", accept)
	if gz {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, 0, "", 0, err
	}
	defer resp.Body.Close()
	buf.Reset()
	_, err = buf.ReadFrom(resp.Body)
	took = time.Since(t0)
	if err != nil {
		return 0, 0, 0, "", 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, 0, "", 0, fmt.Errorf("HTTP %s", resp.Status)
	}
	wire = int64(buf.Len())
	// Read through a reader of its own, so that buf keeps the bytes as
	// they came (-reference serves them).
	var r io.Reader = bytes.NewReader(buf.Bytes())
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return 0, 0, 0, "", 0, err
		}
		r = zr
	}
	h := crc32.NewIEEE()
	if body, err = io.Copy(h, r); err != nil {
		return 0, 0, 0, "", 0, err
	}
	return took, body, wire, resp.Header.Get("Content-Type"), h.Sum32(), nil
}

// scrapeBody fetches one uncompressed body.
func scrapeBody(client *http.Client, url, accept string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	return b, nil
}

// countSeries counts sample lines: not empty, not a # comment.
func countSeries(text []byte) int {
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		l := bytes.TrimSpace(sc.Bytes())
		if len(l) > 0 && l[0] != '#' {
			n++
		}
	}
	return n
}

// matchingLine returns the first line of text containing sub ("" if sub is "").
func matchingLine(text []byte, sub string) string {
	if sub == "" {
		return ""
	}
	for _, l := range bytes.Split(text, []byte("\n")) {
		if bytes.Contains(l, []byte(sub)) {
			return string(l)
		}
	}
	return ""
}

// procCPU returns utime+stime of pid in seconds.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("exporter process %d: %v", pid, err)
	}
	// comm (field 2) may contain spaces and parentheses: split after the
	// last ')'. The rest starts at field 3 (state); utime and stime are
	// fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseUint(f[14-3], 10, 64)
	st, err2 := strconv.ParseUint(f[15-3], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return float64(ut+st) / clkTck, nil
}

// procMem returns VmRSS and VmHWM of pid in MiB.
func procMem(pid int) (rss, hwm float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("exporter process %d: %v", pid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		}
	}
	return rss, hwm, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func printTable(w io.Writer, r *Result) {
	fmt.Fprintf(w, "url               %s\n", r.URL)
	if r.WaitedFor != "" {
		fmt.Fprintf(w, "waited for        %s\n", r.WaitedFor)
	}
	pace := "back to back"
	if r.EveryMs > 0 {
		pace = fmt.Sprintf("one every %g ms", r.EveryMs)
	}
	fmt.Fprintf(w, "scrapes           %d (errors %d) in %.2f s, %s\n", r.Scrapes, r.Errors, r.ScrapeWindowS, pace)
	fmt.Fprintf(w, "latency ms        p50 %.3f  p90 %.3f  p99 %.3f  max %.3f  mean %.3f\n",
		r.P50Ms, r.P90Ms, r.P99Ms, r.MaxMs, r.MeanMs)
	if r.RefP50Ms > 0 {
		fmt.Fprintf(w, "reference ms      p50 %.3f  p90 %.3f  p99 %.3f  max %.3f  (the same bytes from a server doing nothing else, GOMAXPROCS %d)\n",
			r.RefP50Ms, r.RefP90Ms, r.RefP99Ms, r.RefMaxMs, r.RefGOMAXPROCS)
		fmt.Fprintf(w, "over reference    p50 %.2fx  p99 %.2fx\n", r.P50OverRef, r.P99OverRef)
	}
	fmt.Fprintf(w, "fresh scrapes     %d of %d met a new body: p50 %.3f  p99 %.3f  max %.3f ms\n",
		r.Fresh, r.Scrapes-1, r.FreshP50Ms, r.FreshP99Ms, r.FreshMaxMs)
	if r.PID > 0 {
		fmt.Fprintf(w, "cpu ms/scrape     %.3f net (raw %.3f)\n", r.CPUMsPerScrape, r.RawCPUMsPerScrape)
		fmt.Fprintf(w, "cpu while scraped %.2f ms/s\n", r.ScrapeCPURate*1e3)
		fmt.Fprintf(w, "idle cpu          %.4f cpu-s/s (%.2f ms/s over %.1f s)\n",
			r.IdleCPURate, r.IdleCPURate*1e3, r.IdleWindowS)
		fmt.Fprintf(w, "rss MiB           %.1f (hwm %.1f)\n", r.RSSMiB, r.HWMMiB)
	} else {
		fmt.Fprintf(w, "cpu, memory       n/a (no -pid)\n")
	}
	fmt.Fprintf(w, "series            %d\n", r.Series)
	fmt.Fprintf(w, "body bytes        %d text; %d as scraped (%s), %d on the wire\n",
		r.TextBodyBytes, r.ScrapeBodyBytes, r.ContentType, r.ScrapeWireBytes)
}

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// demo is scripts/demo.sh (make demo) running on free ports.
type demo struct {
	cmd            *exec.Cmd
	stdout, stderr *os.File
	exited         chan struct{}
	dgx, p5        string // the simulated nodes' host:port
	prom           string // Prometheus' base URL
}

// startDemo runs scripts/demo.sh as make demo does, with the exporter
// built here, the e2e Prometheus and Alertmanager, free ports and the
// fault file faults (empty: none), and waits for its banner.
func startDemo(t *testing.T, faults string) *demo {
	prometheus, alertmanager := os.Getenv("PROMETHEUS"), os.Getenv("ALERTMANAGER")
	if prometheus == "" || alertmanager == "" {
		t.Skip("PROMETHEUS and ALERTMANAGER name the binaries to run (make test sets them from .tools/bin)")
	}
	dir := t.TempDir()
	d := &demo{dgx: freeAddr(t), p5: freeAddr(t), exited: make(chan struct{})}
	promAddr, amAddr := freeAddr(t), freeAddr(t)
	d.prom = "http://" + promAddr
	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }

	d.cmd = exec.Command("bash", filepath.Join(repoRoot(t), "scripts/demo.sh"))
	d.cmd.Env = append(os.Environ(), "BIN="+buildExporter(t, dir), "PROMETHEUS="+prometheus, "ALERTMANAGER="+alertmanager,
		"EXPORTER="+port(d.dgx), "EXPORTER_P5="+port(d.p5), "PROMETHEUS_PORT="+port(promAddr), "ALERTMANAGER_PORT="+port(amAddr),
		"FAULTS="+faults, "P5_FAULTS=")
	var err error
	if d.stdout, err = os.Create(filepath.Join(dir, "demo.out")); err != nil {
		t.Fatal(err)
	}
	if d.stderr, err = os.Create(filepath.Join(dir, "demo.err")); err != nil {
		t.Fatal(err)
	}
	d.cmd.Stdout, d.cmd.Stderr = d.stdout, d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("demo's output:\n%s\ndemo's errors:\n%s", d.read(d.stdout), d.read(d.stderr))
		}
	})
	waitFor(t, 2*time.Minute, "the demo's banner", func() (bool, error) {
		select {
		case <-d.exited:
			return false, fmt.Errorf("demo ended: %v: %s", d.cmd.ProcessState, d.read(d.stderr))
		default:
		}
		return strings.Contains(d.read(d.stdout), "Ctrl-C stops everything."), nil
	})
	return d
}

// stop sends the demo SIGINT, as Ctrl-C in its terminal does, and waits
// for it (KILL after 30 s).
func (d *demo) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

func (d *demo) read(f *os.File) string {
	b, _ := os.ReadFile(f.Name())
	return string(b)
}

// TestDemo is make demo as a person meets it: the banner names the
// example fault file; Prometheus' own UI (Debian's classic one) lists
// the shipped rules, shows the example's XID alert firing and draws a
// graph in a real browser; every dashboard query returns data, the
// node-to-node ones from the demo's ring included; Ctrl-C stops it all
// quietly, with status 0.
func TestDemo(t *testing.T) {
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		t.Skip("CHROMIUM names a headless browser (make test sets it: scripts/install-test-packages.sh installs Debian's chromium)")
	}
	if testing.Short() {
		t.Skip("about two minutes of real time")
	}
	root := repoRoot(t)
	d := startDemo(t, filepath.Join(root, "scripts/demo-faults.yml"))
	if out := d.read(d.stdout); !strings.Contains(out, "make demo FAULTS=scripts/demo-faults.yml") {
		t.Errorf("the banner does not name the example fault file:\n%s", out)
	}
	s := &stack{prom: d.prom}
	ctx := context.Background()

	// Every panel of every dashboard, the node-to-node probes' included.
	// The slowest to fill are the ring's probes (every 30 s) and the
	// rates over them.
	var gaps []string
	var queries int
	waitFor(t, 3*time.Minute, "data in every dashboard query", func() (bool, error) {
		var err error
		gaps, queries, err = dashboardGaps(ctx, s, d.dgx)
		return err == nil && len(gaps) == 0, fmt.Errorf("%d empty, first %v (%v)", len(gaps), first(gaps), err)
	})
	t.Logf("all %d dashboard queries returned data", queries)
	// Both probes of the ring succeed (the node dashboard's queries are
	// of the DGX, the p5's probe of it). Each node's first probe can be
	// declined while the other's runs: within the last minute.
	waitFor(t, 2*time.Minute, "both nodes of the ring probed successfully", func() (bool, error) {
		v, err := s.query(ctx, `max_over_time(probe_success{job="gpulink-node-probe"}[1m]) == 1`)
		return len(v) == 2, fmt.Errorf("succeeded: %v (%v)", v, err)
	})

	// The alerts page, as Chromium renders it: every shipped alert, and
	// the example's XID alert firing (it has no for:).
	var alerts []string
	for _, g := range readRules(t, filepath.Join(root, "deploy/prometheus/gpulink.rules.yml")).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
			}
		}
	}
	firing := regexp.MustCompile(`GPUXIDResetRequired\s*\(1 active\)`)
	var page string
	waitFor(t, time.Minute, "GPUXIDResetRequired firing on /classic/alerts", func() (bool, error) {
		var err error
		page, err = browse(t, chromium, d.prom+"/classic/alerts")
		return err == nil && firing.MatchString(text(page)) && strings.Contains(page, "alert-danger"), err
	})
	for _, a := range alerts {
		if !strings.Contains(page, a) {
			t.Errorf("/classic/alerts does not list %s", a)
		}
	}
	rules, err := browse(t, chromium, d.prom+"/classic/rules")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if !strings.Contains(rules, "alert: "+a) && !strings.Contains(rules, ">"+a+"<") {
			t.Errorf("/classic/rules does not list %s", a)
		}
	}

	// The graph page: its JavaScript asks the API and Rickshaw draws the
	// series as SVG paths, one legend line per series.
	graph, err := browse(t, chromium, d.prom+"/classic/graph?g0.expr="+
		"gpulink_gpu_temperature_celsius&g0.tab=0&g0.range_input=5m")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`<svg[^>]*>\s*<g[^>]*>\s*<path`).MatchString(graph) &&
		!regexp.MustCompile(`<path[^>]*class="path"`).MatchString(graph) {
		t.Errorf("/classic/graph drew no series for gpulink_gpu_temperature_celsius:\n%s", excerpt(graph, "graph_area"))
	}
	if !strings.Contains(graph, "gpulink_gpu_temperature_celsius{") {
		t.Errorf("/classic/graph has no legend line of gpulink_gpu_temperature_celsius:\n%s", excerpt(graph, "graph_area"))
	}

	// Ctrl-C: status 0 and nothing on stderr.
	d.stop()
	if !d.cmd.ProcessState.Success() {
		t.Errorf("after Ctrl-C the demo exited with %v", d.cmd.ProcessState)
	}
	if e := d.read(d.stderr); e != "" {
		t.Errorf("after Ctrl-C the demo wrote to stderr:\n%s", e)
	}
}

// TestDemoPortTaken: with Prometheus' port in use the demo starts
// nothing and exits non-zero naming the port and its variable.
func TestDemoPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "scripts/demo.sh"))
	cmd.Env = append(os.Environ(), "PROMETHEUS_PORT="+port,
		"EXPORTER="+portOf(t), "EXPORTER_P5="+portOf(t), "ALERTMANAGER_PORT="+portOf(t))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("demo with port %s taken exited 0:\n%s", port, out)
	}
	if want := "port " + port + " (PROMETHEUS_PORT) is in use"; !strings.Contains(string(out), want) {
		t.Errorf("demo with port %s taken said %q; want it to contain %q", port, out, want)
	}
	if strings.Contains(string(out), "Ctrl-C") {
		t.Errorf("demo with port %s taken printed its banner:\n%s", port, out)
	}
}

// TestDemoNamesAFailedProcess: a process that ends before it listens
// stops the demo with a non-zero status, naming the process, its status
// and its log, whose tail it prints and which it keeps.
func TestDemoNamesAFailedProcess(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "share/web/templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "share/web/templates/alerts.html"), "")
	failing := filepath.Join(dir, "exporter")
	writeFile(t, failing, "#!/bin/sh\necho 'cannot start: a reason' >&2\nexit 3\n")
	idle := filepath.Join(dir, "idle")
	writeFile(t, idle, "#!/bin/sh\nexec sleep 30\n")
	for _, f := range []string{failing, idle} {
		if err := os.Chmod(f, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "scripts/demo.sh"))
	cmd.Env = append(os.Environ(), "BIN="+failing, "PROMETHEUS="+idle, "ALERTMANAGER="+idle,
		"PROMETHEUS_WEB="+filepath.Join(dir, "share"), "FAULTS=", "P5_FAULTS=",
		"EXPORTER="+portOf(t), "EXPORTER_P5="+portOf(t), "PROMETHEUS_PORT="+portOf(t), "ALERTMANAGER_PORT="+portOf(t))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("demo with an exporter that cannot start exited 0:\n%s", out)
	}
	m := regexp.MustCompile(`demo: exporter exited with status 3 before listening on 127\.0\.0\.1:\d+; its log, (\S+):\n.*cannot start: a reason`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("demo with an exporter that cannot start said:\n%s\nwant the process, its status and its log named", out)
	}
	if _, err := os.Stat(m[1]); err != nil {
		t.Errorf("the named log is not kept: %v", err)
	}
	os.RemoveAll(filepath.Dir(m[1]))
}

func portOf(t *testing.T) string {
	_, p, _ := net.SplitHostPort(freeAddr(t))
	return p
}

// browse loads url in headless Chromium from a fresh profile and returns
// the DOM after its scripts ran (--dump-dom; --virtual-time-budget lets
// the page's timers and requests finish first).
func browse(t *testing.T, chromium, url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir="+t.TempDir(), "--virtual-time-budget=10000", "--dump-dom", url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("chromium %s: %v: %s", url, err, tail(stderr.String(), 2000))
	}
	return string(out), nil
}

// text is a page's text without its tags, spaces collapsed.
func text(html string) string {
	s := regexp.MustCompile(`<[^>]*>`).ReplaceAllString(html, " ")
	return strings.Join(strings.Fields(s), " ")
}

func excerpt(page, near string) string {
	i := strings.Index(page, near)
	if i < 0 {
		return tail(page, 2000)
	}
	return page[i:min(len(page), i+2000)]
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

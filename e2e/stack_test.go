package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the module's root, two levels above this file.
func repoRoot(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot find the test's own source file")
	}
	return filepath.Dir(filepath.Dir(file))
}

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// buildExporter builds this module's binary into dir.
func buildExporter(t *testing.T, dir string) string { return build(t, dir, "gpulink_exporter", ".") }

// build builds the module's package pkg into dir/name.
func build(t *testing.T, dir, name, pkg string) string {
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// start runs a program for the rest of the test with its output in
// dir/name.log; the cleanup stops it (TERM, then KILL) and prints the log's
// tail when the test failed. stop stops it earlier.
func start(t *testing.T, dir, name, bin string, args ...string) (stop func()) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = sync.OnceFunc(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	t.Cleanup(func() {
		stop()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("--- %s log (tail) ---\n%s", name, b)
		}
	})
	return stop
}

// waitHTTP polls url until it answers 200 or the deadline passes.
func waitHTTP(t *testing.T, url string, within time.Duration) {
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within %v (last error %v)", url, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// webhook receives Alertmanager's notifications.
type webhook struct {
	mu     sync.Mutex
	events []notification
}

// notification is one alert in one webhook call, as Alertmanager sends it.
type notification struct {
	Received    time.Time
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func (w *webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	var msg struct {
		Alerts []notification `json:"alerts"`
	}
	if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now()
	w.mu.Lock()
	for _, a := range msg.Alerts {
		a.Received = now
		w.events = append(w.events, a)
	}
	w.mu.Unlock()
}

func (w *webhook) snapshot() []notification {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]notification(nil), w.events...)
}

// stack is a real Prometheus and Alertmanager, the first scraping targets
// and evaluating rules, the second sending to a webhook in this test.
type stack struct {
	prom string // base URL
	hook *webhook
}

// probePair is a node-to-node probe: prober's exporter probes target's.
type probePair struct {
	prober, target string
}

// probeScrapeTimeout bounds a node-to-node probe's scrape; the simulated
// session takes milliseconds.
const probeScrapeTimeout = 2 * time.Second

// startStack writes the configurations and starts both. rules is the path
// of the (scaled) rules file; targets are host:port of the exporters,
// ring the node-to-node probes, scraped every probeScrapeEvery as the
// shipped example's gpulink-node-probe job scrapes its ring (deploy/
// prometheus/scrape-config.example.yml): one job, the target in
// __param_target and instance, the prober's address from the target's
// __prober__ label. Prometheus' offsets within the interval are fixed per
// target, so two probes of the ring may fall at the same moment at every
// scrape; a prober declined_session tries again (internal/nodeprobe), so
// both still run. The exporters' --node-probe.min-interval must be
// shorter than the interval. tokenFile, where set, is the ring's token
// (--node-probe.token-file), which Prometheus sends to /probe as the
// shipped example does (authorization.credentials_file).
func startStack(t *testing.T, dir, prometheus, alertmanager, rules string, targets []string, ring []probePair, probeScrapeEvery time.Duration,
	tokenFile string) *stack {
	hook := &webhook{}
	srv := httptest.NewServer(hook)
	t.Cleanup(srv.Close)

	amAddr, promAddr := freeAddr(t), freeAddr(t)
	amConfig := fmt.Sprintf(`route:
  receiver: test
  group_by: ['...']
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test
    webhook_configs:
      - url: %s/
        send_resolved: true
`, srv.URL)
	writeFile(t, filepath.Join(dir, "alertmanager.yml"), amConfig)
	start(t, dir, "alertmanager", alertmanager,
		"--config.file="+filepath.Join(dir, "alertmanager.yml"),
		"--storage.path="+filepath.Join(dir, "am-data"),
		"--web.listen-address="+amAddr,
		"--cluster.listen-address=")

	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = "'" + tg + "'"
	}
	var ringTargets strings.Builder
	for _, p := range ring {
		fmt.Fprintf(&ringTargets, `      - targets: ['%s']
        labels: {__prober__: '%s'}
`, p.target, p.prober)
	}
	auth := ""
	if tokenFile != "" {
		auth = fmt.Sprintf("    authorization:\n      credentials_file: %s\n", tokenFile)
	}
	probeJob := fmt.Sprintf(`  - job_name: gpulink-node-probe
    metrics_path: /probe
    params:
      module: [nccl_ring]
    scrape_interval: %s
    scrape_timeout: %s
%s    static_configs:
%s    relabel_configs:
      - source_labels: [__address__]
        target_label: __param_target
      - source_labels: [__param_target]
        target_label: instance
      - source_labels: [__prober__]
        target_label: prober
      - source_labels: [__prober__]
        target_label: __address__
`, fmtDur(probeScrapeEvery), fmtDur(probeScrapeTimeout), auth, ringTargets.String())
	promConfig := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ['%s']
alerting:
  alertmanagers:
    - static_configs:
        - targets: ['%s']
scrape_configs:
  - job_name: gpulink
    static_configs:
      - targets: [%s]
%s`, rules, amAddr, strings.Join(quoted, ", "), probeJob)
	writeFile(t, filepath.Join(dir, "prometheus.yml"), promConfig)
	start(t, dir, "prometheus", prometheus,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "prom-data"),
		"--web.listen-address="+promAddr,
		"--rules.alert.resend-delay=1s")
	waitHTTP(t, "http://"+amAddr+"/-/ready", 30*time.Second)
	waitHTTP(t, "http://"+promAddr+"/-/ready", 30*time.Second)
	return &stack{prom: "http://" + promAddr, hook: hook}
}

func writeFile(t *testing.T, path, text string) {
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sample is one element of an instant query's vector.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query runs an instant query.
func (s *stack) query(ctx context.Context, expr string) ([]sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.prom+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query %q: %v: %s", expr, err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", expr, r.Error)
	}
	switch r.Data.ResultType {
	case "vector", "matrix":
		var out []sample
		if err := json.Unmarshal(r.Data.Result, &out); err != nil {
			return nil, err
		}
		return out, nil
	default: // scalar or string: one value
		if bytes.Equal(bytes.TrimSpace(r.Data.Result), []byte("null")) {
			return nil, nil
		}
		return []sample{{}}, nil
	}
}

// firing is the set of firing alerts Prometheus holds now, as keys.
func (s *stack) firing(ctx context.Context) (map[string]bool, error) {
	v, err := s.query(ctx, `ALERTS{alertstate="firing"}`)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, x := range v {
		out[alertKey(x.Metric)] = true
	}
	return out, nil
}

// alertKey names an alert by what the test expects of it: its name, the
// node, and the GPU, the NIC or else the PCI function (a bridge) it is
// about.
func alertKey(l map[string]string) string {
	k := l["alertname"] + " " + l["instance"]
	if g := l["gpu"]; g != "" {
		k += " gpu=" + g
	}
	if d := l["device"]; d != "" {
		k += " device=" + d
	}
	if b := l["pci_bus_id"]; b != "" && l["gpu"] == "" && l["device"] == "" {
		k += " pci_bus_id=" + b
	}
	return k
}

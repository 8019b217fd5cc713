package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const testScrape = `# HELP gpulink_gpu_nvlink_up Whether the NVLink is up.
# TYPE gpulink_gpu_nvlink_up gauge
gpulink_gpu_nvlink_up{gpu="0",link="1"} 1
# HELP gpulink_gpu_nvlink_errors_total NVLink errors.
# TYPE gpulink_gpu_nvlink_errors_total counter
gpulink_gpu_nvlink_errors_total{gpu="0",link="1",type="replay"} 3
# HELP gpulink_exporter_build_info Build.
# TYPE gpulink_exporter_build_info gauge
gpulink_exporter_build_info{version="1"} 1
`

const testRules = `groups:
  - name: g
    rules:
      - alert: A
        expr: gpulink_gpu_nvlink_up == 0 and rate(gpulink_gpu_nvlink_errors_total[10m]) > 1
`

func TestRun(t *testing.T) {
	dir := t.TempDir()
	scrape, rules := filepath.Join(dir, "scrape.txt"), filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(scrape, []byte(testScrape), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rules, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	// Two nodes, a sample a minute for 3 minutes up to 1000 s, only those
	// from 900 s on.
	if err := run(&out, scrape, rules, 4, 2, time.Minute, 3*time.Minute, 1000, 900, 0); err != nil {
		t.Fatal(err)
	}
	want := `# TYPE gpulink_gpu_nvlink_errors counter
gpulink_gpu_nvlink_errors_total{gpu="0",link="1",type="replay",instance="node-0004",job="gpulink",node="node-0004"} 3 940
gpulink_gpu_nvlink_errors_total{gpu="0",link="1",type="replay",instance="node-0004",job="gpulink",node="node-0004"} 3 1000
gpulink_gpu_nvlink_errors_total{gpu="0",link="1",type="replay",instance="node-0005",job="gpulink",node="node-0005"} 3 940
gpulink_gpu_nvlink_errors_total{gpu="0",link="1",type="replay",instance="node-0005",job="gpulink",node="node-0005"} 3 1000
# TYPE gpulink_gpu_nvlink_up gauge
gpulink_gpu_nvlink_up{gpu="0",link="1",instance="node-0004",job="gpulink",node="node-0004"} 1 940
gpulink_gpu_nvlink_up{gpu="0",link="1",instance="node-0004",job="gpulink",node="node-0004"} 1 1000
gpulink_gpu_nvlink_up{gpu="0",link="1",instance="node-0005",job="gpulink",node="node-0005"} 1 940
gpulink_gpu_nvlink_up{gpu="0",link="1",instance="node-0005",job="gpulink",node="node-0005"} 1 1000
# EOF
`
	if out.String() != want {
		t.Errorf("history:\n%s\nwant (the build info, which no rule reads, left out):\n%s", out.String(), want)
	}
}

func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	scrape, rules := filepath.Join(dir, "scrape.txt"), filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(scrape, []byte(testScrape), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rules, []byte("groups: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(&out, scrape, rules, 0, 1, time.Minute, time.Hour, 0, 0, 0); err == nil || !strings.Contains(err.Error(), "none of the rules' metrics") {
		t.Errorf("rules naming no metric of the scrape: %v", err)
	}
	if err := run(&out, scrape, rules, 0, 0, time.Minute, time.Hour, 0, 0, 0); err == nil || !strings.Contains(err.Error(), "-nodes 0") {
		t.Errorf("no nodes: %v", err)
	}
}

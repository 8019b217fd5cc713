package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

// writeInputs writes testScrape and the rule file text into a temporary
// folder and returns their paths.
func writeInputs(t *testing.T, ruleText string) (scrape, rules string) {
	t.Helper()
	dir := t.TempDir()
	scrape, rules = filepath.Join(dir, "scrape.txt"), filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(scrape, []byte(testScrape), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rules, []byte(ruleText), 0o644); err != nil {
		t.Fatal(err)
	}
	return scrape, rules
}

func TestRun(t *testing.T) {
	scrape, rules := writeInputs(t, testRules)
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
	scrape, rules := writeInputs(t, "groups: []\n")
	var out strings.Builder
	if err := run(&out, scrape, rules, 0, 1, time.Minute, time.Hour, 0, 0, 0); err == nil || !strings.Contains(err.Error(), "none of the rules' metrics") {
		t.Errorf("rules naming no metric of the scrape: %v", err)
	}
	if err := run(&out, scrape, rules, 0, 0, time.Minute, time.Hour, 0, 0, 0); err == nil || !strings.Contains(err.Error(), "-nodes 0") {
		t.Errorf("no nodes: %v", err)
	}
}

// The live scrape after the history: the same series and values as the
// history's, with the node's labels and no timestamps, in a text format
// Prometheus parses.
func TestScrapeHandler(t *testing.T) {
	scrape, rules := writeInputs(t, testRules)
	h, err := newScrapeHandler(scrape, rules)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics?node=7", nil))
	want := `# TYPE gpulink_gpu_nvlink_errors_total counter
gpulink_gpu_nvlink_errors_total{gpu="0",link="1",type="replay",instance="node-0007",job="gpulink",node="node-0007"} 3
# TYPE gpulink_gpu_nvlink_up gauge
gpulink_gpu_nvlink_up{gpu="0",link="1",instance="node-0007",job="gpulink",node="node-0007"} 1
`
	if rec.Code != 200 || rec.Body.String() != want {
		t.Errorf("node 7: %d\n%s\nwant:\n%s", rec.Code, rec.Body.String(), want)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil || len(fams) != 2 {
		t.Errorf("the scrape does not parse as the text format: %v (%d families)", err, len(fams))
	}
	for _, q := range []string{"", "node=x", "node=-1"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics?"+q, nil))
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), "want the node's number") {
			t.Errorf("%q: %d %s", q, rec.Code, rec.Body.String())
		}
	}
}

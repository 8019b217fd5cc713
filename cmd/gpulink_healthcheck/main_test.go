package main

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// exporter serves a one-GPU node's links: PCIe at width, NVLinks none.
func exporter(t *testing.T, width string, nvmlUp string) string {
	t.Helper()
	body := `# TYPE gpulink_gpu_pcie_link_width gauge
gpulink_gpu_pcie_link_width{gpu="0",pci_bus_id="0000:18:00.0",uuid="GPU-0"} ` + width + `
# TYPE gpulink_gpu_pcie_link_max_width gauge
gpulink_gpu_pcie_link_max_width{gpu="0",pci_bus_id="0000:18:00.0",uuid="GPU-0"} 16
# TYPE gpulink_source_up gauge
gpulink_source_up{source="nvml"} ` + nvmlUp + "\n"
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }))
	t.Cleanup(s.Close)
	return s.URL + "/metrics"
}

// The exit status is the verdict (0 OK, 1 not OK, 2 unknown), the line
// says it, and a command line or file that cannot be used is unknown,
// never a verdict on the node.
func TestExitStatus(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	badRules := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(badRules, []byte("groups: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		line string
	}{
		{"healthy", []string{"--exporter.url=" + exporter(t, "16", "1")}, 0, "OK: links fit for jobs"},
		{"x8", []string{"--exporter.url=" + exporter(t, "8", "1")}, 1, "NOT OK: GPUPCIeLinkDowntrained gpu=0 value=8 expected=16"},
		{"nvml down", []string{"--exporter.url=" + exporter(t, "8", "0")}, 2, "UNKNOWN: source nvml (gpulink_source_up 0)"},
		{"exporter down", []string{"--exporter.url=" + down.URL + "/metrics"}, 2, "UNKNOWN: exporter: scrape:"},
		{"bad rules", []string{"--exporter.url=" + exporter(t, "16", "1"), "--rules.file=" + badRules}, 2, "UNKNOWN: rule file " + badRules},
		{"no such alert", []string{"--exporter.url=" + exporter(t, "16", "1"), "--alert=GPUNoSuch"}, 2, "UNKNOWN: rule file deploy/prometheus/gpulink.rules.yml (built in) has no alert GPUNoSuch"},
		{"bad url", []string{"--exporter.url=:9849"}, 2, `UNKNOWN: --exporter.url ":9849" is not a URL with a host`},
	} {
		h := &healthCheck{}
		if _, err := newApp(h).Parse(append(tc.args, "--state.file=")); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := run(h, slog.New(slog.DiscardHandler), &stdout, &stderr)
		if code != tc.code || !strings.HasPrefix(stdout.String(), tc.line) || strings.Count(stdout.String(), "\n") != 1 {
			t.Errorf("%s: exit %d, stdout %q; want %d, one line starting %q", tc.name, code, stdout.String(), tc.code, tc.line)
		}
	}
}

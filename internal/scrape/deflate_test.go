package scrape

import (
	"bytes"
	"compress/gzip"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// TestStitchedGzip: parts deflated apart, some when asked, make one gzip
// member that Go's reader and gzip(1) both take, checksum and length
// included.
func TestStitchedGzip(t *testing.T) {
	big := strings.Repeat(`gpulink_gpu_nvlink_up{gpu="3",link="11",pci_bus_id="0000:9a:00.0"} 1`+"\n", 5000)
	texts := []string{"# rest\nfoo 1\n", "", big, "bar_total 2\n", strings.Repeat("x", 70000)}
	var parts []part
	var want strings.Builder
	for i, s := range texts {
		p := part{text: []byte(s)}
		if i%2 == 0 && s != "" {
			p.deflated = Deflate(nil, p.text)
		}
		parts = append(parts, p)
		want.WriteString(s)
	}
	for _, tail := range []string{"", "# EOF\n"} {
		body := appendGzip(nil, parts, []byte(tail))
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		zr.Multistream(false)
		got, err := io.ReadAll(zr)
		if err != nil || string(got) != want.String()+tail {
			t.Fatalf("tail %q: %d bytes, want %d: %v", tail, len(got), want.Len()+len(tail), err)
		}
		if len(body) > want.Len()/10 {
			t.Errorf("tail %q: %d bytes gzipped from %d", tail, len(body), want.Len())
		}
		gz, err := exec.LookPath("gzip")
		if err != nil {
			continue
		}
		cmd := exec.Command(gz, "-dc")
		cmd.Stdin = bytes.NewReader(body)
		out, err := cmd.Output()
		if err != nil || string(out) != want.String()+tail {
			t.Errorf("gzip -dc, tail %q: %d bytes: %v", tail, len(out), err)
		}
	}
}

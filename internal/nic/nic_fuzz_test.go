package nic

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nicFixtureFiles returns the contents of the files in the committed fixture
// trees (numa/testdata/*.txtar) whose names end in one of suffixes, so
// the fuzzers start from every value the fixtures model.
func nicFixtureFiles(suffixes ...string) []string {
	archives, _ := filepath.Glob(filepath.Join("..", "..", "numa", "testdata", "*.txtar"))
	var out []string
	for _, a := range archives {
		b, err := os.ReadFile(a)
		if err != nil {
			continue
		}
		var name string
		var body strings.Builder
		flush := func() {
			for _, s := range suffixes {
				if strings.HasSuffix(name, "/"+s) {
					out = append(out, body.String())
				}
			}
			body.Reset()
		}
		for _, line := range strings.SplitAfter(string(b), "\n") {
			if h, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "-- "); ok && strings.HasSuffix(h, " --") {
				flush()
				name = strings.TrimSuffix(h, " --")
				continue
			}
			body.WriteString(line)
		}
		flush()
	}
	return out
}

func FuzzParseIBState(f *testing.F) {
	for _, s := range []string{"4: ACTIVE", "1: DOWN", "2: INIT", "3: ARMED", "5: ACTIVE_DEFER", "0: NOP",
		"5: LinkUp", "3: Disabled", "2: Polling", "1: Sleep", "4: PortConfigurationTraining",
		"6: LinkErrorRecovery", "7: Phy Test", "0: <unknown>", "4: ACTIVE\n", "N/A", ""} {
		f.Add(s)
	}
	for _, s := range nicFixtureFiles("state", "phys_state") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, name, err := parseIBState(s)
		if err != nil {
			if id != 0 || name != "" {
				t.Fatalf("parseIBState(%q) returned %d, %q with error %v", s, id, name, err)
			}
			return
		}
		if id < 0 || id > 255 {
			t.Fatalf("parseIBState(%q): id %d out of range", s, id)
		}
		if name == "" || name != strings.TrimSpace(name) || !printableASCII(name) {
			t.Fatalf("parseIBState(%q): bad name %q", s, name)
		}
		// What was parsed prints back to what the kernel would print.
		id2, name2, err := parseIBState(fmt.Sprintf("%d: %s", id, name))
		if err != nil || id2 != id || name2 != name {
			t.Fatalf("parseIBState(%q) = %d, %q does not round-trip: %d, %q, %v", s, id, name, id2, name2, err)
		}
	})
}

func FuzzParseIBRate(f *testing.F) {
	for _, s := range []string{"400 Gb/sec (4X NDR)", "200 Gb/sec (4X HDR)", "100 Gb/sec (4X EDR)",
		"10 Gb/sec (1X SDR)", "2.5 Gb/sec (1X SDR)", "14 Gb/sec (1X FDR)", "40 Gb/sec (4X FDR10)",
		"56 Gb/sec (4X FDR)", "300 Gb/sec (12X EDR)", "25 Gb/sec (1XEDR)", "56 Gb/sec", "0 Gb/sec (4X NDR)",
		"N/A", ""} {
		f.Add(s)
	}
	for _, s := range nicFixtureFiles("rate") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseIBRate(s)
		if err != nil {
			if r != (IBRate{}) {
				t.Fatalf("parseIBRate(%q) returned %+v with error %v", s, r, err)
			}
			return
		}
		b := r.BytesPerSecond
		if math.IsNaN(b) || math.IsInf(b, 0) || b <= 0 || b > maxIBRateGbps*1e9/8 {
			t.Fatalf("parseIBRate(%q): %v bytes/s", s, b)
		}
		if r.Width < 0 || r.Width > 32 || (r.Width == 0) != (r.Speed == "") {
			t.Fatalf("parseIBRate(%q): width %d, speed %q", s, r.Width, r.Speed)
		}
		if r.Speed != "" && strings.Trim(r.Speed, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" {
			t.Fatalf("parseIBRate(%q): speed %q", s, r.Speed)
		}
	})
}

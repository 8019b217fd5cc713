package machine

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// captureScript is scripts/capture-machine.py, the script that captures a
// real machine's files into numa/testdata/captured.
func captureScript(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "capture-machine.py")
}

// TestCaptureKeepsWhatTheExporterReads runs the capture script over every
// modelled tree, extracted, and wants each archive back byte for byte: the
// modelled trees hold what the exporter reads, so a file the script's
// allowlist misses (or a format it writes differently) would be missing
// from a fixture captured on a real machine, and the tests that read it
// would pass on a tree that lacks it.
func TestCaptureKeepsWhatTheExporterReads(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 runs scripts/capture-machine.py: %v", err)
	}
	for _, name := range FixtureNames() {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(testdataDir(), name+".txtar"))
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			if err := ExtractTxtar(bytes.NewReader(want), root); err != nil {
				t.Fatal(err)
			}
			args := []string{captureScript(t), "--root", root}
			procs, _ := filepath.Glob(filepath.Join(root, "proc", "[0-9]*"))
			for _, p := range procs {
				args = append(args, "--pid", filepath.Base(p))
			}
			var stderr bytes.Buffer
			cmd := exec.Command(python, args...)
			cmd.Stderr = &stderr
			got, err := cmd.Output()
			if err != nil {
				t.Fatalf("capture-machine.py: %v: %s", err, stderr.String())
			}
			// The script's first line is the archive's comment, which says
			// where it came from; the trees have none.
			_, got, _ = bytes.Cut(got, []byte("\n"))
			if !bytes.Equal(got, want) {
				t.Errorf("capture of %s differs from the archive: %s", name, firstDiff(got, want))
			}
		})
	}
}

// TestCaptureRefusesAMissingProcess: a --pid that is not there stops the
// script with the pid named, rather than a fixture without the process.
func TestCaptureRefusesAMissingProcess(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sys"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("python3", captureScript(t), "--root", root, "--pid", "99999999").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--pid 99999999: no such process") {
		t.Fatalf("err %v, output %q: want a failure naming the pid", err, out)
	}
}

package machine

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// TB is the part of testing.TB that Load uses; taking it rather than
// testing.TB keeps the testing package out of binaries that import this one
// (the simulated node).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// tmpfs holds extracted trees when it exists: a tree is thousands of small
// files, and on a disk-backed /tmp extracting the DGX one takes over a
// second where tmpfs takes 25 ms.
const tmpfs = "/dev/shm"

// testdataDir is numa/testdata, found from this source file so that tests
// of any package, run from any directory, reach it.
func testdataDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "numa", "testdata")
}

// FixtureNames lists the trees committed in numa/testdata, by the name
// Load takes: the profiles' and the faulty ones internal/sim makes.
func FixtureNames() []string {
	archives, _ := filepath.Glob(filepath.Join(testdataDir(), "*.txtar"))
	names := make([]string, len(archives))
	for i, a := range archives {
		names[i] = strings.TrimSuffix(filepath.Base(a), ".txtar")
	}
	return names
}

// Load extracts the committed tree of a profile, numa/testdata/<profile>.txtar,
// into a fresh temporary directory and returns its root: the sysfs root is
// root/sys and the procfs root root/proc. It fails the test if the profile
// has no archive.
func Load(tb TB, profile string) string {
	tb.Helper()
	return extract(tb, profile, filepath.Join(testdataDir(), profile+".txtar"))
}

// LoadCaptured extracts a tree captured from a real machine by
// scripts/capture-machine.py, numa/testdata/captured/<name>.txtar, as Load
// does a modelled one. The captured trees are apart from the modelled ones
// (FixtureNames does not list them) because no model makes them: the
// tests that read them check the readers against what a kernel really
// wrote, files the model does not know of included.
func LoadCaptured(tb TB, name string) string {
	tb.Helper()
	return extract(tb, name, filepath.Join(testdataDir(), "captured", name+".txtar"))
}

func extract(tb TB, profile, archive string) string {
	tb.Helper()
	f, err := os.Open(archive)
	if err != nil {
		tb.Fatalf("machine: profile %s: %v", profile, err)
	}
	defer f.Close()
	root, err := os.MkdirTemp(tmpfs, "machine-"+profile+"-")
	if err == nil {
		tb.Cleanup(func() { os.RemoveAll(root) })
	} else {
		root = tb.TempDir()
	}
	if err := ExtractTxtar(f, root); err != nil {
		tb.Fatalf("machine: profile %s: %v", profile, err)
	}
	return root
}

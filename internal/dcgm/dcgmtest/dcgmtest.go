// Package dcgmtest builds a fake libdcgm.so.4 from C for tests on machines
// without DCGM, and drives the host engine it models through a control
// file; see c/fakedcgm.c for what it implements.
//
// The fake is compiled against go-dcgm's own dcgm_agent.h and
// dcgm_structs.h (found with `go list -m`), so its entry points and structs
// are the ones go-dcgm calls and passes. It is linked with the SONAME
// libdcgm.so.4: loaded by path first, it is the library go-dcgm's
// dlopen("libdcgm.so.4") finds.
package dcgmtest

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

//go:embed c/fakedcgm.c
var source []byte

// GoDCGMModule is the module whose headers the fake is compiled against.
const GoDCGMModule = "github.com/NVIDIA/go-dcgm"

// TB is the part of testing.TB the package needs.
type TB interface {
	Helper()
	TempDir() string
	Fatalf(format string, args ...any)
}

var (
	headersOnce sync.Once
	headersDir  string
	headersErr  error
)

// headers finds go-dcgm's pkg/dcgm directory in the module cache.
func headers() (string, error) {
	headersOnce.Do(func() {
		// go test puts its own GOROOT/bin first in the test's PATH, so
		// this is the go that runs the test.
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", GoDCGMModule).Output()
		if err != nil {
			headersErr = fmt.Errorf("finding %s with go list -m: %w", GoDCGMModule, err)
			return
		}
		dir := filepath.Join(strings.TrimSpace(string(out)), "pkg", "dcgm")
		if _, err := os.Stat(filepath.Join(dir, "dcgm_agent.h")); err != nil {
			headersErr = fmt.Errorf("go-dcgm headers: %w", err)
			return
		}
		headersDir = dir
	})
	return headersDir, headersErr
}

// Build compiles the fake with gcc into a new temporary directory and
// returns the library's path. The file is named libdcgm.so.4.
func Build(tb TB) string {
	tb.Helper()
	lib, err := BuildIn(tb.TempDir(), "libdcgm.so.4")
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return lib
}

// BuildIn compiles the fake into dir with the given SONAME (libdcgm.so.4
// unless a test wants a library go-dcgm would not find) and returns the
// library's path, dir/libdcgm.so.4. A process that loads the fake must
// keep the file until it exits: each new reader loads it again by path.
func BuildIn(dir, soname string) (string, error) {
	inc, err := headers()
	if err != nil {
		return "", fmt.Errorf("building fake libdcgm: %w", err)
	}
	src := filepath.Join(dir, "fakedcgm.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", fmt.Errorf("writing fake libdcgm source: %w", err)
	}
	lib := filepath.Join(dir, "libdcgm.so.4")
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	args := []string{"-std=gnu11", "-Wall", "-Werror", "-Wno-unused-parameter", "-Wno-deprecated-declarations", "-Wno-format-truncation",
		"-shared", "-fPIC", "-O1", "-I", inc, "-Wl,-soname," + soname, "-o", lib, src, "-lpthread"}
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building fake libdcgm: %w\n%s", err, out)
	}
	return lib, nil
}

// Engine is the host engine the fake models: its state is written to the
// control file on every change, and the fake reads the file on every call.
type Engine struct {
	control string
	log     string

	mu     sync.Mutex
	fields map[string]string
}

// Env names the environment variables the fake reads; they must be set
// before the library is loaded and stay set (the fake reads them on every
// call, and setenv while C reads them is a data race).
const (
	EnvControl = "FAKE_DCGM_CONTROL"
	EnvLog     = "FAKE_DCGM_LOG"
)

// NewEngine points the fake at fresh control and log files in dir: it
// sets FAKE_DCGM_CONTROL and FAKE_DCGM_LOG in this process's environment,
// so call it once per process (TestMain), before anything is sampled.
// The engine starts up, with the fake's defaults.
func NewEngine(dir string) (*Engine, error) {
	e := &Engine{control: filepath.Join(dir, "dcgm-control"), log: filepath.Join(dir, "dcgm-calls.log"),
		fields: map[string]string{}}
	if err := os.Setenv(EnvControl, e.control); err != nil {
		return nil, err
	}
	if err := os.Setenv(EnvLog, e.log); err != nil {
		return nil, err
	}
	return e, e.write()
}

// Reset returns the engine to its defaults with the given settings and
// empties the call log.
func (e *Engine) Reset(kv ...string) error {
	e.mu.Lock()
	e.fields = map[string]string{}
	e.mu.Unlock()
	if err := os.WriteFile(e.log, nil, 0o644); err != nil {
		return err
	}
	return e.Set(kv...)
}

// Set changes settings: key, value pairs as the control file takes them
// (see c/fakedcgm.c); an empty value removes the key.
func (e *Engine) Set(kv ...string) error {
	if len(kv)%2 != 0 {
		return fmt.Errorf("dcgmtest: Set needs key, value pairs, got %d strings", len(kv))
	}
	e.mu.Lock()
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(e.fields, kv[i])
		} else {
			e.fields[kv[i]] = kv[i+1]
		}
	}
	e.mu.Unlock()
	return e.write()
}

// write replaces the control file atomically, so the fake never reads
// half of it.
func (e *Engine) write() error {
	e.mu.Lock()
	keys := make([]string, 0, len(e.fields))
	for k := range e.fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, e.fields[k])
	}
	e.mu.Unlock()
	tmp := e.control + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, e.control)
}

// Calls returns the call log: one "name result [detail]" line per call
// since the last Reset.
func (e *Engine) Calls() []string {
	b, err := os.ReadFile(e.log)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// CallNames returns the name of every call since the last Reset, in order.
func (e *Engine) CallNames() []string {
	var names []string
	for _, l := range e.Calls() {
		if name, _, ok := strings.Cut(l, " "); ok {
			names = append(names, name)
		}
	}
	return names
}

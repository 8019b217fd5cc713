package nodeprobe

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gpulink/gpulink_exporter/probes"
)

func TestParseModules(t *testing.T) {
	f, err := Parse([]byte(`modules:
  big:
    collectives: [all_reduce]
    size: 1GiB
    small_size: 4KiB
    gpus_per_node: 8
    timeout: 2m
    warmup: 0
    iterations: 50
    samples: 5
    http_client:
      tls_config: {}
  plain: {}
  empty:
`))
	if err != nil {
		t.Fatal(err)
	}
	big := f.Modules["big"]
	if !slices.Equal(big.Collectives, []probes.Collective{probes.AllReduce}) || big.Size != 1<<30 || big.SmallSize != 4<<10 ||
		big.GPUsPerNode != 8 || time.Duration(big.Timeout) != 2*time.Minute || big.Warmup != 0 || big.Iterations != 50 || big.Samples != 5 {
		t.Errorf("big: %+v", big)
	}
	// An empty tls_config still means https.
	if !big.TLS() {
		t.Error("big: a tls_config, but not TLS")
	}
	plain := f.Modules["plain"]
	def := DefaultModule()
	if !slices.Equal(plain.Collectives, def.Collectives) || plain.Size != def.Size || plain.SmallSize != def.SmallSize ||
		plain.GPUsPerNode != 1 || plain.Timeout != def.Timeout || plain.Iterations != def.Iterations || plain.TLS() {
		t.Errorf("an empty module is not the default: %+v", plain)
	}
	if empty, ok := f.Modules["empty"]; !ok || empty.Size != def.Size || empty.Timeout != def.Timeout {
		t.Errorf("a module with no body is not the default: %+v", empty)
	}
	if !plain.HTTPClient.FollowRedirects || !plain.HTTPClient.EnableHTTP2 {
		t.Error("http_client lost Prometheus' defaults")
	}
}

// Every mistake is refused, naming the module and field.
func TestParseModulesRefuses(t *testing.T) {
	module := func(body string) string { return "modules:\n  m:\n" + body }
	for _, tc := range []struct {
		yaml, want string
	}{
		{"", "empty modules file"},
		{"modules: {}\n", "no modules"},
		{"module:\n  m: {}\n", "field module not found"},
		{module("    size: 1GiB\n    sise: 2GiB\n"), "module \"m\": yaml: unmarshal errors:\n  line 4: field sise not found"},
		{module("    http_client:\n      tls_config:\n        cafile: x\n"), "module \"m\": yaml: unmarshal errors:\n  line 5: field cafile not found"},
		{module("    http_client:\n      basic_auth:\n        username: a\n        password: b\n        password_file: c\n"), `module "m": at most one of basic_auth password`},
		{module("    collectives: []\n"), `module "m": collectives: []: want at least one`},
		{module("    collectives: [broadcast]\n"), `module "m": collectives: broadcast: want one of all_reduce`},
		{module("    collectives: [send_recv, send_recv]\n"), "each collective once"},
		{module("    size: 8GiB\n"), `module "m": size: 8GiB: want 1MiB to 4GiB`},
		{module("    size: 512KiB\n"), "size: 512KiB"},
		{module("    size: lots\n"), "lots"},
		{module("    small_size: 2B\n"), "small_size: 2B: want 1KiB to 1MiB"},
		{module("    small_size: 2MiB\n"), "small_size: 2MiB"},
		{module("    gpus_per_node: 0\n"), "gpus_per_node: 0: want 1 to 64"},
		{module("    gpus_per_node: 65\n"), "gpus_per_node: 65"},
		{module("    timeout: 0s\n"), "timeout: 0s: want above 0 and at most 10m"},
		{module("    timeout: 11m\n"), "timeout: 11m"},
		{module("    timeout: soon\n"), "soon"},
		{module("    warmup: -1\n"), "warmup: -1: want 0 to 1000"},
		{module("    iterations: 0\n"), "iterations: 0: want 1 to 1000"},
		{module("    samples: 101\n"), "samples: 101: want 1 to 100"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// LoadFile takes a module's relative paths from the file's directory, and
// a reload swaps the modules only when the new file is good.
func TestLoadAndReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "modules.yml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("modules:\n  a:\n    http_client:\n      tls_config:\n        ca_file: ca.pem\n")
	f, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Modules["a"].HTTPClient.TLSConfig.CAFile; got != filepath.Join(dir, "ca.pem") {
		t.Errorf("ca_file %q, want it in the file's directory", got)
	}
	mods := NewModules(f)
	write("modules:\n  b:\n    timeout: 5s\n")
	if err := mods.Reload(path); err != nil {
		t.Fatal(err)
	}
	if _, ok := mods.Get("a"); ok {
		t.Error("module a still there after the reload")
	}
	if b, ok := mods.Get("b"); !ok || b.Timeout != model.Duration(5*time.Second) {
		t.Errorf("module b: %+v %v", b, ok)
	}
	write("modules:\n  c:\n    size: 8GiB\n")
	if err := mods.Reload(path); err == nil {
		t.Fatal("a bad file reloaded")
	}
	if _, ok := mods.Get("b"); !ok {
		t.Error("a failed reload dropped the modules in force")
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.yml")); err == nil {
		t.Error("a missing file loaded")
	}
}

// The default module is valid and what the issue asks for.
func TestDefaultModule(t *testing.T) {
	f := DefaultFile()
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	m, ok := f.Modules[DefaultModuleName]
	if !ok || m.Size != 256<<20 || m.GPUsPerNode != 1 || !slices.Equal(m.Collectives, []probes.Collective{probes.SendRecv, probes.AllReduce}) {
		t.Errorf("default module %+v", m)
	}
}

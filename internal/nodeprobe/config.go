package nodeprobe

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/units"
	promconfig "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/gpulink/gpulink_exporter/probes"
)

// DefaultModuleName is the module served without a modules file, and the
// one /probe runs when no module parameter is given.
const DefaultModuleName = "nccl_ring"

// Limits of a module beyond those of probes.CollectiveOptions (sizes,
// warm-up, iterations, samples): the GPUs a node puts into a session, and
// the session's deadline (past 10 minutes a probe is no longer a probe).
const (
	MaxGPUsPerNode = 64
	MaxTimeout     = 10 * time.Minute
)

// File is a modules file: what each module a /probe call names runs.
type File struct {
	Modules moduleMap `yaml:"modules"`
}

// moduleMap decodes each module on its own, so that an error names the
// module it is in.
type moduleMap map[string]Module

// capture keeps a node's unmarshal func for later: still the same strict
// decoder, until the decode that made it returns.
type capture struct{ unmarshal func(any) error }

func (c *capture) UnmarshalYAML(unmarshal func(any) error) error {
	c.unmarshal = unmarshal
	return nil
}

func (mm *moduleMap) UnmarshalYAML(unmarshal func(any) error) error {
	var raw map[string]*capture
	if err := unmarshal(&raw); err != nil {
		return err
	}
	names := make([]string, 0, len(raw))
	for n := range raw {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make(moduleMap, len(raw))
	for _, n := range names {
		m := DefaultModule()
		if c := raw[n]; c != nil {
			if err := c.unmarshal(&m); err != nil {
				return fmt.Errorf("module %q: %w", n, err)
			}
		}
		out[n] = m
	}
	*mm = out
	return nil
}

// Module is what one node-to-node session runs and how the prober calls
// the target.
type Module struct {
	// Collectives to run across the two nodes: send_recv (local GPU i to
	// the peer's GPU i), all_reduce over every GPU of both nodes, or any
	// other collective of the probes package.
	Collectives []probes.Collective `yaml:"collectives"`
	// Size is the operation's size for the bandwidth (nccl-tests' -b),
	// SmallSize the one the latency is taken at.
	Size      units.Base2Bytes `yaml:"size"`
	SmallSize units.Base2Bytes `yaml:"small_size"`
	// GPUsPerNode each node puts into the session: the first that many
	// idle GPUs in PCI address order.
	GPUsPerNode int `yaml:"gpus_per_node"`
	// Timeout bounds the whole session, both children included. A
	// Prometheus scrape timeout shorter than it (less half a second, as
	// blackbox_exporter does) wins.
	Timeout model.Duration `yaml:"timeout"`
	// Warmup, Iterations and Samples are nccl-tests' -w and -n, and how
	// many timed samples the median is taken over.
	Warmup     int `yaml:"warmup"`
	Iterations int `yaml:"iterations"`
	Samples    int `yaml:"samples"`
	// HTTPClient is how the prober calls the target's /node-probe/join:
	// TLS, basic auth, proxy, as in a Prometheus scrape config.
	HTTPClient promconfig.HTTPClientConfig `yaml:"http_client"`

	// tls is set when http_client has a tls_config: the target is then
	// called over https.
	tls bool
}

// DefaultModule is nccl_ring, and what a module in a file starts from.
func DefaultModule() Module {
	return Module{
		Collectives: []probes.Collective{probes.SendRecv, probes.AllReduce},
		Size:        probes.DefaultCollectiveSizeBytes,
		SmallSize:   probes.DefaultCollectiveSmallBytes,
		GPUsPerNode: 1,
		Timeout:     model.Duration(30 * time.Second),
		Warmup:      probes.DefaultCollectiveWarmup,
		Iterations:  probes.DefaultCollectiveIterations,
		Samples:     probes.DefaultCollectiveSamples,
		HTTPClient:  promconfig.DefaultHTTPClientConfig,
	}
}

// DefaultFile is what the exporter serves without a modules file.
func DefaultFile() *File {
	return &File{Modules: map[string]Module{DefaultModuleName: DefaultModule()}}
}

// UnmarshalYAML fills a module over the defaults. It takes the older
// unmarshal func, not a yaml.Node, so that the decoder's strictness
// (unknown fields are errors) reaches into the module and its http_client.
func (m *Module) UnmarshalYAML(unmarshal func(any) error) error {
	*m = DefaultModule()
	type plain Module
	if err := unmarshal((*plain)(m)); err != nil {
		return err
	}
	// Whether tls_config was written at all: an empty one still means
	// https with the system's roots.
	var raw map[string]any
	if err := unmarshal(&raw); err != nil {
		return err
	}
	hc, _ := raw["http_client"].(map[string]any)
	_, m.tls = hc["tls_config"]
	return nil
}

// TLS reports whether the module calls the target over https whatever
// the target's scheme says.
func (m *Module) TLS() bool { return m.tls }

// FieldError is a module field out of its range.
type FieldError struct {
	Module, Field, Value, Want string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("module %q: %s: %s: want %s", e.Module, e.Field, e.Value, e.Want)
}

// Validate checks every field of the module named name.
func (m *Module) Validate(name string) error {
	bad := func(field, value, want string) error { return &FieldError{name, field, value, want} }
	if len(m.Collectives) == 0 {
		return bad("collectives", "[]", "at least one of "+collectiveList())
	}
	for i, c := range m.Collectives {
		if !slices.Contains(probes.Collectives, c) {
			return bad("collectives", string(c), "one of "+collectiveList())
		}
		if slices.Contains(m.Collectives[:i], c) {
			return bad("collectives", string(c), "each collective once")
		}
	}
	switch {
	case m.Size < probes.MinSizeBytes || m.Size > probes.MaxSizeBytes:
		return bad("size", m.Size.String(), fmt.Sprintf("%s to %s", units.Base2Bytes(probes.MinSizeBytes), units.Base2Bytes(probes.MaxSizeBytes)))
	case m.SmallSize < probes.MinCollectiveSmallBytes || m.SmallSize > probes.MaxCollectiveSmallBytes:
		return bad("small_size", m.SmallSize.String(), fmt.Sprintf("%s to %s", units.Base2Bytes(probes.MinCollectiveSmallBytes), units.Base2Bytes(probes.MaxCollectiveSmallBytes)))
	case m.GPUsPerNode < 1 || m.GPUsPerNode > MaxGPUsPerNode:
		return bad("gpus_per_node", fmt.Sprint(m.GPUsPerNode), fmt.Sprintf("1 to %d", MaxGPUsPerNode))
	case m.Timeout <= 0 || time.Duration(m.Timeout) > MaxTimeout:
		return bad("timeout", m.Timeout.String(), fmt.Sprintf("above 0 and at most %s", model.Duration(MaxTimeout)))
	case m.Warmup < 0 || m.Warmup > probes.MaxCollectiveWarmup:
		return bad("warmup", fmt.Sprint(m.Warmup), fmt.Sprintf("0 to %d", probes.MaxCollectiveWarmup))
	case m.Iterations < 1 || m.Iterations > probes.MaxCollectiveIterations:
		return bad("iterations", fmt.Sprint(m.Iterations), fmt.Sprintf("1 to %d", probes.MaxCollectiveIterations))
	case m.Samples < 1 || m.Samples > probes.MaxSamples:
		return bad("samples", fmt.Sprint(m.Samples), fmt.Sprintf("1 to %d", probes.MaxSamples))
	}
	if err := m.HTTPClient.Validate(); err != nil {
		return fmt.Errorf("module %q: http_client: %w", name, err)
	}
	// What the collectives child checks again: the same limits, whose
	// errors name the daemon's flags rather than the module's fields.
	if err := m.options().Validate(); err != nil {
		return fmt.Errorf("module %q: %w", name, err)
	}
	return nil
}

// options are what both children of a session run with; GPUs, ranks and
// the unique id are each session's.
func (m *Module) options() probes.CollectiveOptions {
	return probes.CollectiveOptions{Collectives: m.Collectives, SizeBytes: int64(m.Size), SmallBytes: int64(m.SmallSize),
		Warmup: m.Warmup, Iterations: m.Iterations, Samples: m.Samples}
}

func collectiveList() string { return strings.Join(probes.CollectiveNames(), ", ") }

// Validate checks every module, in name order so the first error is
// always the same one.
func (c *File) Validate() error {
	if len(c.Modules) == 0 {
		return errors.New("no modules: a modules file names at least one")
	}
	names := make([]string, 0, len(c.Modules))
	for n := range c.Modules {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if n == "" {
			return errors.New("a module has an empty name")
		}
		m := c.Modules[n]
		if err := m.Validate(n); err != nil {
			return err
		}
	}
	return nil
}

// LoadFile reads and checks a modules file. Unknown fields are errors,
// and relative paths in a module's http_client (ca_file, password_file)
// are taken from the file's directory, as Prometheus takes them.
func LoadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	for n, m := range c.Modules {
		m.HTTPClient.SetDirectory(dir)
		c.Modules[n] = m
	}
	return c, nil
}

// Parse decodes and checks a modules file's text.
func Parse(b []byte) (*File, error) {
	c := &File{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty modules file")
		}
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Modules holds the modules in force; a reload swaps them whole.
type Modules struct {
	mu sync.RWMutex
	c  *File
}

// NewModules holds c.
func NewModules(c *File) *Modules { return &Modules{c: c} }

// Get is the module called name.
func (s *Modules) Get(name string) (Module, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, ok := s.c.Modules[name]
	return m, ok
}

// Reload reads path again; on an error the modules in force stay.
func (s *Modules) Reload(path string) error {
	c, err := LoadFile(path)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.c = c
	s.mu.Unlock()
	return nil
}

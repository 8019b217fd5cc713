// Package numa discovers where things sit in a machine: NUMA nodes and their
// distances, the PCIe tree from every GPU, NIC and NVMe drive up to its root
// port, the path class between each GPU and NIC as nvidia-smi topo -m names
// it, NIC port health, and the CPU and memory placement of GPU processes.
//
// Everything is read from a sysfs and a procfs root, so fixture trees stand
// in for a machine in tests. Parsing is kept apart from metrics: this package
// returns typed results and knows nothing of Prometheus.
//
// prometheus/procfs is used for per-process files. Its sysfs PCI and
// InfiniBand readers are not: they drop a whole device (or the whole class)
// when one file is unreadable or holds an unexpected value, which is the
// failure node_exporter#3265 describes. Here one bad file drops one value and
// is counted.
package numa

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// FS is a sysfs root and a procfs root.
type FS struct {
	Sys  string // usually /sys
	Proc string // usually /proc
}

func (f FS) sys(parts ...string) string  { return filepath.Join(append([]string{f.Sys}, parts...)...) }
func (f FS) proc(parts ...string) string { return filepath.Join(append([]string{f.Proc}, parts...)...) }

// tally is the sampler's: one bad file drops one value and is counted.
type tally = sampler.Tally

// readString returns a sysfs file's content without surrounding space.
func readString(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// absent reports whether err means the file is not there, or is there but
// the driver does not implement it (reads of such sysfs attributes fail
// with EINVAL or EOPNOTSUPP, as /sys/class/net/*/speed does on a virtual
// interface): nothing to count.
func absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EINVAL) ||
		errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENODEV)
}

// optString reads a file that may be missing; other failures are counted.
func optString(t *tally, path string) sampler.Opt[string] {
	s, err := readString(path)
	if err != nil {
		if !absent(err) {
			t.Add(err)
		}
		return sampler.Opt[string]{}
	}
	return sampler.Some(s)
}

// optInt reads a decimal or 0x-prefixed integer file.
func optInt(t *tally, path string) sampler.Opt[int64] {
	s := optString(t, path)
	if !s.Valid {
		return sampler.Opt[int64]{}
	}
	v, err := strconv.ParseInt(s.V, 0, 64)
	if err != nil {
		t.Add(fmt.Errorf("%s: %w", path, err))
		return sampler.Opt[int64]{}
	}
	return sampler.Some(v)
}

// optUint reads an unsigned counter file.
func optUint(t *tally, path string) sampler.Opt[uint64] {
	s := optString(t, path)
	if !s.Valid {
		return sampler.Opt[uint64]{}
	}
	v, err := strconv.ParseUint(s.V, 0, 64)
	if err != nil {
		t.Add(fmt.Errorf("%s: %w", path, err))
		return sampler.Opt[uint64]{}
	}
	return sampler.Some(v)
}

package numa

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// GDS is what decides whether GPUDirect Storage (cuFile) reads straight
// from a drive into GPU memory or silently bounces through host memory in
// compatibility mode: the nvidia-fs module, and cuFile's configuration.
type GDS struct {
	// NVFSLoaded says whether nvidia-fs is loaded; absent where sysfs has
	// no module directory.
	NVFSLoaded sampler.Opt[bool]
	// NVFS is nvidia-fs's own account (/proc/driver/nvidia-fs/stats);
	// nil where it is not loaded.
	NVFS *NVFSStats
	// Config is the cuFile configuration in force.
	Config CuFileConfig
}

// NVFSStats is what nvidia-fs counts, as /proc/driver/nvidia-fs/stats
// prints it.
type NVFSStats struct {
	// Version is the driver's, "2.17.5" ("NVFS Driver(version: 2:17:5)").
	Version string
	// Reads and Writes are the operations nvidia-fs served ("Ops : Read=
	// Write="); ReadErrors and WriteErrors its failures ("Reads : err=").
	Reads, Writes, ReadErrors, WriteErrors sampler.Opt[uint64]
}

// NVFSStatsPath is where nvidia-fs prints its counters, under procfs.
const NVFSStatsPath = "driver/nvidia-fs/stats"

// readGDS reads nvidia-fs's state; the configuration is read apart
// (ReadCuFileConfig), since it is a file outside sysfs and procfs.
func (f reader) readGDS(t *sampler.Tally) GDS {
	var g GDS
	if _, err := os.Stat(f.sys("module")); err == nil {
		_, err := os.Stat(f.sys("module", "nvidia_fs"))
		g.NVFSLoaded = sampler.Some(err == nil)
	}
	b, err := os.ReadFile(f.proc(NVFSStatsPath))
	switch {
	case err == nil:
		s, perr := ParseNVFSStats(b)
		t.Merge(perr)
		g.NVFS = s
	case !errors.Is(err, fs.ErrNotExist):
		t.Add(err)
	}
	return g
}

// ParseNVFSStats parses /proc/driver/nvidia-fs/stats. Lines it does not
// know are left alone (each nvidia-fs release adds some); a known line
// whose numbers do not parse is counted.
func ParseNVFSStats(b []byte) (*NVFSStats, error) {
	var t sampler.Tally
	s := &NVFSStats{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "NVFS Driver(version:"); ok {
			s.Version = strings.ReplaceAll(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), ")")), ":", ".")
			continue
		}
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kv := func(key string) sampler.Opt[uint64] {
			for _, f := range strings.Fields(rest) {
				if k, v, ok := strings.Cut(f, "="); ok && k == key {
					n, err := strconv.ParseUint(v, 10, 64)
					if err != nil {
						t.Add(fmt.Errorf("nvidia-fs stats %q: %s=%q is not a count", strings.TrimSpace(name), key, v))
						return sampler.Opt[uint64]{}
					}
					return sampler.Some(n)
				}
			}
			return sampler.Opt[uint64]{}
		}
		switch strings.TrimSpace(name) {
		case "Ops":
			s.Reads, s.Writes = kv("Read"), kv("Write")
		case "Reads":
			s.ReadErrors = kv("err")
		case "Writes":
			s.WriteErrors = kv("err")
		}
	}
	return s, t.Err()
}

// CuFileConfigEnv names the configuration file cuFile reads instead of
// DefaultCuFileConfig, as cuFile itself takes it.
const (
	CuFileConfigEnv     = "CUFILE_ENV_PATH_JSON"
	DefaultCuFileConfig = "/etc/cufile.json"
)

// CuFileConfig is what of cuFile's configuration decides the path.
type CuFileConfig struct {
	// Path is where it was looked for.
	Path string
	// Found says whether the file is there: GDS's packages install it, so
	// its absence says GDS is not installed.
	Found bool
	// AllowCompat is properties.allow_compat_mode: whether cuFile falls
	// back to POSIX I/O through host memory where it cannot go direct.
	// cuFile's default, where the file does not say, is true.
	AllowCompat bool
	// ForceCompat is properties.force_compat_mode: every read bounces,
	// nvidia-fs or not.
	ForceCompat bool
}

// ReadCuFileConfig reads cuFile's configuration at path. An absent file is
// not an error (Found false); one that does not parse is.
func ReadCuFileConfig(path string) (CuFileConfig, error) {
	c := CuFileConfig{Path: path, AllowCompat: true}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	c.Found = true
	var doc struct {
		Properties struct {
			AllowCompat *bool `json:"allow_compat_mode"`
			ForceCompat bool  `json:"force_compat_mode"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(stripJSONComments(b), &doc); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	if doc.Properties.AllowCompat != nil {
		c.AllowCompat = *doc.Properties.AllowCompat
	}
	c.ForceCompat = doc.Properties.ForceCompat
	return c, nil
}

// stripJSONComments blanks // and /* */ comments outside strings: the
// cufile.json NVIDIA ships is JSON with comments, which cuFile accepts.
func stripJSONComments(b []byte) []byte {
	out := make([]byte, 0, len(b))
	inString, escaped := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			out = append(out, c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
			out = append(out, c)
		case c == '/' && i+1 < len(b) && b[i+1] == '/':
			for i < len(b) && b[i] != '\n' {
				i++
			}
			out = append(out, '\n')
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			end := bytes.Index(b[i+2:], []byte("*/"))
			if end < 0 {
				return out
			}
			i += end + 3
			out = append(out, ' ')
		default:
			out = append(out, c)
		}
	}
	return out
}

// NativeFilesystem reports whether cuFile can serve a filesystem directly
// (with nvidia-fs loaded): ext4 in its default data=ordered journalling
// and XFS on local NVMe, and the distributed filesystems GDS supports
// (NFS over RDMA, Lustre, WekaFS, GPFS, BeeGFS). Anything else (tmpfs,
// overlay, btrfs, ZFS, ext4 with data=journal) goes through compatibility
// mode at best.
func NativeFilesystem(fstype, options string) bool {
	switch fstype {
	case "xfs", "nfs", "nfs4", "lustre", "wekafs", "gpfs", "beegfs":
		return true
	case "ext4":
		return !strings.Contains(","+options+",", ",data=journal,")
	}
	return false
}

// Package sysfs reads single-value files of sysfs (and procfs) into optional
// readings: a file that is missing or that the driver does not implement is
// absent, nothing to count; any other failure drops that one value and is
// counted in a sampler.Tally. Every source that reads such files (numa,
// nic) uses these, so one bad file is treated alike everywhere.
package sysfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"syscall"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// maxAttribute bounds a single-value file: a sysfs attribute is at most a
// page, but procfs files read through here may be longer.
const maxAttribute = 64 << 10

// ReadString returns a file's content without surrounding space.
func ReadString(path string) (string, error) {
	var stack [256]byte // most attributes are a number or a word
	b, err := ReadFile(path, stack[:0], maxAttribute)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}

// Absent reports whether err means the file is not there, or is there but
// the driver does not implement it (reads of such sysfs attributes fail
// with EINVAL or EOPNOTSUPP, as /sys/class/net/*/speed does on a virtual
// interface): nothing to count.
func Absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EINVAL) ||
		errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENODEV)
}

// OptString reads a file that may be missing; other failures are counted.
func OptString(t *sampler.Tally, path string) sampler.Opt[string] {
	s, err := ReadString(path)
	if err != nil {
		if !Absent(err) {
			t.Add(err)
		}
		return sampler.Opt[string]{}
	}
	return sampler.Some(s)
}

// OptInt reads a decimal or 0x-prefixed integer file.
func OptInt(t *sampler.Tally, path string) sampler.Opt[int64] {
	s := OptString(t, path)
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

// OptUint reads an unsigned counter file.
func OptUint(t *sampler.Tally, path string) sampler.Opt[uint64] {
	s := OptString(t, path)
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

package sysfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

func TestChainOf(t *testing.T) {
	for _, tc := range []struct {
		in, hb string
		chain  []string
	}{
		{"pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0", "pci0000:15",
			[]string{"0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0"}},
		{"pci0000:00/0000:00:03.0/virtio2/net/eth0", "pci0000:00", []string{"0000:00:03.0"}},
		{"pci0000:00/0000:00:06.0", "pci0000:00", []string{"0000:00:06.0"}},
		{"virtual/net/lo", "", nil},
	} {
		hb, chain := ChainOf(tc.in)
		if hb != tc.hb || len(chain) != len(tc.chain) {
			t.Errorf("ChainOf(%q) = %q %v, want %q %v", tc.in, hb, chain, tc.hb, tc.chain)
			continue
		}
		for i := range chain {
			if chain[i] != tc.chain[i] {
				t.Errorf("ChainOf(%q) = %v, want %v", tc.in, chain, tc.chain)
			}
		}
	}
}

func TestOptReaders(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var tally sampler.Tally
	if v := OptInt(&tally, write("hex", "0x10\n")); !v.Valid || v.V != 16 {
		t.Errorf("OptInt(0x10) = %+v, want 16", v)
	}
	if v := OptUint(&tally, write("counter", " 18446744073709551615 ")); !v.Valid || v.V != 1<<64-1 {
		t.Errorf("OptUint(max) = %+v", v)
	}
	if v := OptString(&tally, filepath.Join(dir, "missing")); v.Valid {
		t.Errorf("missing file read as %+v", v)
	}
	if err := tally.Err(); err != nil {
		t.Fatalf("good and missing files counted as errors: %v", err)
	}
	bad := write("bad", "x16\n")
	if v := OptInt(&tally, bad); v.Valid {
		t.Errorf("OptInt(x16) = %+v, want absent", v)
	}
	if v := OptUint(&tally, write("negative", "-1")); v.Valid {
		t.Errorf("OptUint(-1) = %+v, want absent", v)
	}
	var partial *sampler.PartialError
	if err := tally.Err(); !errors.As(err, &partial) || partial.Count != 2 || !strings.Contains(err.Error(), bad) {
		t.Fatalf("two bad files: err = %v, want a PartialError counting 2 and naming %s", err, bad)
	}
}

func TestAbsent(t *testing.T) {
	for _, err := range []error{fs.ErrNotExist, syscall.EINVAL, syscall.EOPNOTSUPP, syscall.ENODEV,
		&fs.PathError{Op: "read", Path: "/sys/class/net/lo/speed", Err: syscall.EINVAL}} {
		if !Absent(err) {
			t.Errorf("Absent(%v) = false", err)
		}
	}
	if Absent(syscall.EIO) || Absent(fs.ErrPermission) {
		t.Error("EIO or EPERM taken as absent: a failing read would go uncounted")
	}
}

// ReadFile grows its buffer to what the file holds, refuses a file of its
// limit or longer (also into a buffer that could hold more), and reports
// a missing file as fs.ErrNotExist, as os.ReadFile does.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("0123456789", 100) // 1000 bytes
	path := filepath.Join(dir, "attr")
	if err := os.WriteFile(path, []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		buf   []byte
		limit int
		err   bool
	}{
		{"grows from nothing", nil, 4096, false},
		{"grows from a small buffer", make([]byte, 0, 16), 4096, false},
		{"fits its buffer", make([]byte, 3, 2048), 4096, false},
		{"one byte over the limit", nil, 1000, true},
		{"a buffer bigger than the limit", make([]byte, 0, 4096), 999, true},
	} {
		got, err := ReadFile(path, tc.buf, tc.limit)
		switch {
		case tc.err && err == nil:
			t.Errorf("%s: read %d bytes, want an error", tc.name, len(got))
		case !tc.err && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.err && string(got) != long:
			t.Errorf("%s: read %d bytes, want the file's 1000", tc.name, len(got))
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), nil, 4096); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	if s, err := ReadString(path); err != nil || s != long {
		t.Errorf("ReadString of a file longer than its stack buffer: %d bytes, %v", len(s), err)
	}
}

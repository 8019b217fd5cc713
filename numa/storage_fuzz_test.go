package numa

import (
	"strings"
	"testing"
)

// The storage side's parsers read what the kernel, nvidia-fs and an
// operator's cufile.json hold: an error or a value, never a panic.

func FuzzParseMountInfo(f *testing.F) {
	for _, s := range []string{
		"22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n",
		"30 22 9:0 / /raid rw,relatime shared:9 - xfs /dev/md0 rw,attr2\n31 22 259:5 / /scratch\\040space rw - ext4 /dev/nvme3n1 rw\n",
		"21 1 0:30 / / rw - overlay overlay rw,lowerdir=/a\n", "- - -\n", "1 2 3:4 / /x\\ rw - a b\n", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mounts, _ := parseMountInfo([]byte(s))
		for _, m := range mounts {
			if !strings.Contains(m.Device, ":") || m.FSType == "" {
				t.Fatalf("%q -> %+v", s, m)
			}
		}
	})
}

func FuzzParseNVFSStats(f *testing.F) {
	for _, s := range []string{
		"NVFS Driver(version: 2:17:5)\nReads : err=3 io_state_err=0\nOps : Read=1200 Write=40 BatchIO=0\n",
		"Ops : Read=x\n", "NVFS Driver(version:\n", ":\n=\n", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if st, err := ParseNVFSStats([]byte(s)); st == nil && err == nil {
			t.Fatalf("%q: neither stats nor an error", s)
		}
	})
}

func FuzzStripJSONComments(f *testing.F) {
	for _, s := range []string{`{"a": "//x", /* y */ "b": 1} // z`, `"\"//"`, "/*", "//", `{"properties": {"allow_compat_mode": false}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// Comments become at most one byte each: nothing grows.
		out := stripJSONComments([]byte(s))
		if len(out) > len(s) {
			t.Fatalf("%q grew to %q", s, out)
		}
	})
}

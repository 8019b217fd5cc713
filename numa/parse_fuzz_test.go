package numa

import (
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/sysfs"
)

// The parsers read files the machine writes; whatever they hold, they
// must return an error or a value, never panic. make test runs each of
// these for a few seconds; the seeds are real files from the fixtures and
// the borrowed VM.

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-55,112-167", "0-31\n", "", "3", "0,2,4-5", "56-111,168-223"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseCPUList(s)
		if err != nil {
			return
		}
		// What parses must print back to a list that parses to the same set.
		again, err := ParseCPUList(set.String())
		if err != nil || !again.Equal(set) {
			t.Fatalf("%q -> %q -> %v, %v", s, set.String(), again, err)
		}
	})
}

func FuzzParseLinkSpeed(f *testing.F) {
	for _, s := range []string{"32.0 GT/s PCIe", "2.5 GT/s PCIe", "8 GT/s", "Unknown", "16.0 GT/s PCIe\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseLinkSpeed(s)
		if err == nil && v.Valid && (v.V <= 0 || v.V > 1024e9) {
			t.Fatalf("%q -> %v", s, v.V)
		}
		if _, err := parseLinkWidth(s); err != nil {
			return
		}
	})
}

func FuzzParseNodeFiles(f *testing.F) {
	f.Add("numa_hit 554609\nnuma_miss 0\nnuma_foreign 0\ninterleave_hit 1345\nlocal_node 554609\nother_node 0\n")
	f.Add("Node 0 MemTotal:        4812272 kB\nNode 0 MemFree:         3381940 kB\nNode 0 HugePages_Total:     0\n")
	f.Add("10 21")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = parseKeyValues(s)
		_, _ = parseNodeMeminfo(s)
		_, _ = parseDistances(s, []int{0, 1})
		hb, chain := sysfs.ChainOf(s)
		if hb == "" && len(chain) > 0 {
			t.Fatalf("chain %v without host bridge from %q", chain, s)
		}
	})
}

func FuzzParseDriverFiles(f *testing.F) {
	f.Add("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  (dvs-builder@U16-I3-B03-4-3)  Fri May 31 09:30:47 UTC 2024\n")
	f.Add("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:15 UTC 2024\n")
	f.Add("5.15.0-1042-nvidia\n")
	f.Fuzz(func(t *testing.T, s string) {
		if _, branch, err := parseNVIDIAVersion(s); err == nil && (branch < 0 || branch > 999999) {
			t.Fatalf("%q: branch %d", s, branch)
		}
		if major, minor, err := parseKernelRelease(s); err == nil && (major < 0 || minor < 0 || major > 9999 || minor > 9999) {
			t.Fatalf("%q: %d.%d", s, major, minor)
		}
	})
}

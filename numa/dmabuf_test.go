package numa

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

func TestParseNVIDIAVersion(t *testing.T) {
	for _, c := range []struct {
		in     string
		open   bool
		branch int
		bad    bool
	}{
		{"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:15 UTC 2024\nGCC version:  gcc version 12.3.0\n", false, 535, false},
		{"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  (dvs-builder@U16-I3-B03-4-3)  Fri May 31 09:30:47 UTC 2024\n", true, 550, false},
		{"NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.159.04  Release Build  (dvs-builder@U22)  Thu Aug  7 2025\n", true, 580, false},
		{"NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82\n", false, 470, false},
		{"NVRM version: NVIDIA UNIX x86_64 Kernel Module  \nGCC version:  gcc version 12.3.0\n", false, 0, true},
		{"GCC version:  gcc version 12.3.0\n", false, 0, true},
		{"", false, 0, true},
		{"NVRM version: NVIDIA UNIX Kernel Module 99999999999.1\n", false, 0, true},
	} {
		open, branch, err := parseNVIDIAVersion(c.in)
		if (err != nil) != c.bad || open != c.open || branch != c.branch {
			t.Errorf("parseNVIDIAVersion(%.60q) = %v, %d, %v; want %v, %d, error %v", c.in, open, branch, err, c.open, c.branch, c.bad)
		}
	}
}

func TestParseKernelRelease(t *testing.T) {
	for _, c := range []struct {
		in           string
		major, minor int
		bad          bool
	}{
		{"5.15.0-1042-nvidia\n", 5, 15, false},
		{"6.8.0-1015-aws", 6, 8, false},
		{"5.12", 5, 12, false},
		{"4.18.0-513.el8.x86_64", 4, 18, false},
		{"6.10-rc1", 6, 10, false},
		{"6", 0, 0, true},
		{"", 0, 0, true},
		{"x.y.z", 0, 0, true},
		{"5.a", 0, 0, true},
	} {
		major, minor, err := parseKernelRelease(c.in)
		if (err != nil) != c.bad || major != c.major || minor != c.minor {
			t.Errorf("parseKernelRelease(%q) = %d.%d, %v; want %d.%d, error %v", c.in, major, minor, err, c.major, c.minor, c.bad)
		}
	}
}

func TestReadDMABuf(t *testing.T) {
	const (
		open        = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  (b)  Fri May 31 2024\n"
		openOld     = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  510.47.03  Release Build  (b)  2022\n"
		proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:15 UTC 2024\n"
		garbage     = "N/A\n"
	)
	for _, c := range []struct {
		name, version, release string // "" leaves the file out
		want                   sampler.Opt[bool]
		errs                   bool
	}{
		{"open on 5.15", open, "5.15.0-1042-nvidia\n", sampler.Some(true), false},
		{"open on 6.8", open, "6.8.0-1015-aws\n", sampler.Some(true), false},
		{"open on 5.12", open, "5.12.0\n", sampler.Some(true), false},
		{"open on 5.11", open, "5.11.0-27-generic\n", sampler.Some(false), false},
		{"open on 4.18", open, "4.18.0-513.el8.x86_64\n", sampler.Some(false), false},
		{"open before R515", openOld, "5.15.0\n", sampler.Some(false), false},
		{"proprietary", proprietary, "6.8.0\n", sampler.Some(false), false},
		{"proprietary, no release", proprietary, "", sampler.Some(false), false},
		{"no driver", "", "6.8.0\n", sampler.Opt[bool]{}, false},
		{"open, no release", open, "", sampler.Opt[bool]{}, false},
		{"version unparsable", garbage, "6.8.0\n", sampler.Opt[bool]{}, true},
		{"release unparsable", open, "linux\n", sampler.Opt[bool]{}, true},
	} {
		proc := t.TempDir()
		write := func(rel, data string) {
			if data == "" {
				return
			}
			p := filepath.Join(proc, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(data), 0o444); err != nil {
				t.Fatal(err)
			}
		}
		write("driver/nvidia/version", c.version)
		write("sys/kernel/osrelease", c.release)
		var tally sampler.Tally
		got := reader{hostfs.Root{Sys: t.TempDir(), Proc: proc}}.readDMABuf(&tally)
		if got != c.want || (tally.Err() != nil) != c.errs {
			t.Errorf("%s: %+v, errors %v; want %+v, errors %v", c.name, got, tally.Err(), c.want, c.errs)
		}
	}
	var tally sampler.Tally
	if got := (reader{hostfs.Root{Sys: t.TempDir()}}).readDMABuf(&tally); got.Valid || tally.Err() != nil {
		t.Errorf("no procfs root: %+v, %v", got, tally.Err())
	}
}

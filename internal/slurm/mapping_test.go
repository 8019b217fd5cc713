package slurm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

func TestParseMappingName(t *testing.T) {
	for _, tc := range []struct {
		name          string
		gpu, instance int
		ok            bool
	}{
		{"0", 0, -1, true},
		{"7", 7, -1, true},
		{"12", 12, -1, true},
		{"0.1", 0, 1, true},
		{"3.14", 3, 14, true},
		{"", 0, 0, false},
		{".1", 0, 0, false},
		{"1.", 0, 0, false},
		{"1.2.3", 0, 0, false},
		{"-1", 0, 0, false},
		{"+1", 0, 0, false},
		{"1a", 0, 0, false},
		{"GPU-0", 0, 0, false},
		{"0.tmp", 0, 0, false},
		{".0.swp", 0, 0, false},
		{"9999999", 0, 0, false},
	} {
		gpu, instance, ok := parseMappingName(tc.name)
		if ok != tc.ok || ok && (gpu != tc.gpu || instance != tc.instance) {
			t.Errorf("parseMappingName(%q) = %d, %d, %v; want %d, %d, %v", tc.name, gpu, instance, ok, tc.gpu, tc.instance, tc.ok)
		}
	}
}

func TestParseMappingJobs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		// soperator's prolog: printf, no newline.
		{in: "4242", want: []string{"4242"}},
		// echo >> for each job sharing the GPU.
		{in: "4242\n4343\n", want: []string{"4242", "4343"}},
		{in: "4242\r\n\n  4343  \n4242\n", want: []string{"4242", "4343"}},
		{in: "s5K1KKYAYG5D00\n1234_7\n", want: []string{"s5K1KKYAYG5D00", "1234_7"}},
		{in: ""},
		{in: "\n\n"},
		{in: "42 43\n", err: "line 1"},
		{in: "1\n\x00\n", err: "line 2"},
		{in: "\xff\n", err: "line 1"},
		{in: strings.Repeat("9", maxJobID+1), err: "line 1"},
		{in: strings.Repeat("1\n2\n", 10) + func() string {
			var b strings.Builder
			for i := range maxJobsPerGPU + 1 {
				b.WriteString("j" + strings.Repeat("x", i) + "\n")
			}
			return b.String()
		}(), err: "more than"},
		{in: strings.Repeat("\n", maxMappingFile+2), err: "over"},
		{in: strings.Repeat("\n", maxMappingFile+1), err: "over"},
		{in: strings.Repeat("\n", maxMappingFile-1) + "7", want: []string{"7"}},
		{in: strings.Repeat("\n", maxMappingFile), want: nil},
		{in: strings.Repeat("x", maxMappingFile+2), err: "over"},
	} {
		got, err := parseMappingJobs(strings.NewReader(tc.in))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%.30q: err %v, want one saying %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("%.30q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

var identities = []nvml.Identity{
	{Index: 0, UUID: "GPU-a", PCIBusID: "0000:18:00.0"},
	{Index: 1, UUID: "GPU-b", PCIBusID: "0000:2a:00.0"},
}

func write(t *testing.T, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A directory as prologs leave it: files for whole GPUs and MIG
// instances, others to skip, and files that cannot be used, each dropped
// and counted.
func TestMappingReader(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "0", "4242")
	write(t, dir, "1", "4343\n4444\n")
	write(t, dir, "1.2", "4545\n")
	write(t, dir, "0.tmp", "1\n")         // not a mapping file
	write(t, dir, "README", "whatever\n") // nor this
	write(t, dir, "5", "4646\n")          // no GPU 5: counted
	write(t, dir, "2", "")                // no GPU 2 either, but empty
	if err := os.Mkdir(filepath.Join(dir, "3"), 0o755); err != nil {
		t.Fatal(err) // a directory is skipped
	}
	r := &MappingReader{Dir: dir, GPUs: func() []nvml.Identity { return identities }}
	snap, err := r.Sample(context.Background())
	var partial *sampler.PartialError
	if !errors.As(err, &partial) || partial.Count != 2 || !strings.Contains(err.Error(), "names GPU") {
		t.Errorf("err %v, want a PartialError counting files 5 and 2", err)
	}
	want := []Mapping{
		{GPU: 0, GPUInstance: -1, UUID: "GPU-a", PCIBusID: "0000:18:00.0", Jobs: []string{"4242"}},
		{GPU: 1, GPUInstance: -1, UUID: "GPU-b", PCIBusID: "0000:2a:00.0", Jobs: []string{"4343", "4444"}},
		{GPU: 1, GPUInstance: 2, UUID: "GPU-b", PCIBusID: "0000:2a:00.0", Jobs: []string{"4545"}},
	}
	if snap == nil || !reflect.DeepEqual(snap.Files, want) {
		t.Errorf("mappings %+v, want %+v", snap, want)
	}

	// Without NVML every file is kept, by index alone.
	r.GPUs = func() []nvml.Identity { return nil }
	snap, err = r.Sample(context.Background())
	if err != nil || len(snap.Files) != 4 || snap.Files[3].GPU != 5 || snap.Files[3].UUID != "" {
		t.Errorf("without NVML: %+v, %v", snap, err)
	}

	// A file that does not hold job IDs is dropped and counted.
	write(t, dir, "0", "4242 4343\n")
	snap, err = r.Sample(context.Background())
	if !errors.As(err, &partial) || partial.Count != 1 || !strings.Contains(err.Error(), filepath.Join(dir, "0")) || len(snap.Files) != 3 {
		t.Errorf("bad file: %+v, %v", snap, err)
	}
}

func TestMappingReaderDirectory(t *testing.T) {
	// Not there (yet): no mappings, no error.
	r := &MappingReader{Dir: filepath.Join(t.TempDir(), "dcgm-job-map")}
	if snap, err := r.Sample(context.Background()); err != nil || len(snap.Files) != 0 {
		t.Errorf("missing directory: %+v, %v", snap, err)
	}
	// A file where the directory should be fails the sample.
	f := filepath.Join(t.TempDir(), "file")
	write(t, filepath.Dir(f), "file", "1\n")
	r.Dir = f
	if snap, err := r.Sample(context.Background()); err == nil {
		t.Errorf("a file as the directory: %+v, no error", snap)
	}
}

func TestGPUJobs(t *testing.T) {
	const sluid = "s5K1KKYAYG5D00"
	proc := func(pid int, j process.SlurmJob) process.GPUProcess {
		return process.GPUProcess{Placement: &process.Placement{PID: pid, Slurm: j}}
	}
	procs := &process.Snapshot{GPUs: []process.GPU{
		{GPU: 0, UUID: "GPU-a", PCIBusID: "0000:18:00.0", Procs: []process.GPUProcess{
			proc(10, process.SlurmJob{ID: "4242", Step: "0", Task: "0"}),
			proc(11, process.SlurmJob{ID: "4242", Step: "0", Task: "1"}), // same job: once
			proc(12, process.SlurmJob{}),                                 // not in Slurm
		}},
		{GPU: 1, UUID: "GPU-b", PCIBusID: "0000:2a:00.0", Procs: []process.GPUProcess{
			proc(20, process.SlurmJob{ID: "4343", SLUID: sluid, Step: "0"}),
			proc(21, process.SlurmJob{SLUID: "s00000000000AB", Step: "batch"}),
		}},
	}}
	files := &Mappings{Files: []Mapping{
		{GPU: 1, GPUInstance: -1, UUID: "GPU-b", PCIBusID: "0000:2a:00.0", Jobs: []string{"4343"}},
		{GPU: 1, GPUInstance: 3, UUID: "GPU-b", PCIBusID: "0000:2a:00.0", Jobs: []string{"4343"}},
		{GPU: 2, GPUInstance: -1, Jobs: []string{"5000", "5001"}},
	}}
	want := []GPUJob{
		{GPU: 0, UUID: "GPU-a", PCIBusID: "0000:18:00.0", JobID: "4242", Cgroup: true},
		{GPU: 1, UUID: "GPU-b", PCIBusID: "0000:2a:00.0", JobID: "4343", SLUID: sluid, Cgroup: true, MappingFile: true},
		{GPU: 1, UUID: "GPU-b", PCIBusID: "0000:2a:00.0", JobID: "s00000000000AB", SLUID: "s00000000000AB", Cgroup: true},
		{GPU: 1, UUID: "GPU-b", PCIBusID: "0000:2a:00.0", GPUInstance: "3", JobID: "4343", MappingFile: true},
		{GPU: 2, JobID: "5000", MappingFile: true},
		{GPU: 2, JobID: "5001", MappingFile: true},
	}
	if got := GPUJobs(procs, files); !reflect.DeepEqual(got, want) {
		t.Errorf("GPUJobs:\n got %+v\nwant %+v", got, want)
	}
	// A prolog that writes SLURM_JOB_SLUID names the job the process's
	// environment numbers: one job, found both ways.
	sluidFiles := &Mappings{Files: []Mapping{{GPU: 1, GPUInstance: -1, Jobs: []string{sluid}}}}
	wantSLUID := []GPUJob{want[0],
		{GPU: 1, UUID: "GPU-b", PCIBusID: "0000:2a:00.0", JobID: "4343", SLUID: sluid, Cgroup: true, MappingFile: true},
		want[2]}
	if got := GPUJobs(procs, sluidFiles); !reflect.DeepEqual(got, wantSLUID) {
		t.Errorf("GPUJobs with the SLUID in the mapping file:\n got %+v\nwant %+v", got, wantSLUID)
	}
	if got := GPUJobs(nil, nil); len(got) != 0 {
		t.Errorf("GPUJobs(nil, nil) = %+v", got)
	}
	if want[0].Source() != "cgroup" || want[1].Source() != "cgroup,mapping_file" || want[3].Source() != "mapping_file" {
		t.Errorf("sources %q %q %q", want[0].Source(), want[1].Source(), want[3].Source())
	}
}

// Whatever a mapping file holds, its jobs are IDs found in it, each once,
// at most maxJobsPerGPU, or it is an error.
func FuzzParseMappingJobs(f *testing.F) {
	for _, s := range []string{"4242", "4242\n4343\n", "s5K1KKYAYG5D00\r\n", "42 43\n", "\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		jobs, err := parseMappingJobs(strings.NewReader(in))
		if err != nil {
			return
		}
		if len(jobs) > maxJobsPerGPU {
			t.Fatalf("%q: %d jobs", in, len(jobs))
		}
		for i, j := range jobs {
			if j == "" || len(j) > maxJobID || !strings.Contains(in, j) || slices.Contains(jobs[:i], j) {
				t.Fatalf("%q: job %q of %q", in, j, jobs)
			}
		}
	})
}

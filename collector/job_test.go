package collector_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape/scrapetest"
	"github.com/gpulink/gpulink_exporter/internal/slurm"
)

const jobInfoHeader = `# HELP gpulink_gpu_job_info A Slurm job holds the GPU; value 1. job_id is the numeric job ID, or the SLUID where only that is known (job_sluid); source says what found it: cgroup (a process on the GPU runs in the job's cgroup), mapping_file (the GPU's file in --slurm.job-mapping-dir names it), or both. gpu_instance is the MIG instance a mapping file <gpu>.<instance> names.
# TYPE gpulink_gpu_job_info gauge
`

// The jobs of the process source and of the mapping files are one family,
// a job found both ways one series; either source alone serves it too.
func TestJobInfo(t *testing.T) {
	files := &slurm.Mappings{Files: []slurm.Mapping{
		{GPU: 6, GPUInstance: -1, UUID: "GPU-6", PCIBusID: "0000:ba:00.0", Jobs: []string{"4343"}},
		{GPU: 7, GPUInstance: -1, UUID: "GPU-7", PCIBusID: "0000:db:00.0", Jobs: []string{"5000"}},
		{GPU: 7, GPUInstance: 2, UUID: "GPU-7", PCIBusID: "0000:db:00.0", Jobs: []string{"5001"}},
	}}
	both := collector.NewJobCollector(fixed(placementSnapshot()), fixed(files))
	scrapetest.CheckText(t, both)
	want := jobInfoHeader +
		`gpulink_gpu_job_info{gpu="6",gpu_instance="",job_id="4343",job_sluid="s5K1KKYAYG5D00",pci_bus_id="0000:ba:00.0",source="cgroup,mapping_file",uuid="GPU-6"} 1
gpulink_gpu_job_info{gpu="7",gpu_instance="",job_id="5000",job_sluid="",pci_bus_id="0000:db:00.0",source="mapping_file",uuid="GPU-7"} 1
gpulink_gpu_job_info{gpu="7",gpu_instance="2",job_id="5001",job_sluid="",pci_bus_id="0000:db:00.0",source="mapping_file",uuid="GPU-7"} 1
`
	if err := testutil.CollectAndCompare(both, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	lintClean(t, both)
	promtoolCheck(t, "job", exposition(t, both))

	cgroupOnly := collector.NewJobCollector(fixed(placementSnapshot()), nil)
	want = jobInfoHeader +
		`gpulink_gpu_job_info{gpu="6",gpu_instance="",job_id="4343",job_sluid="s5K1KKYAYG5D00",pci_bus_id="0000:ba:00.0",source="cgroup",uuid="GPU-6"} 1
`
	if err := testutil.CollectAndCompare(cgroupOnly, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// A source that is off, passed as wiring passes it: its nil sampler.
	var off *sampler.Sampler[*process.Snapshot]
	filesOnly := collector.NewJobCollector(off, fixed(files))
	if n := testutil.CollectAndCount(filesOnly); n != 3 {
		t.Errorf("mapping files alone: %d series, want 3", n)
	}
	if n := testutil.CollectAndCount(collector.NewJobCollector(off, nil)); n != 0 {
		t.Errorf("both off: %d series", n)
	}
}

// A new snapshot of either source renders anew.
func TestJobInfoFollowsEitherSource(t *testing.T) {
	procs := &settable[*process.Snapshot]{}
	files := &settable[*slurm.Mappings]{}
	c := collector.NewJobCollector(procs, files)
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("before any snapshot: %d series", n)
	}
	files.set(&slurm.Mappings{Files: []slurm.Mapping{{GPU: 0, GPUInstance: -1, Jobs: []string{"1"}}}})
	if n := testutil.CollectAndCount(c); n != 1 {
		t.Fatalf("after the mapping files: %d series", n)
	}
	procs.set(placementSnapshot())
	if n := testutil.CollectAndCount(c); n != 2 {
		t.Fatalf("after the processes: %d series", n)
	}
	files.set(&slurm.Mappings{})
	if n := testutil.CollectAndCount(c); n != 1 {
		t.Fatalf("after the mapping files emptied: %d series", n)
	}
}

// settable is a source whose snapshot a test replaces.
type settable[T any] struct{ snap *sampler.Snapshot[T] }

func (s *settable[T]) set(v T)                      { s.snap = &sampler.Snapshot[T]{Data: v} }
func (s *settable[T]) Latest() *sampler.Snapshot[T] { return s.snap }

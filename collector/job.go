package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/internal/slurm"
)

// JobCollector renders the Slurm job on each GPU as an info series, from
// the processes' cgroups and the job-mapping files together, so that a
// job found both ways is one series. Like gpulink_gpu_pod_info, job IDs
// are not put on every per-GPU series; the info series joins them on in a
// query.
type JobCollector struct {
	scrape.Rendered[jobSources]
	info *prometheus.Desc
}

// jobSources are the latest snapshots of the two sources; either nil.
type jobSources = pair[*process.Snapshot, *slurm.Mappings]

// NewJobCollector renders the jobs of the process source's snapshots and
// of the job-mapping files' (either may be nil: that source is off).
func NewJobCollector(procs scrape.Source[*process.Snapshot], files scrape.Source[*slurm.Mappings]) *JobCollector {
	c := &JobCollector{
		info: gpuDesc("gpu", "job_info",
			"A Slurm job holds the GPU; value 1. job_id is the numeric job ID, or the SLUID where only that is known (job_sluid); source says what found it: cgroup (a process on the GPU runs in the job's cgroup), mapping_file (the GPU's file in --slurm.job-mapping-dir names it), or both. gpu_instance is the MIG instance a mapping file <gpu>.<instance> names.",
			"gpu_instance", "job_id", "job_sluid", "source"),
	}
	c.Init(join(procs, files), rendering(c.render))
	return c
}

// Describe implements prometheus.Collector.
func (c *JobCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.info }

func (c *JobCollector) render(o *out, s jobSources) {
	for _, j := range slurm.GPUJobs(s.A, s.B) {
		o.gauge(c.info, 1, itoa(j.GPU), j.UUID, j.PCIBusID, j.GPUInstance, j.JobID, j.SLUID, j.Source())
	}
}

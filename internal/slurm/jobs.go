package slurm

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/gpulink/gpulink_exporter/internal/process"
)

// GPUJob is one Slurm job on one GPU (or MIG instance), and what says so.
type GPUJob struct {
	GPU            int
	UUID, PCIBusID string
	// GPUInstance is the MIG GPU instance ID a mapping file names; "" for
	// the whole GPU (and for every job found through a process).
	GPUInstance string
	// JobID is the numeric job ID where known, else the SLUID (see
	// process.SlurmJob.Label).
	JobID string
	// SLUID is the job's SLUID where a process's cgroup path names it.
	SLUID string
	// Cgroup is set where a process on the GPU runs in the job's cgroup,
	// MappingFile where the GPU's mapping file names the job.
	Cgroup, MappingFile bool
}

// Source says what found the job: "cgroup", "mapping_file", or both,
// "cgroup,mapping_file".
func (j GPUJob) Source() string {
	switch {
	case j.Cgroup && j.MappingFile:
		return "cgroup,mapping_file"
	case j.Cgroup:
		return "cgroup"
	}
	return "mapping_file"
}

// GPUJobs joins the jobs the processes' cgroups give with those the
// mapping files give, one entry per GPU, GPU instance and job, sorted by
// them. Either snapshot may be nil. A job found both ways is one entry,
// marked with both: also where a prolog wrote the job's SLUID
// (SLURM_JOB_SLUID) and the process's environment gave its number.
func GPUJobs(procs *process.Snapshot, files *Mappings) []GPUJob {
	type key struct {
		gpu      int
		instance string
		job      string
	}
	index := map[key]int{}
	var out []GPUJob
	add := func(j GPUJob) *GPUJob {
		k := key{j.GPU, j.GPUInstance, j.JobID}
		if i, ok := index[k]; ok {
			return &out[i]
		}
		index[k] = len(out)
		out = append(out, j)
		return &out[len(out)-1]
	}
	// bySLUID finds the entries of cgroup jobs known by number by their
	// SLUID too.
	bySLUID := map[key]int{}
	if procs != nil {
		for _, g := range procs.GPUs {
			for _, p := range g.Procs {
				s := p.Placement.Slurm
				if s.Label() == "" {
					continue
				}
				j := add(GPUJob{GPU: g.GPU, UUID: g.UUID, PCIBusID: g.PCIBusID, JobID: s.Label()})
				j.Cgroup = true
				j.SLUID = cmp.Or(j.SLUID, s.SLUID)
				if j.SLUID != "" && j.SLUID != j.JobID {
					bySLUID[key{j.GPU, j.GPUInstance, j.SLUID}] = index[key{j.GPU, j.GPUInstance, j.JobID}]
				}
			}
		}
	}
	if files != nil {
		for _, f := range files.Files {
			instance := ""
			if f.GPUInstance >= 0 {
				instance = strconv.Itoa(f.GPUInstance)
			}
			for _, id := range f.Jobs {
				var j *GPUJob
				if i, ok := bySLUID[key{f.GPU, instance, id}]; ok {
					j = &out[i]
				} else {
					j = add(GPUJob{GPU: f.GPU, UUID: f.UUID, PCIBusID: f.PCIBusID, GPUInstance: instance, JobID: id})
				}
				j.MappingFile = true
				// The process source knows the GPU when NVML did at
				// its sample; keep what either knows.
				j.UUID, j.PCIBusID = cmp.Or(j.UUID, f.UUID), cmp.Or(j.PCIBusID, f.PCIBusID)
			}
		}
	}
	slices.SortFunc(out, func(a, b GPUJob) int {
		return cmp.Or(cmp.Compare(a.GPU, b.GPU), cmp.Compare(a.GPUInstance, b.GPUInstance), cmp.Compare(a.JobID, b.JobID))
	})
	return out
}

package collector

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
)

// processLabels name a process on a GPU. pod_uid and container_id are
// empty outside Kubernetes and containers; slurm_job_id (the numeric job
// ID, else the SLUID) and slurm_step outside a Slurm job step. Only
// processes holding a GPU have series, so their number is bounded by what
// the GPUs can hold, and a process keeps its job and step for life.
var processLabels = []string{"pid", "comm", "pod_uid", "container_id", "slurm_job_id", "slurm_step"}

func processDesc(name, help string, extra ...string) *prometheus.Desc {
	return gpuDesc("process", name, help, append(append([]string{}, processLabels...), extra...)...)
}

// ProcessCollector renders the placement of GPU processes: per GPU the
// processes and how many are misaffine, and, unless turned off, per
// process the ratios the verdict rests on.
type ProcessCollector struct {
	scrape.Rendered[*process.Snapshot]
	perProcess bool

	processes, misaffineProcesses, unknownProcesses  *prometheus.Desc
	misaffine, remoteCPU, remoteThread, remoteMemory *prometheus.Desc
	memoryBytes, gpuMemoryUsed, allowedCPUs          *prometheus.Desc
}

// NewProcessCollector renders the placement source's snapshots. With
// perProcess false only the per-GPU counts are exported.
func NewProcessCollector(src scrape.Source[*process.Snapshot], perProcess bool) *ProcessCollector {
	c := &ProcessCollector{
		perProcess: perProcess,
		processes: gpuDesc("gpu", "processes",
			"Compute processes on the GPU (NVML, MPS clients included), leaving out any that exited while being read."),
		misaffineProcesses: gpuDesc("gpu", "misaffine_processes",
			"Processes on the GPU whose CPUs, threads or resident memory sit mostly on another NUMA node than the GPU's (see gpulink_process_misaffine)."),
		unknownProcesses: gpuDesc("gpu", "placement_unknown_processes",
			"Processes on the GPU whose placement could not be judged: the GPU's NUMA node is unknown on a machine of several nodes, or a file of the process could not be read."),
		misaffine: processDesc("misaffine",
			"1 if more than half of the process's allowed CPUs, of its threads (by the CPU each last ran on) or of its resident memory is off its GPU's NUMA node, or none of its allowed CPUs is on that node. Always 0 on a machine of one node."),
		allowedCPUs: processDesc("allowed_cpus",
			"CPUs the process may run on (Cpus_allowed_list: taskset, cgroup cpuset)."),
		remoteCPU: processDesc("remote_cpu_ratio",
			"Share of the CPUs the process may run on (Cpus_allowed_list) that are not on its GPU's NUMA node."),
		remoteThread: processDesc("remote_thread_ratio",
			"Share of the process's threads that last ran on a CPU off its GPU's NUMA node."),
		remoteMemory: processDesc("remote_memory_ratio",
			"Share of the process's resident memory (/proc/<pid>/numa_maps) on NUMA nodes other than its GPU's."),
		memoryBytes: processDesc("memory_bytes",
			"Host memory the process has resident on the NUMA node, anonymous and file pages it maps (/proc/<pid>/numa_maps).", "numa_node"),
		gpuMemoryUsed: processDesc("gpu_memory_used_bytes",
			"Device memory the process holds on the GPU (NVML)."),
	}
	c.Init(src, rendering(c.render))
	return c
}

func (c *ProcessCollector) descs() []*prometheus.Desc {
	d := []*prometheus.Desc{c.processes, c.misaffineProcesses, c.unknownProcesses}
	if c.perProcess {
		d = append(d, c.misaffine, c.allowedCPUs, c.remoteCPU, c.remoteThread, c.remoteMemory, c.memoryBytes, c.gpuMemoryUsed)
	}
	return d
}

// Describe implements prometheus.Collector.
func (c *ProcessCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

func (c *ProcessCollector) render(o *out, s *process.Snapshot) {
	for i := range s.GPUs {
		g := &s.GPUs[i]
		gpuLabels := []string{itoa(g.GPU), g.UUID, g.PCIBusID}
		o.Labels = gpuLabels
		o.gauge(c.processes, float64(g.Processes))
		o.gauge(c.misaffineProcesses, float64(g.Misaffine))
		o.gauge(c.unknownProcesses, float64(g.Unknown))
		if !c.perProcess {
			continue
		}
		for _, p := range g.Procs {
			pl := p.Placement
			// comm is whatever the process named itself: label values
			// must be UTF-8.
			o.Labels = append(slices.Clip(gpuLabels), itoa(pl.PID), strings.ToValidUTF8(pl.Comm, "\uFFFD"),
				pl.PodUID, pl.ContainerID, pl.Slurm.Label(), pl.Slurm.Step)
			o.optBool(c.misaffine, p.Misaffine)
			if pl.AllowedCPUs.Valid {
				o.gauge(c.allowedCPUs, float64(pl.AllowedCPUs.V.Count()))
			}
			o.optGauge(c.remoteCPU, p.RemoteCPURatio)
			o.optGauge(c.remoteThread, p.RemoteThreadRatio)
			o.optGauge(c.remoteMemory, p.RemoteMemoryRatio)
			if pl.MemoryByNode.Valid {
				nodes := make([]int, 0, len(pl.MemoryByNode.V))
				for n := range pl.MemoryByNode.V {
					nodes = append(nodes, n)
				}
				slices.Sort(nodes)
				for _, n := range nodes {
					o.gauge(c.memoryBytes, float64(pl.MemoryByNode.V[n]), itoa(n))
				}
			}
			o.optGauge(c.gpuMemoryUsed, p.UsedGPUMemory)
		}
	}
}

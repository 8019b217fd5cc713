package collector_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape/scrapetest"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
	"github.com/gpulink/gpulink_exporter/numa"
)

const (
	placementPod = "1f0e8a2c-5b7d-4c3e-9a41-6f2d8e7b9c10"
	placementCtr = "4f8a1d2c9b7e6f5a3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b"
)

func placementCPUs(s string) sampler.Opt[numa.CPUSet] {
	c, err := numa.ParseCPUList(s)
	if err != nil {
		panic(err)
	}
	return sampler.Some(c)
}

// placementSnapshot has a healthy process in a pod, one pinned to the far
// socket whose name is not UTF-8, one in a Slurm job step on a GPU whose
// node is unknown, and a GPU without processes.
func placementSnapshot() *process.Snapshot {
	f := sampler.Some[float64]
	return &process.Snapshot{GPUs: []process.GPU{
		{GPU: 0, UUID: "GPU-0", PCIBusID: "0000:18:00.0", NUMANode: 0, Processes: 1, Procs: []process.GPUProcess{{
			Placement: &process.Placement{PID: 4242, Comm: "python", PodUID: placementPod, ContainerID: placementCtr,
				AllowedCPUs:  placementCPUs("0-55,112-167"),
				MemoryByNode: sampler.Some(map[int]uint64{0: 8192000000, 1: 49152000})},
			UsedGPUMemory: f(1073741824),
			Verdict: numa.Verdict{RemoteCPURatio: f(0), RemoteThreadRatio: f(0.125), RemoteMemoryRatio: f(0.25),
				NoLocalCPU: sampler.Some(false), Misaffine: sampler.Some(false)},
		}}},
		{GPU: 4, UUID: "GPU-4", PCIBusID: "0000:9a:00.0", NUMANode: 1, Processes: 1, Misaffine: 1, Procs: []process.GPUProcess{{
			Placement: &process.Placement{PID: 5151, Comm: "bad\xffname", AllowedCPUs: placementCPUs("56-111,168-223"),
				MemoryByNode: sampler.Some(map[int]uint64{1: 819200000, 0: 7372800000})},
			Verdict: numa.Verdict{RemoteCPURatio: f(1), RemoteThreadRatio: f(1), RemoteMemoryRatio: f(0.9),
				NoLocalCPU: sampler.Some(true), Misaffine: sampler.Some(true)},
		}}},
		{GPU: 6, UUID: "GPU-6", PCIBusID: "0000:ba:00.0", NUMANode: -1, Processes: 1, Unknown: 1, Procs: []process.GPUProcess{{
			Placement: &process.Placement{PID: 6161, Comm: "python", MemoryByNode: sampler.Some(map[int]uint64{0: 4096}),
				Slurm: process.SlurmJob{ID: "4343", SLUID: "s5K1KKYAYG5D00", Step: "0+1", Task: "0"}},
		}}},
		{GPU: 7, UUID: "GPU-7", PCIBusID: "0000:db:00.0", NUMANode: 1},
	}}
}

const placementPerGPUText = `# HELP gpulink_gpu_misaffine_processes Processes on the GPU whose CPUs, threads or resident memory sit mostly on another NUMA node than the GPU's (see gpulink_process_misaffine).
# TYPE gpulink_gpu_misaffine_processes gauge
gpulink_gpu_misaffine_processes{gpu="0",pci_bus_id="0000:18:00.0",uuid="GPU-0"} 0
gpulink_gpu_misaffine_processes{gpu="4",pci_bus_id="0000:9a:00.0",uuid="GPU-4"} 1
gpulink_gpu_misaffine_processes{gpu="6",pci_bus_id="0000:ba:00.0",uuid="GPU-6"} 0
gpulink_gpu_misaffine_processes{gpu="7",pci_bus_id="0000:db:00.0",uuid="GPU-7"} 0
# HELP gpulink_gpu_placement_unknown_processes Processes on the GPU whose placement could not be judged: the GPU's NUMA node is unknown on a machine of several nodes, or a file of the process could not be read.
# TYPE gpulink_gpu_placement_unknown_processes gauge
gpulink_gpu_placement_unknown_processes{gpu="0",pci_bus_id="0000:18:00.0",uuid="GPU-0"} 0
gpulink_gpu_placement_unknown_processes{gpu="4",pci_bus_id="0000:9a:00.0",uuid="GPU-4"} 0
gpulink_gpu_placement_unknown_processes{gpu="6",pci_bus_id="0000:ba:00.0",uuid="GPU-6"} 1
gpulink_gpu_placement_unknown_processes{gpu="7",pci_bus_id="0000:db:00.0",uuid="GPU-7"} 0
# HELP gpulink_gpu_processes Compute processes on the GPU (NVML, MPS clients included), leaving out any that exited while being read.
# TYPE gpulink_gpu_processes gauge
gpulink_gpu_processes{gpu="0",pci_bus_id="0000:18:00.0",uuid="GPU-0"} 1
gpulink_gpu_processes{gpu="4",pci_bus_id="0000:9a:00.0",uuid="GPU-4"} 1
gpulink_gpu_processes{gpu="6",pci_bus_id="0000:ba:00.0",uuid="GPU-6"} 1
gpulink_gpu_processes{gpu="7",pci_bus_id="0000:db:00.0",uuid="GPU-7"} 0
`

const placementPerProcessText = `# HELP gpulink_process_allowed_cpus CPUs the process may run on (Cpus_allowed_list: taskset, cgroup cpuset).
# TYPE gpulink_process_allowed_cpus gauge
gpulink_process_allowed_cpus{comm="python",container_id="` + placementCtr + `",gpu="0",pci_bus_id="0000:18:00.0",pid="4242",pod_uid="` + placementPod + `",slurm_job_id="",slurm_step="",uuid="GPU-0"} 112
gpulink_process_allowed_cpus{comm="bad�name",container_id="",gpu="4",pci_bus_id="0000:9a:00.0",pid="5151",pod_uid="",slurm_job_id="",slurm_step="",uuid="GPU-4"} 112
# HELP gpulink_process_gpu_memory_used_bytes Device memory the process holds on the GPU (NVML).
# TYPE gpulink_process_gpu_memory_used_bytes gauge
gpulink_process_gpu_memory_used_bytes{comm="python",container_id="` + placementCtr + `",gpu="0",pci_bus_id="0000:18:00.0",pid="4242",pod_uid="` + placementPod + `",slurm_job_id="",slurm_step="",uuid="GPU-0"} 1.073741824e+09
# HELP gpulink_process_memory_bytes Host memory the process has resident on the NUMA node, anonymous and file pages it maps (/proc/<pid>/numa_maps).
# TYPE gpulink_process_memory_bytes gauge
gpulink_process_memory_bytes{comm="python",container_id="` + placementCtr + `",gpu="0",numa_node="0",pci_bus_id="0000:18:00.0",pid="4242",pod_uid="` + placementPod + `",slurm_job_id="",slurm_step="",uuid="GPU-0"} 8.192e+09
gpulink_process_memory_bytes{comm="python",container_id="` + placementCtr + `",gpu="0",numa_node="1",pci_bus_id="0000:18:00.0",pid="4242",pod_uid="` + placementPod + `",slurm_job_id="",slurm_step="",uuid="GPU-0"} 4.9152e+07
gpulink_process_memory_bytes{comm="bad�name",container_id="",gpu="4",numa_node="0",pci_bus_id="0000:9a:00.0",pid="5151",pod_uid="",slurm_job_id="",slurm_step="",uuid="GPU-4"} 7.3728e+09
gpulink_process_memory_bytes{comm="bad�name",container_id="",gpu="4",numa_node="1",pci_bus_id="0000:9a:00.0",pid="5151",pod_uid="",slurm_job_id="",slurm_step="",uuid="GPU-4"} 8.192e+08
gpulink_process_memory_bytes{comm="python",container_id="",gpu="6",numa_node="0",pci_bus_id="0000:ba:00.0",pid="6161",pod_uid="",slurm_job_id="4343",slurm_step="0+1",uuid="GPU-6"} 4096
# HELP gpulink_process_misaffine 1 if more than half of the process's allowed CPUs, of its threads (by the CPU each last ran on) or of its resident memory is off its GPU's NUMA node, or none of its allowed CPUs is on that node. Always 0 on a machine of one node.
# TYPE gpulink_process_misaffine gauge
gpulink_process_misaffine{comm="python",container_id="` + placementCtr + `",gpu="0",pci_bus_id="0000:18:00.0",pid="4242",pod_uid="` + placementPod + `",slurm_job_id="",slurm_step="",uuid="GPU-0"} 0
gpulink_process_misaffine{comm="bad�name",container_id="",gpu="4",pci_bus_id="0000:9a:00.0",pid="5151",pod_uid="",slurm_job_id="",slurm_step="",uuid="GPU-4"} 1
# HELP gpulink_process_remote_cpu_ratio Share of the CPUs the process may run on (Cpus_allowed_list) that are not on its GPU's NUMA node.
# TYPE gpulink_process_remote_cpu_ratio gauge
gpulink_process_remote_cpu_ratio{comm="python",container_id="` + placementCtr + `",gpu="0",pci_bus_id="0000:18:00.0",pid="4242",pod_uid="` + placementPod + `",slurm_job_id="",slurm_step="",uuid="GPU-0"} 0
gpulink_process_remote_cpu_ratio{comm="bad�name",container_id="",gpu="4",pci_bus_id="0000:9a:00.0",pid="5151",pod_uid="",slurm_job_id="",slurm_step="",uuid="GPU-4"} 1
# HELP gpulink_process_remote_memory_ratio Share of the process's resident memory (/proc/<pid>/numa_maps) on NUMA nodes other than its GPU's.
# TYPE gpulink_process_remote_memory_ratio gauge
gpulink_process_remote_memory_ratio{comm="python",container_id="` + placementCtr + `",gpu="0",pci_bus_id="0000:18:00.0",pid="4242",pod_uid="` + placementPod + `",slurm_job_id="",slurm_step="",uuid="GPU-0"} 0.25
gpulink_process_remote_memory_ratio{comm="bad�name",container_id="",gpu="4",pci_bus_id="0000:9a:00.0",pid="5151",pod_uid="",slurm_job_id="",slurm_step="",uuid="GPU-4"} 0.9
# HELP gpulink_process_remote_thread_ratio Share of the process's threads that last ran on a CPU off its GPU's NUMA node.
# TYPE gpulink_process_remote_thread_ratio gauge
gpulink_process_remote_thread_ratio{comm="python",container_id="` + placementCtr + `",gpu="0",pci_bus_id="0000:18:00.0",pid="4242",pod_uid="` + placementPod + `",slurm_job_id="",slurm_step="",uuid="GPU-0"} 0.125
gpulink_process_remote_thread_ratio{comm="bad�name",container_id="",gpu="4",pci_bus_id="0000:9a:00.0",pid="5151",pod_uid="",slurm_job_id="",slurm_step="",uuid="GPU-4"} 1
`

var placementPerGPUNames = []string{"gpulink_gpu_misaffine_processes", "gpulink_gpu_placement_unknown_processes", "gpulink_gpu_processes"}

var placementPerProcessNames = []string{"gpulink_process_allowed_cpus", "gpulink_process_gpu_memory_used_bytes", "gpulink_process_memory_bytes",
	"gpulink_process_misaffine", "gpulink_process_remote_cpu_ratio", "gpulink_process_remote_memory_ratio",
	"gpulink_process_remote_thread_ratio"}

func TestProcessMetrics(t *testing.T) {
	c := collector.NewProcessCollector(fixed(placementSnapshot()), true)
	scrapetest.CheckText(t, c)
	want := placementPerGPUText + placementPerProcessText
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	lintClean(t, c)
	// A second scrape serves the same rendering.
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestProcessMetricsPerProcessOff(t *testing.T) {
	c := collector.NewProcessCollector(fixed(placementSnapshot()), false)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(placementPerGPUText)); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != len(placementPerGPUNames) {
		t.Errorf("%d families, want only the %d per-GPU ones", len(mfs), len(placementPerGPUNames))
	}
	lintClean(t, c)
}

func TestProcessMetricsBeforeFirstSample(t *testing.T) {
	c := collector.NewProcessCollector(fixedSource[*process.Snapshot]{}, true)
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("%d metrics before the first sample, want none", n)
	}
}

func lintClean(t *testing.T, c prometheus.Collector) {
	t.Helper()
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// placementNode is the daemon's wiring of the placement source over a
// fixture tree and a fake NVML whose GPUs carry the tree's processes.
type placementNode struct {
	fs     hostfs.Root
	m      *nvmlmodel.Library
	reader *nvml.Reader
	topo   *sampler.Sampler[*numa.Topology]
	place  *sampler.Sampler[*process.Snapshot]
}

func newPlacementNode(t *testing.T, profile string) *placementNode {
	t.Helper()
	root := machine.Load(t, profile)
	n := &placementNode{fs: hostfs.Under(root), m: nvmlmodel.NewDGXH100()}
	model := sim.Fixtures()[profile]()
	for i, g := range n.m.GPUs {
		var pids []int
		for _, p := range model.Processes {
			for _, bus := range p.GPUs {
				if bus == g.PciBusID {
					pids = append(pids, p.PID)
				}
			}
		}
		n.m.SetProcesses(i, 2<<30, pids...)
	}
	n.reader = nvml.NewReader(n.m, n.fs.Sys, nil)
	opts := sampler.Options{Interval: time.Hour, Timeout: 5 * time.Second}
	n.topo = sampler.New[*numa.Topology]("topology", &numa.TopologyReader{FS: n.fs}, opts)
	n.topo.SampleOnce(context.Background())
	n.place = sampler.New[*process.Snapshot]("process", &process.Reader{
		FS:        n.fs,
		Processes: n.reader.ComputeProcesses,
		GPUs:      n.reader.Identities,
		Topology:  n.topo.LatestData,
	}, opts)
	n.place.SampleOnce(context.Background())
	if st := n.place.Status(); !st.Up || n.place.Latest() == nil {
		t.Fatalf("placement sample: %+v", st)
	}
	return n
}

// dgx-h100-faults: pid 4242 on GPU 0 (node 0) runs on node 1's CPUs with
// 90% of its pages there. pid 5151 on GPU 4 and the MPS server 6161 on
// GPU 2 (unpinned, memory 55/45) are not misaffine.
func TestProcessMetricsDGXFaults(t *testing.T) {
	n := newPlacementNode(t, "dgx-h100-faults")
	c := collector.NewProcessCollector(n.place, true)
	lintClean(t, c)
	uuid := func(i int) string { return n.m.GPUs[i].UUID }
	var want strings.Builder
	want.WriteString("# HELP gpulink_gpu_misaffine_processes Processes on the GPU whose CPUs, threads or resident memory sit mostly on another NUMA node than the GPU's (see gpulink_process_misaffine).\n")
	want.WriteString("# TYPE gpulink_gpu_misaffine_processes gauge\n")
	for i, g := range n.m.GPUs {
		v := "0"
		if i == 0 {
			v = "1"
		}
		want.WriteString(`gpulink_gpu_misaffine_processes{gpu="` + string(rune('0'+i)) + `",pci_bus_id="` + g.PciBusID + `",uuid="` + uuid(i) + `"} ` + v + "\n")
	}
	want.WriteString("# HELP gpulink_gpu_processes Compute processes on the GPU (NVML, MPS clients included), leaving out any that exited while being read.\n")
	want.WriteString("# TYPE gpulink_gpu_processes gauge\n")
	for i, g := range n.m.GPUs {
		v := "0"
		if i == 0 || i == 2 || i == 4 {
			v = "1"
		}
		want.WriteString(`gpulink_gpu_processes{gpu="` + string(rune('0'+i)) + `",pci_bus_id="` + g.PciBusID + `",uuid="` + uuid(i) + `"} ` + v + "\n")
	}
	pod4242 := `container_id="` + fixtureContainer(t, n, 4242) + `",gpu="0",pci_bus_id="0000:18:00.0",pid="4242",pod_uid="` + placementPod + `",slurm_job_id="",slurm_step="",uuid="` + uuid(0) + `"`
	pod5151 := `container_id="` + fixtureContainer(t, n, 5151) + `",gpu="4",pci_bus_id="0000:9a:00.0",pid="5151",pod_uid="b6dcdec5-de98-5651-abf8-cfee8ab37743",slurm_job_id="",slurm_step="",uuid="` + uuid(4) + `"`
	mps := `container_id="",gpu="2",pci_bus_id="0000:3a:00.0",pid="6161",pod_uid="",slurm_job_id="",slurm_step="",uuid="` + uuid(2) + `"`
	want.WriteString(`# HELP gpulink_process_misaffine 1 if more than half of the process's allowed CPUs, of its threads (by the CPU each last ran on) or of its resident memory is off its GPU's NUMA node, or none of its allowed CPUs is on that node. Always 0 on a machine of one node.
# TYPE gpulink_process_misaffine gauge
gpulink_process_misaffine{comm="python",` + pod4242 + `} 1
gpulink_process_misaffine{comm="nvidia-cuda-mps",` + mps + `} 0
gpulink_process_misaffine{comm="python",` + pod5151 + `} 0
# HELP gpulink_process_remote_cpu_ratio Share of the CPUs the process may run on (Cpus_allowed_list) that are not on its GPU's NUMA node.
# TYPE gpulink_process_remote_cpu_ratio gauge
gpulink_process_remote_cpu_ratio{comm="python",` + pod4242 + `} 1
gpulink_process_remote_cpu_ratio{comm="nvidia-cuda-mps",` + mps + `} 0.5
gpulink_process_remote_cpu_ratio{comm="python",` + pod5151 + `} 0
# HELP gpulink_process_remote_memory_ratio Share of the process's resident memory (/proc/<pid>/numa_maps) on NUMA nodes other than its GPU's.
# TYPE gpulink_process_remote_memory_ratio gauge
gpulink_process_remote_memory_ratio{comm="python",` + pod4242 + `} 0.9
gpulink_process_remote_memory_ratio{comm="nvidia-cuda-mps",` + mps + `} 0.45
gpulink_process_remote_memory_ratio{comm="python",` + pod5151 + `} 0.004975124378109453
`)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want.String()), "gpulink_gpu_misaffine_processes", "gpulink_gpu_processes",
		"gpulink_process_misaffine", "gpulink_process_remote_cpu_ratio", "gpulink_process_remote_memory_ratio"); err != nil {
		t.Error(err)
	}
}

// fixtureContainer reads the container ID the fixture gave a process,
// from the snapshot: the tests of the numa package check the cgroup
// parsing itself.
func fixtureContainer(t *testing.T, n *placementNode, pid int) string {
	t.Helper()
	for _, g := range n.place.Latest().Data.GPUs {
		for _, p := range g.Procs {
			if p.Placement.PID == pid {
				if len(p.Placement.ContainerID) != 64 {
					t.Errorf("pid %d: container ID %q", pid, p.Placement.ContainerID)
				}
				return p.Placement.ContainerID
			}
		}
	}
	t.Fatalf("pid %d not in the snapshot", pid)
	return ""
}

// The full scrape of the DGX fixture's processes passes promtool when
// PROMTOOL is set (make test sets it).
func TestProcessMetricsPromtool(t *testing.T) {
	n := newPlacementNode(t, "dgx-h100-faults")
	for name, c := range map[string]prometheus.Collector{
		"fixed snapshot":  collector.NewProcessCollector(fixed(placementSnapshot()), true),
		"dgx-h100-faults": collector.NewProcessCollector(n.place, true),
	} {
		promtoolCheck(t, name, exposition(t, c))
	}
}

// Describe lists the per-process families only when they are on.
func TestProcessDescribe(t *testing.T) {
	for _, perProcess := range []bool{true, false} {
		c := collector.NewProcessCollector(fixedSource[*process.Snapshot]{}, perProcess)
		ch := make(chan *prometheus.Desc, 32)
		c.Describe(ch)
		close(ch)
		var got []string
		for d := range ch {
			got = append(got, d.String())
		}
		want := placementPerGPUNames
		if perProcess {
			want = append(append([]string{}, want...), placementPerProcessNames...)
		}
		if len(got) != len(want) {
			t.Fatalf("perProcess %v: %d descs, want %d", perProcess, len(got), len(want))
		}
		for _, name := range want {
			found := false
			for _, d := range got {
				found = found || strings.Contains(d, `fqName: "`+name+`"`)
			}
			if !found {
				t.Errorf("perProcess %v: %s not described", perProcess, name)
			}
		}
	}
}

package process_test

import (
	"slices"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/internal/slurm"
	"github.com/gpulink/gpulink_exporter/numa"
)

// The placement source over a lent GPU VM captured with a real GPU process
// (numa/testdata/captured/h100-vm, bench/capture-fixture.sh, 2026-12-07):
// pid 537, python3 holding memory on the H100, which the bench script moved
// into the cgroup v2 path a Slurm step's task gets,
// /system.slice/slurmstepd.scope/job_4242/step_0/user/task_0. NVML's process
// list is not in a capture, so it is what nvidia-smi said of the same
// machine in the same run (--query-compute-apps: "537, 1542 MiB"; -q: GPU
// 00000000:00:06.0, UUID GPU-658e400d-873d-71c9-5ab4-8a77b67edb19); the
// rest is read from the kernel's files. topo -m gives the GPU NUMA
// affinity 0 on the VM's one node, so nothing of the process is remote.
func TestPlacementCapturedH100VM(t *testing.T) {
	root := machine.LoadCaptured(t, "h100-vm")
	fs := hostfs.Under(root)
	topo, err := numa.ReadTopology(fs)
	if err != nil {
		t.Fatal(err)
	}
	const uuid, bus = "GPU-658e400d-873d-71c9-5ab4-8a77b67edb19", "0000:00:06.0"
	r := &process.Reader{FS: fs,
		Processes: func() ([]nvml.Process, error) {
			return []nvml.Process{{GPU: 0, UUID: uuid, PCIBusID: bus, PID: 537, UsedMemory: sampler.Some(1542.0 * (1 << 20))}}, nil
		},
		Topology: func() *numa.Topology { return topo },
		GPUs:     func() []nvml.Identity { return []nvml.Identity{{Index: 0, UUID: uuid, PCIBusID: bus}} }}
	snap := sample(t, r)
	if len(snap.GPUs) != 1 {
		t.Fatalf("GPUs %+v, want GPU 0 alone", snap.GPUs)
	}
	g := gpuOf(t, snap, 0)
	if g.NUMANode != 0 || g.Processes != 1 || g.Misaffine != 0 || g.Unknown != 0 || len(g.Procs) != 1 {
		t.Fatalf("GPU %+v, want node 0 (numa_node -1, the one node's CPUs local) and one process judged", g)
	}
	p := g.Procs[0]
	pl := p.Placement
	// The job from the cgroup path alone: job_4242 names it, so environ
	// (SLURM_JOB_ID=4242 too) is not needed.
	if pl.Slurm != (process.SlurmJob{ID: "4242", Step: "0", Task: "0"}) || pl.Slurm.Label() != "4242" {
		t.Errorf("Slurm %+v, want job 4242 step 0 task 0", pl.Slurm)
	}
	if pl.PID != 537 || pl.Comm != "python3" || pl.PodUID != "" || pl.ContainerID != "" {
		t.Errorf("placement pid %d comm %q pod %q container %q, want 537 python3 in no pod", pl.PID, pl.Comm, pl.PodUID, pl.ContainerID)
	}
	if !pl.AllowedCPUs.Valid || pl.AllowedCPUs.V.String() != "0-15" {
		t.Errorf("allowed CPUs %v, want status's Cpus_allowed_list 0-15", pl.AllowedCPUs)
	}
	// status says Threads: 18; field 39 of each task's stat, in any order
	// (the task directory's order is the filesystem's).
	threads := slices.Sorted(slices.Values(pl.ThreadCPUs))
	if want := []int{0, 1, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}; !slices.Equal(threads, want) {
		t.Errorf("thread CPUs %v, want %v", threads, want)
	}
	// numa_maps: 155683 pages of 4 kB on N0, 608 MiB; status's VmRSS,
	// read a moment before, is 622736 kB.
	if m := pl.MemoryByNode; !m.Valid || len(m.V) != 1 || m.V[0] != 155683*4096 {
		t.Errorf("memory by node %v, want 155683 pages of 4 kB on node 0", m)
	}
	wantRatio(t, "remote CPU", p.RemoteCPURatio, 0)
	wantRatio(t, "remote thread", p.RemoteThreadRatio, 0)
	wantRatio(t, "remote memory", p.RemoteMemoryRatio, 0)
	if p.Misaffine != sampler.Some(false) || p.UsedGPUMemory != sampler.Some(1542.0*(1<<20)) {
		t.Errorf("misaffine %v, GPU memory %v; want false, 1542 MiB", p.Misaffine, p.UsedGPUMemory)
	}

	// The job on the GPU, as gpulink_gpu_job_info renders it: GPU 0 runs
	// job 4242, found through the process's cgroup.
	want := []slurm.GPUJob{{GPU: 0, UUID: uuid, PCIBusID: bus, JobID: "4242", Cgroup: true}}
	if jobs := slurm.GPUJobs(snap, nil); !slices.Equal(jobs, want) || jobs[0].Source() != "cgroup" {
		t.Errorf("GPU jobs %+v, want %+v", jobs, want)
	}
}

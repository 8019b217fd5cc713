package sim

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/process"
)

// A process of the host whose CUDA_VISIBLE_DEVICES names simulated GPUs is
// their compute process in NVML, and the simulated procfs shows the
// host's own files for it: the process source reads its real cgroup.
// When it ends, it leaves NVML and the tree.
func TestHostProcessesAreGPUProcesses(t *testing.T) {
	host := t.TempDir()
	write := func(pid, file, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(host, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, pid, file), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// 70001: an srun step on GPUs 1 and 2; 70002 names GPU 5 by UUID;
	// 70003 has no CUDA_VISIBLE_DEVICES; 4242 is a PID the profile models.
	write("70001", "environ", "SLURM_JOB_ID=12\x00CUDA_VISIBLE_DEVICES=1,2\x00")
	write("70001", "cgroup", "6:freezer:/slurm_n1/uid_0/job_12/step_0\n3:cpuset:/slurm_n1/uid_0/job_12/step_0\n0::/\n")
	write("70001", "comm", "sleep\n")
	write("70002", "environ", "CUDA_VISIBLE_DEVICES=GPU-placeholder\x00")
	write("70003", "environ", "PATH=/bin\x00")
	write("4242", "environ", "CUDA_VISIBLE_DEVICES=7\x00")

	n, err := Start(Config{Profile: "dgx-h100", Seed: 7, HostProcesses: host})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	uuid5 := n.Fake().GPUs[5].UUID
	write("70002", "environ", "CUDA_VISIBLE_DEVICES="+uuid5+"\x00")
	if err := n.Advance(time.Now()); err != nil {
		t.Fatal(err)
	}
	pids := func(i int) []int {
		var out []int
		n.Fake().Update(func() {
			for _, p := range n.Fake().GPUs[i].Processes {
				out = append(out, int(p.Pid))
			}
		})
		return out
	}
	for gpu, want := range map[int]int{1: 70001, 2: 70001, 5: 70002} {
		if !slices.Contains(pids(gpu), want) {
			t.Errorf("GPU %d lists %v, not host process %d", gpu, pids(gpu), want)
		}
	}
	for gpu := range 8 {
		if slices.Contains(pids(gpu), 70003) {
			t.Errorf("GPU %d lists 70003, which names no GPU", gpu)
		}
	}
	if slices.Contains(pids(7), 4242) {
		t.Errorf("host PID 4242 shadowed the profile's process of that PID")
	}
	pl, err := process.Read(n.FS().Proc, 70001)
	if err != nil && pl.Comm == "" {
		t.Fatal(err)
	}
	if pl.Comm != "sleep" || pl.Slurm.ID != "12" || pl.Slurm.Step != "0" {
		t.Errorf("host process read through the simulated procfs: comm %q, Slurm %+v", pl.Comm, pl.Slurm)
	}

	if err := os.RemoveAll(filepath.Join(host, "70001")); err != nil {
		t.Fatal(err)
	}
	if err := n.Advance(time.Now()); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(pids(1), 70001) {
		t.Errorf("ended process still listed: %v", pids(1))
	}
	if _, err := os.Lstat(filepath.Join(n.FS().Proc, "70001")); !os.IsNotExist(err) {
		t.Errorf("ended process still in the tree: %v", err)
	}
}

package sim

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
)

// hostProcesses finds the processes of the machine the simulated node runs
// on that are to be its GPU processes: those whose environment names
// simulated GPUs in CUDA_VISIBLE_DEVICES, by index or UUID, as a CUDA
// program takes the GPUs it may use and as Slurm sets it for a job's
// tasks from its GPU allocation. It returns their PIDs by GPU index,
// ascending. So a real scheduler in front of the simulated node (the
// real-Slurm test) runs real jobs whose real processes NVML lists, and
// the exporter reads their real cgroups and environments through the
// simulated procfs, which links each one's directory to the host's.
//
// A process whose environment cannot be read (gone, or not ours) is
// skipped; so is a PID the profile models itself.
func hostProcesses(proc string, uuids []string, modelled map[int]bool) [][]int {
	out := make([][]int, len(uuids))
	entries, err := os.ReadDir(proc)
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || modelled[pid] || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join(proc, e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			v, ok := bytes.CutPrefix(kv, []byte("CUDA_VISIBLE_DEVICES="))
			if !ok {
				continue
			}
			for _, g := range visibleGPUs(string(v), uuids) {
				out[g] = append(out[g], pid)
			}
		}
	}
	for _, pids := range out {
		slices.Sort(pids)
	}
	return out
}

// visibleGPUs are the indices of the GPUs a CUDA_VISIBLE_DEVICES value
// names: a comma-separated list of indices or UUIDs (GPU-...), which CUDA
// reads up to the first it does not know.
func visibleGPUs(v string, uuids []string) []int {
	var out []int
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		i, err := strconv.Atoi(f)
		if err != nil {
			i = slices.Index(uuids, f)
		}
		if i < 0 || i >= len(uuids) {
			break
		}
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out
}

// linkHostProcesses makes each host process's directory in the simulated
// procfs a link to the host's own.
func linkHostProcesses(m *machine.Machine, proc string, host [][]int) {
	for _, pids := range host {
		for _, pid := range pids {
			if m.Links == nil {
				m.Links = map[string]string{}
			}
			p := strconv.Itoa(pid)
			m.Links["proc/"+p] = filepath.Join(proc, p)
		}
	}
}

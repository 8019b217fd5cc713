package process

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"syscall"

	"github.com/prometheus/procfs"

	"github.com/gpulink/gpulink_exporter/internal/sysfs"
)

// SlurmJob is the Slurm job step a process runs in, as its cgroup path
// names it. The zero value is no job.
type SlurmJob struct {
	// ID is the numeric job ID: the path's job_<id>, or, where the path
	// names the job by its SLUID, SLURM_JOB_ID from the process's
	// environment; "" where neither gives it.
	ID string
	// SLUID is the job's SLUID where the path names the job by it
	// (cgroup v2 under Slurm 26.05 and later, unless CgroupJobIdPaths=yes).
	SLUID string
	// Step is the step: a number ("0"), a heterogeneous job's component
	// ("0+1"), "batch", "extern", "interactive" or "TBD"; "" where the
	// path stops at the job.
	Step string
	// Task is the task within the step ("0"; "special" on cgroup v2 for
	// processes proctrack added before a task existed); "" where the path
	// stops at the step.
	Task string
	// Node is the node name of a slurmd built with
	// --enable-multiple-slurmd (<node>_slurmstepd.scope, /slurm_<node>);
	// "" otherwise.
	Node string
	// UID is the job's user ID where the path names it (cgroup v1's
	// uid_<uid>); "" on cgroup v2.
	UID string
}

// Label is the job as the metrics name it: the numeric ID where known,
// else the SLUID.
func (j SlurmJob) Label() string {
	if j.ID != "" {
		return j.ID
	}
	return j.SLUID
}

// cgroupSlurmJob takes the Slurm job from a process's cgroups: the
// unified hierarchy's path on cgroup v2; on cgroup v1, where each
// controller has its own line and Slurm puts the process at the step in
// some (freezer) and at the task in others (memory, cpuset), the line
// that says most.
func cgroupSlurmJob(cgroups []procfs.Cgroup) SlurmJob {
	var best SlurmJob
	for _, c := range cgroups {
		j, ok := parseCgroupSlurm(c.Path)
		if ok && slurmDepth(j) > slurmDepth(best) {
			best = j
		}
	}
	return best
}

// slurmDepth ranks what a parsed path says: job, step, task.
func slurmDepth(j SlurmJob) int {
	switch {
	case j.Task != "":
		return 3
	case j.Step != "":
		return 2
	case j.Label() != "":
		return 1
	}
	return 0
}

// parseCgroupSlurm reads the Slurm job step from a cgroup path, as Slurm's
// cgroup plugins lay it out:
//
//	cgroup/v2 (22.05+): <prefix>/<slice>/[<node>_]slurmstepd.scope/<job>/step_<step>/user/task_<task>
//	cgroup/v1:          <prefix>/slurm[_<node>]/uid_<uid>/job_<id>/step_<step>/task_<task>
//
// where <job> is job_<id> (22.05 to 25.11, and 26.05 with
// CgroupJobIdPaths=yes) or the job's SLUID (26.05's default). The slice
// (CgroupSlice, system.slice by default) is configurable and a slurmd in
// a container sees a prefix before it, so the path is anchored on Slurm's
// own components, not on its start. slurmstepd's own cgroups
// (step_<step>/slurm, the scope's system, v1's slurm/system) are not the
// job's work and read as no job; so does a path below a task's cgroup
// on v1, or below anything but a task on v2, which no Slurm makes.
func parseCgroupSlurm(path string) (SlurmJob, bool) {
	comps := strings.Split(strings.Trim(path, "/"), "/")
	for i, c := range comps {
		if node, ok := strings.CutSuffix(c, "slurmstepd.scope"); ok && (node == "" || strings.HasSuffix(node, "_") && len(node) > 1) {
			return parseSlurmV2(strings.TrimSuffix(node, "_"), comps[i+1:])
		}
	}
	for i, c := range comps {
		if node, ok := strings.CutPrefix(c, "slurm"); ok && (node == "" || strings.HasPrefix(node, "_") && len(node) > 1) &&
			i+2 < len(comps) && strings.HasPrefix(comps[i+1], "uid_") {
			return parseSlurmV1(strings.TrimPrefix(node, "_"), comps[i+1:])
		}
	}
	return SlurmJob{}, false
}

// parseSlurmV2 reads what follows [<node>_]slurmstepd.scope.
func parseSlurmV2(node string, rest []string) (SlurmJob, bool) {
	if len(rest) == 0 {
		return SlurmJob{}, false
	}
	j := SlurmJob{Node: node}
	if id, ok := strings.CutPrefix(rest[0], "job_"); ok && isJobID(id) {
		j.ID = id
	} else if isSLUID(rest[0]) {
		j.SLUID = rest[0]
	} else {
		return SlurmJob{}, false // the scope's system (slurmstepd infinity), or no job
	}
	if len(rest) == 1 {
		return j, true
	}
	step, ok := slurmStep(rest[1])
	if !ok {
		return SlurmJob{}, false
	}
	j.Step = step
	switch {
	case len(rest) == 2:
		return j, true
	case rest[2] != "user":
		return SlurmJob{}, false // step_<s>/slurm: slurmstepd itself
	case len(rest) == 3:
		return j, true
	}
	task, ok := strings.CutPrefix(rest[3], "task_")
	if !ok || task != "special" && !isJobID(task) {
		return SlurmJob{}, false
	}
	// A task may make cgroups of its own below its task_<t>; they are
	// still the job's work.
	j.Task = task
	return j, true
}

// parseSlurmV1 reads what follows /slurm[_<node>]: uid_<uid>/job_<id>...
func parseSlurmV1(node string, rest []string) (SlurmJob, bool) {
	uid, ok1 := strings.CutPrefix(rest[0], "uid_")
	id, ok2 := strings.CutPrefix(rest[1], "job_")
	if !ok1 || !ok2 || !isJobID(uid) || !isJobID(id) {
		return SlurmJob{}, false
	}
	j := SlurmJob{ID: id, Node: node, UID: uid}
	if len(rest) == 2 {
		return j, true
	}
	step, ok := slurmStep(rest[2])
	if !ok {
		return SlurmJob{}, false
	}
	j.Step = step
	if len(rest) == 3 {
		return j, true
	}
	task, ok := strings.CutPrefix(rest[3], "task_")
	if !ok || !isJobID(task) || len(rest) > 4 {
		return SlurmJob{}, false
	}
	j.Task = task
	return j, true
}

// slurmStep reads a step's cgroup name, step_<step>, as Slurm's
// log_build_step_id_str writes the step: a number, a number and a
// heterogeneous component ("0+1"), or a special step's name.
func slurmStep(c string) (string, bool) {
	s, ok := strings.CutPrefix(c, "step_")
	if !ok {
		return "", false
	}
	switch s {
	case "batch", "extern", "interactive", "TBD":
		return s, true
	}
	id, comp, het := strings.Cut(s, "+")
	if !isJobID(id) || het && !isJobID(comp) {
		return "", false
	}
	return s, true
}

// isJobID reports whether s is a Slurm 32-bit ID in decimal (job, step,
// task, uid): 1 to 10 digits.
func isJobID(s string) bool {
	if len(s) == 0 || len(s) > 10 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// sluidAlphabet is Crockford's base32, which Slurm writes SLUIDs in
// (src/common/sluid.c): digits and capitals without I, L, O and U.
const sluidAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// isSLUID reports whether s is a SLUID as Slurm names a job's cgroup:
// "s" and 13 characters of sluidAlphabet ("s5K1KKYAYG5D00").
func isSLUID(s string) bool {
	if len(s) != 14 || s[0] != 's' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if strings.IndexByte(sluidAlphabet, s[i]) < 0 {
			return false
		}
	}
	return true
}

// jobIDKey is the variable srun, sbatch and salloc give every task the
// numeric job ID in.
var jobIDKey = []byte("SLURM_JOB_ID=")

// maxEnvironEntry bounds one NAME=value of an environment: the kernel's
// MAX_ARG_STRLEN (32 pages).
const maxEnvironEntry = 128 << 10

// readEnvironJobID finds SLURM_JOB_ID in /proc/<pid>/environ: the
// environment the process was started with (a later setenv does not show).
// Reading another user's process's environ needs ptrace access to it
// (root or CAP_SYS_PTRACE), as numa_maps does. found is false where the
// variable is not set or does not hold a job ID.
func readEnvironJobID(path string) (id string, found bool, err error) {
	fd, err := sysfs.Open(path)
	if err != nil {
		return "", false, err
	}
	defer syscall.Close(fd)
	return parseEnvironJobID(sysfs.FDReader{FD: fd, Path: path})
}

// parseEnvironJobID reads NUL-separated NAME=value entries, streaming: an
// environment may be megabytes.
func parseEnvironJobID(r io.Reader) (id string, found bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxEnvironEntry+1)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, 0); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), jobIDKey); ok {
			if !isJobID(string(v)) {
				return "", false, nil
			}
			return string(v), true, nil
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		return "", false, err
	}
	// An entry longer than the kernel allows is no SLURM_JOB_ID.
	return "", false, nil
}

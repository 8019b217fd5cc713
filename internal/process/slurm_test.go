package process

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
)

// sluid is a SLUID as Slurm 26.05 names a job's cgroup by default.
const sluid = "s5K1KKYAYG5D00"

// The layouts Slurm's cgroup plugins make (SchedMD/slurm
// src/plugins/cgroup/v1/xcgroup.c, cgroup/v2/cgroup_v2.c; see
// shared/reference/slurm_cgroups.md), and paths that must not read as a
// job.
func TestParseCgroupSlurm(t *testing.T) {
	podS := strings.ReplaceAll(podU, "-", "_")
	for _, tc := range []struct {
		path string
		want SlurmJob
		ok   bool
	}{
		// cgroup v2, job_<id> (22.05 to 25.11; 26.05 with CgroupJobIdPaths=yes).
		{"/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0", SlurmJob{ID: "4242", Step: "0", Task: "0"}, true},
		{"/system.slice/slurmstepd.scope/job_4242/step_3/user/task_17", SlurmJob{ID: "4242", Step: "3", Task: "17"}, true},
		// The special steps.
		{"/system.slice/slurmstepd.scope/job_211/step_batch/user/task_0", SlurmJob{ID: "211", Step: "batch", Task: "0"}, true},
		{"/system.slice/slurmstepd.scope/job_211/step_extern/user/task_0", SlurmJob{ID: "211", Step: "extern", Task: "0"}, true},
		{"/system.slice/slurmstepd.scope/job_211/step_interactive/user/task_0", SlurmJob{ID: "211", Step: "interactive", Task: "0"}, true},
		{"/system.slice/slurmstepd.scope/job_211/step_TBD/user/task_0", SlurmJob{ID: "211", Step: "TBD", Task: "0"}, true},
		// A heterogeneous job's component.
		{"/system.slice/slurmstepd.scope/job_900/step_0+1/user/task_2", SlurmJob{ID: "900", Step: "0+1", Task: "2"}, true},
		// Pids proctrack added before a task existed.
		{"/system.slice/slurmstepd.scope/job_4242/step_0/user/task_special", SlurmJob{ID: "4242", Step: "0", Task: "special"}, true},
		// Shallower: the step's user cgroup, the step, the job.
		{"/system.slice/slurmstepd.scope/job_4242/step_0/user", SlurmJob{ID: "4242", Step: "0"}, true},
		{"/system.slice/slurmstepd.scope/job_4242/step_0", SlurmJob{ID: "4242", Step: "0"}, true},
		{"/system.slice/slurmstepd.scope/job_4242", SlurmJob{ID: "4242"}, true},
		// Cgroups a task made below its own are still the job's.
		{"/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0/worker", SlurmJob{ID: "4242", Step: "0", Task: "0"}, true},
		// SLUID (26.05's default).
		{"/system.slice/slurmstepd.scope/" + sluid + "/step_0/user/task_0", SlurmJob{SLUID: sluid, Step: "0", Task: "0"}, true},
		{"/system.slice/slurmstepd.scope/" + sluid + "/step_extern/user/task_0", SlurmJob{SLUID: sluid, Step: "extern", Task: "0"}, true},
		// --enable-multiple-slurmd: the node names the scope.
		{"/system.slice/gpu-node-07_slurmstepd.scope/job_4242/step_0/user/task_0", SlurmJob{ID: "4242", Step: "0", Task: "0", Node: "gpu-node-07"}, true},
		{"/system.slice/n1_slurmstepd.scope/" + sluid + "/step_1/user/task_3", SlurmJob{SLUID: sluid, Step: "1", Task: "3", Node: "n1"}, true},
		// Another CgroupSlice, and slurmd in a container (a prefix).
		{"/slurm.slice/slurmstepd.scope/job_7/step_0/user/task_0", SlurmJob{ID: "7", Step: "0", Task: "0"}, true},
		{"/docker.slice/docker-" + ctrID + ".scope/system.slice/slurmstepd.scope/job_7/step_0/user/task_0", SlurmJob{ID: "7", Step: "0", Task: "0"}, true},
		{"/slurmstepd.scope/job_7/step_0/user/task_0", SlurmJob{ID: "7", Step: "0", Task: "0"}, true},
		// cgroup v1, one path per controller.
		{"/slurm/uid_1000/job_123/step_0/task_0", SlurmJob{ID: "123", Step: "0", Task: "0", UID: "1000"}, true},
		{"/slurm/uid_1000/job_123/step_0", SlurmJob{ID: "123", Step: "0", UID: "1000"}, true},
		{"/slurm/uid_1000/job_123", SlurmJob{ID: "123", UID: "1000"}, true},
		{"/slurm/uid_1000/job_123/step_batch/task_0", SlurmJob{ID: "123", Step: "batch", Task: "0", UID: "1000"}, true},
		{"/slurm/uid_1000/job_123/step_extern", SlurmJob{ID: "123", Step: "extern", UID: "1000"}, true},
		{"/slurm/uid_1000/job_123/step_interactive/task_3", SlurmJob{ID: "123", Step: "interactive", Task: "3", UID: "1000"}, true},
		{"/slurm/uid_1000/job_124/step_2+1/task_0", SlurmJob{ID: "124", Step: "2+1", Task: "0", UID: "1000"}, true},
		// v1 with --enable-multiple-slurmd, and under a prefix.
		{"/slurm_gpu-node-07/uid_0/job_5/step_0/task_1", SlurmJob{ID: "5", Step: "0", Task: "1", Node: "gpu-node-07", UID: "0"}, true},
		{"/docker/" + ctrID + "/slurm/uid_1000/job_123/step_0", SlurmJob{ID: "123", Step: "0", UID: "1000"}, true},

		// slurmstepd itself: the step's slurm cgroup, the scope's waiting
		// area, v1's slurmd cpuset.
		{"/system.slice/slurmstepd.scope/job_4242/step_0/slurm", SlurmJob{}, false},
		{"/system.slice/slurmstepd.scope/" + sluid + "/step_batch/slurm", SlurmJob{}, false},
		{"/system.slice/slurmstepd.scope/system", SlurmJob{}, false},
		{"/system.slice/slurmstepd.scope", SlurmJob{}, false},
		{"/slurm/system", SlurmJob{}, false},
		{"/system.slice/slurmd.service", SlurmJob{}, false},
		// Kubernetes pods and other services.
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podS + ".slice/cri-containerd-" + ctrID + ".scope", SlurmJob{}, false},
		{"/kubepods/besteffort/pod" + podU + "/" + ctrID, SlurmJob{}, false},
		{"/system.slice/train.service", SlurmJob{}, false},
		{"/user.slice/user-1000.slice/session-4.scope", SlurmJob{}, false},
		{"/", SlurmJob{}, false},
		{"", SlurmJob{}, false},
		// Near misses.
		{"/system.slice/slurmstepd.scope/job_/step_0/user/task_0", SlurmJob{}, false},
		{"/system.slice/slurmstepd.scope/job_12a/step_0/user/task_0", SlurmJob{}, false},
		{"/system.slice/slurmstepd.scope/job_12345678901/step_0", SlurmJob{}, false},
		{"/system.slice/slurmstepd.scope/s5K1KKYAYG5D0/step_0", SlurmJob{}, false},  // 12 characters
		{"/system.slice/slurmstepd.scope/s5K1KKYAYG5DOO/step_0", SlurmJob{}, false}, // O is not Crockford's
		{"/system.slice/slurmstepd.scope/s5k1kkyayg5d00/step_0", SlurmJob{}, false}, // lower case
		{"/system.slice/slurmstepd.scope/job_1/step_x/user/task_0", SlurmJob{}, false},
		{"/system.slice/slurmstepd.scope/job_1/step_0+/user/task_0", SlurmJob{}, false},
		{"/system.slice/slurmstepd.scope/job_1/step_0/user/task_x", SlurmJob{}, false},
		{"/system.slice/slurmstepd.scope/job_1/step_0/other", SlurmJob{}, false},
		{"/system.slice/_slurmstepd.scope/job_1/step_0/user/task_0", SlurmJob{}, false},
		{"/system.slice/xslurmstepd.scope/job_1/step_0/user/task_0", SlurmJob{}, false},
		{"/slurm/uid_x/job_1/step_0", SlurmJob{}, false},
		{"/slurm/uid_1000", SlurmJob{}, false},
		{"/slurm/uid_1000/job_1/step_0/task_0/extra", SlurmJob{}, false},
		{"/slurm/uid_1000/job_1/step_0/task_special", SlurmJob{}, false},
		{"/slurmx/uid_1000/job_1/step_0", SlurmJob{}, false},
		{"/slurm_/uid_1000/job_1/step_0", SlurmJob{}, false},
	} {
		got, ok := parseCgroupSlurm(tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseCgroupSlurm(%q) = %+v, %v; want %+v, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

// On cgroup v1 the controllers place the process at different depths:
// the line that names the task wins, whichever comes first.
func TestCgroupSlurmJobV1Lines(t *testing.T) {
	lines := []procfs.Cgroup{
		{HierarchyID: 12, Controllers: []string{"freezer"}, Path: "/slurm/uid_1000/job_123/step_0"},
		{HierarchyID: 11, Controllers: []string{"memory"}, Path: "/slurm/uid_1000/job_123/step_0/task_2"},
		{HierarchyID: 4, Controllers: []string{"cpu", "cpuacct"}, Path: "/"},
		{HierarchyID: 1, Controllers: []string{"name=systemd"}, Path: "/system.slice/slurmd.service"},
		{HierarchyID: 0, Path: "/system.slice/slurmd.service"},
	}
	want := SlurmJob{ID: "123", Step: "0", Task: "2", UID: "1000"}
	if got := cgroupSlurmJob(lines); got != want {
		t.Errorf("cgroupSlurmJob = %+v, want %+v", got, want)
	}
	if got := cgroupSlurmJob(lines[2:]); got != (SlurmJob{}) {
		t.Errorf("no Slurm line: %+v", got)
	}
}

func TestParseEnvironJobID(t *testing.T) {
	long := strings.Repeat("x", 200_000)
	for _, tc := range []struct {
		in    string
		id    string
		found bool
	}{
		{"HOME=/root\x00SLURM_JOB_ID=4343\x00SLURM_JOB_SLUID=" + sluid + "\x00", "4343", true},
		{"SLURM_JOB_ID=4343", "4343", true}, // no final NUL
		{"SLURM_JOB_IDX=1\x00SLURM_JOB_ID=77\x00", "77", true},
		{"SLURM_JOBID=4343\x00", "", false},
		{"SLURM_JOB_ID=\x00", "", false},
		{"SLURM_JOB_ID=43x\x00", "", false},
		{"", "", false},
		// A variable longer than the kernel allows ends the search.
		{"A=" + long + "\x00SLURM_JOB_ID=1\x00", "", false},
		// Long variables below that bound are skipped.
		{"A=" + long[:100_000] + "\x00SLURM_JOB_ID=12\x00", "12", true},
	} {
		id, found, err := parseEnvironJobID(strings.NewReader(tc.in))
		if err != nil || id != tc.id || found != tc.found {
			t.Errorf("%.40q: %q, %v, %v; want %q, %v", tc.in, id, found, err, tc.id, tc.found)
		}
	}
}

// Read takes the job from the cgroup file; a SLUID path takes the
// numeric ID from environ where it can be read, and where it cannot the
// value is dropped and counted, the rest kept.
func TestReadSlurmJob(t *testing.T) {
	v2 := func(job string) string { return "0::/system.slice/slurmstepd.scope/" + job + "/step_0/user/task_0\n" }
	for i, tc := range []struct {
		name    string
		cgroup  string
		environ *string // nil: no environ file
		denied  bool    // environ unreadable
		want    SlurmJob
		counted bool
	}{
		{name: "job_<id>", cgroup: v2("job_4242"), want: SlurmJob{ID: "4242", Step: "0", Task: "0"}},
		{name: "SLUID with SLURM_JOB_ID", cgroup: v2(sluid), environ: ptr("PATH=/bin\x00SLURM_JOB_ID=4343\x00"),
			want: SlurmJob{ID: "4343", SLUID: sluid, Step: "0", Task: "0"}},
		{name: "SLUID without SLURM_JOB_ID", cgroup: v2(sluid), environ: ptr("PATH=/bin\x00"),
			want: SlurmJob{SLUID: sluid, Step: "0", Task: "0"}},
		{name: "SLUID, environ unreadable", cgroup: v2(sluid), environ: ptr("SLURM_JOB_ID=4343\x00"), denied: true,
			want: SlurmJob{SLUID: sluid, Step: "0", Task: "0"}, counted: true},
		// environ is read only where the path lacks the ID.
		{name: "job_<id>, environ unreadable", cgroup: v2("job_4242"), environ: ptr("SLURM_JOB_ID=1\x00"), denied: true,
			want: SlurmJob{ID: "4242", Step: "0", Task: "0"}},
		{name: "v1", cgroup: "12:freezer:/slurm/uid_1000/job_123/step_0\n11:memory:/slurm/uid_1000/job_123/step_0/task_1\n0::/\n",
			want: SlurmJob{ID: "123", Step: "0", Task: "1", UID: "1000"}},
		{name: "slurmstepd", cgroup: "0::/system.slice/slurmstepd.scope/job_4242/step_0/slurm\n"},
	} {
		root := t.TempDir()
		pid := 200 + i
		files := map[string]string{"comm": "python\n", "cgroup": tc.cgroup}
		if tc.environ != nil {
			files["environ"] = *tc.environ
		}
		writeProc(t, root, strconv.Itoa(pid), files)
		var denied error
		if tc.denied {
			denied = makeUnreadable(t, filepath.Join(root, strconv.Itoa(pid), "environ"))
		}
		p, err := Read(root, pid)
		var partial *sampler.PartialError
		switch {
		case tc.counted && (!errors.As(err, &partial) || partial.Count != 1 || !errors.Is(err, denied) || !strings.Contains(err.Error(), "environ")):
			t.Errorf("%s: err %v, want a PartialError counting environ", tc.name, err)
		case !tc.counted && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		}
		if p.Slurm != tc.want {
			t.Errorf("%s: job %+v, want %+v", tc.name, p.Slurm, tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// The environ of a real GPU process (numa/testdata/captured/h100-vm, pid
// 537, started by bench/capture-fixture.sh with SLURM_JOB_ID=4242 among
// eight variables): what Read falls back to where the cgroup path names
// the job by its SLUID alone.
func TestReadEnvironJobIDCaptured(t *testing.T) {
	root := machine.LoadCaptured(t, "h100-vm")
	id, found, err := readEnvironJobID(filepath.Join(root, "proc", "537", "environ"))
	if err != nil || !found || id != "4242" {
		t.Errorf("SLURM_JOB_ID %q, found %v, err %v; want 4242", id, found, err)
	}
}

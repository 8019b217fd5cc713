package process

import (
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/numa"
)

// fixtureSeeds adds the named file of every process in every fixture
// tree as a seed.
func fixtureSeeds(f *testing.F, name string, add func(string)) {
	for _, fixture := range machine.FixtureNames() {
		root := machine.Load(f, fixture)
		paths, _ := filepath.Glob(filepath.Join(root, "proc", "*", name))
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil {
				add(string(b))
			}
		}
	}
}

// Per-process files are written by the kernel, but fixtures and odd
// kernels are not: whatever they hold, the parsers return a value or an
// error, never panic. Seeds are real lines from the borrowed VM and from
// DGX-style placements.

var numaMapsSeeds = []string{
	numaMapsVM,
	"7f3a1c000000 default anon=8448 dirty=8448 active=0 N0=6144 N1=2304 kernelpagesize_kB=4\n",
	"7f5e18021000 default file=/dev/zero\\040(deleted) dirty=512 mapmax=2 active=0 N0=512 kernelpagesize_kB=4\n",
	"7f5e40000000 default file=/anon_hugepage\\040(deleted) huge anon=4 dirty=4 N1=4 kernelpagesize_kB=2048\n",
	"7f0000000000 prefer (many):0-1 anon=1 dirty=1 N1=1 kernelpagesize_kB=4\n",
	"7f5e10000000 default\n",
	"7f00 default N0=1\n",
	"",
	// A PyTorch process on a 2x H200 machine: CUDA's pinned host memory
	// shows on /dev/nvidiactl.
	"200800000 default file=/dev/nvidiactl dirty=71 mapped=14336 active=0 N0=14336 kernelpagesize_kB=4\n" +
		"00a29000 default file=/usr/bin/python3.12 anon=311 dirty=311 mapped=334 mapmax=8 active=23 N0=334 kernelpagesize_kB=4\n" +
		"190f1000 default heap anon=32754 dirty=32754 active=0 N0=32754 kernelpagesize_kB=4\n",
}

func FuzzParseNUMAMaps(f *testing.F) {
	for _, s := range numaMapsSeeds {
		f.Add(s)
	}
	fixtureSeeds(f, "numa_maps", func(s string) { f.Add(s) })
	var s numaMapsScratch
	buf := make([]byte, 64)
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseNUMAMaps(strings.NewReader(in))
		// A parser reused from an earlier file, with a small first
		// buffer, reads the same.
		again, err2 := s.parse(strings.NewReader(in), buf)
		if (err == nil) != (err2 == nil) || err == nil && !maps.Equal(got, again) {
			t.Fatalf("%q: fresh parser %v, %v; reused %v, %v", in, got, err, again, err2)
		}
		if err != nil {
			return
		}
		if !strings.Contains(in, "N") && len(got) > 0 {
			t.Fatalf("%q: memory %v without N fields", in, got)
		}
		for n := range got {
			if n < 0 || n >= maxNUMANode {
				t.Fatalf("%q: node %d", in, n)
			}
		}
	})
}

func FuzzParseCgroupPod(f *testing.F) {
	podS := strings.ReplaceAll(podU, "-", "_")
	for _, s := range []string{
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podS + ".slice/cri-containerd-" + ctrID + ".scope",
		"/kubepods/besteffort/pod" + podU + "/" + ctrID,
		"/kubepods/pod" + podU + "/" + ctrID,
		"/system.slice/containerd.service/kubepods-besteffort-pod" + podS + ".slice:cri-containerd:" + ctrID,
		"/system.slice/docker-" + ctrID + ".scope",
		"/process_api/98e0b3c2a7f14e6d8c5b4a3f2e1d0c9b",
		"/",
	} {
		f.Add(s)
	}
	fixtureSeeds(f, "cgroup", func(s string) { f.Add(strings.TrimPrefix(strings.TrimSpace(s), "0::")) })
	f.Fuzz(func(t *testing.T, path string) {
		pod, ctr := parseCgroupPod(path)
		if pod != "" && (!podUIDValid(pod) || strings.Contains(pod, "_") ||
			!strings.Contains(path, pod) && !strings.Contains(path, strings.ReplaceAll(pod, "-", "_"))) {
			t.Fatalf("%q: pod UID %q", path, pod)
		}
		if ctr != "" && (!isContainerID(ctr) || !strings.Contains(path, ctr)) {
			t.Fatalf("%q: container ID %q", path, ctr)
		}
		// The same path among v1 controllers' paths naming nothing reads
		// the same.
		pod2, ctr2 := cgroupPod([]procfs.Cgroup{{HierarchyID: 2, Path: "/"}, {HierarchyID: 1, Path: path}, {Path: "/user.slice"}})
		if pod2 != pod || ctr2 != ctr {
			t.Fatalf("%q: cgroups give %q %q, path %q %q", path, pod2, ctr2, pod, ctr)
		}
	})
}

func FuzzParseStatCPU(f *testing.F) {
	f.Add("python", uint16(37), "")
	f.Add("my (weird) proc", uint16(5), "")
	f.Add(") ) )", uint16(0), "4242 (x) S 1")
	f.Add("pt_autograd_0", uint16(8191), "3553 (cat) R 3551 3551 29982 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 230733 3133440 381 18446744073709551615 94873740963840 94873740983721 140737324577520 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 94873740999728 94873741001344 94874722516992 140737324579327 140737324579347 140737324579347 140737324580843 0\n")
	fixtureSeeds(f, "task/*/stat", func(s string) { f.Add("x", uint16(1), s) })
	f.Fuzz(func(t *testing.T, comm string, cpu uint16, raw string) {
		if v, err := parseStatCPU([]byte(raw)); err == nil && (v < 0 || v >= numa.MaxCPU) {
			t.Fatalf("%q: CPU %d", raw, v)
		}
		// Whatever the command name holds, the CPU is found.
		want := int(cpu) % numa.MaxCPU
		got, err := parseStatCPU([]byte(statLine(comm, strconv.Itoa(want))))
		if err != nil || got != want {
			t.Fatalf("comm %q: got %d, %v; want %d", comm, got, err, want)
		}
	})
}

func FuzzParseStatusCPUs(f *testing.F) {
	f.Add("Name:\tpython\nCpus_allowed:\tffffffff\nCpus_allowed_list:\t0-31\nMems_allowed_list:\t0\n")
	f.Add("Cpus_allowed_list:\t0-55,112-167\n")
	fixtureSeeds(f, "status", func(s string) { f.Add(s) })
	f.Fuzz(func(t *testing.T, in string) {
		cpus, found, err := parseStatusCPUs([]byte(in))
		if (err != nil || !found) && cpus.Count() != 0 {
			t.Fatalf("%q: CPUs %v with found %v, err %v", in, cpus, found, err)
		}
	})
}

// Whatever the path, the Slurm parser gives a job whose every part is
// well formed and found in the path, or nothing; slurmstepd's own cgroups
// and pods are never a job.
func FuzzParseCgroupSlurm(f *testing.F) {
	for _, s := range []string{
		"/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0",
		"/system.slice/slurmstepd.scope/" + sluid + "/step_batch/user/task_0",
		"/system.slice/n1_slurmstepd.scope/job_1/step_0+1/user/task_special",
		"/system.slice/slurmstepd.scope/job_4242/step_0/slurm",
		"/system.slice/slurmstepd.scope/system",
		"/docker.slice/docker-" + ctrID + ".scope/system.slice/slurmstepd.scope/job_7/step_extern/user/task_0",
		"/slurm/uid_1000/job_123/step_interactive/task_3",
		"/slurm_n1/uid_0/job_5/step_0",
		"/slurm/system",
		"/kubepods/besteffort/pod" + podU + "/" + ctrID,
	} {
		f.Add(s)
	}
	fixtureSeeds(f, "cgroup", func(s string) { f.Add(strings.TrimPrefix(strings.TrimSpace(s), "0::")) })
	f.Fuzz(func(t *testing.T, path string) {
		j, ok := parseCgroupSlurm(path)
		if !ok {
			if j != (SlurmJob{}) {
				t.Fatalf("%q: no match but %+v", path, j)
			}
			return
		}
		if (j.ID == "") == (j.SLUID == "") || j.ID != "" && !isJobID(j.ID) || j.SLUID != "" && !isSLUID(j.SLUID) {
			t.Fatalf("%q: job ID %q, SLUID %q", path, j.ID, j.SLUID)
		}
		if j.Task != "" && j.Step == "" {
			t.Fatalf("%q: task %q without a step", path, j.Task)
		}
		for _, part := range [][2]string{{"", j.SLUID}, {"step_", j.Step}, {"task_", j.Task}, {"", j.Node}, {"uid_", j.UID}, {"job_", j.ID}} {
			if part[1] != "" && !strings.Contains(path, part[0]+part[1]) {
				t.Fatalf("%q: %+v: %q is not in the path", path, j, part)
			}
		}
		if strings.Contains(path, "kubepods") && !strings.Contains(path, "slurm") {
			t.Fatalf("%q: a pod read as job %+v", path, j)
		}
		// slurmstepd's own cgroup below the same step is no job.
		if j.Step != "" && j.Task == "" && j.UID == "" && strings.HasSuffix(strings.TrimRight(path, "/"), "step_"+j.Step) {
			if _, ok := parseCgroupSlurm(strings.TrimRight(path, "/") + "/slurm"); ok {
				t.Fatalf("%q/slurm reads as a job", path)
			}
		}
		// The same path among v1 controllers' paths naming nothing reads
		// the same.
		if got := cgroupSlurmJob([]procfs.Cgroup{{HierarchyID: 2, Path: "/"}, {HierarchyID: 1, Path: path}}); got != j {
			t.Fatalf("%q: cgroups give %+v, path %+v", path, got, j)
		}
	})
}

func FuzzParseEnvironJobID(f *testing.F) {
	f.Add("HOME=/root\x00SLURM_JOB_ID=4343\x00")
	f.Add("SLURM_JOB_ID=1")
	f.Add("")
	f.Fuzz(func(t *testing.T, in string) {
		id, found, err := parseEnvironJobID(strings.NewReader(in))
		if err != nil || found != (id != "") || found && (!isJobID(id) || !strings.Contains(in, "SLURM_JOB_ID="+id)) {
			t.Fatalf("%q: %q, %v, %v", in, id, found, err)
		}
	})
}

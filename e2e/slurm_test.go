package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpulink/gpulink_exporter/internal/healthcheck"
)

// A real one-node Slurm (Debian's slurm-wlm: munged, slurmctld and slurmd
// with proctrack/cgroup and task/cgroup on cgroup v1) in front of the
// simulated DGX H100, whose NVML lists the real jobs' processes as its GPU
// processes (--sim.host-processes: those whose CUDA_VISIBLE_DEVICES,
// which Slurm sets from the job's GPUs, names a simulated GPU). The
// cluster is the test's own: its configuration, ports, state and munge
// key in a temporary directory and a node name of its own, so a slurmd
// already on the machine is left alone; everything it starts it stops by
// process id, and it removes the cgroups Slurm made for its node.
//
// The prolog and epilog are deploy/slurm/job-map.sh as shipped, run by
// the real slurmd; the health check is the healthcheck command as
// deploy/slurm/README.md installs it (gpulink_healthcheck), run by slurmd every
// HealthCheckInterval.

// slurmNeeds are the programs the test runs.
var slurmNeeds = []string{"munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel", "sinfo"}

// requireSlurm skips the test where it cannot run, or fails it where
// GPULINK_SLURM_E2E=require (make test sets it: CI must run it, and
// scripts/install-slurm.sh installs what it needs).
func requireSlurm(t *testing.T) {
	var why []string
	if os.Geteuid() != 0 {
		why = append(why, "needs root (slurmd makes cgroups and runs jobs as root)")
	}
	for _, p := range slurmNeeds {
		if _, err := exec.LookPath(p); err != nil {
			why = append(why, "no "+p)
		}
	}
	if fi, err := os.Stat("/sys/fs/cgroup/freezer"); err != nil || !fi.IsDir() {
		why = append(why, "no cgroup v1 freezer hierarchy at /sys/fs/cgroup/freezer (the test configures cgroup/v1)")
	}
	if len(why) == 0 {
		return
	}
	msg := "real-Slurm test: " + strings.Join(why, "; ") + " (scripts/install-slurm.sh installs slurm-wlm and munge)"
	if os.Getenv("GPULINK_SLURM_E2E") == "require" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// slurmCluster is the test's one-node cluster.
type slurmCluster struct {
	t         *testing.T
	dir, node string
	env       []string
	// checkLog is where each health check run writes "--- run" and its
	// output.
	checkLog string
}

func (s *slurmCluster) cmd(name string, args ...string) (string, error) {
	c := exec.Command(name, args...)
	c.Env, c.Dir = s.env, s.dir
	out, err := c.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (s *slurmCluster) must(name string, args ...string) string {
	s.t.Helper()
	out, err := s.cmd(name, args...)
	if err != nil {
		s.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// state is the node's state and drain reason, as the health check reads
// them.
func (s *slurmCluster) state() healthcheck.NodeState {
	s.t.Helper()
	sc := &healthcheck.Slurm{Node: s.node, Run: func(_ context.Context, args ...string) (string, error) {
		return s.cmd("scontrol", args...)
	}}
	st, err := sc.State(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

// checkRuns are the health check's runs so far, each its output.
func (s *slurmCluster) checkRuns() []string {
	b, _ := os.ReadFile(s.checkLog)
	runs := strings.Split(string(b), "--- run\n")
	return runs[1:]
}

// waitRuns waits until n more health check runs have finished after the
// first `from` and returns them.
func (s *slurmCluster) waitRuns(from, n int) []string {
	s.t.Helper()
	waitFor(s.t, time.Duration(n+2)*slurmCheckInterval, fmt.Sprintf("%d more health check runs", n), func() (bool, error) {
		// A run is finished when the next has started or its output
		// says what it did to the node.
		runs := s.checkRuns()
		return len(runs) > from+n || len(runs) == from+n && strings.Contains(runs[len(runs)-1], "slurm: "), nil
	})
	return s.checkRuns()[from : from+n]
}

// slurmCheckInterval is HealthCheckInterval.
const slurmCheckInterval = 5 * time.Second

func startSlurm(t *testing.T, dir, healthCheck, exporterURL string) *slurmCluster {
	root := repoRoot(t)
	s := &slurmCluster{t: t, dir: dir, node: fmt.Sprintf("gltest%d", os.Getpid()%100000), checkLog: filepath.Join(dir, "healthcheck.log")}
	for _, d := range []string{"etc", "state", "spool", "run", "dev", "jobs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(dir, "etc", "slurm.conf")
	s.env = append(os.Environ(), "SLURM_CONF="+conf)
	// The GPUs as Slurm's GRES: character devices of NVIDIA's major
	// number, here only so that gres.conf can list eight; no driver
	// answers them and nothing opens them.
	for i := range 8 {
		if err := syscall.Mknod(filepath.Join(dir, "dev", fmt.Sprintf("nvidia%d", i)), syscall.S_IFCHR|0o600, 195<<8|i); err != nil {
			t.Fatalf("mknod: %v", err)
		}
	}
	// Prolog and Epilog as deploy/slurm/README.md installs them, with the
	// test's mapping directory; the health check as it says, with the
	// test's exporter and state, logging each run.
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, "#!/bin/sh\n"+body)
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	jobMap := script("job-map", fmt.Sprintf("GPULINK_JOB_MAPPING_DIR=%s exec %s \"$@\"\n", filepath.Join(dir, "jobs"), filepath.Join(root, "deploy/slurm/job-map.sh")))
	check := script("healthcheck", fmt.Sprintf("export SLURM_CONF=%s\necho '--- run' >>%s\nexec %s --exporter.url=%s --state.file=%s --slurm.drain --slurm.node=%s >>%s 2>&1\n",
		conf, s.checkLog, healthCheck, exporterURL, filepath.Join(dir, "state", "healthcheck.state"), s.node, s.checkLog))
	port := func() string { _, p, _ := strings.Cut(freeAddr(t), ":"); return p }
	writeFile(t, conf, fmt.Sprintf(`ClusterName=gltest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=%[1]s
SlurmdPort=%[2]s
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%[3]s/run/munge.sock
CredType=cred/munge
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
MpiDefault=none
StateSaveLocation=%[3]s/state
SlurmdSpoolDir=%[3]s/spool/%%n
SlurmctldPidFile=%[3]s/run/slurmctld.pid
SlurmdPidFile=%[3]s/run/slurmd.pid
SlurmctldLogFile=%[3]s/slurmctld.log
SlurmdLogFile=%[3]s/slurmd.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
GresTypes=gpu
Prolog=%[4]s
Epilog=%[4]s
PrologFlags=Alloc
HealthCheckProgram=%[5]s
HealthCheckInterval=%[6]d
HealthCheckNodeState=ANY
NodeName=%[7]s NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=%[8]d RealMemory=100 Gres=gpu:8 State=UNKNOWN
PartitionName=p Nodes=%[7]s Default=YES MaxTime=INFINITE OverSubscribe=FORCE:8 State=UP
`, port(), port(), dir, jobMap, check, int(slurmCheckInterval.Seconds()), s.node, runtimeCPUs()))
	writeFile(t, filepath.Join(dir, "etc", "cgroup.conf"), "CgroupPlugin=cgroup/v1\nConstrainCores=yes\n")
	writeFile(t, filepath.Join(dir, "etc", "gres.conf"), fmt.Sprintf("NodeName=%s Name=gpu File=%s/dev/nvidia[0-7]\n", s.node, dir))

	// The cgroups Slurm makes for the node, removed once every daemon
	// has stopped (cleanups run last first).
	t.Cleanup(func() {
		for _, c := range must(filepath.Glob("/sys/fs/cgroup/*/slurm_" + s.node)) {
			removeCgroups(c)
		}
	})
	key := filepath.Join(dir, "etc", "munge.key")
	s.must("mungekey", "--create", "--keyfile="+key)
	start(t, dir, "munged", "munged", "--foreground", "--force", "--socket="+filepath.Join(dir, "run", "munge.sock"), "--key-file="+key,
		"--log-file="+filepath.Join(dir, "munged.log"), "--pid-file="+filepath.Join(dir, "run", "munged.pid"), "--seed-file="+filepath.Join(dir, "run", "munged.seed"))
	waitFor(t, 10*time.Second, "munged's socket", func() (bool, error) {
		_, err := os.Stat(filepath.Join(dir, "run", "munge.sock"))
		return err == nil, err
	})
	start(t, dir, "slurmctld", "slurmctld", "-D", "-i", "-f", conf)
	start(t, dir, "slurmd", "slurmd", "-D", "-N", s.node, "-f", conf)
	// Jobs end before the daemons stop.
	t.Cleanup(func() {
		_, _ = s.cmd("scancel", "--full", "--partition=p")
		waitUntil(30*time.Second, func() bool { out, err := s.cmd("squeue", "-h"); return err == nil && out == "" })
	})
	waitFor(t, 60*time.Second, "node idle in sinfo", func() (bool, error) {
		out, err := s.cmd("sinfo", "-h", "-n", s.node, "-o", "%t")
		return err == nil && strings.HasPrefix(out, "idle"), fmt.Errorf("sinfo: %q %v", out, err)
	})
	return s
}

// runtimeCPUs is the machine's CPU count, what slurmd finds.
func runtimeCPUs() int {
	b, err := os.ReadFile("/sys/fs/cgroup/cpuset/cpuset.effective_cpus")
	if err != nil {
		return 2
	}
	n := 0
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(r, "-")
		a, _ := strconv.Atoi(lo)
		b := a
		if found {
			b, _ = strconv.Atoi(hi)
		}
		n += b - a + 1
	}
	return n
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// removeCgroups removes a cgroup tree, leaves first; a cgroup that still
// has processes stays.
func removeCgroups(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroups(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(dir)
}

func waitUntil(within time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// seriesOf are the label sets of a metric's series in a scrape.
func seriesOf(t *testing.T, url, name string) []map[string]string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, m := range fams[name].GetMetric() {
		ls := map[string]string{}
		for _, l := range m.GetLabel() {
			ls[l.GetName()] = l.GetValue()
		}
		out = append(out, ls)
	}
	return out
}

// has says whether one of series carries every label of want.
func has(series []map[string]string, want map[string]string) bool {
	return slices.ContainsFunc(series, func(s map[string]string) bool {
		for k, v := range want {
			if s[k] != v {
				return false
			}
		}
		return true
	})
}

func TestSlurmEndToEnd(t *testing.T) {
	requireSlurm(t)
	// Slurm's socket paths must stay short: a directory of its own under
	// /tmp rather than t.TempDir's long name.
	dir, err := os.MkdirTemp("", "gls")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin, hc := buildExporter(t, dir), buildHealthCheck(t, dir)
	addr, faults := freeAddr(t), filepath.Join(dir, "faults.yml")
	url := "http://" + addr + "/metrics"
	writeFile(t, faults, "faults: []\n")
	exporterArgs := []string{"--sim=dgx-h100", "--sim.host-processes", "--sim.faults=" + faults, "--web.listen-address=" + addr,
		"--slurm.job-mapping-dir=" + filepath.Join(dir, "jobs"), "--slurm.interval=1s",
		"--nvml.interval=1s", "--process.interval=1s", "--topology.interval=1s"}
	stopExporter := start(t, dir, "exporter", bin, exporterArgs...)
	waitHTTP(t, url, 30*time.Second)
	s := startSlurm(t, dir, hc, url)

	t.Run("JobsAttributed", func(t *testing.T) { slurmJobs(t, s, url) })
	if t.Failed() {
		return
	}
	t.Run("DrainAndResume", func(t *testing.T) { slurmDrain(t, s, faults) })
	t.Run("ExporterDown", func(t *testing.T) {
		stopExporter()
		if line, code := runCheck(t, hc, "--exporter.url="+url, "--state.file="); code != 2 || !strings.HasPrefix(line, "UNKNOWN: exporter:") {
			t.Errorf("exporter stopped: %d %q, want 2 UNKNOWN: exporter: ...", code, line)
		}
		for _, run := range s.waitRuns(len(s.checkRuns()), 2) {
			if !strings.Contains(run, "UNKNOWN: exporter:") || !strings.Contains(run, "slurm: node left as it is") {
				t.Errorf("health check with the exporter stopped:\n%s", run)
			}
		}
		if st := s.state(); st.Drained() {
			t.Errorf("exporter stopped: node %s %q, want not drained", st.State, st.Reason)
		}
	})
}

// slurmJobs runs a batch job with a step, a job array and an srun job, and
// watches the exporter report each one's real processes with its job and
// step, and the prolog's mapping files name it on its GPUs, until it ends.
func slurmJobs(t *testing.T, s *slurmCluster, url string) {
	script := filepath.Join(s.dir, "step.sh")
	writeFile(t, script, "#!/bin/sh\nsrun --mpi=none --gres=gpu:2 sleep 600\n")
	batch := s.must("sbatch", "--parsable", "--gres=gpu:2", "-o", filepath.Join(s.dir, "batch.out"), script)
	array := s.must("sbatch", "--parsable", "--array=1-2", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 600")
	srun := exec.Command("srun", "--mpi=none", "--gres=gpu:1", "-J", "gltest-srun", "sleep", "600")
	srun.Env, srun.Dir = s.env, s.dir
	if err := srun.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srun.Process.Kill(); _ = srun.Wait() })

	// Each job's ID (an array's tasks have their own) and what it runs.
	type job struct {
		id, what string
		steps    []string // the steps whose processes hold its GPUs
	}
	var jobs []job
	waitFor(t, 60*time.Second, "every job running", func() (bool, error) {
		out, err := s.cmd("squeue", "-h", "-t", "R", "-o", "%A %F %K %j")
		jobs = nil
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) < 4 {
				continue
			}
			switch {
			case f[0] == batch:
				jobs = append(jobs, job{f[0], "batch job with a step", []string{"batch", "0"}})
			case f[1] == array:
				jobs = append(jobs, job{f[0], "array task " + f[2], []string{"batch"}})
			case f[3] == "gltest-srun":
				jobs = append(jobs, job{f[0], "srun job", []string{"0"}})
			}
		}
		return len(jobs) == 4, fmt.Errorf("squeue: %q %v", out, err)
	})
	gpusOf := func(id string) []string {
		var gpus []string
		for _, f := range must(filepath.Glob(filepath.Join(s.dir, "jobs", "[0-9]*"))) {
			b, _ := os.ReadFile(f)
			if slices.Contains(strings.Fields(string(b)), id) {
				gpus = append(gpus, filepath.Base(f))
			}
		}
		return gpus
	}
	for _, j := range jobs {
		waitFor(t, 30*time.Second, j.what+" "+j.id+" on its GPUs in gpulink_gpu_job_info and the process series", func() (bool, error) {
			gpus := gpusOf(j.id)
			if len(gpus) == 0 {
				return false, fmt.Errorf("the prolog wrote no mapping file naming job %s", j.id)
			}
			info := seriesOf(t, url, "gpulink_gpu_job_info")
			procs := seriesOf(t, url, "gpulink_process_gpu_memory_used_bytes")
			for _, g := range gpus {
				if !has(info, map[string]string{"gpu": g, "job_id": j.id, "source": "cgroup,mapping_file"}) {
					return false, fmt.Errorf("no gpulink_gpu_job_info{gpu=%q,job_id=%q,source=\"cgroup,mapping_file\"} in %v", g, j.id, info)
				}
				for _, step := range j.steps {
					if !has(procs, map[string]string{"gpu": g, "slurm_job_id": j.id, "slurm_step": step}) {
						return false, fmt.Errorf("no process of job %s step %s on GPU %s", j.id, step, g)
					}
				}
			}
			return true, nil
		})
		t.Logf("%s %s: GPUs %v", j.what, j.id, gpusOf(j.id))
	}

	// The jobs end: their mapping files go (the epilog), and their
	// processes and jobs leave the GPUs.
	for _, j := range jobs {
		s.must("scancel", j.id)
	}
	for _, j := range jobs {
		waitFor(t, 60*time.Second, j.what+" "+j.id+" gone", func() (bool, error) {
			if gpus := gpusOf(j.id); len(gpus) > 0 {
				return false, fmt.Errorf("mapping files still name job %s on GPUs %v", j.id, gpus)
			}
			if has(seriesOf(t, url, "gpulink_gpu_job_info"), map[string]string{"job_id": j.id}) {
				return false, fmt.Errorf("gpulink_gpu_job_info still names job %s", j.id)
			}
			if has(seriesOf(t, url, "gpulink_process_gpu_memory_used_bytes"), map[string]string{"slurm_job_id": j.id}) {
				return false, fmt.Errorf("a process of job %s is still on a GPU", j.id)
			}
			return true, nil
		})
	}
}

// slurmDrain breaks links of the simulated node and watches slurmd's
// health check drain the real node with the reason, within two runs, and
// resume it when the fault is cleared; a node an operator drained stays
// drained.
func slurmDrain(t *testing.T, s *slurmCluster, faults string) {
	// expect injects fault and waits until a run does what want says,
	// which must be the first or second run after it.
	expect := func(fault, what, want string) {
		t.Helper()
		from := len(s.checkRuns())
		writeFile(t, faults, fault)
		waitFor(t, 6*slurmCheckInterval, what, func() (bool, error) {
			runs := s.checkRuns()[from:]
			return slices.ContainsFunc(runs, func(r string) bool { return strings.Contains(r, want) }), fmt.Errorf("runs since: %q", runs)
		})
		runs := s.checkRuns()[from:]
		if i := slices.IndexFunc(runs, func(r string) bool { return strings.Contains(r, want) }); i > 1 {
			t.Errorf("%s: at run %d after the change, not within two HealthCheckIntervals:\n%s", what, i+1, strings.Join(runs[:i+1], "--- run\n"))
		}
	}
	idle := func(what string) {
		t.Helper()
		if st := s.state(); st.Drained() {
			t.Errorf("%s: node %s, reason %q", what, st.State, st.Reason)
		}
	}
	idle("before any fault")

	expect("faults:\n- {kind: nvlink_down, gpu: 2, link: 5}\n", "NVLink 5 of GPU 2 down: drained",
		"drained: gpulink: GPUNVLinkDown gpu=2 link=5")
	if st := s.state(); !st.Drained() || !strings.Contains(st.Reason, "gpu=2 link=5") {
		t.Errorf("NVLink down: node %s, reason %q; want drained naming gpu=2 link=5", st.State, st.Reason)
	}
	out := s.must("sinfo", "-R", "-h", "-n", s.node, "-o", "%E")
	t.Logf("sinfo -R: %s", out)

	expect("faults: []\n", "NVLink back: resumed", "resumed")
	idle("NVLink back")

	expect("faults:\n- {kind: pcie_width, gpu: 1, width: 8}\n", "GPU 1's PCIe link at x8: drained",
		"drained: gpulink: GPUPCIeLinkDowntrained gpu=1 value=8 expected=16")
	expect("faults: []\n", "PCIe link back at x16: resumed", "resumed")
	idle("PCIe back")

	// An operator's drain is the operator's: the check neither replaces
	// its reason nor resumes it.
	s.must("scontrol", "update", "nodename="+s.node, "state=drain", "reason=operator: fan replaced")
	expect("faults:\n- {kind: nvlink_down, gpu: 2, link: 5}\n", "NVLink down on a node an operator drained: left",
		"left drained by another reason: operator: fan replaced")
	expect("faults: []\n", "healthy again, operator's drain: left", "OK: links fit for jobs")
	for _, run := range s.waitRuns(len(s.checkRuns()), 1) {
		if strings.Contains(run, "resumed") {
			t.Errorf("the check resumed a node an operator drained:\n%s", run)
		}
	}
	if st := s.state(); !st.Drained() || st.Reason != "operator: fan replaced" {
		t.Errorf("operator's drain: node %s, reason %q", st.State, st.Reason)
	}
	s.must("scontrol", "update", "nodename="+s.node, "state=resume")
}

package probes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const testGPU = "0000:18:00.0"

func TestRunnerOptionsArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want []string
	}{
		{"no host nodes asks for unbound memory", Options{GPU: testGPU, SizeBytes: DefaultSizeBytes, Samples: DefaultSamples},
			[]string{"--gpu=" + testGPU, "--no-host-node-binding", "--size=67108864", "--samples=3"}},
		{"everything", Options{GPU: testGPU, Peers: []string{"0000:2a:00.0", "0000:3a:00.0"}, HostNodes: []int{1, 0},
			Probes: []Kind{HostToDevice, PeerCopy}, SizeBytes: 1 << 20, Samples: 7},
			[]string{"--gpu=" + testGPU, "--peer=0000:2a:00.0", "--peer=0000:3a:00.0", "--host-node=1", "--host-node=0",
				"--probe=host_to_device", "--probe=peer_copy", "--size=1048576", "--samples=7"}},
		{"storage", Options{GPU: testGPU, HostNodes: []int{0}, SizeBytes: 1 << 20, Samples: 2, StorageDir: "/raid/probe", StorageBytes: 1 << 30},
			[]string{"--gpu=" + testGPU, "--host-node=0", "--storage-dir=/raid/probe", "--storage-size=1073741824", "--size=1048576", "--samples=2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.o.Args(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Args() = %q\nwant       %q", got, tc.want)
			}
		})
	}
}

// helperRunner returns a runner whose child is this test binary in the
// given helper mode (see main_test.go).
func helperRunner(t *testing.T, mode string, timeout time.Duration) *ChildRunner {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(helperEnv, mode)
	// Under -race a child that exits 0 would otherwise sleep a second in
	// the race runtime's exit hook.
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	return &ChildRunner{Command: []string{exe, "probe", "--path.sysfs=/nonexistent/sys"}, Timeout: timeout}
}

func TestRunnerArgsRoundTrip(t *testing.T) {
	r := helperRunner(t, "ok", time.Minute)
	o := Options{GPU: testGPU, Peers: []string{"0000:2a:00.0", "0000:3a:00.0"}, HostNodes: []int{0, 1},
		Probes: []Kind{HostToDevice, PeerCopy, LaunchLatency}, SizeBytes: 1 << 20, Samples: 3}
	round, err := r.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if round.Version != ContractVersion || len(round.GPUs) != 1 {
		t.Fatalf("round = %+v", round)
	}
	// The runner says which process measured: its own probe contexts are
	// no contention.
	if round.PID <= 0 || round.PID == os.Getpid() {
		t.Errorf("round PID %d, want the child's", round.PID)
	}
	g := round.GPUs[0]
	wantArgv := "probe --path.sysfs=/nonexistent/sys --output=json --no-sharing-check " + strings.Join(o.Args(), " ")
	if g.PCIBusID != testGPU || g.Name != wantArgv {
		t.Errorf("child saw GPU %q argv %q\nwant %q argv %q", g.PCIBusID, g.Name, testGPU, wantArgv)
	}
	// The child's parse of the flags gives back the Options.
	if back, err := parseHelperArgs(strings.Fields(g.Name)); err != nil || !reflect.DeepEqual(back, o) {
		t.Errorf("parsed back %+v, %v; want %+v", back, err, o)
	}
	var got []string
	for _, res := range g.Results {
		s := string(res.Probe) + " " + res.Peer
		if res.HostNUMANode != nil {
			s += "node" + strconv.Itoa(*res.HostNUMANode)
		}
		if res.SizeBytes != 1<<20 || res.Samples != 3 {
			t.Errorf("%s: size %d samples %d", s, res.SizeBytes, res.Samples)
		}
		got = append(got, s)
	}
	want := []string{"host_to_device node0", "host_to_device node1", "peer_copy 0000:2a:00.0", "peer_copy 0000:3a:00.0", "launch_latency "}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("results %q, want %q", got, want)
	}
}

func TestRunnerExitNonZeroWithRound(t *testing.T) {
	r := helperRunner(t, "exit2", time.Minute)
	round, err := r.Run(context.Background(), Options{GPU: testGPU})
	if err != nil {
		t.Fatalf("exit 2 with a round: %v, want no error", err)
	}
	if len(round.GPUs) != 1 || round.GPUs[0].Error == "" {
		t.Errorf("round = %+v, want the GPU's error", round)
	}
}

func TestRunnerCrash(t *testing.T) {
	for _, tc := range []struct {
		mode      string
		want      []string // in Error()
		wantRound bool
	}{
		{"crash", []string{"exit status 3", "no output on stdout", "stderr: probe: cuInit: CUDA_ERROR_NO_DEVICE"}, false},
		{"panic", []string{"exit status 2", "stderr: panic: helper panics"}, false},
		{"signal", []string{"signal: killed"}, true},
		{"garbage", []string{"invalid JSON at offset 2 near \"this is not a round"}, false},
		{"truncated", []string{"invalid JSON", "unexpected end of JSON input"}, false},
		{"badtype", []string{"invalid JSON at offset", "all of them"}, false},
		{"badversion", []string{"contract version 99, want 1"}, false},
		{"noversion", []string{"no contract version"}, false},
		{"empty", []string{"no output on stdout"}, false},
		{"bigoutput", []string{"more than 8 MiB on stdout; child killed"}, false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			// A timeout far beyond what any of these takes: each must be
			// seen for what it is, not end as a timeout.
			r := helperRunner(t, tc.mode, 2*time.Minute)
			round, err := r.Run(context.Background(), Options{GPU: testGPU})
			var rf *RunFailure
			if !errors.As(err, &rf) {
				t.Fatalf("err = %v, want a *RunFailure", err)
			}
			if rf.Result != RunCrash {
				t.Errorf("result %q, want %q (%v)", rf.Result, RunCrash, err)
			}
			msg := err.Error()
			for _, w := range append(tc.want, "GPU "+testGPU) {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
			if (round != nil) != tc.wantRound {
				t.Errorf("round = %v, want one: %v", round, tc.wantRound)
			}
		})
	}
}

func TestRunnerStderrKeepsTail(t *testing.T) {
	r := helperRunner(t, "stderrflood", time.Minute)
	_, err := r.Run(context.Background(), Options{GPU: testGPU})
	var rf *RunFailure
	if !errors.As(err, &rf) {
		t.Fatalf("err = %v", err)
	}
	if len(rf.Stderr) != childStderrTail || !strings.HasSuffix(rf.Stderr, "LAST LINE\n") {
		t.Errorf("kept %d bytes of stderr ending %q; want %d ending in LAST LINE", len(rf.Stderr), rf.Stderr[max(0, len(rf.Stderr)-40):], childStderrTail)
	}
	if !strings.HasSuffix(err.Error(), "stderr: LAST LINE") {
		t.Errorf("error %q does not end with stderr's last line", err)
	}
}

func TestRunnerStartError(t *testing.T) {
	for _, cmd := range [][]string{nil, {filepath.Join(t.TempDir(), "no-such-binary")}} {
		_, err := (&ChildRunner{Command: cmd}).Run(context.Background(), Options{GPU: testGPU})
		var rf *RunFailure
		if !errors.As(err, &rf) || rf.Result != RunError {
			t.Errorf("command %q: err = %v, want a RunError result", cmd, err)
		}
	}
}

// helperPIDs sets up the file a hanging helper writes its pid and its
// grandchild's to, and returns a function that waits for them.
func helperPIDs(t *testing.T) func() (child, grandchild int) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "pids")
	t.Setenv(helperPIDsEnv, f)
	return func() (int, int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(f); err == nil {
				var pids []int
				for _, s := range strings.Fields(string(b)) {
					n, _ := strconv.Atoi(s)
					pids = append(pids, n)
				}
				if len(pids) == 2 && pids[0] > 0 && pids[1] > 0 {
					return pids[0], pids[1]
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("helper never wrote its pids to %s", f)
		return 0, 0
	}
}

// processGone reports whether pid has exited. A zombie counts as gone: an
// orphaned grandchild is reaped by whatever runs as init, which in a
// container may never do it.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	// pid (comm) state ...; comm may hold spaces and parentheses.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] == "Z"
}

func waitGone(t *testing.T, what string, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("%s (pid %d) still running", what, pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRunnerTimeoutKillsProcessGroup(t *testing.T) {
	// Long enough for the helper to start its grandchild even on a loaded
	// machine under -race; the grandchild's pid is checked below.
	r := helperRunner(t, "hang", 1500*time.Millisecond)
	pids := helperPIDs(t)
	start := time.Now()
	_, err := r.Run(context.Background(), Options{GPU: testGPU})
	took := time.Since(start)
	var rf *RunFailure
	if !errors.As(err, &rf) || rf.Result != RunTimeout {
		t.Fatalf("err = %v, want a timeout", err)
	}
	for _, w := range []string{"GPU " + testGPU, "no round within 1.5s", "child killed", "stderr: probe helper: hanging"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
	if took > 30*time.Second {
		t.Errorf("Run took %s with a 1.5s timeout", took)
	}
	child, grandchild := pids()
	waitGone(t, "child", child)
	waitGone(t, "grandchild", grandchild)
}

func TestRunnerCancelKillsProcessGroup(t *testing.T) {
	r := helperRunner(t, "hang", 0)
	pids := helperPIDs(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type ret struct {
		round *Round
		err   error
	}
	done := make(chan ret, 1)
	go func() {
		round, err := r.Run(ctx, Options{GPU: testGPU})
		done <- ret{round, err}
	}()
	child, grandchild := pids()
	cancel()
	var got ret
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	var rf *RunFailure
	if !errors.As(got.err, &rf) || rf.Result != RunError || !strings.Contains(got.err.Error(), "cancelled") {
		t.Errorf("err = %v, want a cancelled RunError", got.err)
	}
	waitGone(t, "child", child)
	waitGone(t, "grandchild", grandchild)
}

func TestRunnerKillsLeftoversAfterExit(t *testing.T) {
	r := helperRunner(t, "leftover", time.Minute)
	pids := helperPIDs(t)
	start := time.Now()
	round, err := r.Run(context.Background(), Options{GPU: testGPU})
	if err != nil || round == nil {
		t.Fatalf("Run = %v, %v", round, err)
	}
	// The grandchild holds stdout; had it lived, Run would have waited
	// childPipeGrace for the pipe.
	if took := time.Since(start); took >= childPipeGrace+time.Second {
		t.Logf("Run took %s: waited on the grandchild's pipe?", took)
	}
	_, grandchild := pids()
	waitGone(t, "grandchild", grandchild)
}

func TestRunnerStuckChild(t *testing.T) {
	r := helperRunner(t, "hang", 300*time.Millisecond)
	pids := helperPIDs(t)
	// A child that survives SIGKILL, as one stuck in a driver call does:
	// the runner's kill does nothing.
	r.signal = func(int, syscall.Signal) error { return nil }
	r.killGrace = 50 * time.Millisecond

	_, err := r.Run(context.Background(), Options{GPU: testGPU})
	if !strings.Contains(errString(err), "did not exit within 50ms of SIGKILL") {
		t.Fatalf("first run: %v", err)
	}
	_, err = r.Run(context.Background(), Options{GPU: testGPU})
	var rf *RunFailure
	if !errors.As(err, &rf) || rf.Result != RunTimeout || !strings.Contains(err.Error(), "still alive after SIGKILL") {
		t.Fatalf("second run while the first child lives: %v", err)
	}

	child, grandchild := pids()
	syscall.Kill(-child, syscall.SIGKILL)
	deadline := time.Now().Add(30 * time.Second)
	for r.stuck.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("stuck child never reaped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitGone(t, "grandchild", grandchild)

	t.Setenv(helperEnv, "ok")
	r.signal, r.Timeout = nil, time.Minute
	if _, err := r.Run(context.Background(), Options{GPU: testGPU}); err != nil {
		t.Errorf("run after the stuck child went: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func TestRunnerParseRound(t *testing.T) {
	round, err := parseRound([]byte(`{"version":1,"cuda_driver_version":13000,"gpus":[{"pci_bus_id":"0000:18:00.0","results":[]}]}` + "\n"))
	if err != nil || round.DriverVersion != 13000 || len(round.GPUs) != 1 {
		t.Errorf("parseRound = %+v, %v", round, err)
	}
	// Something else writing on the child's stdout makes the output
	// untrustworthy as a whole.
	if _, err := parseRound([]byte(`{"version":1,"gpus":[]} and more`)); err == nil || !strings.Contains(err.Error(), "invalid JSON at offset") {
		t.Errorf("trailing text: %v", err)
	}
}

func TestRunnerTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 8}
	for _, s := range []string{"abc", "defgh", "ij", "0123456789ABC", "Z"} {
		_, _ = b.Write([]byte(s))
	}
	if got := b.String(); got != "6789ABCZ" {
		t.Errorf("tail = %q", got)
	}
}

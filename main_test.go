package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/probes"
)

// runMainEnv makes the test binary run main with its arguments: the end
// to end tests run the real start-up without building another binary.
const runMainEnv = "GPULINK_EXPORTER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

var quiet = slog.New(slog.DiscardHandler)

// check parses args with the real app and runs the start-up validation.
func check(t *testing.T, args ...string) error {
	t.Helper()
	l := newCLI()
	command, err := l.app.Parse(args)
	if err != nil {
		t.Fatalf("%q does not parse: %v", args, err)
	}
	return l.validate(command, quiet)
}

// numericFlags are every flag whose value is a number, a duration or a
// size: start-up must check each, so each needs a row below.
func numericFlags(t *testing.T) []string {
	t.Helper()
	numeric := regexp.MustCompile(`(?i)\.(u?int\d*|float\d*|duration|bytes)Value$`)
	var names []string
	for _, f := range newCLI().app.Model().Flags {
		if numeric.MatchString(fmt.Sprintf("%T", f.Value)) {
			names = append(names, f.Name)
		}
	}
	if len(names) < 15 {
		t.Fatalf("found only %d numeric flags (%v): has kingpin renamed its value types?", len(names), names)
	}
	return names
}

// badValues has, for every numeric flag, values start-up must refuse, each
// with any other flags it needs. A numeric flag added without a row here
// fails TestEveryNumericFlagIsChecked.
var badValues = map[string][][]string{
	"web.max-requests":            {{"-1"}},
	"runtime.gomaxprocs":          {{"0"}, {"-2"}},
	"nvml.interval":               {{"0s"}, {"-5s"}},
	"nvml.timeout":                {{"0s"}, {"-1s"}, {"10s", "--nvml.interval=5s"}, {"6s"}, {"2s", "--nvml.interval=1s"}},
	"nvml.slow-interval":          {{"0s"}, {"-1m"}},
	"topology.interval":           {{"0s"}, {"-15s"}},
	"process.interval":            {{"0s"}, {"-1s"}},
	"nic.interval":                {{"0s"}, {"-1s"}},
	"nccl.interval":               {{"0s"}, {"-1m"}},
	"dcgm.interval":               {{"0s"}, {"-1s"}, {"1ns"}},
	"kubernetes.interval":         {{"0s"}, {"-30s"}},
	"slurm.interval":              {{"0s"}, {"-15s"}},
	"probe.interval":              {{"0s"}, {"-10m"}},
	"probe.timeout":               {{"0s"}, {"-1s"}},
	"probe.first-delay":           {{"-1s"}},
	"probe.jitter":                {{"-0.1"}, {"0.6"}, {"NaN"}},
	"probe.max-duty":              {{"0"}, {"-0.001"}, {"1.5"}, {"NaN"}},
	"probe.utilization-threshold": {{"-0.5"}, {"1.01"}, {"NaN"}},
	"probe.size":                  {{"8GiB"}, {"0"}, {"512KiB"}},
	"probe.samples":               {{"0"}, {"-3"}, {"101"}},
	"probe.storage-size":          {{"0", "--probe.storage-dir=/data"}, {"1025KiB", "--probe.storage-dir=/data"}, {"65GiB", "--probe.storage-dir=/data"}},
	"node-probe.min-interval":     {{"-1s"}},
	"collective.interval":         {{"0s"}, {"-1h"}},
	"collective.timeout":          {{"0s"}, {"-5m"}},
	"collective.size":             {{"0"}, {"512KiB"}, {"8GiB"}},
	"collective.small-size":       {{"0"}, {"512B"}, {"2MiB"}},
	"collective.warmup":           {{"-1"}, {"1001"}},
	"collective.iterations":       {{"0"}, {"-20"}, {"1001"}},
	"collective.samples":          {{"0"}, {"101"}},
}

// goodValues are edge values start-up must take.
var goodValues = [][]string{
	{},
	{"--web.max-requests=0"},
	{"--runtime.gomaxprocs=1"},
	{"--nvml.timeout=5s", "--nvml.interval=5s"},
	{"--nvml.interval=1s", "--nvml.timeout=1s"},
	{"--nvml.interval=1s"},                            // the default timeout follows a shorter interval
	{"--nvml.slow-interval=1s", "--nvml.interval=5s"}, // then every sample reads it
	{"--dcgm.interval=1ms", "--collector.dcgm"},
	{"--kubernetes.interval=1s", "--collector.kubernetes"}, // the kubelet's deadline follows
	{"--probe.first-delay=0s", "--probe.jitter=0.5", "--probe.max-duty=1", "--probe.utilization-threshold=1"},
	{"--probe.jitter=0", "--probe.utilization-threshold=0"}, // none, and any utilisation is busy
	{"--probe.size=1MiB", "--probe.samples=1"},
	{"--probe.size=4GiB", "--probe.samples=100"},
	{"--probe.timeout=20m"}, // a child's deadline, not bounded by the interval between rounds
	{"--node-probe.min-interval=0s", "--node-probe.enabled"},
	{"--collective.size=1MiB", "--collective.small-size=1KiB", "--collective.warmup=0", "--collective.iterations=1", "--collective.samples=1"},
	{"--collective.size=4GiB", "--collective.small-size=1MiB", "--collective.warmup=1000", "--collective.iterations=1000", "--collective.samples=100"},
	{"--collective.interval=1m", "--collective.timeout=2h"}, // like --probe.timeout, not bounded by the interval
	{"--collective.kind=all_reduce", "--collective.kind=send_recv", "--nccl.library=/opt/nccl/lib/libnccl.so.2", "--nccl.nvls"},
	// --sim serves its own tree: the path flags are not read.
	{"--sim=dgx-h100", "--path.sysfs=/nonexistent", "--path.procfs=/nonexistent"},
}

// TestEveryNumericFlagIsChecked builds the real app, gives every numeric
// flag bad values and expects start-up to refuse each, naming the flag.
func TestEveryNumericFlagIsChecked(t *testing.T) {
	flags := numericFlags(t)
	for _, name := range flags {
		if _, ok := badValues[name]; !ok {
			t.Errorf("--%s takes a number but has no row in badValues: add one, and a check to validate", name)
		}
	}
	for name, cases := range badValues {
		if !slices.Contains(flags, name) {
			t.Errorf("badValues has a row for --%s, which is not a numeric flag", name)
			continue
		}
		for _, c := range cases {
			args := append([]string{"--" + name + "=" + c[0]}, c[1:]...)
			err := check(t, args...)
			if err == nil || !strings.Contains(err.Error(), "--"+name+"=") {
				t.Errorf("%q: got %v, want an error naming --%s", args, err, name)
			}
		}
	}
}

func TestGoodValuesStart(t *testing.T) {
	for _, args := range goodValues {
		if err := check(t, args...); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
}

// The cases of issue 11, and the other flags that are not numbers.
func TestStartupRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--probe.size=8GiB"}, "--probe.size=8GiB: want 1MiB to 4GiB"},
		{[]string{"--probe.size=8GiB", "--sim=dgx-h100"}, "--probe.size="},
		{[]string{"--probe.size=8GiB", "--probe.policy=off"}, "--probe.size="},
		{[]string{"--nvml.interval=-5s"}, "--nvml.interval=-5s: want a duration above 0"},
		{[]string{"--probe.samples=0"}, "--probe.samples=0: want 1 to 100"},
		{[]string{"--nvml.timeout=10s", "--nvml.interval=5s"}, "--nvml.timeout=10s: want a duration above 0 and at most --nvml.interval (5s)"},
		{[]string{"--path.sysfs=/nonexistent"}, "--path.sysfs=/nonexistent"},
		{[]string{"--path.procfs=/nonexistent"}, "--path.procfs=/nonexistent"},
		{[]string{"--path.sysfs=/etc/hostname"}, "--path.sysfs=/etc/hostname: want an existing directory"},
		{[]string{"--web.telemetry-path=metrics"}, "--web.telemetry-path=metrics"},
		{[]string{"--web.telemetry-path=/probe"}, "--web.telemetry-path=/probe: want a path other than /probe, /node-probe/reserve, /node-probe/join"},
		{[]string{"--node-probe.config.file=/nonexistent/modules.yml"}, "--node-probe.config.file=/nonexistent/modules.yml: open"},
		{[]string{"--node-probe.gpu=gpu0"}, "--node-probe.gpu=gpu0: want a PCI address"},
		{[]string{"--sim.faults=x.yaml"}, "--sim.faults needs --sim"},
		{[]string{"--slurm.job-mapping-dir=/etc/hostname"}, "--slurm.job-mapping-dir=/etc/hostname: want a directory of job-mapping files, not a file"},
		{[]string{"--slurm.job-mapping-dir=/etc/hostname/x"}, "--slurm.job-mapping-dir=/etc/hostname/x: want a directory the exporter can read"},
		{[]string{"--sim=dgx-h100", "probe"}, "the probe command needs a real GPU"},
		{[]string{"--sim=dgx-h100", "collectives"}, "the collectives command needs real GPUs"},
	} {
		err := check(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.args, err, c.want)
		}
	}
}

// The daemon's --nccl.library and the collectives command read one
// variable, so `collectives --check` run in the exporter's container (the
// chart's nccl.hostPath sets it) checks the library the daemon loads; a
// flag given wins.
func TestNCCLLibraryFromTheEnvironment(t *testing.T) {
	t.Setenv("GPULINK_NCCL_LIBRARY", "/host/nccl/libnccl.so.2")
	for _, c := range []struct {
		args            []string
		daemon, command string
	}{
		{[]string{"collectives", "--check"}, "/host/nccl/libnccl.so.2", "/host/nccl/libnccl.so.2"},
		{[]string{"collectives", "--check", "--library=/opt/nccl/libnccl.so.2"}, "/host/nccl/libnccl.so.2", "/opt/nccl/libnccl.so.2"},
	} {
		l := newCLI()
		if _, err := l.app.Parse(c.args); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if l.cfg.ncclLib != c.daemon || l.collectives.Library != c.command {
			t.Errorf("%q: daemon %q, command %q; want %q, %q", c.args, l.cfg.ncclLib, l.collectives.Library, c.daemon, c.command)
		}
	}
}

// A path that may appear later is a warning, not an error.
func TestMissingSocketOrLibraryWarns(t *testing.T) {
	var log bytes.Buffer
	l := newCLI()
	command, err := l.app.Parse([]string{"--collector.kubernetes", "--kubernetes.pod-resources-socket=/nonexistent/kubelet.sock",
		"--nvml.library=/nonexistent/libnvidia-ml.so.1", "--cuda.library=libcuda.so.1", "--slurm.job-mapping-dir=/nonexistent/dcgm-job-map"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.validate(command, slog.New(slog.NewTextHandler(&log, nil))); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--kubernetes.pod-resources-socket", "--nvml.library", "--slurm.job-mapping-dir"} {
		if !strings.Contains(log.String(), "flag="+flag) {
			t.Errorf("no warning for %s in %q", flag, log.String())
		}
	}
	if strings.Contains(log.String(), "--cuda.library") {
		t.Errorf("a bare library name is the loader's to find, got %q", log.String())
	}
}

// TestBinaryRefuses runs the real start-up (this test binary running main)
// and expects it to exit non-zero with the flag named, before anything
// starts, with or without --sim.
func TestBinaryRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"--probe.size=8GiB"}, "--probe.size"},
		{[]string{"--sim=dgx-h100", "--probe.size=8GiB"}, "--probe.size"},
		{[]string{"--nvml.interval=-5s"}, "--nvml.interval"},
		{[]string{"--sim=dgx-h100", "--nvml.interval=-5s"}, "--nvml.interval"},
		{[]string{"--probe.samples=0"}, "--probe.samples"},
		{[]string{"--nvml.timeout=10s", "--nvml.interval=5s"}, "--nvml.timeout"},
		{[]string{"--sim=dgx-h100", "--collective.iterations=0"}, "--collective.iterations"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, os.Args[0], append(c.args, "--web.listen-address=127.0.0.1:0")...)
		cmd.Env = append(os.Environ(), runMainEnv+"=1")
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		err := cmd.Run()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() <= 0 {
			t.Errorf("%q: got %v, want a non-zero exit (stderr %q)", c.args, err, stderr.String())
			continue
		}
		if !strings.Contains(stderr.String(), c.flag+"=") {
			t.Errorf("%q: stderr %q does not name %s", c.args, stderr.String(), c.flag)
		}
	}
}

// The README's flag table documents every flag the app has.
func TestREADMEListsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range newCLI().app.Model().Flags {
		if f.Hidden || slices.Contains([]string{"help", "version", "web.systemd-socket"}, f.Name) {
			continue
		}
		if !bytes.Contains(readme, []byte("`--"+f.Name)) {
			t.Errorf("README does not document --%s", f.Name)
		}
	}
}

// TestWiring starts the table's sources on the simulated node: the label
// of each is the table's name, and the process source gets the NVML reader
// and the topology sampler even with the nvml, xid and topology collectors
// off.
func TestWiring(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string // source labels
	}{
		{[]string{"--probe.policy=always", "--collector.kubernetes", "--kubernetes.interval=1s"},
			[]string{"kubernetes", "nccl", "nic", "nvml", "probe", "process", "sim", "topology", "xid"}},
		// The topology sampler, without its collector; the nccl source
		// reads the NICs itself without the nic source.
		{[]string{"--no-collector.nvml", "--no-collector.xid", "--no-collector.topology", "--no-collector.nic"},
			[]string{"nccl", "process", "sim", "topology"}},
		{[]string{"--slurm.job-mapping-dir=" + t.TempDir()},
			[]string{"nccl", "nic", "nvml", "probe", "process", "sim", "slurm", "topology", "xid"}},
		{[]string{"--no-collector.nccl"},
			[]string{"nic", "nvml", "probe", "process", "sim", "topology", "xid"}},
		// The Slurm source's switch: no mapping files read though a
		// directory is named (and no gpulink_gpu_job_info).
		{[]string{"--slurm.job-mapping-dir=" + t.TempDir(), "--no-collector.slurm"},
			[]string{"nccl", "nic", "nvml", "probe", "process", "sim", "topology", "xid"}},
	} {
		w, l := wireSim(t, append(c.args, "--sim=dgx-h100")...)
		var got []string
		for _, s := range w.statuses {
			got = append(got, s.Status().Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: sources %v, want %v", c.args, got, c.want)
		}
		if (w.reader != nil) != l.cfg.src[processSource].on || w.topology == nil {
			t.Errorf("%q: the process source lacks the NVML reader or the topology sampler", c.args)
		}
		if _, err := w.reg.Gather(); err != nil {
			t.Errorf("%q: gather: %v", c.args, err)
		}
	}
}

// wireSim parses args (which name a --sim profile), checks them as start-up
// does, and starts the sources over the simulated node they name, with the
// faults file of --sim.faults; everything is stopped when the test ends.
func wireSim(t *testing.T, args ...string) (*wiring, *cli) {
	t.Helper()
	l := newCLI()
	command, err := l.app.Parse(args)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.validate(command, quiet); err != nil {
		t.Fatal(err)
	}
	node, err := sim.Start(sim.Config{Profile: l.cfg.sim, FaultsFile: l.cfg.simFaults, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	w := newWiring(context.Background(), l.cfg, quiet, scrape.NewRegistry(), node.FS(), node.NVML, node)
	t.Cleanup(func() {
		w.close()
		node.Close()
	})
	if err := w.startSources(); err != nil {
		t.Fatal(err)
	}
	return w, l
}

// The collective child gets the libraries of the flags, and NVLS only
// when the operator asks for it; the command it names parses.
func TestCollectivesCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"/bin/exe", "collectives", "--cuda.library=libcuda.so.1", "--library=libnccl.so.2"}},
		{[]string{"--nccl.library=/opt/nccl/libnccl.so.2", "--cuda.library=/usr/lib/libcuda.so.1", "--nccl.nvls"},
			[]string{"/bin/exe", "collectives", "--cuda.library=/usr/lib/libcuda.so.1", "--library=/opt/nccl/libnccl.so.2", "--nvls"}},
	} {
		l := newCLI()
		if _, err := l.app.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		got := collectivesCommand("/bin/exe", l.cfg)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: child %q, want %q", tc.args, got, tc.want)
		}
		child := newCLI()
		command, err := child.app.Parse(append(got[1:], "--output=json", "--gpu=0000:18:00.0", "--gpu=0000:2a:00.0"))
		if err != nil || command != child.collectivesCmd.FullCommand() || child.collectives.NVLS != slices.Contains(tc.args, "--nccl.nvls") {
			t.Errorf("%q: the child's command line parses as %q, %v; NVLS %v", got, command, err, child.collectives.NVLS)
		}
	}
}

// A server that cannot start (its port taken) ends the exporter with exit
// 1 and the reason, at once.
func TestServerFailureExits(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "--sim=dgx-h100", "--web.listen-address="+l.Addr().String())
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("got %v, want exit 1 (stderr %q)", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "address already in use") {
		t.Errorf("stderr does not say why the server failed: %q", stderr.String())
	}
}

// Closing the wiring stops the sources before it shuts NVML down, whether
// or not the context it was given has ended (it has not when the server
// fails to start): the XID watch, an NVML call in flight for as long as it
// runs, ends first, so the reader's Shutdown does not wait out its bound
// and leave NVML loaded. Unloading NVML under a call crashed the real
// exporter on an H200.
func TestCloseStopsSourcesFirst(t *testing.T) {
	w, _ := wireSim(t, "--sim=dgx-h100")
	xid := func() sampler.Status {
		for _, s := range w.statuses {
			if st := s.Status(); st.Name == "xid" {
				return st
			}
		}
		t.Fatal("no xid source")
		return sampler.Status{}
	}
	deadline := time.Now().Add(30 * time.Second)
	for !xid().Up {
		if time.Now().After(deadline) {
			t.Fatal("the XID watch never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	w.close()
	// The watch's event wait is a second; Shutdown's bound five.
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("close took %v: the XID watch was still running when NVML was shut down", d)
	}
}

// topology on a machine without GPUs says so and exits non-zero, in the
// one error form, rather than print an empty matrix and exit 0.
func TestTopologyWithoutGPUs(t *testing.T) {
	root := t.TempDir()
	f, err := os.Open("numa/testdata/no-gpu.txtar")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := machine.ExtractTxtar(f, root); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "topology", "--path.sysfs="+filepath.Join(root, "sys"),
		"--path.procfs="+filepath.Join(root, "proc"), "--nvml.library=/nonexistent/libnvidia-ml.so.1")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() <= 0 {
		t.Errorf("topology without GPUs: %v, want a non-zero exit (stdout %q)", err, stdout.String())
	}
	if want := probes.ErrorPrefix + "no GPU on this machine"; !strings.Contains(stderr.String(), want) {
		t.Errorf("topology without GPUs said %q, want %q", stderr.String(), want)
	}
	if stdout.Len() != 0 {
		t.Errorf("topology without GPUs printed a matrix:\n%s", stdout.String())
	}
}

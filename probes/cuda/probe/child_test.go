package probe

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda/cudatest"
	"github.com/gpulink/gpulink_exporter/probes/sharingtest"
)

// The fake driver's model (see cudatest): what each probe must report back
// if it queues, times and counts correctly.
const (
	fakeH2D     = 50e9
	fakeD2H     = 48e9
	fakeLocal   = 1500e9 // bytes copied per second; the probe counts 2x
	fakePeer    = 380e9
	fakeHostLat = 1200e-9
	fakePeerLat = 800e-9
	gpu0, gpu1  = "0000:00:06.0", "0000:00:07.0"
	testSize    = 4 << 20
	testSamples = 3
	closeEnough = 1e-3 // relative; the model is exact but events are float ms
)

// fakeMachine builds the fake driver with the borrowed VM's two H200
// addresses and returns a config over the matching sysfs fixture.
func fakeMachine(t *testing.T) ChildConfig {
	t.Helper()
	t.Setenv("FAKE_CUDA_BUSIDS", gpu0+","+gpu1)
	root := machine.Load(t, "h200-vm")
	return ChildConfig{Library: cudatest.Build(t), FS: hostfs.Under(root)}
}

// hostNodes binds to node 0 where this kernel has one (every NUMA kernel
// does), else leaves the buffers unbound.
func hostNodes() []int {
	if _, err := os.Stat("/sys/devices/system/node/node0"); err != nil {
		return nil
	}
	return []int{0}
}

func near(got, want float64) bool { return math.Abs(got-want) <= closeEnough*want }

func find(t *testing.T, g probes.GPURound, kind probes.Kind, dir string) probes.Result {
	t.Helper()
	for _, r := range g.Results {
		if r.Probe == kind && r.Direction == dir {
			return r
		}
	}
	t.Fatalf("no %s %s result in %+v", kind, dir, g.Results)
	return probes.Result{}
}

func TestRoundMeasuresWhatTheFakeModels(t *testing.T) {
	cfg := fakeMachine(t)
	round := RunRound(context.Background(), cfg, []probes.Options{{
		GPU: gpu0, Peers: []string{gpu1}, HostNodes: hostNodes(), SizeBytes: testSize, Samples: testSamples,
	}})
	if round.Version != probes.ContractVersion || round.DriverVersion != 13000 || len(round.GPUs) != 1 {
		t.Fatalf("round header: %+v", round)
	}
	g := round.GPUs[0]
	if g.Error != "" || !g.OK() {
		t.Fatalf("GPU not probed cleanly: %+v", g)
	}
	if g.PCIBusID != gpu0 || g.CUDADevice != 0 {
		t.Errorf("GPU %s CUDA device %d", g.PCIBusID, g.CUDADevice)
	}
	bw := []struct {
		kind probes.Kind
		dir  string
		want float64
	}{
		{probes.HostToDevice, probes.DirHostToDevice, fakeH2D},
		{probes.DeviceToHost, probes.DirDeviceToHost, fakeD2H},
		{probes.HostBidirectional, probes.DirHostToDevice, fakeH2D},
		{probes.HostBidirectional, probes.DirDeviceToHost, fakeD2H},
		{probes.DeviceLocalCopy, probes.DirLocal, 2 * fakeLocal},
		{probes.PeerCopy, probes.DirToPeer, fakePeer},
		{probes.PeerBidirectional, probes.DirToPeer, fakePeer},
		{probes.PeerBidirectional, probes.DirFromPeer, fakePeer},
	}
	for _, c := range bw {
		r := find(t, g, c.kind, c.dir)
		if !near(r.BytesPerSecond, c.want) {
			t.Errorf("%s %s = %.4g B/s, want %.4g", c.kind, c.dir, r.BytesPerSecond, c.want)
		}
		if r.SizeBytes != testSize || r.Samples != testSamples {
			t.Errorf("%s %s: size %d samples %d", c.kind, c.dir, r.SizeBytes, r.Samples)
		}
		isHost := c.kind == probes.HostToDevice || c.kind == probes.DeviceToHost || c.kind == probes.HostBidirectional
		if isHost && len(hostNodes()) > 0 && (r.HostNUMANode == nil || *r.HostNUMANode != 0) {
			t.Errorf("%s %s: host node %v, want 0", c.kind, c.dir, r.HostNUMANode)
		}
		if !isHost && r.HostNUMANode != nil {
			t.Errorf("%s %s carries a host node", c.kind, c.dir)
		}
		if strings.HasPrefix(string(c.kind), "peer") != (r.Peer == gpu1) {
			t.Errorf("%s %s: peer %q", c.kind, c.dir, r.Peer)
		}
	}
	for _, c := range []struct {
		kind probes.Kind
		want float64
	}{{probes.HostLatency, fakeHostLat}, {probes.PeerLatency, fakePeerLat}} {
		r := find(t, g, c.kind, "")
		if !near(r.Seconds, c.want) || r.SizeBytes != probes.ChaseBytes {
			t.Errorf("%s = %g s over %d bytes, want %g over %d", c.kind, r.Seconds, r.SizeBytes, c.want, probes.ChaseBytes)
		}
	}
	// All launches unless the machine running the test is slower than
	// launchBudget allows; TestLaunchLatencyStopsAtItsBudget checks the cut.
	if r := find(t, g, probes.LaunchLatency, ""); r.Seconds <= 0 || r.Samples < 1 || r.Samples > LaunchCount {
		t.Errorf("launch latency %g over %d samples", r.Seconds, r.Samples)
	}
	// The h200-vm fixture's GPU link is Gen5 x16; the fake's event query
	// says the copies are still running after the gate opened.
	if l := g.LinkUnderLoad; l == nil || *l != (probes.LinkUnderLoad{Generation: 5, Width: 16, Confirmed: true}) {
		t.Errorf("link under load %+v, want Gen5 x16 confirmed", l)
	}
	// Two buffers at once is the most any probe holds on the GPU (both
	// directions, a local copy, a bidirectional peer pair); the same for
	// pinned host memory. The fake's context takes 512 MiB.
	if g.DeviceMemoryBytes != 2*testSize || g.HostMemoryBytes != 2*testSize {
		t.Errorf("device memory %d, host memory %d, want %d each", g.DeviceMemoryBytes, g.HostMemoryBytes, 2*testSize)
	}
	if g.ContextMemoryBytes != 512<<20+2*testSize {
		t.Errorf("context memory %d, want %d", g.ContextMemoryBytes, 512<<20+2*testSize)
	}
	if g.BusySeconds <= 0 || g.ContextSeconds <= 0 {
		t.Errorf("busy %g s, context %g s", g.BusySeconds, g.ContextSeconds)
	}
}

func TestLaunchLatencyStopsAtItsBudget(t *testing.T) {
	// Each launch waits 5 ms, as beside a job that holds the GPU's time
	// slices: the probe stops after launchBudget instead of 1100 launches,
	// and times the second half of what it ran.
	t.Setenv("FAKE_CUDA_LAUNCH_SLEEP_US", "5000")
	cfg := fakeMachine(t)
	g := RunRound(context.Background(), cfg, []probes.Options{{GPU: gpu0, Probes: []probes.Kind{probes.LaunchLatency}, Samples: 1}}).GPUs[0]
	r := find(t, g, probes.LaunchLatency, "")
	most := int(launchBudget/(5*time.Millisecond)) + 1
	if r.Error != "" || r.Samples < 1 || r.Samples > most/2+1 || r.Seconds < 5e-3 {
		t.Errorf("launch latency %g s over %d samples (error %q), want >= 5 ms over at most %d", r.Seconds, r.Samples, r.Error, most/2+1)
	}
}

func TestOneFailingProbeLeavesTheOthers(t *testing.T) {
	// Allocations go: host_to_device 1, device_to_host 2, then the third,
	// the bidirectional probe's first buffer, fails.
	t.Setenv("FAKE_CUDA_FAIL", "cuMemAlloc_v2:2:3")
	cfg := fakeMachine(t)
	round := RunRound(context.Background(), cfg, []probes.Options{{GPU: gpu0, Peers: []string{gpu1}, SizeBytes: testSize, Samples: 1}})
	g := round.GPUs[0]
	if g.Error != "" {
		t.Fatalf("GPU error %q", g.Error)
	}
	failed := 0
	for _, r := range g.Results {
		if r.Error == "" {
			continue
		}
		failed++
		if r.Probe != probes.HostBidirectional || !strings.Contains(r.Error, "CUDA_ERROR_OUT_OF_MEMORY") {
			t.Errorf("unexpected failure %s %s: %s", r.Probe, r.Direction, r.Error)
		}
	}
	if failed != 2 {
		t.Errorf("%d failed results, want both directions of host_bidirectional", failed)
	}
	if r := find(t, g, probes.DeviceLocalCopy, probes.DirLocal); !near(r.BytesPerSecond, 2*fakeLocal) {
		t.Errorf("a later probe after the failure: %+v", r)
	}
	if g.DeviceMemoryBytes != 2*testSize {
		t.Errorf("device memory %d: a failed probe must give back what it took", g.DeviceMemoryBytes)
	}
}

func TestPeerProbesWithoutPeerAccess(t *testing.T) {
	t.Setenv("FAKE_CUDA_PEER", "0")
	cfg := fakeMachine(t)
	g := RunRound(context.Background(), cfg, []probes.Options{{GPU: gpu0, Peers: []string{gpu1}, SizeBytes: testSize, Samples: 1}}).GPUs[0]
	for _, r := range g.Results {
		isPeer := r.Probe == probes.PeerCopy || r.Probe == probes.PeerBidirectional || r.Probe == probes.PeerLatency
		if isPeer && !strings.Contains(r.Error, "cannot access GPU "+gpu1+" peer to peer") {
			t.Errorf("%s %s: %q", r.Probe, r.Direction, r.Error)
		}
		if !isPeer && r.Error != "" {
			t.Errorf("%s failed: %s", r.Probe, r.Error)
		}
	}
}

func TestGPUThatCannotBeProbed(t *testing.T) {
	t.Run("no driver", func(t *testing.T) {
		round := RunRound(context.Background(), ChildConfig{Library: "/nonexistent/libcuda.so.1"}, []probes.Options{{GPU: gpu0}})
		if g := round.GPUs[0]; !strings.Contains(g.Error, "/nonexistent/libcuda.so.1") || g.PCIBusID != gpu0 {
			t.Errorf("%+v", g)
		}
	})
	t.Run("absent GPU", func(t *testing.T) {
		cfg := fakeMachine(t)
		g := RunRound(context.Background(), cfg, []probes.Options{{GPU: "0000:18:00.0", SizeBytes: testSize, Samples: 1}}).GPUs[0]
		if !strings.Contains(g.Error, "no CUDA device at PCI address 0000:18:00.0") {
			t.Errorf("%+v", g)
		}
	})
	t.Run("kernels fail to load", func(t *testing.T) {
		t.Setenv("FAKE_CUDA_FAIL", "cuModuleLoadDataEx:218")
		cfg := fakeMachine(t)
		g := RunRound(context.Background(), cfg, []probes.Options{{GPU: gpu0, SizeBytes: testSize, Samples: 1}}).GPUs[0]
		if !strings.Contains(g.Error, "loading the probe kernels") || !strings.Contains(g.Error, "CUDA_ERROR_INVALID_PTX") {
			t.Errorf("%+v", g)
		}
	})
}

func TestChainIsOneCycleThroughEveryNode(t *testing.T) {
	c := newChain(0x7f0000000000, 1<<16, chaseStride)
	n := len(c.order)
	seen := map[uint64]bool{}
	p := c.start()
	for range n {
		if seen[p] {
			t.Fatalf("cycle shorter than %d nodes", n)
		}
		seen[p] = true
		off := p - c.base
		p = uint64(c.bytes[off]) | uint64(c.bytes[off+1])<<8 | uint64(c.bytes[off+2])<<16 | uint64(c.bytes[off+3])<<24 |
			uint64(c.bytes[off+4])<<32 | uint64(c.bytes[off+5])<<40
	}
	if p != c.start() || p != c.after(n) || c.after(1) == c.start() {
		t.Fatalf("chase does not return to its start after %d hops", n)
	}
	// The warm-up tour: one hop into every page, back where it began.
	pages := map[uint64]bool{}
	p = c.tourStart()
	for range len(c.pages) {
		page := (p - c.base) / tourPage
		if pages[page] || (p-c.base)%tourPage != tourOffset {
			t.Fatalf("tour visits %#x: page %d twice or off its slot", p, page)
		}
		pages[page] = true
		p = binary.LittleEndian.Uint64(c.bytes[p-c.base:])
	}
	if p != c.tourStart() || len(pages) != (1<<16)/tourPage {
		t.Fatalf("tour of %d pages does not close", len(pages))
	}
}

func TestCommandJSONAndTable(t *testing.T) {
	cfg := fakeMachine(t)
	for _, out := range []string{"json", "table"} {
		var stdout, stderr bytes.Buffer
		cmd := &Command{Library: cfg.Library, FS: cfg.FS, GPUs: []string{"all"}, Size: "4MiB", Samples: 1, Output: out,
			Probes: []string{"host_to_device", "peer_copy"}, NoHostBinding: true}
		if code := cmd.Run(context.Background(), &stdout, &stderr); code != probes.ExitOK {
			t.Fatalf("%s: exit %d: %s", out, code, stderr.String())
		}
		if out == "table" {
			for _, want := range []string{"GPU 0000:00:06.0 Fake H200 0 (CUDA device 0)", "host_to_device", "50.00 GB/s", "to_peer", "0000:00:07.0", "380.00 GB/s", "Gen5 x16 (confirmed while copying)"} {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("table lacks %q:\n%s", want, stdout.String())
				}
			}
			continue
		}
		var round probes.Round
		if err := json.Unmarshal(stdout.Bytes(), &round); err != nil {
			t.Fatalf("json: %v\n%s", err, stdout.String())
		}
		// --gpu=all probes both GPUs, each against the other.
		if len(round.GPUs) != 2 || round.GPUs[1].PCIBusID != gpu1 {
			t.Fatalf("GPUs %+v", round.GPUs)
		}
		for _, g := range round.GPUs {
			if len(g.Results) != 2 || !g.OK() {
				t.Errorf("GPU %s results %+v", g.PCIBusID, g.Results)
			}
		}
	}
}

func TestCommandRejectsBadInput(t *testing.T) {
	cfg := fakeMachine(t)
	for _, c := range []struct {
		cmd  Command
		want string
	}{
		{Command{Size: "12 parsecs", Samples: 1}, "--size=12 parsecs: want bytes or a size such as 64MiB"},
		{Command{Size: "1024", Samples: 1}, "--size=1024: want 1MiB to 4GiB"},
		{Command{Size: "8GiB", Samples: 1}, "--size=8GiB: want 1MiB to 4GiB"},
		{Command{Size: "64MiB", Samples: 0}, "--samples=0: want 1 to 100"},
		{Command{Size: "64MiB", Samples: 101}, "--samples=101: want 1 to 100"},
		{Command{Size: "64MiB", Samples: 1, Probes: []string{"warp_drive"}}, "--probe=warp_drive: unknown probe"},
		{Command{Size: "64MiB", Samples: 1, GPUs: []string{"7"}}, "--gpu=7: there are 2 GPUs (0-1)"},
	} {
		c.cmd.Library, c.cmd.FS = cfg.Library, cfg.FS
		var stdout, stderr bytes.Buffer
		if code := c.cmd.Run(context.Background(), &stdout, &stderr); code != probes.ExitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%+v: exit %d, stderr %q, want %q", c.cmd, code, stderr.String(), c.want)
		}
	}
}

// sharingOn is the fake process list with pid 777 ("python3") on GPU 0
// in the listings job says.
func sharingOn(job func(call int) bool) *probes.SharingCheck {
	return sharingtest.Check([]string{gpu0, gpu1}, gpu0, job)
}

// The probe command lists what shared its GPUs, as the daemon does: a job
// on GPU 0 seen only while the round ran marks GPU 0's results contended
// in the table, the JSON and on stderr; GPU 1's results, and a round with
// no job, are marked nothing.
func TestCommandReportsWhatSharedTheGPU(t *testing.T) {
	cfg := fakeMachine(t)
	run := func(out string, sharing *probes.SharingCheck, gpus ...string) (string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := &Command{Library: cfg.Library, FS: cfg.FS, GPUs: gpus, Size: "4MiB", Samples: 1, Output: out,
			Probes: []string{"host_to_device", "peer_copy"}, NoHostBinding: true, Sharing: sharing}
		if code := cmd.Run(context.Background(), &stdout, &stderr); code != probes.ExitOK {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		return stdout.String(), stderr.String()
	}
	duringOnly := func(call int) bool { return call == 2 } // not before, not after
	stdout, stderr := run("table", sharingOn(duringOnly), "0")
	for _, want := range []string{"shared: GPU 0000:00:06.0: other compute processes: pid 777 (python3)", "contended", "other_process"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "GPU 0000:00:06.0 was shared while it was measured; its results are marked contended (other_process)") ||
		!strings.Contains(stderr, "pid 777 (python3)") {
		t.Errorf("stderr does not say GPU 0 was shared:\n%s", stderr)
	}

	stdout, stderr = run("json", sharingOn(duringOnly), "all")
	var round probes.Round
	if err := json.Unmarshal([]byte(stdout), &round); err != nil {
		t.Fatalf("json: %v\n%s", err, stdout)
	}
	if len(round.GPUs) != 2 {
		t.Fatalf("GPUs %+v", round.GPUs)
	}
	c0, c1 := round.GPUs[0].Contention, round.GPUs[1].Contention
	if !c0.Contended() || !reflect.DeepEqual(c0.Reasons, []string{probes.ContendedOtherProcess}) ||
		!reflect.DeepEqual(c0.Processes, map[string][]int{gpu0: {777}}) || c0.ProcessNames[777] != "python3" {
		t.Errorf("GPU 0 contention %+v", c0)
	}
	// GPU 1's own results are its own; those against GPU 0 are not.
	if c1 == nil || len(c1.Reasons) != 0 || !reflect.DeepEqual(c1.Peers, map[string][]string{gpu0: {probes.ContendedOtherProcess}}) {
		t.Errorf("GPU 1 contention %+v, want only its results against GPU 0", c1)
	}
	if !strings.Contains(stderr, "GPU 0000:00:06.0 was shared") || !strings.Contains(stderr, "GPU 0000:00:07.0 was shared") {
		t.Errorf("stderr:\n%s", stderr)
	}

	stdout, stderr = run("json", sharingOn(func(int) bool { return false }), "0")
	round = probes.Round{}
	if err := json.Unmarshal([]byte(stdout), &round); err != nil {
		t.Fatalf("json: %v\n%s", err, stdout)
	}
	if c := round.GPUs[0].Contention; c == nil || c.Contended() || c.ProcessChecks < 2 {
		t.Errorf("alone: contention %+v, want checked and clean", c)
	}
	if strings.Contains(stderr, "shared") {
		t.Errorf("alone, stderr says shared:\n%s", stderr)
	}
	stdout, _ = run("table", sharingOn(func(int) bool { return false }), "0")
	if strings.Contains(stdout, "shared:") || strings.Contains(stdout, "other_process") {
		t.Errorf("alone, the table marks something:\n%s", stdout)
	}
}

// Without NVML the command still runs, and says that sharing could not be
// checked.
func TestCommandWithoutNVMLSaysSharingWasNotChecked(t *testing.T) {
	cfg := fakeMachine(t)
	var stdout, stderr bytes.Buffer
	cmd := &Command{Library: cfg.Library, FS: cfg.FS, GPUs: []string{"0"}, Size: "4MiB", Samples: 1, Output: "json",
		Probes: []string{"host_to_device"}, NoHostBinding: true, SharingUnavailable: errors.New("NVML: libnvidia-ml.so.1 not found")}
	if code := cmd.Run(context.Background(), &stdout, &stderr); code != probes.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "could not check whether other processes shared the GPUs: NVML: libnvidia-ml.so.1 not found") {
		t.Errorf("stderr: %s", stderr.String())
	}
	var round probes.Round
	if err := json.Unmarshal(stdout.Bytes(), &round); err != nil || round.GPUs[0].Contention != nil {
		t.Errorf("round %+v, %v: want results and no contention claimed", round, err)
	}
}

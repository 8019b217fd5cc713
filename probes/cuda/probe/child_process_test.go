package probe

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/internal/childtest"
)

// realChildRunner runs the real probe child (this test binary,
// childtest.Self) over the fake driver, as the daemon runs the exporter
// binary.
func realChildRunner(t *testing.T, cfg ChildConfig, timeout time.Duration) *probes.ChildRunner {
	t.Helper()
	return &probes.ChildRunner{Command: []string{childtest.Self(t), "probe", "--cuda.library=" + cfg.Library, "--path.sysfs=" + cfg.FS.Sys}, Timeout: timeout}
}

func TestDaemonRunsTheRealChild(t *testing.T) {
	cfg := fakeMachine(t)
	r := realChildRunner(t, cfg, time.Minute)
	round, err := r.Run(context.Background(), probes.Options{GPU: gpu1, Peers: []string{gpu0}, SizeBytes: testSize, Samples: 1,
		Probes: []probes.Kind{probes.HostToDevice, probes.PeerCopy}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(round.GPUs) != 1 || round.GPUs[0].PCIBusID != gpu1 || len(round.GPUs[0].Results) != 2 || !round.GPUs[0].OK() {
		t.Fatalf("round %+v", round)
	}
	if r := find(t, round.GPUs[0], probes.PeerCopy, probes.DirToPeer); r.Peer != gpu0 || !near(r.BytesPerSecond, fakePeer) {
		t.Errorf("peer copy %+v", r)
	}
}

// A driver call that never returns (a wedged GPU) must cost the daemon
// one killed child, not a hung scheduler.
func TestHungDriverCallIsKilled(t *testing.T) {
	t.Setenv("FAKE_CUDA_HANG", "cuStreamSynchronize")
	cfg := fakeMachine(t)
	r := realChildRunner(t, cfg, 2*time.Second)
	start := time.Now()
	_, err := r.Run(context.Background(), probes.Options{GPU: gpu0, SizeBytes: testSize, Samples: 1, Probes: []probes.Kind{probes.LaunchLatency}})
	var rf *probes.RunFailure
	if !errors.As(err, &rf) || rf.Result != probes.RunTimeout {
		t.Fatalf("Run with a hung driver: %v, want a timeout", err)
	}
	if !strings.Contains(err.Error(), gpu0) {
		t.Errorf("error %q does not name the GPU", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the hung child took %v to be dealt with", d)
	}
}

func TestChildWithoutADriverReportsTheGPU(t *testing.T) {
	cfg := fakeMachine(t)
	cfg.Library = "/nonexistent/libcuda.so.1"
	round, err := realChildRunner(t, cfg, time.Minute).Run(context.Background(), probes.Options{GPU: gpu0, SizeBytes: testSize, Samples: 1})
	if err != nil {
		t.Fatalf("Run without a driver: %v, want a round saying why", err)
	}
	if g := round.GPUs[0]; g.PCIBusID != gpu0 || !strings.Contains(g.Error, "/nonexistent/libcuda.so.1") {
		t.Fatalf("GPU %+v, want an error naming the library", g)
	}
}

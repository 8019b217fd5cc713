package collectives

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda/cudatest"
	"github.com/gpulink/gpulink_exporter/probes/nccl/nccltest"
	"github.com/gpulink/gpulink_exporter/probes/sharingtest"
)

// runCollectivesHere runs the collectives command in this process over
// the fakes (a few operations, every collective) with sharing as given.
func runCollectivesHere(t *testing.T, output string, sharing *probes.SharingCheck) (string, string) {
	t.Helper()
	// The command sets NCCL's variables in its process: put them back.
	for _, k := range []string{"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_NVLS_ENABLE"} {
		t.Setenv(k, os.Getenv(k))
	}
	t.Setenv("FAKE_CUDA_BUSIDS", gpu0+","+gpu1)
	t.Setenv("FAKE_NCCL_LAT_US", "0")
	c := &CollectiveCommand{CUDALibrary: cudatest.Build(t), Library: nccltest.Build(t), GPUs: []string{"all"},
		Size: "1MiB", SmallSize: "8KiB", Warmup: 1, Iterations: 2, Samples: 2, Timeout: time.Minute, Output: output, Sharing: sharing}
	var stdout, stderr bytes.Buffer
	if code := c.Run(context.Background(), &stdout, &stderr); code != probes.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	return stdout.String(), stderr.String()
}

// sharedGPU1 is the fake process list with pid 777 ("python3") on GPU 1
// in the listings job says.
func sharedGPU1(job func(call int) bool) *probes.SharingCheck {
	return sharingtest.Check([]string{gpu0, gpu1}, gpu1, job)
}

// The collectives command lists what shared its GPUs: a job on GPU 1 seen
// while the round ran makes every result contended (a collective crosses
// every GPU), in the JSON, the table and on stderr; alone, nothing is.
func TestCollectivesCommandReportsWhatSharedTheGPUs(t *testing.T) {
	during := func(call int) bool { return call == 2 }
	stdout, stderr := runCollectivesHere(t, "json", sharedGPU1(during))
	var round probes.CollectiveRound
	if err := json.Unmarshal([]byte(stdout), &round); err != nil {
		t.Fatalf("json: %v\n%s", err, stdout)
	}
	c := round.Contention
	if len(round.Results) == 0 || !c.Contended() || !reflect.DeepEqual(c.Reasons, []string{probes.ContendedOtherProcess}) ||
		!reflect.DeepEqual(c.Processes, map[string][]int{gpu1: {777}}) || c.ProcessNames[777] != "python3" {
		t.Errorf("contention %+v over %d results", c, len(round.Results))
	}
	if !strings.Contains(stderr, "every result is marked contended (other_process)") || !strings.Contains(stderr, "GPU 0000:00:07.0: other compute processes: pid 777 (python3)") {
		t.Errorf("stderr:\n%s", stderr)
	}

	stdout, _ = runCollectivesHere(t, "table", sharedGPU1(during))
	if !strings.Contains(stdout, "# contended (other_process)") || !strings.Contains(stdout, "#   shared: GPU 0000:00:07.0: other compute processes: pid 777 (python3)") {
		t.Errorf("table:\n%s", stdout)
	}

	stdout, stderr = runCollectivesHere(t, "json", sharedGPU1(func(int) bool { return false }))
	round = probes.CollectiveRound{}
	if err := json.Unmarshal([]byte(stdout), &round); err != nil {
		t.Fatalf("json: %v\n%s", err, stdout)
	}
	if c := round.Contention; c == nil || c.Contended() || c.ProcessChecks < 2 {
		t.Errorf("alone: contention %+v, want checked and clean", c)
	}
	if strings.Contains(stderr, "contended") || strings.Contains(stderr, "could not check") {
		t.Errorf("alone, stderr:\n%s", stderr)
	}
}

// Without NVML the command runs and says sharing was not checked.
func TestCollectivesCommandWithoutNVML(t *testing.T) {
	stdout, stderr := runCollectivesHere(t, "json", nil)
	var round probes.CollectiveRound
	if err := json.Unmarshal([]byte(stdout), &round); err != nil || len(round.Results) == 0 || round.Contention != nil {
		t.Errorf("round %+v, %v", round, err)
	}
	if !strings.Contains(stderr, "could not check whether other processes shared the GPUs") {
		t.Errorf("stderr: %s", stderr)
	}
}

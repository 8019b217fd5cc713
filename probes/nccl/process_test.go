package nccl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/probes"
)

// Two processes, as a node-to-node probe runs one child on each node (or
// two on one node): rank 0 here makes the unique id, rank 1 in another
// process joins with its hex, and both time an all-reduce over what
// connects them.
func TestTwoProcessesMeetThroughAUniqueID(t *testing.T) {
	for _, tc := range []struct {
		name      string
		childHost string
		childGPU  int
		gbps      float64
		// The connection each side logs.
		parentLine, childLine string
	}{
		{"two nodes", "node-b", 0, defaultNetGBs,
			"Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0", "Channel 00/0 : 0[0] -> 1[0] [receive] via NET/Socket/0"},
		{"one node", "node-a", 1, defaultP2PGBs,
			"Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM", "Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := t.TempDir()
			t.Setenv("FAKE_NCCL_HOSTNAME", "node-a")
			t.Setenv("NCCL_DEBUG", "INFO")
			t.Setenv("NCCL_DEBUG_FILE", filepath.Join(logs, "nccl.%h.%p.log"))
			r := newRig(t, 2)
			id, err := r.lib.NewUniqueID()
			if err != nil {
				t.Fatal(err)
			}
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			child := exec.CommandContext(ctx, exe)
			child.Env = append(os.Environ(), helperEnv+"=rank", helperCUDAEnv+"="+r.cudaPath, helperNCCLEnv+"="+r.ncclPath,
				helperIDEnv+"="+probes.UniqueID(id).String(), helperRankEnv+"=1", helperRanksEnv+"=2", helperDeviceEnv+"="+strconv.Itoa(tc.childGPU),
				"FAKE_NCCL_HOSTNAME="+tc.childHost, "GORACE=atexit_sleep_ms=0")
			var stdout, stderr bytes.Buffer
			child.Stdout, child.Stderr = &stdout, &stderr
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			comms, err := r.lib.InitRanks(ctx, id, 2, 0, 1, r.makeCurrent)
			if err != nil {
				child.Process.Kill()
				_ = child.Wait() // killed: its status says nothing more
				t.Fatalf("InitRanks of rank 0: %v (the other rank said %q)", err, stderr.String())
			}
			send, recv := buffers(t, r)
			times := r.timed(t, func() {
				group(t, r.lib, comms, func() error { return comms[0].AllReduce(send[0], recv[0], testElems, r.streams[0]) })
			})
			if err := comms[0].Destroy(); err != nil {
				t.Errorf("Destroy: %v", err)
			}
			if err := child.Wait(); err != nil {
				t.Fatalf("the other rank: %v: %s", err, stderr.String())
			}
			childNs, err := strconv.ParseFloat(strings.TrimSpace(stdout.String()), 64)
			if err != nil {
				t.Fatalf("the other rank printed %q", stdout.String())
			}
			want := modelNs(testBytes, 1, tc.gbps) // all-reduce over 2 ranks: bus factor 1
			within1pc(t, "rank 0's all-reduce", times[0], want)
			within1pc(t, "rank 1's all-reduce", time.Duration(childNs), want)

			parentLog := readLog(t, filepath.Join(logs, fmt.Sprintf("nccl.node-a.%d.log", os.Getpid())))
			if !strings.Contains(parentLog, tc.parentLine) {
				t.Errorf("rank 0's log has no %q:\n%s", tc.parentLine, parentLog)
			}
			childLogs := glob(t, filepath.Join(logs, fmt.Sprintf("nccl.%s.%d.log", tc.childHost, child.Process.Pid)))
			if len(childLogs) != 1 {
				t.Fatalf("no log of the other rank in %s", logs)
			}
			if childLog := readLog(t, childLogs[0]); !strings.Contains(childLog, tc.childLine) {
				t.Errorf("rank 1's log has no %q:\n%s", tc.childLine, childLog)
			}
			if left := glob(t, filepath.Join(r.rdv, "fakenccl-*")); len(left) != 0 {
				t.Errorf("rendezvous directories left behind: %v", left)
			}
		})
	}
}

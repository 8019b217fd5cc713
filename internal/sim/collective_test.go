package sim

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
)

// collectiveOptions are the daemon's defaults over the node's GPUs.
func collectiveOptions(n *Node) probes.CollectiveOptions {
	o := probes.CollectiveOptions{SizeBytes: probes.DefaultCollectiveSizeBytes, SmallBytes: probes.DefaultCollectiveSmallBytes,
		Warmup: probes.DefaultCollectiveWarmup, Iterations: probes.DefaultCollectiveIterations, Samples: probes.DefaultCollectiveSamples}
	for _, g := range n.gpus {
		o.GPUs = append(o.GPUs, g.Addr)
	}
	o.Ranks = len(o.GPUs)
	return o
}

func runCollectives(t *testing.T, n *Node, o probes.CollectiveOptions) *probes.CollectiveRound {
	t.Helper()
	r, err := n.Runner().RunCollectives(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Error != "" {
		t.Fatalf("round error: %s", r.Error)
	}
	return r
}

// collResult is the round's result of c at size; for send/recv, of the pair.
func collResult(t *testing.T, r *probes.CollectiveRound, c probes.Collective, size int64, pair ...int) probes.CollectiveResult {
	t.Helper()
	for _, res := range r.Results {
		if res.Collective != c || res.SizeBytes != size {
			continue
		}
		if c == probes.SendRecv && (*res.FromRank != pair[0] || *res.ToRank != pair[1]) {
			continue
		}
		return res
	}
	t.Fatalf("no %s at %d bytes %v in %+v", c, size, pair, r.Results)
	return probes.CollectiveResult{}
}

func within(got, want, tolerance float64) bool { return math.Abs(got-want) <= want*tolerance }

// transportsOf counts the round's channels by transport, and those from
// or to rank.
func transportsOf(r *probes.CollectiveRound, rank int) (all, touching map[string]int) {
	all, touching = map[string]int{}, map[string]int{}
	for _, tr := range r.Transports {
		all[tr.Kind]++
		if tr.FromRank == rank || tr.ToRank == rank {
			touching[tr.Kind]++
		}
	}
	return all, touching
}

// A healthy DGX H100 gives what nccl-tests gives on one: about 370 GB/s
// all-reduce bus bandwidth, send/recv a little over, every pair over P2P.
func TestCollectivesDGXH100(t *testing.T) {
	n := startNode(t, "dgx-h100", "")
	o := collectiveOptions(n)
	r := runCollectives(t, n, o)
	if r.NCCLVersion != 22703 || r.Ranks != 8 || len(r.GPUs) != 8 {
		t.Errorf("round header %+v", r)
	}
	// Four collectives at two sizes, 28 pairs at two.
	if len(r.Results) != 4*2+28*2 {
		t.Errorf("%d results, want 64", len(r.Results))
	}
	ar := collResult(t, r, probes.AllReduce, o.SizeBytes)
	if !within(ar.BusBytesPerSecond, 370e9, 0.05) {
		t.Errorf("all_reduce bus bandwidth %.4g, want 370e9 within 5%%", ar.BusBytesPerSecond)
	}
	if !within(ar.AlgBytesPerSecond*1.75, ar.BusBytesPerSecond, 1e-9) {
		t.Errorf("all_reduce algbw %.4g busbw %.4g: not nccl-tests' factor", ar.AlgBytesPerSecond, ar.BusBytesPerSecond)
	}
	for _, c := range []probes.Collective{probes.AllGather, probes.ReduceScatter, probes.AllToAll} {
		if res := collResult(t, r, c, o.SizeBytes); !within(res.BusBytesPerSecond, 370e9, 0.05) {
			t.Errorf("%s bus bandwidth %.4g", c, res.BusBytesPerSecond)
		}
	}
	if sr := collResult(t, r, probes.SendRecv, o.SizeBytes, 2, 5); !within(sr.BusBytesPerSecond, 372e9, 0.05) {
		t.Errorf("send_recv 2->5 %.4g", sr.BusBytesPerSecond)
	}
	if lat := collResult(t, r, probes.AllReduce, o.SmallBytes); lat.Seconds < 20e-6 || lat.Seconds > 40e-6 {
		t.Errorf("all_reduce latency %g s", lat.Seconds)
	}
	all, _ := transportsOf(r, 0)
	// 16 channels on each of the ring's 8 pairs and the all-to-all's 56.
	if len(all) != 1 || all[probes.TransportP2P] != 56*16 {
		t.Errorf("channels by transport %v, want only p2p, 16 for each of 56 pairs", all)
	}
	// The cost: the warm-up and timed operations of each result, buffers
	// of twice the size, and a context held a little longer.
	if r.BusySeconds < 1 || r.BusySeconds > 10 || r.DeviceMemoryBytes != 2*o.SizeBytes || r.ContextSeconds <= r.BusySeconds {
		t.Errorf("cost: busy %g s, memory %d, context %g s", r.BusySeconds, r.DeviceMemoryBytes, r.ContextSeconds)
	}

	// The daemon's expectations against the model: a ratio near 0.82.
	snap, err := n.Runner().reader.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	topo, _ := numa.ReadTopology(n.FS())
	transports := probes.CollectivePathFor(snap, topo, r.GPUs).Annotate(r)
	ar = collResult(t, r, probes.AllReduce, o.SizeBytes)
	if ratio := ar.BusBytesPerSecond / ar.ExpectedBusBytesPerSecond; ratio < 0.78 || ratio > 0.86 {
		t.Errorf("all_reduce ratio %.3g against %.4g expected, want about 0.82", ratio, ar.ExpectedBusBytesPerSecond)
	}
	if len(transports) != 56 {
		t.Errorf("%d expected transports", len(transports))
	}
}

// Two NVLinks of GPU 3 down: every collective over it slows to its 16
// links; a pair without GPU 3 does not.
func TestCollectivesNVLinkDown(t *testing.T) {
	n := startNode(t, "dgx-h100", "faults:\n- {kind: nvlink_down, gpu: 3, link: 0}\n- {kind: nvlink_down, gpu: 3, link: 1}\n")
	o := collectiveOptions(n)
	r := runCollectives(t, n, o)
	if ar := collResult(t, r, probes.AllReduce, o.SizeBytes); !within(ar.BusBytesPerSecond, 370e9*16/18, 0.03) {
		t.Errorf("all_reduce with GPU 3 at 16 links: %.4g, want about %.4g", ar.BusBytesPerSecond, 370e9*16/18)
	}
	if sr := collResult(t, r, probes.SendRecv, o.SizeBytes, 3, 4); !within(sr.BusBytesPerSecond, 372e9*16/18, 0.03) {
		t.Errorf("send_recv 3->4 %.4g", sr.BusBytesPerSecond)
	}
	if sr := collResult(t, r, probes.SendRecv, o.SizeBytes, 0, 1); !within(sr.BusBytesPerSecond, 372e9, 0.03) {
		t.Errorf("send_recv 0->1 %.4g, want unchanged", sr.BusBytesPerSecond)
	}
}

// nccl_transport makes NCCL fall back: to host memory on every pair, or
// to the network on the pairs of the GPUs named; the round reports the
// transport it used.
func TestCollectivesTransportFault(t *testing.T) {
	t.Run("shm everywhere", func(t *testing.T) {
		n := startNode(t, "dgx-h100", "faults:\n- {kind: nccl_transport, transport: shm}\n")
		o := collectiveOptions(n)
		r := runCollectives(t, n, o)
		ar := collResult(t, r, probes.AllReduce, o.SizeBytes)
		if !within(ar.BusBytesPerSecond, shmBytesPerSecond, 0.05) {
			t.Errorf("all_reduce over shared memory %.4g, want about %.4g", ar.BusBytesPerSecond, shmBytesPerSecond)
		}
		if all, _ := transportsOf(r, 0); len(all) != 1 || all[probes.TransportSHM] == 0 {
			t.Errorf("channels %v, want shm only", all)
		}
		healthy := collResult(t, runCollectives(t, startNode(t, "dgx-h100", ""), o), probes.AllReduce, o.SmallBytes)
		if lat := collResult(t, r, probes.AllReduce, o.SmallBytes); lat.Seconds <= healthy.Seconds {
			t.Errorf("latency over shared memory %g s, not above P2P's %g s", lat.Seconds, healthy.Seconds)
		}
	})
	t.Run("net for GPU 0", func(t *testing.T) {
		n := startNode(t, "dgx-h100", "faults:\n- {kind: nccl_transport, transport: net, gpus: [0]}\n")
		o := collectiveOptions(n)
		r := runCollectives(t, n, o)
		// GPU 0's two nearest ConnectX-7 at 400 Gb/s: 100 GB/s, of which
		// NCCL gets 0.8.
		if ar := collResult(t, r, probes.AllReduce, o.SizeBytes); !within(ar.BusBytesPerSecond, 80e9, 0.05) {
			t.Errorf("all_reduce over the network %.4g, want about 80e9", ar.BusBytesPerSecond)
		}
		if sr := collResult(t, r, probes.SendRecv, o.SizeBytes, 0, 5); !within(sr.BusBytesPerSecond, 80e9, 0.05) {
			t.Errorf("send_recv 0->5 %.4g", sr.BusBytesPerSecond)
		}
		if sr := collResult(t, r, probes.SendRecv, o.SizeBytes, 1, 5); !within(sr.BusBytesPerSecond, 372e9, 0.05) {
			t.Errorf("send_recv 1->5 %.4g, want P2P's", sr.BusBytesPerSecond)
		}
		all, touching := transportsOf(r, 0)
		if len(touching) != 1 || touching[probes.TransportNet] == 0 || all[probes.TransportP2P] == 0 {
			t.Errorf("channels %v, GPU 0's %v: want GPU 0's over net only, the rest p2p", all, touching)
		}
	})
}

// The network transport follows the NICs: one of GPU 0's two nearest
// ports at half rate takes a quarter off, and both down leave no path.
func TestCollectivesOverTheNICs(t *testing.T) {
	probe := startNode(t, "dgx-h100", "")
	topo, err := numa.ReadTopology(probe.FS())
	if err != nil {
		t.Fatal(err)
	}
	near, _ := topo.NearestNICs(topo.Device(probe.gpus[0].Addr))
	if len(near) != 2 || len(near[0].RDMANames) == 0 || len(near[1].RDMANames) == 0 {
		t.Fatalf("GPU 0's nearest NICs %v, want the two on its switch", near)
	}
	nic0, nic1 := near[0].RDMANames[0], near[1].RDMANames[0]
	base := "faults:\n- {kind: nccl_transport, transport: net, gpus: [0]}\n"

	n := startNode(t, "dgx-h100", base+"- {kind: nic_rate, device: "+nic0+", fraction: 0.5}\n")
	o := collectiveOptions(n)
	if sr := collResult(t, runCollectives(t, n, o), probes.SendRecv, o.SizeBytes, 0, 1); !within(sr.BusBytesPerSecond, 60e9, 0.05) {
		t.Errorf("send_recv 0->1 with %s at half rate: %.4g, want about 60e9", nic0, sr.BusBytesPerSecond)
	}

	n = startNode(t, "dgx-h100", base+"- {kind: nic_down, device: "+nic0+"}\n- {kind: nic_down, device: "+nic1+"}\n")
	r := runCollectives(t, n, o)
	if ar := collResult(t, r, probes.AllReduce, o.SizeBytes); !strings.Contains(ar.Error, "no net path") || ar.BusBytesPerSecond != 0 {
		t.Errorf("all_reduce with %s and %s down: %+v, want an error", nic0, nic1, ar)
	}
	if sr := collResult(t, r, probes.SendRecv, o.SizeBytes, 1, 2); sr.Error != "" {
		t.Errorf("send_recv 1->2 failed too: %s", sr.Error)
	}
}

func TestCollectivesRefused(t *testing.T) {
	n := startNode(t, "dgx-h100", "")
	ok := collectiveOptions(n)
	for _, tc := range []struct {
		name string
		edit func(*probes.CollectiveOptions)
		want string
	}{
		// Ranks on another node and no one to hand the unique id to.
		{"another node", func(o *probes.CollectiveOptions) { o.Ranks = 16 }, "8 of 16 ranks are in other processes"},
		{"unknown GPU", func(o *probes.CollectiveOptions) { o.GPUs[1] = "0000:42:00.0" }, "no CUDA device with PCI bus id 0000:42:00.0"},
		// One address in two forms: the child normalises them as NVML does.
		{"GPU twice", func(o *probes.CollectiveOptions) { o.GPUs[1] = strings.ToUpper(o.GPUs[5]) }, "0000:ab:00.0 given twice"},
	} {
		o := ok
		o.GPUs = append([]string(nil), ok.GPUs...)
		tc.edit(&o)
		r, err := n.Runner().RunCollectives(context.Background(), o, nil)
		if err != nil || !strings.Contains(r.Error, tc.want) || len(r.Results) != 0 {
			t.Errorf("%s: round %+v, err %v; want a round saying %q", tc.name, r, err, tc.want)
		}
	}
	// Options the child refuses: a crash, as of a child that exits
	// without a round.
	for name, edit := range map[string]func(*probes.CollectiveOptions){
		"one GPU":       func(o *probes.CollectiveOptions) { o.GPUs, o.Ranks = o.GPUs[:1], 1 },
		"no iterations": func(o *probes.CollectiveOptions) { o.Iterations = 0 },
		"GPU twice":     func(o *probes.CollectiveOptions) { o.GPUs[1] = o.GPUs[0] },
	} {
		o := ok
		o.GPUs = append([]string(nil), ok.GPUs...)
		edit(&o)
		var rf *probes.RunFailure
		if r, err := n.Runner().RunCollectives(context.Background(), o, nil); r != nil || !errors.As(err, &rf) || rf.Result != probes.RunCrash {
			t.Errorf("%s: round %+v, err %v; want a crash", name, r, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.Runner().RunCollectives(ctx, ok, nil); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Errorf("cancelled: %v", err)
	}
}

package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/probes"
)

// sessionOptions are a node-to-node session's options on one side: the
// node's first k GPUs as ranks first..first+k-1 of 2k, send/recv and
// all-reduce as the default module runs them.
func sessionOptions(n *Node, k, first int, id string) probes.CollectiveOptions {
	o := collectiveOptions(n)
	o.GPUs, o.Ranks, o.FirstRank, o.UniqueID = o.GPUs[:k], 2*k, first, id
	o.Collectives = []probes.Collective{probes.SendRecv, probes.AllReduce}
	return o
}

// session runs both sides of a session, as the exporters do: the prober's
// child makes the id, the target's joins with it; each returns its round.
func session(t *testing.T, prober, target *Node, k int) (p, q *probes.CollectiveRound) {
	t.Helper()
	ids := make(chan string, 1)
	type ran struct {
		r   *probes.CollectiveRound
		err error
	}
	done := make(chan ran, 1)
	go func() {
		r, err := prober.Runner().RunCollectives(context.Background(), sessionOptions(prober, k, 0, ""), ids)
		done <- ran{r, err}
	}()
	var id string
	select {
	case id = <-ids:
	case r := <-done:
		t.Fatalf("the prober's round ended without handing out an id: %+v, %v", r.r, r.err)
	}
	if _, err := probes.ParseUniqueID(id); err != nil {
		t.Fatalf("the id handed out is not an NCCL unique id: %v", err)
	}
	q, err := target.Runner().RunCollectives(context.Background(), sessionOptions(target, k, k, id), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.r, q
}

// transportDetails counts a round's channels by NCCL's name for them.
func transportDetails(r *probes.CollectiveRound) map[string]int {
	out := map[string]int{}
	for _, tr := range r.Transports {
		out[tr.Kind+" "+tr.Detail]++
	}
	return out
}

// A DGX H100 probes a p5: each side's part goes over the network at 0.8 of
// its GPU's rail NICs (one 400 Gb/s ConnectX-7 on the DGX, four 100 Gb/s
// EFAs on the p5: 50 GB/s either way), and each side reports its own
// side of a send/recv.
func TestNodeToNodeSession(t *testing.T) {
	dgx, p5 := startNode(t, "dgx-h100", ""), startNode(t, "aws-p5", "")
	p, q := session(t, dgx, p5, 1)
	if p.Error != "" || q.Error != "" {
		t.Fatalf("round errors: prober %q, target %q", p.Error, q.Error)
	}
	if p.Ranks != 2 || p.FirstRank != 0 || q.Ranks != 2 || q.FirstRank != 1 {
		t.Errorf("ranks: prober %d from %d, target %d from %d", p.Ranks, p.FirstRank, q.Ranks, q.FirstRank)
	}
	o := sessionOptions(dgx, 1, 0, "")
	if sr := collResult(t, p, probes.SendRecv, o.SizeBytes, 0, 1); sr.Error != "" || !within(sr.BusBytesPerSecond, 40e9, 0.03) {
		t.Errorf("send_recv 0->1 from the DGX: %+v, want about 40e9", sr)
	}
	if lat := collResult(t, p, probes.SendRecv, o.SmallBytes, 0, 1); lat.Seconds < 20e-6 || lat.Seconds > 30e-6 {
		t.Errorf("send_recv latency over the network %g s", lat.Seconds)
	}
	if sr := collResult(t, q, probes.SendRecv, o.SizeBytes, 0, 1); sr.Error != "" || !within(sr.BusBytesPerSecond, 40e9, 0.03) {
		t.Errorf("send_recv 0->1 received on the p5: %+v, want about 40e9", sr)
	}
	// Two ranks: the bus factor is 1, each side at its own NICs' rate.
	for name, r := range map[string]*probes.CollectiveRound{"DGX": p, "p5": q} {
		if ar := collResult(t, r, probes.AllReduce, o.SizeBytes); ar.Error != "" || !within(ar.BusBytesPerSecond, 40e9, 0.03) {
			t.Errorf("all_reduce on the %s's side: %+v, want about 40e9", name, ar)
		}
	}
	// Each side logs the connections of its own rank, all over the
	// network: its ring's to the other rank, and the send/recv's, which
	// both ends log. The DGX's go through mlx5_0 (the first NIC) over
	// InfiniBand, the p5's through GPU 0's four EFAs (the 25th to 28th of
	// its 32 in NCCL's order) through aws-ofi-nccl, one channel on each;
	// all with GPUDirect RDMA.
	if got := transportDetails(p); len(got) != 1 || got[probes.TransportNet+" NET/IB/0/GDRDMA"] != channelsOf[probes.TransportNet] {
		t.Errorf("the DGX's channels %v", got)
	}
	for _, tr := range p.Transports {
		if tr.Network != "IB" || !tr.GDR {
			t.Errorf("the DGX's channel %+v: want IB with GPUDirect RDMA", tr)
		}
	}
	for _, tr := range q.Transports {
		if tr.Kind != probes.TransportNet || !strings.HasPrefix(tr.Detail, "NET/Libfabric/") || tr.Network != "EFA" || !tr.GDR {
			t.Errorf("the p5's channel %+v: want EFA through Libfabric with GPUDirect RDMA", tr)
		}
	}
	if got := transportDetails(q); len(got) != 4 || len(q.Transports) != 2*channelsOf[probes.TransportNet] {
		t.Errorf("the p5's channels %v, want one on each of GPU 0's four EFAs, from and to rank 1", got)
	}
	if p.BusySeconds <= 0 || p.DeviceMemoryBytes != 2*o.SizeBytes || q.BusySeconds <= 0 {
		t.Errorf("cost: prober %g s %d bytes, target %g s", p.BusySeconds, p.DeviceMemoryBytes, q.BusySeconds)
	}
}

// Two GPUs a node: each of the DGX's GPUs sends through its own rail, the
// pair between its GPUs over NVLink; the prober reports every send/recv it
// sends, to its own GPU and to the target's.
func TestNodeToNodeTwoGPUs(t *testing.T) {
	dgx, peer := startNode(t, "dgx-h100", "faults:\n- {kind: nic_rate, device: mlx5_1, fraction: 0.5}\n"), startNode(t, "dgx-h100", "")
	p, q := session(t, dgx, peer, 2)
	o := sessionOptions(dgx, 2, 0, "")
	for _, c := range []struct {
		from, to int
		want     float64
	}{{0, 1, 372e9}, {0, 2, 40e9}, {0, 3, 40e9}, {1, 2, 20e9}, {1, 3, 20e9}} {
		if sr := collResult(t, p, probes.SendRecv, o.SizeBytes, c.from, c.to); !within(sr.BusBytesPerSecond, c.want, 0.05) {
			t.Errorf("send_recv %d->%d: %.4g, want about %.4g", c.from, c.to, sr.BusBytesPerSecond, c.want)
		}
	}
	// All-reduce over four ranks, at the prober's slowest link: GPU 1's
	// rail at half rate. The target's side is healthy.
	if ar := collResult(t, p, probes.AllReduce, o.SizeBytes); !within(ar.BusBytesPerSecond, 20e9, 0.05) {
		t.Errorf("all_reduce on the prober's side %.4g, want about 20e9", ar.BusBytesPerSecond)
	}
	if ar := collResult(t, q, probes.AllReduce, o.SizeBytes); !within(ar.BusBytesPerSecond, 40e9, 0.05) {
		t.Errorf("all_reduce on the target's side %.4g, want about 40e9", ar.BusBytesPerSecond)
	}
	// The target sends between its own GPUs and receives what the
	// prober's send, each through its own healthy rail.
	if sr := collResult(t, q, probes.SendRecv, o.SizeBytes, 2, 3); len(q.Results) != 12 || !within(sr.BusBytesPerSecond, 372e9, 0.05) {
		t.Errorf("the target reports %+v: want its all_reduce, its send_recv 2->3 and its side of the 4 from the prober, at two sizes each", q.Results)
	}
	for _, c := range [][2]int{{0, 2}, {0, 3}, {1, 2}, {1, 3}} {
		if sr := collResult(t, q, probes.SendRecv, o.SizeBytes, c[0], c[1]); !within(sr.BusBytesPerSecond, 40e9, 0.05) {
			t.Errorf("send_recv %d->%d received on the target: %.4g, want about 40e9", c[0], c[1], sr.BusBytesPerSecond)
		}
	}
	got := transportDetails(p)
	if got[probes.TransportP2P+" P2P/CUMEM/read"] == 0 || got[probes.TransportNet+" NET/IB/0/GDRDMA"] == 0 || got[probes.TransportNet+" NET/IB/1/GDRDMA"] == 0 {
		t.Errorf("the prober's channels %v: want P2P between its GPUs, each GPU's rail to the other node", got)
	}
}

// The NIC faults on the sender's side: its rail port down fails what it
// sends, at half rate halves it; the other NIC near the GPU (another
// GPU's rail) changes nothing.
func TestNodeToNodeNICFaults(t *testing.T) {
	o := sessionOptions(startNode(t, "dgx-h100", ""), 1, 0, "")
	for _, tc := range []struct {
		faults string
		want   float64 // 0: failed
	}{
		{"- {kind: nic_down, device: mlx5_0}\n", 0},
		{"- {kind: nic_flapping, device: mlx5_0, period: 1h}\n", 0}, // in its first, down, phase
		{"- {kind: nic_rate, device: mlx5_0, fraction: 0.5}\n", 20e9},
		{"- {kind: nic_down, device: mlx5_1}\n", 40e9},
	} {
		p, q := session(t, startNode(t, "dgx-h100", "faults:\n"+tc.faults), startNode(t, "dgx-h100", ""), 1)
		sr, ar := collResult(t, p, probes.SendRecv, o.SizeBytes, 0, 1), collResult(t, p, probes.AllReduce, o.SizeBytes)
		switch {
		case tc.want == 0:
			for _, r := range []probes.CollectiveResult{sr, ar} {
				if !strings.Contains(r.Error, "no net path from rank 0 to rank 1: mlx5_0 port 1 is down") || r.BusBytesPerSecond != 0 {
					t.Errorf("%s%s: %+v, want it failed on mlx5_0", tc.faults, r.Collective, r)
				}
			}
		case !within(sr.BusBytesPerSecond, tc.want, 0.03) || !within(ar.BusBytesPerSecond, tc.want, 0.03):
			t.Errorf("%ssend_recv %.4g, all_reduce %.4g, want about %.4g", tc.faults, sr.BusBytesPerSecond, ar.BusBytesPerSecond, tc.want)
		}
		// The target's own side does not see the prober's NICs.
		if ar := collResult(t, q, probes.AllReduce, o.SizeBytes); ar.Error != "" || !within(ar.BusBytesPerSecond, 40e9, 0.03) {
			t.Errorf("%sthe target's all_reduce %+v", tc.faults, ar)
		}
	}
}

// The unique id as the child hands it out: not without someone to hand it
// to, and not past the deadline.
func TestNodeToNodeUniqueID(t *testing.T) {
	n := startNode(t, "dgx-h100", "")
	r, err := n.Runner().RunCollectives(context.Background(), sessionOptions(n, 1, 0, ""), nil)
	if err != nil || !strings.Contains(r.Error, "1 of 2 ranks are in other processes, and there is no one to hand them the unique id") {
		t.Errorf("no ids channel: %+v, %v", r, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	r, err = n.Runner().RunCollectives(ctx, sessionOptions(n, 1, 0, ""), make(chan string))
	if err == nil || r == nil || !strings.Contains(r.Error, "handing out the unique id") {
		t.Errorf("nobody reading the id: %+v, %v; want a timeout with the id not handed out", r, err)
	}
	// Two rounds, two ids.
	seen := map[string]bool{}
	for range 2 {
		ids := make(chan string, 1)
		if _, err := n.Runner().RunCollectives(context.Background(), sessionOptions(n, 1, 0, ""), ids); err != nil {
			t.Fatal(err)
		}
		seen[<-ids] = true
	}
	if len(seen) != 2 {
		t.Errorf("ids %v: want a new one each round", seen)
	}
}

// nccl_net_socket: the DGX's container sees no RDMA device, and NCCL
// takes sockets though the port is up: every connection of its side is
// NET/Socket without GPUDirect RDMA, at what TCP carries; the p5's side
// keeps EFA. nccl_gdr_off: InfiniBand without GPUDirect RDMA, at full
// rate.
func TestNodeToNodeNCCLNetworkFaults(t *testing.T) {
	for _, c := range []struct {
		fault, detail, network string
		rate                   float64
	}{
		{"nccl_net_socket", "NET/Socket/0", "Socket", socketBytesPerSecond * netEfficiency},
		{"nccl_gdr_off", "NET/IB/0", "IB", 40e9},
	} {
		dgx, p5 := startNode(t, "dgx-h100", "faults:\n- {kind: "+c.fault+"}\n"), startNode(t, "aws-p5", "")
		p, q := session(t, dgx, p5, 1)
		for _, tr := range p.Transports {
			if tr.Detail != c.detail || tr.Network != c.network || tr.GDR {
				t.Errorf("%s: the DGX's channel %+v, want %s over %s without GPUDirect RDMA", c.fault, tr, c.detail, c.network)
			}
		}
		if len(p.Transports) == 0 {
			t.Errorf("%s: no channels", c.fault)
		}
		for _, tr := range q.Transports {
			if tr.Network != "EFA" || !tr.GDR {
				t.Errorf("%s: the p5's channel %+v, want EFA with GPUDirect RDMA", c.fault, tr)
			}
		}
		o := sessionOptions(dgx, 1, 0, "")
		if ar := collResult(t, p, probes.AllReduce, o.SizeBytes); !within(ar.BusBytesPerSecond, c.rate, 0.05) {
			t.Errorf("%s: all_reduce on the DGX's side %.4g, want about %.4g", c.fault, ar.BusBytesPerSecond, c.rate)
		}
	}
}

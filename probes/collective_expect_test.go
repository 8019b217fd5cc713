package probes_test

import (
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
	"github.com/gpulink/gpulink_exporter/probes"
)

// collectiveRound is a round over gpus from firstRank of ranks: an
// all-reduce, its latency, and send/recv from each of its ranks to the
// next.
func collectiveRound(gpus []string, firstRank, ranks int) *probes.CollectiveRound {
	r := &probes.CollectiveRound{GPUs: gpus, FirstRank: firstRank, Ranks: ranks, Results: []probes.CollectiveResult{
		{Collective: probes.AllReduce, SizeBytes: 256 << 20, Ranks: ranks, BusBytesPerSecond: 370e9},
		{Collective: probes.AllReduce, SizeBytes: 8 << 10, Ranks: ranks, Seconds: 25e-6},
	}}
	for from := range ranks - 1 {
		to := from + 1
		r.Results = append(r.Results, probes.CollectiveResult{Collective: probes.SendRecv, SizeBytes: 256 << 20, Ranks: 2,
			FromRank: &from, ToRank: &to, BusBytesPerSecond: 365e9})
	}
	return r
}

// expectations are the expected bus bandwidths of collectiveRound's
// results, in order.
func expectations(r *probes.CollectiveRound) []float64 {
	var out []float64
	for _, res := range r.Results {
		out = append(out, res.ExpectedBusBytesPerSecond)
	}
	return out
}

func wantExpectations(t *testing.T, what string, r *probes.CollectiveRound, want []float64) {
	t.Helper()
	got := expectations(r)
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !near(got[i], want[i]) && !(got[i] == 0 && want[i] == 0) {
			t.Errorf("%s: result %d (%s) expects %.4g, want %.4g", what, i, r.Results[i].Collective, got[i], want[i])
		}
	}
}

// On a DGX H100 every pair has a GPU's whole NVSwitch bandwidth, and
// every pair should connect peer to peer.
func TestCollectivePathDGXH100(t *testing.T) {
	topo, snap := topology(t, "dgx-h100"), sample(t, nvmlmodel.NewDGXH100())
	r := collectiveRound(dgxGPUs, 0, 8)
	transports := probes.CollectivePathFor(snap, topo, dgxGPUs).Annotate(r)
	want := []float64{nvlink18, nvlink18}
	for range 7 {
		want = append(want, nvlink18)
	}
	wantExpectations(t, "DGX H100", r, want)
	if len(transports) != 56 {
		t.Errorf("%d pair transports, want every ordered pair of 8", len(transports))
	}
	for _, tr := range transports {
		if tr.Kind != probes.TransportP2P || tr.GPU == tr.Peer {
			t.Errorf("transport %+v, want p2p between two GPUs", tr)
		}
	}
}

// Two NVLinks of GPU 3 down: every collective over it, and its pairs,
// expect its 16 links; other pairs keep 18.
func TestCollectivePathNVLinksDown(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	m.Update(func() {
		m.GPUs[3].NVLinks[0].Up = false
		m.GPUs[3].NVLinks[7].Up = false
	})
	topo, snap := topology(t, "dgx-h100"), sample(t, m)
	r := collectiveRound(dgxGPUs, 0, 8)
	probes.CollectivePathFor(snap, topo, dgxGPUs).Annotate(r)
	// Send/recv 0->1, 1->2, 2->3, 3->4, 4->5, 5->6, 6->7.
	wantExpectations(t, "GPU 3 at 16 links", r, []float64{16 * 25e9, 16 * 25e9,
		nvlink18, nvlink18, 16 * 25e9, 16 * 25e9, nvlink18, nvlink18, nvlink18})
}

// Without NVML nothing is known of the NVLinks or of peer to peer: the
// PCIe tree alone bounds the pairs, and no transport is expected.
func TestCollectivePathPCIeOnly(t *testing.T) {
	topo := topology(t, "aws-p5")
	gpus := []string{p5GPU(0), p5GPU(1), p5GPU(2)}
	r := collectiveRound(gpus, 0, 3)
	if tr := probes.CollectivePathFor(nil, topo, gpus).Annotate(r); len(tr) != 0 {
		t.Errorf("transports %+v without NVML", tr)
	}
	wantExpectations(t, "p5 without NVML", r, []float64{gen4x8, gen4x8, gen4x8, gen4x8})
}

// Two GPUs without NVLink: peer to peer where NVML says one may write into
// the other, else host memory; either way PCIe's rate.
func TestCollectivePathTransports(t *testing.T) {
	gpu := func(i int, bus string, width int) nvml.GPUState {
		return nvml.GPUState{Identity: nvml.Identity{Index: i, PCIBusID: bus},
			PCIe: nvml.PCIeLink{MaxGeneration: sampler.Some(4), MaxWidth: sampler.Some(width)}}
	}
	gpus := []string{"0000:01:00.0", "0000:02:00.0"}
	for _, write := range []bool{true, false} {
		snap := &nvml.Snapshot{GPUs: []nvml.GPUState{gpu(0, gpus[0], 16), gpu(1, gpus[1], 8)},
			Pairs: []nvml.Pair{{GPU: 0, Peer: 1, Level: "PHB", P2P: map[string]bool{"write": write}}}}
		r := collectiveRound(gpus, 0, 2)
		transports := probes.CollectivePathFor(snap, nil, gpus).Annotate(r)
		want := probes.TransportSHM
		if write {
			want = probes.TransportP2P
		}
		if len(transports) != 2 || transports[0].Kind != want || transports[1].Kind != want ||
			transports[0].GPU != gpus[0] || transports[0].Peer != gpus[1] {
			t.Errorf("P2P write %v: transports %+v, want %s both ways", write, transports, want)
		}
		wantExpectations(t, "PCIe pair", r, []float64{gen4x8, gen4x8, gen4x8})
	}
}

// In a node-to-node round the collective crosses a network this path does
// not know; a send/recv between two local ranks is still known.
func TestCollectivePathOtherRanks(t *testing.T) {
	topo, snap := topology(t, "dgx-h100"), sample(t, nvmlmodel.NewDGXH100())
	local := dgxGPUs[:2]
	r := collectiveRound(local, 2, 4) // ranks 2 and 3 here, 0 and 1 elsewhere
	probes.CollectivePathFor(snap, topo, local).Annotate(r)
	// Send/recv 0->1 and 1->2 cross to the other node; 2->3 is local.
	wantExpectations(t, "node-to-node", r, []float64{0, 0, 0, 0, nvlink18})

	// A path of other GPUs than the round's expects nothing.
	r = collectiveRound(dgxGPUs[:2], 0, 2)
	probes.CollectivePathFor(snap, topo, dgxGPUs[2:4]).Annotate(r)
	wantExpectations(t, "other GPUs", r, []float64{0, 0, 0})
}

package probes

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// recorder is a Measurer and GPU that records every call, in order, and
// answers each measurement with the next value of a counter, so a result
// shows which call gave it. Each measurement costs one busy second.
type recorder struct {
	calls []string
	// fail makes the call recorded as the key fail with its error.
	fail map[string]error
	// links are what successive HostToDevice calls asked to read the
	// link give; nil once they run out.
	links []*LinkUnderLoad
	// during runs after a call is recorded.
	during func(call string)
	// partial: Open fails after starting the GPU.
	partial bool

	value float64
	busy  float64
}

func (r *recorder) record(format string, args ...any) error {
	call := fmt.Sprintf(format, args...)
	r.calls = append(r.calls, call)
	if r.during != nil {
		r.during(call)
	}
	return r.fail[call]
}

// measured is the next value, and a busy second, unless the call fails.
// Its samples lie a tenth either side of it.
func (r *recorder) measured(err error) (Measured, error) {
	if err != nil {
		return Measured{}, err
	}
	r.busy++
	r.value++
	return Measured{Median: r.value, Min: 0.9 * r.value, Max: 1.1 * r.value}, nil
}

func negated(m Measured) Measured { return Measured{Median: -m.Median, Min: -m.Max, Max: -m.Min} }

func (r *recorder) DriverVersion() int { return 12040 }

func (r *recorder) Open(ctx context.Context, o Options) (GPU, Device, error) {
	err := r.record("open %s size=%d samples=%d", o.GPU, o.SizeBytes, o.Samples)
	switch {
	case r.partial:
		return r, Device{CUDADevice: 3, Name: "Fake"}, errors.New("kernels did not load")
	case err != nil:
		return nil, Device{CUDADevice: -1}, err
	}
	return r, Device{CUDADevice: 3, Name: "Fake"}, nil
}

func (r *recorder) HostToDevice(node int, readLink bool) (Measured, *LinkUnderLoad, error) {
	call := fmt.Sprintf("host_to_device %d", node)
	if readLink {
		call += " +link"
	}
	v, err := r.measured(r.record("%s", call))
	var link *LinkUnderLoad
	if readLink && len(r.links) > 0 {
		link, r.links = r.links[0], r.links[1:]
	}
	return v, link, err
}

func (r *recorder) DeviceToHost(node int) (Measured, error) {
	return r.measured(r.record("device_to_host %d", node))
}

func (r *recorder) HostBidirectional(node int) (Measured, Measured, error) {
	v, err := r.measured(r.record("host_bidirectional %d", node))
	return v, negated(v), err
}

func (r *recorder) LocalCopy() (Measured, error) { return r.measured(r.record("device_local_copy")) }

func (r *recorder) OpenPeer(peer string) error { return r.record("open peer %s", peer) }

func (r *recorder) PeerCopy(peer string) (Measured, error) {
	return r.measured(r.record("peer_copy %s", peer))
}

func (r *recorder) PeerBidirectional(peer string) (Measured, Measured, error) {
	v, err := r.measured(r.record("peer_bidirectional %s", peer))
	return v, negated(v), err
}

func (r *recorder) HostLatency(node int) (Measured, error) {
	return r.measured(r.record("host_latency %d", node))
}

func (r *recorder) PeerLatency(peer string) (Measured, error) {
	return r.measured(r.record("peer_latency %s", peer))
}

func (r *recorder) LaunchLatency() (Measured, int, error) {
	v, err := r.measured(r.record("launch_latency"))
	return v, 42, err
}

func (r *recorder) Cost() Cost {
	return Cost{BusySeconds: r.busy, DeviceMemoryBytes: 2 << 20, ContextMemoryBytes: 600 << 20, HostMemoryBytes: 4 << 20}
}

func (r *recorder) Close() float64 {
	_ = r.record("close") // Close has no error to return
	return r.busy + 0.5
}

// describe is a result in one line: probe, direction, peer, node (- for
// none), size, samples, and the value or the error.
func describe(res Result) string {
	node := "-"
	if res.HostNUMANode != nil {
		node = fmt.Sprint(*res.HostNUMANode)
	}
	v := fmt.Sprint(res.BytesPerSecond)
	if res.Seconds != 0 {
		v = fmt.Sprintf("%gs", res.Seconds)
	}
	if res.Error != "" {
		v = "error " + res.Error
	}
	return strings.Join([]string{string(res.Probe), res.Direction, res.Peer, node, fmt.Sprint(res.SizeBytes), fmt.Sprint(res.Samples), v}, " ")
}

func describeAll(g GPURound) []string {
	var out []string
	for _, r := range g.Results {
		out = append(out, describe(r))
	}
	return out
}

func checkLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got  %s\n want %s", what, strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
}

// The round's structure: every kind in run order, host probes once per
// host node in the order given (the GPU's own first), peer copies against
// every peer, bidirectional and latency peer probes only against peers at
// a higher address, the link read once under load.
func TestMeasureRoundOrderPairsAndHostNodes(t *testing.T) {
	const self, lower, higher = "0000:2a:00.0", "0000:18:00.0", "0000:3a:00.0"
	r := &recorder{links: []*LinkUnderLoad{{Generation: 5, Width: 16, Confirmed: true}}}
	round := MeasureRound(context.Background(), r, []Options{{
		GPU: "0000:2A:00.0", Peers: []string{"0000:18:00.0", "0000:3A:00.0"}, HostNodes: []int{1, 0}, SizeBytes: 4 << 20, Samples: 3,
	}})
	checkLines(t, "calls", r.calls, []string{
		"open 0000:2A:00.0 size=4194304 samples=3",
		"host_to_device 1 +link", "host_to_device 0",
		"device_to_host 1", "device_to_host 0",
		"host_bidirectional 1", "host_bidirectional 0",
		"device_local_copy",
		"open peer " + lower, "peer_copy " + lower, "open peer " + higher, "peer_copy " + higher,
		"open peer " + higher, "peer_bidirectional " + higher,
		"host_latency 1", "host_latency 0",
		"open peer " + higher, "peer_latency " + higher,
		"launch_latency",
		"close",
	})
	if round.Version != ContractVersion || round.DriverVersion != 12040 || len(round.GPUs) != 1 {
		t.Fatalf("round %+v", round)
	}
	g := round.GPUs[0]
	checkLines(t, "results", describeAll(g), []string{
		"host_to_device host_to_device  1 4194304 3 1",
		"host_to_device host_to_device  0 4194304 3 2",
		"device_to_host device_to_host  1 4194304 3 3",
		"device_to_host device_to_host  0 4194304 3 4",
		"host_bidirectional host_to_device  1 4194304 3 5",
		"host_bidirectional device_to_host  1 4194304 3 -5",
		"host_bidirectional host_to_device  0 4194304 3 6",
		"host_bidirectional device_to_host  0 4194304 3 -6",
		"device_local_copy local  - 4194304 3 7",
		"peer_copy to_peer " + lower + " - 4194304 3 8",
		"peer_copy to_peer " + higher + " - 4194304 3 9",
		"peer_bidirectional to_peer " + higher + " - 4194304 3 10",
		"peer_bidirectional from_peer " + higher + " - 4194304 3 -10",
		"host_latency   1 2097152 3 11s",
		"host_latency   0 2097152 3 12s",
		"peer_latency  " + higher + " - 2097152 3 13s",
		"launch_latency   - 0 42 14s",
	})
	if g.PCIBusID != self || g.CUDADevice != 3 || g.Name != "Fake" || g.Error != "" {
		t.Errorf("GPU %s device %d %q error %q", g.PCIBusID, g.CUDADevice, g.Name, g.Error)
	}
	if l := g.LinkUnderLoad; l == nil || *l != (LinkUnderLoad{Generation: 5, Width: 16, Confirmed: true}) {
		t.Errorf("link under load %+v", l)
	}
	// The peer's share of the busy time: one peer copy for the lower
	// peer; copy, bidirectional and latency for the higher.
	if want := map[string]float64{lower: 1, higher: 3}; !reflect.DeepEqual(g.PeerBusySeconds, want) {
		t.Errorf("peer busy seconds %v, want %v", g.PeerBusySeconds, want)
	}
	if g.BusySeconds != 14 || g.ContextSeconds != 14.5 || g.DeviceMemoryBytes != 2<<20 || g.ContextMemoryBytes != 600<<20 || g.HostMemoryBytes != 4<<20 {
		t.Errorf("cost %+v", g)
	}
}

// Without host nodes the host buffers are unbound (-1) and the results
// carry no node; without peers there are no peer probes and no peer busy
// seconds; a GPU with the highest address measures peer copies only.
func TestMeasureRoundUnboundAndHighestGPU(t *testing.T) {
	r := &recorder{}
	g := MeasureRound(context.Background(), r, []Options{{GPU: "0000:3a:00.0", Peers: []string{"0000:18:00.0"}, SizeBytes: 1 << 20, Samples: 1,
		Probes: []Kind{PeerLatency, HostLatency, PeerBidirectional, HostToDevice, PeerCopy}}}).GPUs[0]
	checkLines(t, "calls", r.calls, []string{
		"open 0000:3a:00.0 size=1048576 samples=1",
		"host_to_device -1 +link",
		"open peer 0000:18:00.0", "peer_copy 0000:18:00.0",
		"host_latency -1",
		"close",
	})
	checkLines(t, "results", describeAll(g), []string{
		"host_to_device host_to_device  - 1048576 1 1",
		"peer_copy to_peer 0000:18:00.0 - 1048576 1 2",
		"host_latency   - 2097152 1 3s",
	})
	if g.LinkUnderLoad != nil {
		t.Errorf("link under load %+v from a read that gave nothing", g.LinkUnderLoad)
	}

	r = &recorder{}
	g = MeasureRound(context.Background(), r, []Options{{GPU: "0000:18:00.0", SizeBytes: 1 << 20, Samples: 1}}).GPUs[0]
	for _, c := range r.calls {
		if strings.Contains(c, "peer") {
			t.Errorf("call %q without peers", c)
		}
	}
	if g.PeerBusySeconds != nil {
		t.Errorf("peer busy seconds %v without peers", g.PeerBusySeconds)
	}
}

// The link is read under load until a read gives it, and only from a copy
// that worked.
func TestMeasureRoundReadsTheLinkUntilItHasIt(t *testing.T) {
	link := &LinkUnderLoad{Generation: 4, Width: 8}
	r := &recorder{links: []*LinkUnderLoad{nil, link, link}, fail: map[string]error{"host_to_device 1 +link": errors.New("out of memory")}}
	g := MeasureRound(context.Background(), r, []Options{{GPU: "0000:18:00.0", HostNodes: []int{0, 1, 2, 3}, SizeBytes: 1 << 20, Samples: 1,
		Probes: []Kind{HostToDevice}}}).GPUs[0]
	checkLines(t, "calls", r.calls, []string{
		"open 0000:18:00.0 size=1048576 samples=1",
		"host_to_device 0 +link", "host_to_device 1 +link", "host_to_device 2 +link", "host_to_device 3",
		"close",
	})
	if g.LinkUnderLoad != link {
		t.Errorf("link under load %+v, want node 2's", g.LinkUnderLoad)
	}
	if res := g.Results[1]; res.Error != "out of memory" || res.BytesPerSecond != 0 || *res.HostNUMANode != 1 {
		t.Errorf("failed copy %+v", res)
	}
}

// A failure is the failing probe's alone, in every result it would have
// given; a peer that cannot be opened fails each probe against it.
func TestMeasureRoundFailures(t *testing.T) {
	const peer = "0000:2a:00.0"
	r := &recorder{fail: map[string]error{
		"host_bidirectional -1": errors.New("no memory"),
		"open peer " + peer:     errors.New("no peer access"),
		"launch_latency":        errors.New("launch failed"),
	}}
	g := MeasureRound(context.Background(), r, []Options{{GPU: "0000:18:00.0", Peers: []string{peer}, SizeBytes: 1 << 20, Samples: 2,
		Probes: []Kind{HostBidirectional, DeviceLocalCopy, PeerCopy, PeerBidirectional, PeerLatency, LaunchLatency}}}).GPUs[0]
	checkLines(t, "results", describeAll(g), []string{
		"host_bidirectional host_to_device  - 1048576 2 error no memory",
		"host_bidirectional device_to_host  - 1048576 2 error no memory",
		"device_local_copy local  - 1048576 2 1",
		"peer_copy to_peer " + peer + " - 1048576 2 error no peer access",
		"peer_bidirectional to_peer " + peer + " - 1048576 2 error no peer access",
		"peer_bidirectional from_peer " + peer + " - 1048576 2 error no peer access",
		"peer_latency  " + peer + " - 2097152 2 error no peer access",
		"launch_latency   - 0 42 error launch failed",
	})
	if g.Error != "" || g.OK() {
		t.Errorf("GPU error %q, OK %v", g.Error, g.OK())
	}
	if g.PeerBusySeconds[peer] != 0 {
		t.Errorf("peer busy %v for a peer never measured", g.PeerBusySeconds)
	}
}

// A GPU that cannot be opened is the round's error for it; the next GPU is
// still measured. One opened part way is closed and its cost counted.
func TestMeasureRoundOpenFails(t *testing.T) {
	r := &recorder{fail: map[string]error{"open 0000:18:00.0 size=1048576 samples=1": errors.New("no CUDA device at PCI address 0000:18:00.0")}}
	round := MeasureRound(context.Background(), r, []Options{
		{GPU: "0000:18:00.0", SizeBytes: 1 << 20, Samples: 1},
		{GPU: "0000:2a:00.0", SizeBytes: 1 << 20, Samples: 1, Probes: []Kind{LaunchLatency}},
	})
	if len(round.GPUs) != 2 {
		t.Fatalf("round %+v", round)
	}
	if g := round.GPUs[0]; g.Error != "no CUDA device at PCI address 0000:18:00.0" || g.CUDADevice != -1 || len(g.Results) != 0 || g.Results == nil || g.ContextSeconds != 0 {
		t.Errorf("GPU that cannot be opened: %+v", g)
	}
	if g := round.GPUs[1]; g.Error != "" || len(g.Results) != 1 {
		t.Errorf("next GPU: %+v", g)
	}
	checkLines(t, "calls", r.calls, []string{
		"open 0000:18:00.0 size=1048576 samples=1",
		"open 0000:2a:00.0 size=1048576 samples=1", "launch_latency", "close",
	})

	r = &recorder{partial: true}
	g := MeasureRound(context.Background(), r, []Options{{GPU: "0000:18:00.0", SizeBytes: 1 << 20, Samples: 1}}).GPUs[0]
	if g.Error != "kernels did not load" || g.CUDADevice != 3 || g.Name != "Fake" || len(g.Results) != 0 || g.ContextSeconds != 0.5 || g.DeviceMemoryBytes != 2<<20 {
		t.Errorf("GPU opened part way: %+v", g)
	}
	checkLines(t, "calls", r.calls, []string{"open 0000:18:00.0 size=1048576 samples=1", "close"})
}

// A round cut short stops between probe kinds, and runs no later GPU.
func TestMeasureRoundStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{during: func(call string) {
		if call == "device_to_host 0" {
			cancel()
		}
	}}
	round := MeasureRound(ctx, r, []Options{
		{GPU: "0000:18:00.0", HostNodes: []int{0, 1}, SizeBytes: 1 << 20, Samples: 1},
		{GPU: "0000:2a:00.0", SizeBytes: 1 << 20, Samples: 1},
	})
	checkLines(t, "calls", r.calls, []string{
		"open 0000:18:00.0 size=1048576 samples=1",
		"host_to_device 0 +link", "host_to_device 1 +link",
		"device_to_host 0", "device_to_host 1",
		"close",
	})
	if len(round.GPUs) != 1 {
		t.Errorf("%d GPUs in a cancelled round", len(round.GPUs))
	}
}

// Each result carries its samples' extremes beside the median, in the
// result's own direction and unit.
func TestMeasureRoundSampleExtremes(t *testing.T) {
	round := MeasureRound(context.Background(), &recorder{}, []Options{{
		GPU: "0000:2a:00.0", Probes: []Kind{HostBidirectional, HostLatency}, SizeBytes: 4 << 20, Samples: 3,
	}})
	var got []string
	for _, r := range round.GPUs[0].Results {
		got = append(got, fmt.Sprintf("%s %s %.2g..%.2g", r.Probe, r.Direction, r.SampleMin, r.SampleMax))
	}
	checkLines(t, "extremes", got, []string{
		"host_bidirectional host_to_device 0.9..1.1",
		"host_bidirectional device_to_host -1.1..-0.9",
		"host_latency  1.8..2.2",
	})
	if round.PID == 0 {
		t.Error("the round does not say which process measured it")
	}
}

// storageRecorder is a recorder that measures storage too.
type storageRecorder struct {
	recorder
	skip error
}

func (r *storageRecorder) Open(ctx context.Context, o Options) (GPU, Device, error) {
	_, d, err := r.recorder.Open(ctx, o)
	return r, d, err
}

func (r *storageRecorder) StorageWrite(dir string) (StorageMeasured, error) {
	m, err := r.measured(r.record("write %s", dir))
	if r.skip != nil {
		return StorageMeasured{}, r.skip
	}
	return StorageMeasured{Rate: m, Mode: StorageCompat, Filesystem: "xfs", Drive: "0000:1a:00.0"}, err
}

func (r *storageRecorder) StorageRead(dir string) (StorageMeasured, error) {
	m, err := r.measured(r.record("read %s", dir))
	if r.skip != nil {
		return StorageMeasured{}, r.skip
	}
	return StorageMeasured{Rate: m, Mode: StorageNative, Filesystem: "xfs", Drive: "0000:1a:00.0"}, err
}

func TestMeasureRoundStorage(t *testing.T) {
	o := Options{GPU: "0000:18:00.0", SizeBytes: 1 << 20, Samples: 3, Probes: []Kind{StorageToDevice, DeviceToStorage, LaunchLatency}}
	// No directory: the storage probes are left out, asked for or not.
	rec := &storageRecorder{}
	g := MeasureRound(context.Background(), rec, []Options{o}).GPUs[0]
	if len(g.Results) != 1 || g.Results[0].Probe != LaunchLatency {
		t.Errorf("without a directory: %+v, want the launch latency alone", g.Results)
	}
	// With one: the write first (it makes the file), each labelled with
	// how it moved its bytes.
	o.StorageDir, o.StorageBytes = "/raid", 1<<30
	rec = &storageRecorder{}
	g = MeasureRound(context.Background(), rec, []Options{o}).GPUs[0]
	want := []string{"open 0000:18:00.0 size=1048576 samples=3", "launch_latency", "write /raid", "read /raid", "close"}
	if !reflect.DeepEqual(rec.calls, want) {
		t.Errorf("calls %q, want %q", rec.calls, want)
	}
	w, r := g.Results[1], g.Results[2]
	if w.Probe != DeviceToStorage || w.Direction != DirDeviceToStorage || w.Samples != 1 || w.StorageMode != StorageCompat ||
		r.Probe != StorageToDevice || r.Samples != 3 || r.SizeBytes != 1<<30 || r.StorageMode != StorageNative || r.StorageDrive != "0000:1a:00.0" || r.BytesPerSecond == 0 {
		t.Errorf("storage results %+v %+v", w, r)
	}
	// A skip is neither a value nor a failure.
	rec = &storageRecorder{skip: &Skip{Reason: SkipStorageMissingDir, Detail: "/raid: no such file or directory"}}
	g = MeasureRound(context.Background(), rec, []Options{o}).GPUs[0]
	if s := g.Results[2].Skipped; s == nil || s.Reason != SkipStorageMissingDir || g.Results[2].Error != "" || !g.OK() {
		t.Errorf("skipped: %+v", g.Results[2])
	}
	// A measurer that cannot measure storage says so.
	g = MeasureRound(context.Background(), &recorder{}, []Options{o}).GPUs[0]
	if e := g.Results[2].Error; !strings.Contains(e, "cannot measure storage") {
		t.Errorf("plain recorder: %+v", g.Results[2])
	}
}

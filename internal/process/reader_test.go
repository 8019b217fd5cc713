package process_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/process"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/numa"
)

// dgxTopology is a DGX H100's two sockets with two of its GPUs: GPU 0 on
// node 0, GPU 4 on node 1, and a GPU whose node the firmware does not give
// (numa_node -1, every CPU local).
func dgxTopology(t testing.TB) *numa.Topology {
	t.Helper()
	cpus := func(s string) numa.CPUSet {
		c, err := numa.ParseCPUList(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return &numa.Topology{
		Nodes: []numa.NUMANode{{ID: 0, CPUs: cpus("0-55,112-167")}, {ID: 1, CPUs: cpus("56-111,168-223")}},
		Devices: map[string]*numa.PCIDevice{
			"0000:18:00.0": {Address: "0000:18:00.0", Kind: numa.KindGPU, NUMANode: 0},
			"0000:3a:00.0": {Address: "0000:3a:00.0", Kind: numa.KindGPU, NUMANode: 0},
			"0000:9a:00.0": {Address: "0000:9a:00.0", Kind: numa.KindGPU, NUMANode: 1},
			"0000:ba:00.0": {Address: "0000:ba:00.0", Kind: numa.KindGPU, NUMANode: -1, LocalCPUs: sampler.Some(cpus("0-223"))},
		},
	}
}

// vmTopology is the borrowed VM: one node, numa_node -1 on the GPU.
func vmTopology(t testing.TB) *numa.Topology {
	t.Helper()
	c, _ := numa.ParseCPUList("0-31")
	return &numa.Topology{
		Nodes:   []numa.NUMANode{{ID: 0, CPUs: c}},
		Devices: map[string]*numa.PCIDevice{"0000:00:06.0": {Address: "0000:00:06.0", Kind: numa.KindGPU, NUMANode: -1}},
	}
}

// stat is a task's stat line with last CPU cpu, shaped as the kernel's.
func stat(pid int, comm string, cpu int) string {
	return fmt.Sprintf("%d (%s) S 1 %d %d 0 -1 4194560 120394 0 12 0 10234 2345 0 0 20 0 34 0 "+
		"1234567 21474836480 1048576 18446744073709551615 94873740963840 94873740983721 140737324577520 0 0 "+
		"0 16386 0 0 0 0 0 17 %d 0 0 0 0 0 94873740999728 94873741001344 94874722516992 140737324579327 "+
		"140737324579347 140737324579347 140737324580843 0\n", pid, comm, pid, pid, cpu)
}

// fakeProc describes a process to write under a proc root.
type fakeProc struct {
	pid     int
	comm    string
	allowed string
	threads []int          // last CPU of each thread
	pages   map[int]uint64 // 4 KiB pages by node
	cgroup  string
	lines   int // numa_maps lines to spread the pages over; 1 if 0
}

func writeFakeProc(t testing.TB, root string, p fakeProc) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(p.pid))
	files := map[string]string{
		"comm":   p.comm + "\n",
		"status": "Name:\t" + p.comm + "\nTgid:\t" + strconv.Itoa(p.pid) + "\nCpus_allowed_list:\t" + p.allowed + "\n",
		"cgroup": "0::" + p.cgroup + "\n",
	}
	for i, cpu := range p.threads {
		files[fmt.Sprintf("task/%d/stat", p.pid+i)] = stat(p.pid+i, p.comm, cpu)
	}
	var b strings.Builder
	lines := max(p.lines, 1)
	for i := range lines {
		fmt.Fprintf(&b, "%x default anon=1 dirty=1 active=0", 0x7f0000000000+i<<21)
		for n := 0; n < 4; n++ {
			// Spread each node's pages over the lines, the rest on the
			// last.
			v, ok := p.pages[n]
			if !ok {
				continue
			}
			per := v / uint64(lines)
			if i == lines-1 {
				per = v - per*uint64(lines-1)
			}
			if per > 0 {
				fmt.Fprintf(&b, " N%d=%d", n, per)
			}
		}
		b.WriteString(" kernelpagesize_kB=4\n")
		if i%3 == 0 {
			b.WriteString("7f5e8a3fe000 default file=/dev/nvidiactl\n")
		}
	}
	files["numa_maps"] = b.String()
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func repeat(cpu, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = cpu
	}
	return out
}

const (
	podUID      = "1f0e8a2c-5b7d-4c3e-9a41-6f2d8e7b9c10"
	containerID = "4f8a1d2c9b7e6f5a3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b"
)

var k8sCgroup = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
	strings.ReplaceAll(podUID, "-", "_") + ".slice/cri-containerd-" + containerID + ".scope"

var (
	gpu0 = nvml.Process{GPU: 0, UUID: "GPU-0", PCIBusID: "0000:18:00.0"}
	gpu2 = nvml.Process{GPU: 2, UUID: "GPU-2", PCIBusID: "0000:3a:00.0"}
	gpu4 = nvml.Process{GPU: 4, UUID: "GPU-4", PCIBusID: "0000:9a:00.0"}
	gpu6 = nvml.Process{GPU: 6, UUID: "GPU-6", PCIBusID: "0000:ba:00.0"}
)

func on(g nvml.Process, pid int) nvml.Process {
	g.PID = pid
	g.UsedMemory = sampler.Some(float64(1 << 30))
	return g
}

func sample(t testing.TB, r *process.Reader) *process.Snapshot {
	t.Helper()
	snap, err := r.Sample(context.Background())
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	return snap
}

func gpuOf(t *testing.T, s *process.Snapshot, index int) *process.GPU {
	t.Helper()
	for i := range s.GPUs {
		if s.GPUs[i].GPU == index {
			return &s.GPUs[i]
		}
	}
	t.Fatalf("GPU %d not in snapshot %+v", index, s)
	return nil
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func wantRatio(t *testing.T, what string, got sampler.Opt[float64], want float64) {
	t.Helper()
	if !got.Valid || !near(got.V, want) {
		t.Errorf("%s = %+v, want %v", what, got, want)
	}
}

func TestPlacementHealthy(t *testing.T) {
	root := t.TempDir()
	writeFakeProc(t, root, fakeProc{pid: 4242, comm: "python", allowed: "0-55,112-167",
		threads: []int{3, 4, 5, 113, 120}, pages: map[int]uint64{0: 100000}, cgroup: k8sCgroup})
	r := &process.Reader{FS: hostfs.Root{Proc: root},
		Processes: func() ([]nvml.Process, error) { return []nvml.Process{on(gpu0, 4242)}, nil },
		Topology:  func() *numa.Topology { return dgxTopology(t) }}
	g := gpuOf(t, sample(t, r), 0)
	if g.NUMANode != 0 || g.Processes != 1 || g.Misaffine != 0 || g.Unknown != 0 || len(g.Procs) != 1 {
		t.Fatalf("GPU 0: %+v", g)
	}
	p := g.Procs[0]
	if p.Placement.Comm != "python" || p.Placement.PodUID != podUID || p.Placement.ContainerID != containerID {
		t.Errorf("identity %+v", p.Placement)
	}
	wantRatio(t, "remote CPU", p.RemoteCPURatio, 0)
	wantRatio(t, "remote thread", p.RemoteThreadRatio, 0)
	wantRatio(t, "remote memory", p.RemoteMemoryRatio, 0)
	if p.Misaffine != sampler.Some(false) || p.NoLocalCPU != sampler.Some(false) {
		t.Errorf("misaffine %+v, no local CPU %+v", p.Misaffine, p.NoLocalCPU)
	}
	if p.UsedGPUMemory != sampler.Some(float64(1<<30)) {
		t.Errorf("GPU memory %+v", p.UsedGPUMemory)
	}
}

// dgx-h100-faults: pid 4242 on GPU 0 (node 0) pinned to node 1's CPUs
// with 90% of its pages there.
func TestPlacementPinnedFarSocket(t *testing.T) {
	root := t.TempDir()
	writeFakeProc(t, root, fakeProc{pid: 4242, comm: "python", allowed: "56-111,168-223",
		threads: []int{60, 61, 170, 171}, pages: map[int]uint64{0: 10000, 1: 90000}, lines: 40})
	r := &process.Reader{FS: hostfs.Root{Proc: root},
		Processes: func() ([]nvml.Process, error) { return []nvml.Process{on(gpu0, 4242)}, nil },
		Topology:  func() *numa.Topology { return dgxTopology(t) }}
	g := gpuOf(t, sample(t, r), 0)
	if g.Processes != 1 || g.Misaffine != 1 || g.Unknown != 0 {
		t.Fatalf("GPU 0: %+v", g)
	}
	p := g.Procs[0]
	wantRatio(t, "remote CPU", p.RemoteCPURatio, 1)
	wantRatio(t, "remote thread", p.RemoteThreadRatio, 1)
	wantRatio(t, "remote memory", p.RemoteMemoryRatio, 0.9)
	if p.Misaffine != sampler.Some(true) || p.NoLocalCPU != sampler.Some(true) {
		t.Errorf("misaffine %+v, no local CPU %+v", p.Misaffine, p.NoLocalCPU)
	}
}

// Each test alone makes a process misaffine.
func TestPlacementEachRule(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    fakeProc
		want bool
	}{
		{"memory mostly remote", fakeProc{allowed: "0-55", threads: []int{1}, pages: map[int]uint64{0: 49, 1: 51}}, true},
		{"memory half remote", fakeProc{allowed: "0-55", threads: []int{1}, pages: map[int]uint64{0: 50, 1: 50}}, false},
		{"threads mostly remote", fakeProc{allowed: "0-223", threads: []int{1, 60, 61}, pages: map[int]uint64{0: 1}}, true},
		{"CPUs mostly remote", fakeProc{allowed: "0,56-111", threads: []int{0}, pages: map[int]uint64{0: 1}}, true},
		{"unpinned", fakeProc{allowed: "0-223", threads: []int{1, 60}, pages: map[int]uint64{0: 1}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.p.pid, tc.p.comm = 100, "x"
			writeFakeProc(t, root, tc.p)
			r := &process.Reader{FS: hostfs.Root{Proc: root},
				Processes: func() ([]nvml.Process, error) { return []nvml.Process{on(gpu0, 100)}, nil },
				Topology:  func() *numa.Topology { return dgxTopology(t) }}
			p := gpuOf(t, sample(t, r), 0).Procs[0]
			if p.Misaffine != sampler.Some(tc.want) {
				t.Errorf("misaffine %+v, want %v (%+v)", p.Misaffine, tc.want, p)
			}
		})
	}
}

// dgx-h100 pid 6161 on GPU 2: unpinned, threads on both nodes, memory
// 55/45: half its CPUs are remote, which is no majority.
func TestPlacementUnpinnedSpread(t *testing.T) {
	root := t.TempDir()
	writeFakeProc(t, root, fakeProc{pid: 6161, comm: "python", allowed: "0-223",
		threads: []int{1, 2, 57, 58, 113, 169}, pages: map[int]uint64{0: 55000, 1: 45000}, lines: 10})
	r := &process.Reader{FS: hostfs.Root{Proc: root},
		Processes: func() ([]nvml.Process, error) { return []nvml.Process{on(gpu2, 6161)}, nil },
		Topology:  func() *numa.Topology { return dgxTopology(t) }}
	g := gpuOf(t, sample(t, r), 2)
	p := g.Procs[0]
	wantRatio(t, "remote CPU", p.RemoteCPURatio, 0.5)
	wantRatio(t, "remote thread", p.RemoteThreadRatio, 0.5)
	wantRatio(t, "remote memory", p.RemoteMemoryRatio, 0.45)
	if p.Misaffine != sampler.Some(false) || g.Misaffine != 0 {
		t.Errorf("misaffine %+v, GPU %+v", p.Misaffine, g)
	}
}

// h200-vm: one node, numa_node -1 everywhere: everything is local.
func TestPlacementSingleNodeVM(t *testing.T) {
	root := t.TempDir()
	writeFakeProc(t, root, fakeProc{pid: 793, comm: "python3", allowed: "0-31",
		threads: repeat(7, 34), pages: map[int]uint64{0: 500000}, cgroup: "/process_api/98e0b3c2"})
	r := &process.Reader{FS: hostfs.Root{Proc: root},
		Processes: func() ([]nvml.Process, error) {
			return []nvml.Process{{GPU: 0, UUID: "GPU-a", PCIBusID: "0000:00:06.0", PID: 793}}, nil
		},
		Topology: func() *numa.Topology { return vmTopology(t) }}
	g := gpuOf(t, sample(t, r), 0)
	if g.NUMANode != -1 || g.Processes != 1 || g.Misaffine != 0 || g.Unknown != 0 {
		t.Fatalf("GPU: %+v", g)
	}
	p := g.Procs[0]
	wantRatio(t, "remote CPU", p.RemoteCPURatio, 0)
	wantRatio(t, "remote thread", p.RemoteThreadRatio, 0)
	wantRatio(t, "remote memory", p.RemoteMemoryRatio, 0)
	if p.Misaffine != sampler.Some(false) || p.Placement.PodUID != "" || p.Placement.ContainerID != "" {
		t.Errorf("process %+v", p)
	}
}

// A GPU whose node is unknown on a two-node machine: nothing is judged,
// and node 0 is not assumed.
func TestPlacementUnknownNode(t *testing.T) {
	root := t.TempDir()
	writeFakeProc(t, root, fakeProc{pid: 300, comm: "python", allowed: "0-55",
		threads: []int{1}, pages: map[int]uint64{0: 100}})
	r := &process.Reader{FS: hostfs.Root{Proc: root},
		Processes: func() ([]nvml.Process, error) { return []nvml.Process{on(gpu6, 300)}, nil },
		Topology:  func() *numa.Topology { return dgxTopology(t) }}
	g := gpuOf(t, sample(t, r), 6)
	if g.NUMANode != -1 || g.Processes != 1 || g.Misaffine != 0 || g.Unknown != 1 {
		t.Fatalf("GPU: %+v", g)
	}
	p := g.Procs[0]
	if p.RemoteCPURatio.Valid || p.RemoteThreadRatio.Valid || p.RemoteMemoryRatio.Valid || p.Misaffine.Valid || p.NoLocalCPU.Valid {
		t.Errorf("unknown node judged: %+v", p)
	}
	if p.Placement.Comm != "python" || !p.Placement.MemoryByNode.Valid {
		t.Errorf("placement still read: %+v", p.Placement)
	}

	// No topology yet: the same.
	r.Topology = func() *numa.Topology { return nil }
	if g := gpuOf(t, sample(t, r), 6); g.Unknown != 1 || g.Procs[0].Misaffine.Valid {
		t.Errorf("no topology: %+v", g)
	}
	r.Topology = nil
	if g := gpuOf(t, sample(t, r), 6); g.Unknown != 1 {
		t.Errorf("no topology func: %+v", g)
	}
}

// A value that cannot be read leaves the verdict unknown unless a known
// test already holds.
func TestPlacementPartiallyRead(t *testing.T) {
	root := t.TempDir()
	writeFakeProc(t, root, fakeProc{pid: 1, comm: "a", allowed: "0-55", threads: []int{1}, pages: map[int]uint64{0: 1}})
	writeFakeProc(t, root, fakeProc{pid: 2, comm: "b", allowed: "56-111", threads: []int{60}, pages: map[int]uint64{1: 1}})
	for _, pid := range []string{"1", "2"} {
		if err := os.WriteFile(filepath.Join(root, pid, "numa_maps"), []byte("7f00 default N0=x kernelpagesize_kB=4\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &process.Reader{FS: hostfs.Root{Proc: root},
		Processes: func() ([]nvml.Process, error) { return []nvml.Process{on(gpu0, 1), on(gpu0, 2)}, nil },
		Topology:  func() *numa.Topology { return dgxTopology(t) }}
	snap, err := r.Sample(context.Background())
	var partial *sampler.PartialError
	if !errors.As(err, &partial) || partial.Count != 2 {
		t.Fatalf("err %v, want a PartialError counting 2", err)
	}
	g := gpuOf(t, snap, 0)
	if g.Processes != 2 || g.Misaffine != 1 || g.Unknown != 1 {
		t.Fatalf("GPU: %+v", g)
	}
	if g.Procs[0].Misaffine.Valid || g.Procs[0].RemoteMemoryRatio.Valid || !g.Procs[0].RemoteCPURatio.Valid {
		t.Errorf("pid 1: %+v", g.Procs[0])
	}
	if g.Procs[1].Misaffine != sampler.Some(true) {
		t.Errorf("pid 2: %+v", g.Procs[1])
	}
}

// A process that exits between NVML's list and the read is left out
// without an error.
func TestPlacementProcessExits(t *testing.T) {
	root := t.TempDir()
	writeFakeProc(t, root, fakeProc{pid: 4242, comm: "python", allowed: "0-55", threads: []int{1}, pages: map[int]uint64{0: 1}})
	writeFakeProc(t, root, fakeProc{pid: 5151, comm: "python", allowed: "56-111", threads: []int{60}, pages: map[int]uint64{1: 1}})
	r := &process.Reader{FS: hostfs.Root{Proc: root},
		Processes: func() ([]nvml.Process, error) {
			// 5151 exits once listed; 999 had already gone.
			if err := os.RemoveAll(filepath.Join(root, "5151")); err != nil {
				return nil, err
			}
			return []nvml.Process{on(gpu0, 4242), on(gpu0, 999), on(gpu4, 5151)}, nil
		},
		Topology: func() *numa.Topology { return dgxTopology(t) },
		GPUs: func() []nvml.Identity {
			return []nvml.Identity{{Index: 0, UUID: "GPU-0", PCIBusID: "0000:18:00.0"}, {Index: 4, UUID: "GPU-4", PCIBusID: "0000:9a:00.0"}}
		}}
	snap := sample(t, r)
	if g := gpuOf(t, snap, 0); g.Processes != 1 || len(g.Procs) != 1 || g.Procs[0].Placement.PID != 4242 {
		t.Errorf("GPU 0: %+v", g)
	}
	if g := gpuOf(t, snap, 4); g.Processes != 0 || len(g.Procs) != 0 || g.NUMANode != 1 {
		t.Errorf("GPU 4: %+v", g)
	}
}

// A process on two GPUs is read once and judged against each.
func TestPlacementProcessOnTwoGPUs(t *testing.T) {
	root := t.TempDir()
	writeFakeProc(t, root, fakeProc{pid: 77, comm: "torchrun", allowed: "0-55", threads: []int{1}, pages: map[int]uint64{0: 10}})
	r := &process.Reader{FS: hostfs.Root{Proc: root},
		Processes: func() ([]nvml.Process, error) {
			return []nvml.Process{on(gpu0, 77), on(gpu4, 77), on(gpu4, 77)}, nil // listed twice on GPU 4
		},
		Topology: func() *numa.Topology { return dgxTopology(t) }}
	snap := sample(t, r)
	g0, g4 := gpuOf(t, snap, 0), gpuOf(t, snap, 4)
	if g0.Misaffine != 0 || g4.Misaffine != 1 || g4.Processes != 1 || len(g4.Procs) != 1 {
		t.Fatalf("GPU 0 %+v, GPU 4 %+v", g0, g4)
	}
	if g0.Procs[0].Placement != g4.Procs[0].Placement {
		t.Errorf("placement read twice")
	}
}

func TestPlacementProcessListErrors(t *testing.T) {
	root := t.TempDir()
	writeFakeProc(t, root, fakeProc{pid: 1, comm: "a", allowed: "0-55", threads: []int{1}, pages: map[int]uint64{0: 1}})
	r := &process.Reader{FS: hostfs.Root{Proc: root}, Topology: func() *numa.Topology { return dgxTopology(t) }}

	r.Processes = func() ([]nvml.Process, error) { return nil, nvml.ErrNoLibrary }
	if _, err := r.Sample(context.Background()); !errors.Is(err, nvml.ErrNoLibrary) {
		t.Errorf("err %v, want ErrNoLibrary", err)
	}
	r.Processes = func() ([]nvml.Process, error) {
		return []nvml.Process{on(gpu0, 1)}, &sampler.PartialError{Count: 1, First: errors.New("GPU 3: unknown error")}
	}
	snap, err := r.Sample(context.Background())
	var partial *sampler.PartialError
	if !errors.As(err, &partial) || partial.Count != 1 || gpuOf(t, snap, 0).Processes != 1 {
		t.Errorf("partial list: %+v, %v", snap, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.Processes = func() ([]nvml.Process, error) { return []nvml.Process{on(gpu0, 1)}, nil }
	if _, err := r.Sample(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err %v", err)
	}
}

// BenchmarkPlacementSample reads 8 processes shaped like the PyTorch
// process on the VM: 34 threads, numa_maps of 522 lines.
func BenchmarkPlacementSample(b *testing.B) {
	root := b.TempDir()
	var procs []nvml.Process
	for i, g := range []nvml.Process{gpu0, gpu0, gpu2, gpu2, gpu4, gpu4, gpu6, gpu6} {
		pid := 1000 + 100*i
		writeFakeProc(b, root, fakeProc{pid: pid, comm: "python", allowed: "0-55,112-167",
			threads: repeat(3+i, 34), pages: map[int]uint64{0: 3000000, 1: 200000}, lines: 400, cgroup: k8sCgroup})
		procs = append(procs, on(g, pid))
	}
	topo := dgxTopology(b)
	r := &process.Reader{FS: hostfs.Root{Proc: root},
		Processes: func() ([]nvml.Process, error) { return procs, nil },
		Topology:  func() *numa.Topology { return topo }}
	b.ReportAllocs()
	for b.Loop() {
		if s := sample(b, r); len(s.GPUs) != 4 {
			b.Fatalf("%d GPUs", len(s.GPUs))
		}
	}
}

// TestPlacementHelperProcess is no test: with GPULINK_PLACEMENT_HELPER
// set to "<MiB>,<threads>,<mappings>" it stands in for a training process
// for BenchmarkPlacementSampleLive: it touches MiB of anonymous memory
// spread over that many separate mappings (numa_maps lines), starts that
// many threads, says "ready" and waits for its stdin to close.
func TestPlacementHelperProcess(t *testing.T) {
	spec := os.Getenv("GPULINK_PLACEMENT_HELPER")
	if spec == "" {
		t.Skip("helper process for BenchmarkPlacementSampleLive")
	}
	var mib, threads, mappings int
	if _, err := fmt.Sscanf(spec, "%d,%d,%d", &mib, &threads, &mappings); err != nil || mappings < 1 {
		t.Fatalf("GPULINK_PLACEMENT_HELPER=%q: %v", spec, err)
	}
	size := (mib << 20) / mappings &^ 4095
	for i := range mappings {
		m, err := syscall.Mmap(-1, 0, size+4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < len(m); j += 4096 {
			m[j] = 1
		}
		if i%2 == 1 { // differing protection keeps neighbours from merging
			if err := syscall.Mprotect(m, syscall.PROT_READ); err != nil {
				t.Fatal(err)
			}
		}
	}
	block := make(chan struct{})
	for range threads {
		go func() {
			runtime.LockOSThread()
			<-block
		}()
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// BenchmarkPlacementSampleLive samples 8 real processes made by
// TestPlacementHelperProcess, GPULINK_PLACEMENT_LIVE="<MiB>,<threads>,<mappings>"
// each (e.g. 4096,34,520), through the real /proc. Run it with -cpu 1:
// the daemon runs at GOMAXPROCS=1.
func BenchmarkPlacementSampleLive(b *testing.B) {
	spec := os.Getenv("GPULINK_PLACEMENT_LIVE")
	if spec == "" {
		b.Skip("set GPULINK_PLACEMENT_LIVE=<MiB>,<threads>,<mappings>")
	}
	var procs []nvml.Process
	for i := range 8 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPlacementHelperProcess$")
		cmd.Env = append(os.Environ(), "GPULINK_PLACEMENT_HELPER="+spec)
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
			b.Fatalf("helper: %q, %v", line, err)
		}
		procs = append(procs, nvml.Process{GPU: i, PCIBusID: "0000:00:00.0", PID: cmd.Process.Pid})
	}
	fs := hostfs.Root{Sys: "/sys", Proc: "/proc"}
	nodes, _ := numa.ReadNUMANodes(fs)
	topo := &numa.Topology{Nodes: nodes, Devices: map[string]*numa.PCIDevice{"0000:00:00.0": {Address: "0000:00:00.0", NUMANode: 0}}}
	r := &process.Reader{FS: fs,
		Processes: func() ([]nvml.Process, error) { return procs, nil },
		Topology:  func() *numa.Topology { return topo }}
	// One process alone, for the per-process cost.
	one := *r
	one.Processes = func() ([]nvml.Process, error) { return procs[:1], nil }
	start := time.Now()
	snap := sample(b, &one)
	b.ReportMetric(float64(time.Since(start).Microseconds()), "us-one-process")
	p := snap.GPUs[0].Procs[0].Placement
	b.Logf("pid %d: %d threads, memory by node %v", p.PID, len(p.ThreadCPUs), p.MemoryByNode.V)
	for b.Loop() {
		if s := sample(b, r); len(s.GPUs) != 8 || s.GPUs[7].Processes != 1 {
			b.Fatalf("snapshot %+v", s)
		}
	}
}

// TestPlacementRealMachine runs the source over the real NVML, sysfs and
// procfs with GPULINK_PLACEMENT_REAL=1, on a GPU machine with processes
// on its GPUs, and logs what it finds and how long each sample takes. Run
// it at GOMAXPROCS=1, as the daemon runs.
func TestPlacementRealMachine(t *testing.T) {
	if os.Getenv("GPULINK_PLACEMENT_REAL") == "" {
		t.Skip("set GPULINK_PLACEMENT_REAL=1 on a GPU machine")
	}
	rd := nvml.NewReader(gonvml.New(), "/sys", nil)
	if err := rd.Init(); err != nil {
		t.Fatal(err)
	}
	defer rd.Shutdown()
	fs := hostfs.Root{Sys: "/sys", Proc: "/proc"}
	topo, err := numa.ReadTopology(fs)
	t.Logf("topology: %d nodes, %d GPUs, err %v", len(topo.Nodes), len(topo.GPUs), err)
	for i := range 3 {
		start := time.Now()
		procs, err := rd.ComputeProcesses()
		t.Logf("ComputeProcesses %d: %d processes in %v, err %v", i, len(procs), time.Since(start), err)
	}
	r := &process.Reader{FS: fs, Processes: rd.ComputeProcesses, GPUs: rd.Identities,
		Topology: func() *numa.Topology { return topo }}
	var took []time.Duration
	var snap *process.Snapshot
	for range 20 {
		start := time.Now()
		s, err := r.Sample(context.Background())
		took = append(took, time.Since(start))
		if err != nil {
			t.Logf("Sample: %v", err)
		}
		snap = s
	}
	slices.Sort(took)
	t.Logf("Sample at GOMAXPROCS=%d: min %v median %v max %v", runtime.GOMAXPROCS(0), took[0], took[len(took)/2], took[len(took)-1])
	for _, g := range snap.GPUs {
		t.Logf("GPU %d %s node %d: %d processes, %d misaffine, %d unknown", g.GPU, g.PCIBusID, g.NUMANode, g.Processes, g.Misaffine, g.Unknown)
		for _, p := range g.Procs {
			pl := p.Placement
			t.Logf("  pid %d %q pod %q ctr %q allowed %v threads %d memory %v gpu mem %v remote cpu %v thread %v memory %v misaffine %v",
				pl.PID, pl.Comm, pl.PodUID, pl.ContainerID, pl.AllowedCPUs.V, len(pl.ThreadCPUs), pl.MemoryByNode.V,
				p.UsedGPUMemory, p.RemoteCPURatio, p.RemoteThreadRatio, p.RemoteMemoryRatio, p.Misaffine)
		}
	}
}

// placementFixture is the placement source over a fixture profile, its
// processes on the GPUs the profile names, GPUs indexed in address order
// as NVML does.
func placementFixture(t testing.TB, profile string) *process.Reader {
	t.Helper()
	root := machine.Load(t, profile)
	fs := hostfs.Under(root)
	model := sim.Fixtures()[profile]()
	index := map[string]int{}
	var ids []nvml.Identity
	for i, d := range model.GPUs() {
		index[d.Addr] = i
		ids = append(ids, nvml.Identity{Index: i, UUID: fmt.Sprintf("GPU-%d", i), PCIBusID: d.Addr})
	}
	var procs []nvml.Process
	for _, p := range model.Processes {
		for _, bus := range p.GPUs {
			i, ok := index[bus]
			if !ok {
				t.Fatalf("%s: pid %d on %s, no such GPU", profile, p.PID, bus)
			}
			procs = append(procs, nvml.Process{GPU: i, UUID: ids[i].UUID, PCIBusID: bus, PID: p.PID})
		}
	}
	topo, err := numa.ReadTopology(fs)
	if err != nil {
		t.Fatalf("%s topology: %v", profile, err)
	}
	return &process.Reader{FS: fs,
		Processes: func() ([]nvml.Process, error) { return procs, nil },
		Topology:  func() *numa.Topology { return topo },
		GPUs:      func() []nvml.Identity { return ids }}
}

// Every profile's processes, judged as its comments say.
func TestPlacementFixtures(t *testing.T) {
	type want struct {
		gpu, pid         int
		comm, pod        string
		container        bool
		cpu, thread, mem float64
		misaffine        bool
	}
	for _, tc := range []struct {
		profile string
		gpus    int
		want    []want
	}{
		{"dgx-h100", 8, []want{
			{0, 4242, "python", podUID, true, 0, 0, 12000.0 / 2012000, false},
			{2, 6161, "nvidia-cuda-mps", "", false, 0.5, 5.0 / 12, 0.45, false},
			{4, 5151, "python", "b6dcdec5-de98-5651-abf8-cfee8ab37743", true, 0, 0, 9000.0 / 1809000, false},
		}},
		{"dgx-h100-faults", 8, []want{
			{0, 4242, "python", podUID, true, 1, 1, 0.9, true},
			{2, 6161, "nvidia-cuda-mps", "", false, 0.5, 5.0 / 12, 0.45, false},
			{4, 5151, "python", "b6dcdec5-de98-5651-abf8-cfee8ab37743", true, 0, 0, 9000.0 / 1809000, false},
		}},
		{"aws-p5", 8, []want{{0, 3131, "python", "", false, 0, 0, 8000.0 / 1508000, false}}},
		{"aws-p5-faults", 8, []want{
			{0, 3131, "python", "", false, 0, 0, 8000.0 / 1508000, false},
			{6, 3232, "python", "", false, 0, 0, 0.8, true},
		}},
		{"h200-vm", 2, []want{{0, 793, "python3", "", false, 0, 0, 0, false}}},
		{"no-gpu", 0, nil},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			snap := sample(t, placementFixture(t, tc.profile))
			if len(snap.GPUs) != tc.gpus {
				t.Fatalf("%d GPUs, want %d", len(snap.GPUs), tc.gpus)
			}
			total, misaffine := 0, 0
			for _, g := range snap.GPUs {
				total += g.Processes
				misaffine += g.Misaffine
				if g.Unknown != 0 {
					t.Errorf("GPU %d: %d unknown", g.GPU, g.Unknown)
				}
			}
			wantMis := 0
			for _, w := range tc.want {
				if w.misaffine {
					wantMis++
				}
				g := gpuOf(t, snap, w.gpu)
				var p *process.GPUProcess
				for i := range g.Procs {
					if g.Procs[i].Placement.PID == w.pid {
						p = &g.Procs[i]
					}
				}
				if p == nil {
					t.Errorf("pid %d not on GPU %d: %+v", w.pid, w.gpu, g)
					continue
				}
				pl := p.Placement
				if pl.Comm != w.comm || pl.PodUID != w.pod || (len(pl.ContainerID) == 64) != w.container {
					t.Errorf("pid %d: comm %q pod %q container %q", w.pid, pl.Comm, pl.PodUID, pl.ContainerID)
				}
				wantRatio(t, fmt.Sprintf("pid %d remote CPU", w.pid), p.RemoteCPURatio, w.cpu)
				wantRatio(t, fmt.Sprintf("pid %d remote thread", w.pid), p.RemoteThreadRatio, w.thread)
				wantRatio(t, fmt.Sprintf("pid %d remote memory", w.pid), p.RemoteMemoryRatio, w.mem)
				if p.Misaffine != sampler.Some(w.misaffine) {
					t.Errorf("pid %d: misaffine %+v, want %v", w.pid, p.Misaffine, w.misaffine)
				}
			}
			if total != len(tc.want) || misaffine != wantMis {
				t.Errorf("%d processes, %d misaffine; want %d, %d", total, misaffine, len(tc.want), wantMis)
			}
		})
	}
}

// The fixture's pages add up to what the profile says, in bytes.
func TestPlacementFixtureMemory(t *testing.T) {
	p, err := process.Read(filepath.Join(machine.Load(t, "dgx-h100-faults"), "proc"), 4242)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]uint64{0: 200_000 * 4096, 1: 1_800_000 * 4096}
	if !p.MemoryByNode.Valid || p.MemoryByNode.V[0] != want[0] || p.MemoryByNode.V[1] != want[1] {
		t.Errorf("memory %v, want %v", p.MemoryByNode, want)
	}
}

// BenchmarkPlacementSampleFixture samples the DGX fixture's three
// processes.
func BenchmarkPlacementSampleFixture(b *testing.B) {
	r := placementFixture(b, "dgx-h100-faults")
	b.ReportAllocs()
	for b.Loop() {
		sample(b, r)
	}
}

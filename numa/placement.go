package numa

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// MisaffineRatio is the share of a process's allowed CPUs, threads or
// resident memory that must sit off its GPU's NUMA node for the process to
// be called misaffine: more than half.
//
// A process is misaffine on a GPU when more than MisaffineRatio of its
// allowed CPUs (Cpus_allowed_list), of its threads (by the CPU each last
// ran on) or of its resident memory (numa_maps) is off the GPU's node, or
// when none of its allowed CPUs is on that node. It is not misaffine when
// all four are known and none holds; otherwise (a value could not be read)
// the verdict is unknown, unless a known one already holds.
//
// An unpinned process on a 2-socket machine has exactly half its allowed
// CPUs remote and is not misaffine by that alone; one pinned to the far
// socket has all of them remote, and one whose memory was first touched
// from the far socket has most of its pages there. On a machine with one
// NUMA node (or none: a kernel without NUMA) nothing is remote, whatever
// numa_node says; on one with more, a GPU whose node is unknown leaves
// every ratio and the verdict unknown: node 0 is never assumed.
const MisaffineRatio = 0.5

// placementWorkers bounds the numa_maps reads, and apart from them the
// small-file reads, in flight at once. Reads block in the kernel
// (numa_maps walks the page tables as it is read), and a blocking read
// holds its own thread, so even at GOMAXPROCS=1 they overlap.
const placementWorkers = 8

// PlacementReader samples where the processes holding GPUs run and keep
// their memory, against their GPUs' NUMA nodes. It implements
// sampler.Source.
type PlacementReader struct {
	FS FS
	// Processes lists the processes holding each GPU (nvml.Reader's
	// ComputeProcesses).
	Processes func() ([]nvml.Process, error)
	// Topology returns the latest topology snapshot; nil while there is
	// none, and then no process's placement can be judged.
	Topology func() *Topology
	// GPUs, when set, lists every GPU (nvml.Reader's Identities) so that a
	// GPU without processes is still reported, with none; when nil only
	// GPUs with processes are.
	GPUs func() []nvml.Identity
}

// PlacementSnapshot is the placement of every GPU's processes.
type PlacementSnapshot struct {
	// GPUs are sorted by index.
	GPUs []GPUPlacement
}

// GPUPlacement is one GPU's processes.
type GPUPlacement struct {
	GPU      int
	UUID     string
	PCIBusID string
	// NUMANode is the GPU's node; -1 when unknown.
	NUMANode int
	// Processes counts the GPU's processes, leaving out those that exited
	// while they were read; Misaffine those found misaffine, Unknown those
	// whose placement could not be judged.
	Processes, Misaffine, Unknown int
	// Procs are sorted by PID.
	Procs []GPUProcess
}

// GPUProcess is one process on one GPU.
type GPUProcess struct {
	// Placement is shared by every GPU the process holds.
	Placement *ProcessPlacement
	// UsedGPUMemory is the device memory it holds on this GPU, in bytes.
	UsedGPUMemory sampler.Opt[float64]
	// RemoteCPURatio is the share of its allowed CPUs that are not on the
	// GPU's node; RemoteThreadRatio the share of its threads that last ran
	// off that node; RemoteMemoryRatio the share of its resident bytes on
	// other nodes. Absent where unknown.
	RemoteCPURatio, RemoteThreadRatio, RemoteMemoryRatio sampler.Opt[float64]
	// NoLocalCPU is true when none of its allowed CPUs is on the GPU's
	// node.
	NoLocalCPU sampler.Opt[bool]
	// Misaffine is the verdict (see MisaffineRatio); absent when it
	// cannot be judged.
	Misaffine sampler.Opt[bool]
}

// Sample lists the GPU processes and reads each once, concurrently. A
// process that exits while it is read is left out silently; values that
// cannot be read are left out and counted in a *sampler.PartialError.
func (r *PlacementReader) Sample(ctx context.Context) (*PlacementSnapshot, error) {
	var t sampler.Tally
	procs, err := r.Processes()
	if err != nil {
		var partial *sampler.PartialError
		if !errors.As(err, &partial) {
			return nil, fmt.Errorf("GPU processes: %w", err)
		}
		t.Merge(err)
	}
	var topo *Topology
	if r.Topology != nil {
		topo = r.Topology()
	}

	// Each PID once, however many GPUs it holds.
	var pids []int
	seen := map[int]bool{}
	for _, p := range procs {
		if !seen[p.PID] {
			seen[p.PID] = true
			pids = append(pids, p.PID)
		}
	}
	placements, err := r.readAll(ctx, pids, &t)
	if err != nil {
		return nil, err
	}

	byGPU := map[int]*GPUPlacement{}
	gpuOf := func(index int, uuid, bus string) *GPUPlacement {
		g := byGPU[index]
		if g == nil {
			g = &GPUPlacement{GPU: index, UUID: uuid, PCIBusID: bus, NUMANode: -1}
			if topo != nil {
				if d := topo.Device(bus); d != nil {
					g.NUMANode = topo.NodeOf(d)
				}
			}
			byGPU[index] = g
		}
		return g
	}
	if r.GPUs != nil {
		for _, id := range r.GPUs() {
			gpuOf(id.Index, id.UUID, id.PCIBusID)
		}
	}
	type key struct{ gpu, pid int }
	done := map[key]bool{}
	for _, p := range procs {
		g := gpuOf(p.GPU, p.UUID, p.PCIBusID)
		pl := placements[p.PID]
		if pl == nil || done[key{p.GPU, p.PID}] {
			continue // exited, or listed twice
		}
		done[key{p.GPU, p.PID}] = true
		gp := judge(topo, g.NUMANode, pl)
		gp.UsedGPUMemory = sampler.Opt[float64]{V: p.UsedMemory.V, Valid: p.UsedMemory.Valid}
		g.Processes++
		switch {
		case !gp.Misaffine.Valid:
			g.Unknown++
		case gp.Misaffine.V:
			g.Misaffine++
		}
		g.Procs = append(g.Procs, gp)
	}

	snap := &PlacementSnapshot{GPUs: make([]GPUPlacement, 0, len(byGPU))}
	for _, g := range byGPU {
		slices.SortFunc(g.Procs, func(a, b GPUProcess) int { return cmp.Compare(a.Placement.PID, b.Placement.PID) })
		snap.GPUs = append(snap.GPUs, *g)
	}
	slices.SortFunc(snap.GPUs, func(a, b GPUPlacement) int { return cmp.Compare(a.GPU, b.GPU) })
	return snap, t.Err()
}

// mapsPool keeps the numa_maps readers' buffers from sample to sample.
var mapsPool = sync.Pool{New: func() any { return newMapsScratch() }}

// readAll reads the processes, a few at a time. The result holds no entry
// for a process that exited.
//
// Each process is two jobs: numa_maps, one long read while the kernel
// walks the page tables, and the small files (comm, status, cgroup, a
// stat per thread), many short reads. All the numa_maps reads are started
// first. At GOMAXPROCS=1 a goroutine in a long read keeps the one P until
// the runtime hands it on (within 20 µs once sysmon is watching, up
// to 10 ms when it has been idle), after which the read goes on in its
// own thread; the short reads, too short to be handed on, run on the P
// meanwhile.
func (r *PlacementReader) readAll(ctx context.Context, pids []int, t *sampler.Tally) (map[int]*ProcessPlacement, error) {
	type memory struct {
		m   sampler.Opt[map[int]uint64]
		err error
	}
	type files struct {
		p   ProcessPlacement
		err error
	}
	mems, fils := make([]memory, len(pids)), make([]files, len(pids))
	var wg sync.WaitGroup
	memSlots, fileSlots := make(chan struct{}, placementWorkers), make(chan struct{}, placementWorkers)
	for i, pid := range pids {
		wg.Go(func() {
			memSlots <- struct{}{}
			defer func() { <-memSlots }()
			if mems[i].err = ctx.Err(); mems[i].err != nil {
				return
			}
			s := mapsPool.Get().(*mapsScratch)
			defer mapsPool.Put(s)
			mems[i].m, mems[i].err = r.FS.readProcessMemory(pid, s)
		})
	}
	for i, pid := range pids {
		wg.Go(func() {
			fileSlots <- struct{}{}
			defer func() { <-fileSlots }()
			if fils[i].err = ctx.Err(); fils[i].err != nil {
				return
			}
			fils[i].p, fils[i].err = r.FS.readProcessFiles(pid, make([]byte, 0, 4096))
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("placement sample abandoned: %w", err)
	}
	out := make(map[int]*ProcessPlacement, len(pids))
	for i, pid := range pids {
		if errors.Is(fils[i].err, ErrProcessGone) || errors.Is(mems[i].err, ErrProcessGone) {
			continue
		}
		t.Merge(fils[i].err)
		t.Merge(mems[i].err)
		p := fils[i].p
		p.MemoryByNode = mems[i].m
		out[pid] = &p
	}
	return out, nil
}

// judge compares one process's placement with its GPU's node, by the
// rule MisaffineRatio gives.
func judge(topo *Topology, gpuNode int, p *ProcessPlacement) GPUProcess {
	gp := GPUProcess{Placement: p}
	if topo == nil {
		return gp
	}
	if len(topo.Nodes) <= 1 {
		zero := sampler.Some(0.0)
		if p.AllowedCPUs.Valid && p.AllowedCPUs.V.Count() > 0 {
			gp.RemoteCPURatio = zero
			gp.NoLocalCPU = sampler.Some(false)
		}
		if len(p.ThreadCPUs) > 0 {
			gp.RemoteThreadRatio = zero
		}
		if p.MemoryByNode.Valid && memTotal(p.MemoryByNode.V) > 0 {
			gp.RemoteMemoryRatio = zero
		}
		gp.Misaffine = sampler.Some(false)
		return gp
	}
	node := topo.Node(gpuNode)
	if gpuNode < 0 || node == nil {
		return gp
	}
	// A node without CPUs (memory only) gives nothing to be near.
	if node.CPUs.Count() > 0 {
		if p.AllowedCPUs.Valid {
			if n := p.AllowedCPUs.V.Count(); n > 0 {
				local := p.AllowedCPUs.V.Intersect(node.CPUs).Count()
				gp.RemoteCPURatio = sampler.Some(float64(n-local) / float64(n))
				gp.NoLocalCPU = sampler.Some(local == 0)
			}
		}
		if n := len(p.ThreadCPUs); n > 0 {
			remote := 0
			for _, c := range p.ThreadCPUs {
				if !node.CPUs.Contains(c) {
					remote++
				}
			}
			gp.RemoteThreadRatio = sampler.Some(float64(remote) / float64(n))
		}
	}
	if p.MemoryByNode.Valid {
		if total := memTotal(p.MemoryByNode.V); total > 0 {
			remote := total - float64(p.MemoryByNode.V[gpuNode])
			gp.RemoteMemoryRatio = sampler.Some(max(0, remote/total))
		}
	}
	gp.Misaffine = misaffine(gp)
	return gp
}

// misaffine ORs the four tests, any of which may be unknown.
func misaffine(gp GPUProcess) sampler.Opt[bool] {
	known := true
	for _, r := range []sampler.Opt[float64]{gp.RemoteCPURatio, gp.RemoteThreadRatio, gp.RemoteMemoryRatio} {
		switch {
		case !r.Valid:
			known = false
		case r.V > MisaffineRatio:
			return sampler.Some(true)
		}
	}
	switch {
	case !gp.NoLocalCPU.Valid:
		known = false
	case gp.NoLocalCPU.V:
		return sampler.Some(true)
	}
	if !known {
		return sampler.Opt[bool]{}
	}
	return sampler.Some(false)
}

// memTotal sums resident bytes, in floating point: fixture values may
// be large enough to overflow a sum of integers.
func memTotal(m map[int]uint64) float64 {
	var s float64
	for _, v := range m {
		s += float64(v)
	}
	return s
}

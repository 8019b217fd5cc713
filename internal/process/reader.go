package process

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/numa"
)

// workers bounds the numa_maps reads, and apart from them the
// small-file reads, in flight at once. Reads block in the kernel
// (numa_maps walks the page tables as it is read), and a blocking read
// holds its own thread, so even at GOMAXPROCS=1 they overlap.
const workers = 8

// Reader samples where the processes holding GPUs run and keep their
// memory, against their GPUs' NUMA nodes. It implements sampler.Source.
type Reader struct {
	// FS is the machine's filesystem; only its procfs root is read here,
	// the GPUs' nodes come from Topology.
	FS hostfs.Root
	// Processes lists the processes holding each GPU (nvml.Reader's
	// ComputeProcesses).
	Processes func() ([]nvml.Process, error)
	// Topology returns the latest topology snapshot; nil while there is
	// none, and then no process's placement can be judged.
	Topology func() *numa.Topology
	// GPUs, when set, lists every GPU (nvml.Reader's Identities) so that a
	// GPU without processes is still reported, with none; when nil only
	// GPUs with processes are.
	GPUs func() []nvml.Identity
}

// Snapshot is the placement of every GPU's processes.
type Snapshot struct {
	// GPUs are sorted by index.
	GPUs []GPU
}

// GPU is one GPU's processes.
type GPU struct {
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
	Placement *Placement
	// UsedGPUMemory is the device memory it holds on this GPU, in bytes.
	UsedGPUMemory sampler.Opt[float64]
	// Verdict is the placement judged against this GPU's node (see
	// numa.MisaffineRatio).
	numa.Verdict
}

// Sample lists the GPU processes and reads each once, concurrently. A
// process that exits while it is read is left out silently; values that
// cannot be read are left out and counted in a *sampler.PartialError.
func (r *Reader) Sample(ctx context.Context) (*Snapshot, error) {
	var t sampler.Tally
	procs, err := r.Processes()
	if err != nil {
		var partial *sampler.PartialError
		if !errors.As(err, &partial) {
			return nil, fmt.Errorf("GPU processes: %w", err)
		}
		t.Merge(err)
	}
	var topo *numa.Topology
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

	byGPU := map[int]*GPU{}
	gpuOf := func(index int, uuid, bus string) *GPU {
		g := byGPU[index]
		if g == nil {
			g = &GPU{GPU: index, UUID: uuid, PCIBusID: bus, NUMANode: -1}
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
		gp := GPUProcess{
			Placement:     pl,
			UsedGPUMemory: sampler.Opt[float64]{V: p.UsedMemory.V, Valid: p.UsedMemory.Valid},
			Verdict:       numa.Judge(topo, g.NUMANode, pl.AllowedCPUs, pl.ThreadCPUs, pl.MemoryByNode),
		}
		g.Processes++
		switch {
		case !gp.Misaffine.Valid:
			g.Unknown++
		case gp.Misaffine.V:
			g.Misaffine++
		}
		g.Procs = append(g.Procs, gp)
	}

	snap := &Snapshot{GPUs: make([]GPU, 0, len(byGPU))}
	for _, g := range byGPU {
		slices.SortFunc(g.Procs, func(a, b GPUProcess) int { return cmp.Compare(a.Placement.PID, b.Placement.PID) })
		snap.GPUs = append(snap.GPUs, *g)
	}
	slices.SortFunc(snap.GPUs, func(a, b GPU) int { return cmp.Compare(a.GPU, b.GPU) })
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
func (r *Reader) readAll(ctx context.Context, pids []int, t *sampler.Tally) (map[int]*Placement, error) {
	type memory struct {
		m   sampler.Opt[map[int]uint64]
		err error
	}
	type files struct {
		p   Placement
		err error
	}
	mems, fils := make([]memory, len(pids)), make([]files, len(pids))
	var wg sync.WaitGroup
	memSlots, fileSlots := make(chan struct{}, workers), make(chan struct{}, workers)
	for i, pid := range pids {
		wg.Go(func() {
			memSlots <- struct{}{}
			defer func() { <-memSlots }()
			if mems[i].err = ctx.Err(); mems[i].err != nil {
				return
			}
			s := mapsPool.Get().(*mapsScratch)
			defer mapsPool.Put(s)
			mems[i].m, mems[i].err = readMemory(r.FS.Proc, pid, s)
		})
	}
	for i, pid := range pids {
		wg.Go(func() {
			fileSlots <- struct{}{}
			defer func() { <-fileSlots }()
			if fils[i].err = ctx.Err(); fils[i].err != nil {
				return
			}
			fils[i].p, fils[i].err = readFiles(r.FS.Proc, pid, make([]byte, 0, 4096))
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("placement sample abandoned: %w", err)
	}
	out := make(map[int]*Placement, len(pids))
	for i, pid := range pids {
		if errors.Is(fils[i].err, ErrGone) || errors.Is(mems[i].err, ErrGone) {
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

package probe

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda"
)

// ChildConfig is what the probe child needs besides the Options.
type ChildConfig struct {
	// Library is the CUDA driver library to load.
	Library string
	// FS is where sysfs is, for the link state read under load.
	FS hostfs.Root
	// CuFileLibrary is the cuFile library the storage probes try.
	CuFileLibrary string
}

// RunRound probes each GPU in opts in turn and returns the round. It is the
// body of `gpulink_exporter probe`: it runs in a child process, so whatever
// it leaves behind (contexts, device memory, a wedged driver call) ends with
// that process.
func RunRound(ctx context.Context, cfg ChildConfig, opts []probes.Options) *probes.Round {
	drv, err := cuda.Open(cfg.Library)
	if err != nil {
		var addrs []string
		for _, o := range opts {
			addrs = append(addrs, o.GPU)
		}
		return failedRound(addrs, err)
	}
	defer drv.Close()
	return runRound(ctx, drv, cfg.FS, cfg.CuFileLibrary, opts)
}

// failedRound is a round in which no GPU could be probed, for err.
func failedRound(gpus []string, err error) *probes.Round {
	round := &probes.Round{Version: probes.ContractVersion, Started: time.Now().UTC(), GPUs: []probes.GPURound{}}
	for _, g := range gpus {
		round.GPUs = append(round.GPUs, probes.GPURound{PCIBusID: pciaddr.Normalize(g), CUDADevice: -1, Results: []probes.Result{}, Error: err.Error()})
	}
	return round
}

func runRound(ctx context.Context, drv *cuda.Driver, fs hostfs.Root, cufileLib string, opts []probes.Options) *probes.Round {
	return probes.MeasureRound(ctx, cudaMeasurer{drv: drv, fs: fs, cufile: cufileLib}, opts)
}

// cudaMeasurer is the Measurer over the CUDA driver: the probe child's.
type cudaMeasurer struct {
	drv    *cuda.Driver
	fs     hostfs.Root
	cufile string
}

func (m cudaMeasurer) DriverVersion() int {
	v, _ := m.drv.Version()
	return v
}

// chaseStride: the nodes of what the latency probes chase
// (probes.ChaseBytes) are a cache line (128 bytes on NVIDIA GPUs) apart.
const chaseStride = 128

// gateTimeout bounds the spin kernel: queueing a sample's work takes
// microseconds, so a gate still shut after this means the host is gone.
const gateTimeout = 5 * time.Second

// gpuProbe is one GPU's probing, the GPU that cudaMeasurer opens: its
// worker, kernels and control page, and the accounting of what the probes
// cost.
type gpuProbe struct {
	ctx                context.Context
	fs                 hostfs.Root
	opts               probes.Options
	w                  *worker
	spin, chase, empty *cuda.Function

	// ctl is a pinned host page the GPU reads and writes: the gate word at
	// 0, the gate's timed-out flag at 4, the chase kernel's output at 64.
	ctl    *hostBuffer
	ctlDev cuda.DevicePtr

	peers map[string]*worker

	// cufile is the cuFile library to try for the storage probes;
	// storage their file, once made, or storageErr why it was not.
	cufile     string
	storage    *storageFile
	storageErr error

	addr string // the GPU's PCI address, sysfs form
	busy time.Duration
	dev  int64       // device memory held now
	host int64       // pinned host memory held now
	cost probes.Cost // the memory highs; busy is kept apart, as a duration
}

// Open finds the GPU, starts its worker and loads the kernels.
func (m cudaMeasurer) Open(ctx context.Context, o probes.Options) (probes.GPU, probes.Device, error) {
	found := probes.Device{CUDADevice: -1}
	addr := pciaddr.Normalize(o.GPU)
	dev, err := m.drv.DeviceByPCIBusID(o.GPU)
	if err != nil {
		return nil, found, err
	}
	found.CUDADevice = dev.Ordinal
	found.Name, _ = dev.Name()
	w, err := startWorker(dev)
	if err != nil {
		return nil, found, fmt.Errorf("GPU %s: %v", addr, err)
	}
	p := &gpuProbe{ctx: ctx, fs: m.fs, opts: o, w: w, addr: addr, peers: map[string]*worker{}, cufile: m.cufile}
	if err := p.setup(); err != nil {
		// The context was held: returned, so that it is closed and counted.
		return p, found, fmt.Errorf("GPU %s: %v", addr, err)
	}
	return p, found, nil
}

// Close stops the peers' workers and then the GPU's own.
func (p *gpuProbe) Close() float64 {
	p.teardown()
	return p.w.stop().Seconds()
}

func (p *gpuProbe) Cost() probes.Cost {
	c := p.cost
	c.BusySeconds = p.busy.Seconds()
	return c
}

func (p *gpuProbe) OpenPeer(addr string) error {
	_, err := p.peer(addr)
	return err
}

func (p *gpuProbe) setup() error {
	ctl, err := allocHost(int64(4096), -1)
	if err != nil {
		return err
	}
	p.ctl = ctl
	return p.w.do(func(c *cuda.Context) error {
		if p.ctlDev, err = c.RegisterHost(ctl.mem); err != nil {
			return err
		}
		m, err := c.LoadModule(cuda.Kernels)
		if err != nil {
			return fmt.Errorf("loading the probe kernels: %w", err)
		}
		for _, k := range []struct {
			f    **cuda.Function
			name string
		}{{&p.spin, "gpulink_spin"}, {&p.chase, "gpulink_chase"}, {&p.empty, "gpulink_empty"}} {
			if *k.f, err = m.Function(k.name); err != nil {
				return err
			}
		}
		// The module stays loaded until the context goes with the worker.
		return nil
	})
}

func (p *gpuProbe) teardown() {
	p.closeStorage()
	for _, w := range p.peers {
		w.stop()
	}
	if p.ctl != nil {
		_ = p.w.do(func(c *cuda.Context) error { return c.UnregisterHost(p.ctl.mem) })
		p.ctl.free()
	}
}

// peer returns the worker holding the peer's context, starting it and
// enabling access both ways on first use.
func (p *gpuProbe) peer(addr string) (*worker, error) {
	if w, ok := p.peers[addr]; ok {
		return w, nil
	}
	dev, err := p.w.dev.Driver().DeviceByPCIBusID(addr)
	if err != nil {
		return nil, err
	}
	ok, err := p.w.dev.CanAccessPeer(dev)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("GPU %s cannot access GPU %s peer to peer", p.addr, addr)
	}
	w, err := startWorker(dev)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", addr, err)
	}
	if err := p.w.do(func(c *cuda.Context) error { return c.EnablePeerAccess(w.ctx) }); err != nil {
		w.stop()
		return nil, err
	}
	if err := w.do(func(c *cuda.Context) error { return c.EnablePeerAccess(p.w.ctx) }); err != nil {
		w.stop()
		return nil, err
	}
	p.peers[addr] = w
	return w, nil
}

// The control page's words.
func (p *gpuProbe) gateWord() *uint32     { return (*uint32)(unsafe.Pointer(&p.ctl.mem[0])) }
func (p *gpuProbe) timedOutWord() *uint32 { return (*uint32)(unsafe.Pointer(&p.ctl.mem[4])) }
func (p *gpuProbe) chaseOut() (last, ns uint64) {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&p.ctl.mem[64]))),
		atomic.LoadUint64((*uint64)(unsafe.Pointer(&p.ctl.mem[72])))
}

// alloc and free keep the device memory account; free ignores zero.
func (p *gpuProbe) alloc(w *worker, n int64) (cuda.DevicePtr, error) {
	var ptr cuda.DevicePtr
	err := w.do(func(c *cuda.Context) (err error) {
		ptr, err = c.Alloc(n)
		return err
	})
	if err == nil && w == p.w {
		p.dev += n
		p.cost.DeviceMemoryBytes = max(p.cost.DeviceMemoryBytes, p.dev)
	}
	return ptr, err
}

func (p *gpuProbe) free(w *worker, ptr cuda.DevicePtr, n int64) {
	if ptr == 0 {
		return
	}
	if w.do(func(c *cuda.Context) error { return c.Free(ptr) }) == nil && w == p.w {
		p.dev -= n
	}
}

// pinned maps, binds and registers host memory; release undoes it.
type pinned struct {
	buf *hostBuffer
	dev cuda.DevicePtr
}

func (p *gpuProbe) pin(n int64, node int) (*pinned, error) {
	buf, err := allocHost(n, node)
	if err != nil {
		return nil, err
	}
	var dp cuda.DevicePtr
	if err := p.w.do(func(c *cuda.Context) (err error) {
		dp, err = c.RegisterHost(buf.mem)
		return err
	}); err != nil {
		buf.free()
		return nil, err
	}
	p.host += n
	p.cost.HostMemoryBytes = max(p.cost.HostMemoryBytes, p.host)
	return &pinned{buf: buf, dev: dp}, nil
}

func (p *gpuProbe) unpin(h *pinned) {
	if h == nil {
		return
	}
	_ = p.w.do(func(c *cuda.Context) error { return c.UnregisterHost(h.buf.mem) })
	p.host -= int64(len(h.buf.mem))
	h.buf.free()
}

// noteMemory records what the GPU's memory use is with the probe's
// buffers in place.
func (p *gpuProbe) noteMemory() {
	_ = p.w.do(func(c *cuda.Context) error { // a failed read leaves the last peak
		free, total, err := c.MemInfo()
		if err == nil && total > free {
			p.cost.ContextMemoryBytes = max(p.cost.ContextMemoryBytes, int64(total-free))
		}
		return err
	})
}

var errGateTimedOut = errors.New("the spin gate timed out before the host opened it")

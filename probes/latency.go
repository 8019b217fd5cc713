package probes

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gpulink/gpulink_exporter/probes/cuda"
)

// chain is a pointer chase laid out in a buffer: a random cycle through
// every node, so neither a prefetcher nor the order of pages helps.
type chain struct {
	base  uint64 // device address of the buffer
	order []int  // node indexes in chase order
	bytes []byte // the buffer's contents
}

// newChain lays out n nodes stride bytes apart, each holding the device
// address of the next. The cycle is fixed (seeded) so rounds compare.
func newChain(base uint64, size, stride int) *chain {
	n := size / stride
	c := &chain{base: base, order: make([]int, n), bytes: make([]byte, size)}
	for i := range c.order {
		c.order[i] = i
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(n, func(i, j int) { c.order[i], c.order[j] = c.order[j], c.order[i] })
	for k, node := range c.order {
		next := c.order[(k+1)%n]
		binary.LittleEndian.PutUint64(c.bytes[node*stride:], base+uint64(next*stride))
	}
	return c
}

func (c *chain) start() uint64 { return c.base + uint64(c.order[0]*chaseStride) }

// after is the address the chase reaches after hops steps.
func (c *chain) after(hops int) uint64 {
	return c.base + uint64(c.order[hops%len(c.order)]*chaseStride)
}

// A warm-up walks the whole cycle (16384 hops, about 19 ms through host
// memory, 13 ms through a peer's), so every page of the buffer is in the
// GPU's TLB as it will be for the samples; each timed sample then walks
// chaseSampleHops on from where the last one stopped, so the samples
// together cover the cycle. Short walks that each restart at the same node
// see one subset of pages, and wandered by several percent between rounds
// on an H200 (1105-1190 ns); the samples are kept short because a chase
// kernel holds the GPU from a job running beside it.
const chaseSampleHops = 4096

// chaseLatency runs the chase kernel on this GPU over c and returns the
// median time of one hop.
func (p *gpuProbe) chaseLatency(c *chain) (float64, error) {
	var out []float64
	err := p.w.do(func(ctx *cuda.Context) error {
		s, err := ctx.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		at := c.start()
		walked := 0
		run := func(hops int) (time.Duration, error) {
			if err := s.Launch(p.chase, cuda.U64(at), cuda.U32(uint32(hops)), cuda.U64(uint64(p.ctlDev)+64)); err != nil {
				return 0, err
			}
			if err := s.Synchronize(); err != nil {
				return 0, err
			}
			last, ns := p.chaseOut()
			walked += hops
			if want := c.after(walked); last != want {
				return 0, fmt.Errorf("pointer chase ended at %#x, want %#x: the chain was not read back as written", last, want)
			}
			if ns == 0 {
				return 0, fmt.Errorf("a chase of %d hops took no measurable time", hops)
			}
			at = last
			d := time.Duration(ns)
			p.busy += d
			return d, nil
		}
		if _, err := run(len(c.order)); err != nil {
			return err
		}
		hops := min(chaseSampleHops, len(c.order))
		for range p.opts.Samples {
			if err := p.ctx.Err(); err != nil {
				return err
			}
			d, err := run(hops)
			if err != nil {
				return err
			}
			out = append(out, d.Seconds()/float64(hops))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return median(out), nil
}

// hostLatency chases pointers through pinned host memory on one node: each
// hop is a round trip over PCIe to that node's memory.
func (p *gpuProbe) hostLatency(node int) Result {
	r := Result{Probe: HostLatency, HostNUMANode: nodeRef(node), SizeBytes: chaseBytes, Samples: p.opts.Samples}
	h, err := p.pin(chaseBytes, node)
	if err != nil {
		return errResult(r, err)
	}
	defer p.unpin(h)
	c := newChain(uint64(h.dev), chaseBytes, chaseStride)
	copy(h.buf.mem, c.bytes)
	if r.Seconds, err = p.chaseLatency(c); err != nil {
		return errResult(r, err)
	}
	return r
}

// peerLatency chases pointers through the peer's memory: each hop is a
// round trip over the link between the two GPUs.
func (p *gpuProbe) peerLatency(addr string) Result {
	r := Result{Probe: PeerLatency, Peer: addr, SizeBytes: chaseBytes, Samples: p.opts.Samples}
	pw, err := p.peer(addr)
	if err != nil {
		return errResult(r, err)
	}
	ptr, err := p.alloc(pw, chaseBytes)
	if err != nil {
		return errResult(r, err)
	}
	defer p.free(pw, ptr, chaseBytes)
	c := newChain(uint64(ptr), chaseBytes, chaseStride)
	if err := pw.do(func(ctx *cuda.Context) error { return ctx.CopyHtoD(ptr, c.bytes) }); err != nil {
		return errResult(r, err)
	}
	if r.Seconds, err = p.chaseLatency(c); err != nil {
		return errResult(r, err)
	}
	return r
}

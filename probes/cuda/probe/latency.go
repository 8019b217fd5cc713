package probe

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda"
)

// chain is a pointer chase laid out in a buffer: a random cycle through
// every node, so neither a prefetcher nor the order of pages helps. Beside
// it, in bytes no node uses, a second cycle (the tour) touches every page
// once, in random order, for the warm-up.
type chain struct {
	base  uint64 // device address of the buffer
	order []int  // node indexes in chase order
	pages []int  // page indexes in tour order
	bytes []byte // the buffer's contents
}

// A node is 8 bytes at the start of its stride; the tour's slot in a page
// is tourOffset bytes into the page's first node, clear of that.
const (
	tourPage   = 4096
	tourOffset = 64
)

// newChain lays out n nodes stride bytes apart, each holding the device
// address of the next, and the page tour. Both cycles are fixed (seeded)
// so rounds compare.
func newChain(base uint64, size, stride int) *chain {
	r := rand.New(rand.NewPCG(1, 2))
	c := &chain{base: base, order: shuffled(r, size/stride), pages: shuffled(r, size/tourPage), bytes: make([]byte, size)}
	link := func(order []int, at func(int) int) {
		for k, i := range order {
			next := order[(k+1)%len(order)]
			binary.LittleEndian.PutUint64(c.bytes[at(i):], base+uint64(at(next)))
		}
	}
	link(c.order, func(node int) int { return node * stride })
	link(c.pages, func(page int) int { return page*tourPage + tourOffset })
	return c
}

// shuffled is 0..n-1 in an order drawn from r.
func shuffled(r *rand.Rand, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	r.Shuffle(n, func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func (c *chain) start() uint64 { return c.base + uint64(c.order[0]*chaseStride) }

// after is the address the chase reaches after hops steps.
func (c *chain) after(hops int) uint64 {
	return c.base + uint64(c.order[hops%len(c.order)]*chaseStride)
}

// tourStart is where the page tour begins, and ends after len(pages) hops.
func (c *chain) tourStart() uint64 {
	return c.base + uint64(c.pages[0]*tourPage+tourOffset)
}

// Before the timed samples a warm-up puts every page of the buffer in the
// GPU's TLB; each timed sample then walks chaseSampleHops on from where the
// last one stopped, so the samples together cover the cycle (short walks
// that each restart at the same node see one subset of pages, and wandered
// by several percent between rounds on an H200, 1105-1190 ns).
//
// In a peer's memory the warm-up tours every page once (512 hops, 0.4 ms).
// In host memory it walks the whole cycle (16384 hops, 19 ms), as the
// reference does: the CPU has just written the chain, and a GPU's first
// read of a line still in the CPU's cache is faster than every later one.
// With only the page tour the host samples read 1107-1132 ns against the
// reference's 1188-1243 (H200, 2026-11-22); after the whole lap they read
// 1155-1207 (2026-11-21). A chase kernel holds the GPU from a job beside
// it for as long as it runs, so the peer chase, which gains nothing from
// the lap, does not walk it.
const chaseSampleHops = 4096

// ChaseHops is how many hops the latency probe of kind (HostLatency or
// PeerLatency) walks for one result: the warm-up, then samples samples.
// It is for a model of the probe's cost; chaseLatency is what walks them.
func ChaseHops(kind probes.Kind, samples int) int {
	nodes := probes.ChaseBytes / chaseStride
	warm := probes.ChaseBytes / tourPage // the page tour
	if kind == probes.HostLatency {
		warm = nodes // the whole cycle
	}
	return warm + samples*min(chaseSampleHops, nodes)
}

// chaseLatency runs the chase kernel on this GPU over c and returns the
// median time of one hop. lap warms up with the whole cycle, else with the
// page tour.
func (p *gpuProbe) chaseLatency(c *chain, lap bool) (probes.Measured, error) {
	var out []float64
	err := p.w.do(func(ctx *cuda.Context) error {
		s, err := ctx.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		run := func(from uint64, hops int, want uint64) (time.Duration, error) {
			if err := s.Launch(p.chase, cuda.U64(from), cuda.U32(uint32(hops)), cuda.U64(uint64(p.ctlDev)+64)); err != nil {
				return 0, err
			}
			if err := s.Synchronize(); err != nil {
				return 0, err
			}
			last, ns := p.chaseOut()
			if last != want {
				return 0, fmt.Errorf("pointer chase ended at %#x, want %#x: the chain was not read back as written", last, want)
			}
			if ns == 0 {
				return 0, fmt.Errorf("a chase of %d hops took no measurable time", hops)
			}
			d := time.Duration(ns)
			p.busy += d
			return d, nil
		}
		from, hops := c.tourStart(), len(c.pages)
		if lap {
			from, hops = c.start(), len(c.order)
		}
		if _, err := run(from, hops, from); err != nil {
			return err
		}
		at, walked := c.start(), 0
		hops = min(chaseSampleHops, len(c.order))
		for range p.opts.Samples {
			if err := p.ctx.Err(); err != nil {
				return err
			}
			walked += hops
			d, err := run(at, hops, c.after(walked))
			if err != nil {
				return err
			}
			at = c.after(walked)
			out = append(out, d.Seconds()/float64(hops))
		}
		return nil
	})
	if err != nil {
		return probes.Measured{}, err
	}
	return probes.Sampled(out), nil
}

// HostLatency chases pointers through pinned host memory on one node: each
// hop is a round trip over PCIe to that node's memory.
func (p *gpuProbe) HostLatency(node int) (probes.Measured, error) {
	h, err := p.pin(probes.ChaseBytes, node)
	if err != nil {
		return probes.Measured{}, err
	}
	defer p.unpin(h)
	c := newChain(uint64(h.dev), probes.ChaseBytes, chaseStride)
	copy(h.buf.mem, c.bytes)
	return p.chaseLatency(c, true)
}

// PeerLatency chases pointers through the peer's memory: each hop is a
// round trip over the link between the two GPUs.
func (p *gpuProbe) PeerLatency(addr string) (probes.Measured, error) {
	pw, err := p.peer(addr)
	if err != nil {
		return probes.Measured{}, err
	}
	ptr, err := p.alloc(pw, probes.ChaseBytes)
	if err != nil {
		return probes.Measured{}, err
	}
	defer p.free(pw, ptr, probes.ChaseBytes)
	c := newChain(uint64(ptr), probes.ChaseBytes, chaseStride)
	if err := pw.do(func(ctx *cuda.Context) error { return ctx.CopyHtoD(ptr, c.bytes) }); err != nil {
		return probes.Measured{}, err
	}
	return p.chaseLatency(c, false)
}

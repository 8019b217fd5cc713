package probe

import (
	"math"
	"time"

	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda"
)

// HostToDevice, DeviceToHost and HostBidirectional are hostCopy's kinds.
func (p *gpuProbe) HostToDevice(node int, readLink bool) (probes.Measured, *probes.LinkUnderLoad, error) {
	rates, link, err := p.hostCopy(probes.HostToDevice, node, readLink)
	if err != nil {
		return probes.Measured{}, nil, err
	}
	return rates[0], link, nil
}

func (p *gpuProbe) DeviceToHost(node int) (probes.Measured, error) {
	rates, _, err := p.hostCopy(probes.DeviceToHost, node, false)
	if err != nil {
		return probes.Measured{}, err
	}
	return rates[0], nil
}

func (p *gpuProbe) HostBidirectional(node int) (probes.Measured, probes.Measured, error) {
	rates, _, err := p.hostCopy(probes.HostBidirectional, node, false)
	if err != nil {
		return probes.Measured{}, probes.Measured{}, err
	}
	return rates[0], rates[1], nil
}

// hostCopy measures one host copy probe with the host buffer on one node:
// one rate, or for HostBidirectional the host-to-device and device-to-host
// rates. With readLink, a host-to-device copy reads the link under load
// too.
func (p *gpuProbe) hostCopy(kind probes.Kind, node int, readLink bool) ([]probes.Measured, *probes.LinkUnderLoad, error) {
	size := p.opts.SizeBytes
	// Both directions at once need a host and a device buffer each.
	pairs := 1
	if kind == probes.HostBidirectional {
		pairs = 2
	}
	var hosts []*pinned
	var devs []cuda.DevicePtr
	var lanes []*lane
	defer func() {
		closeLanes(lanes)
		for _, d := range devs {
			p.free(p.w, d, size)
		}
		for _, h := range hosts {
			p.unpin(h)
		}
	}()
	for range pairs {
		h, err := p.pin(size, node)
		if err != nil {
			return nil, nil, err
		}
		hosts = append(hosts, h)
		d, err := p.alloc(p.w, size)
		if err != nil {
			return nil, nil, err
		}
		devs = append(devs, d)
	}
	p.noteMemory()
	for i := range pairs {
		toDevice := kind == probes.HostToDevice || (kind == probes.HostBidirectional && i == 0)
		dst, src := devs[i], hosts[i].dev
		if !toDevice {
			dst, src = hosts[i].dev, devs[i]
		}
		l, err := p.newLane(p.w, dst, src, size)
		if err != nil {
			return nil, nil, err
		}
		lanes = append(lanes, l)
	}
	rates, err := p.measure(lanes)
	if err != nil {
		return nil, nil, err
	}
	var link *probes.LinkUnderLoad
	if kind == probes.HostToDevice && readLink {
		link = p.readLinkUnderLoad(lanes[0], rates[0].Median)
	}
	return rates, link, nil
}

// measure runs one lane alone or two at once.
func (p *gpuProbe) measure(lanes []*lane) ([]probes.Measured, error) {
	if len(lanes) == 2 {
		r, err := p.bidirectional([2]*lane{lanes[0], lanes[1]}, p.opts.Samples)
		return r[:], err
	}
	r, _, err := p.bandwidth(lanes[0], p.opts.Samples)
	return []probes.Measured{r}, err
}

// linkReadTime is how long the under-load sample's copies run: several
// times the sub-millisecond sysfs read, so they are still running when it
// is done and the end event is asked.
const linkReadTime = 15 * time.Millisecond

// readLinkUnderLoad reads the GPU's PCIe link while host-to-device copies
// move data, and confirms they were still moving once it was read; nil
// when the read gave nothing.
func (p *gpuProbe) readLinkUnderLoad(l *lane, rate float64) *probes.LinkUnderLoad {
	loops := int(math.Ceil(linkReadTime.Seconds() * rate / float64(l.n)))
	var link numa.PCIeLink
	var readErr error
	var running bool
	_, err := p.timed([]*lane{l}, []int{min(max(loops, minLoops), 4*maxLoops)}, func() {
		link, readErr = numa.ReadPCIeLink(p.fs, p.addr)
		_ = l.w.do(func(*cuda.Context) error { // an error leaves running false
			done, err := l.end.Done()
			running = err == nil && !done
			return err
		})
	})
	if err != nil || readErr != nil || !link.Speed.Valid || !link.Width.Valid {
		return nil
	}
	return &probes.LinkUnderLoad{
		Generation: numa.Generation(link.Speed.V),
		Width:      link.Width.V,
		Confirmed:  running,
	}
}

// LocalCopy copies within the GPU's memory. Every byte copied is read once
// and written once, and both are counted, so the result compares with the
// HBM's peak bandwidth.
func (p *gpuProbe) LocalCopy() (probes.Measured, error) {
	size := p.opts.SizeBytes
	src, err := p.alloc(p.w, size)
	if err != nil {
		return probes.Measured{}, err
	}
	defer p.free(p.w, src, size)
	dst, err := p.alloc(p.w, size)
	if err != nil {
		return probes.Measured{}, err
	}
	defer p.free(p.w, dst, size)
	p.noteMemory()
	l, err := p.newLane(p.w, dst, src, size)
	if err != nil {
		return probes.Measured{}, err
	}
	defer l.close()
	rate, _, err := p.bandwidth(l, p.opts.Samples)
	if err != nil {
		return probes.Measured{}, err
	}
	return rate.Scaled(2), nil
}

// PeerCopy and PeerBidirectional are peerCopy's kinds.
func (p *gpuProbe) PeerCopy(addr string) (probes.Measured, error) {
	rates, err := p.peerCopy(probes.PeerCopy, addr)
	if err != nil {
		return probes.Measured{}, err
	}
	return rates[0], nil
}

func (p *gpuProbe) PeerBidirectional(addr string) (probes.Measured, probes.Measured, error) {
	rates, err := p.peerCopy(probes.PeerBidirectional, addr)
	if err != nil {
		return probes.Measured{}, probes.Measured{}, err
	}
	return rates[0], rates[1], nil
}

// peerCopy measures one peer copy probe against the GPU at addr: the rate
// to the peer, and for PeerBidirectional the rate from it.
func (p *gpuProbe) peerCopy(kind probes.Kind, addr string) ([]probes.Measured, error) {
	size := p.opts.SizeBytes
	pw, err := p.peer(addr)
	if err != nil {
		return nil, err
	}
	type buf struct {
		w   *worker
		ptr cuda.DevicePtr
	}
	var bufs []buf
	var lanes []*lane
	defer func() {
		closeLanes(lanes)
		for _, b := range bufs {
			p.free(b.w, b.ptr, size)
		}
	}()
	get := func(w *worker) (cuda.DevicePtr, error) {
		ptr, err := p.alloc(w, size)
		if err == nil {
			bufs = append(bufs, buf{w, ptr})
		}
		return ptr, err
	}
	// Each direction is a copy issued by the GPU that writes: its copy
	// engine pushes into the other's memory (nvbandwidth's write tests).
	writers := []*worker{p.w}
	if kind == probes.PeerBidirectional {
		writers = append(writers, pw)
	}
	for i, w := range writers {
		reader := pw
		if i == 1 {
			reader = p.w
		}
		src, err := get(w)
		if err != nil {
			return nil, err
		}
		dst, err := get(reader)
		if err != nil {
			return nil, err
		}
		l, err := p.newLane(w, dst, src, size)
		if err != nil {
			return nil, err
		}
		lanes = append(lanes, l)
	}
	p.noteMemory()
	return p.measure(lanes)
}

// LaunchCount launches are timed for the launch latency, after
// LaunchWarmup untimed ones, as the reference (latency_ref.cu) does. With
// 200 after 20 the median moved 5-29% between rounds on the same GPU,
// against the reference's 1-6% (bench/RESULTS.md, 2026-11-21). On an idle
// GPU all 1100 take about 11 ms. Beside a job each launch waits for a time
// slice (2.4 ms under a GEMM on an H200) and costs the job one, so the
// launches stop at launchBudget: the job then loses a few slices, not 1100
// (2.8% of its throughput at a 10 s interval, measured 2026-11-22), and the
// warm-up shrinks to the first half of what ran.
const (
	LaunchCount  = 1000
	LaunchWarmup = 100
	launchBudget = 40 * time.Millisecond
)

// LaunchLatency is the time from launching an empty kernel to the host
// seeing it finish: the floor under every small GPU operation.
func (p *gpuProbe) LaunchLatency() (probes.Measured, int, error) {
	var d []float64
	err := p.w.do(func(c *cuda.Context) error {
		s, err := c.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		times, err := s.TimeLaunches(p.empty, LaunchWarmup+LaunchCount, launchBudget)
		if err != nil {
			return err
		}
		warm := LaunchWarmup
		if len(times) < 2*LaunchWarmup {
			warm = len(times) / 2
		}
		for i, el := range times {
			p.busy += el
			if i >= warm {
				d = append(d, el.Seconds())
			}
		}
		return nil
	})
	if err != nil {
		return probes.Measured{}, LaunchCount, err
	}
	return probes.Sampled(d), len(d), nil
}

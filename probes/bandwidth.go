package probes

import (
	"math"
	"time"

	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes/cuda"
)

// hostProbe measures one host probe with the host buffer on one node.
func (p *gpuProbe) hostProbe(kind Kind, node int) []Result {
	if kind == HostLatency {
		return []Result{p.hostLatency(node)}
	}
	size := p.opts.SizeBytes
	base := Result{Probe: kind, HostNUMANode: nodeRef(node), SizeBytes: size, Samples: p.opts.Samples}
	fail := func(err error) []Result {
		if kind == HostBidirectional {
			a, b := base, base
			a.Direction, b.Direction = DirHostToDevice, DirDeviceToHost
			return []Result{errResult(a, err), errResult(b, err)}
		}
		base.Direction = map[Kind]string{HostToDevice: DirHostToDevice, DeviceToHost: DirDeviceToHost}[kind]
		return []Result{errResult(base, err)}
	}

	// Both directions at once need a host and a device buffer each.
	pairs := 1
	if kind == HostBidirectional {
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
			return fail(err)
		}
		hosts = append(hosts, h)
		d, err := p.alloc(p.w, size)
		if err != nil {
			return fail(err)
		}
		devs = append(devs, d)
	}
	p.noteMemory()
	var dirs []string
	for i := range pairs {
		toDevice := kind == HostToDevice || (kind == HostBidirectional && i == 0)
		dst, src, dir := devs[i], hosts[i].dev, DirHostToDevice
		if !toDevice {
			dst, src, dir = hosts[i].dev, devs[i], DirDeviceToHost
		}
		l, err := p.newLane(p.w, dst, src, size)
		if err != nil {
			return fail(err)
		}
		lanes, dirs = append(lanes, l), append(dirs, dir)
	}
	rates, err := p.measure(lanes)
	if err != nil {
		return fail(err)
	}
	if kind == HostToDevice && p.round.LinkUnderLoad == nil {
		p.readLinkUnderLoad(lanes[0], rates[0])
	}
	out := make([]Result, len(lanes))
	for i := range lanes {
		r := base
		r.Direction, r.BytesPerSecond = dirs[i], rates[i]
		out[i] = r
	}
	return out
}

// measure runs one lane alone or two at once.
func (p *gpuProbe) measure(lanes []*lane) ([]float64, error) {
	if len(lanes) == 2 {
		r, err := p.bidirectional([2]*lane{lanes[0], lanes[1]}, p.opts.Samples)
		return r[:], err
	}
	r, _, err := p.bandwidth(lanes[0], p.opts.Samples)
	return []float64{r}, err
}

// linkReadTime is how long the under-load sample's copies run: several
// times the sub-millisecond sysfs read, so they are still running when it
// is done and the end event is asked.
const linkReadTime = 15 * time.Millisecond

// readLinkUnderLoad reads the GPU's PCIe link while host-to-device copies
// move data, and confirms they were still moving once it was read.
func (p *gpuProbe) readLinkUnderLoad(l *lane, rate float64) {
	loops := int(math.Ceil(linkReadTime.Seconds() * rate / float64(l.n)))
	var link numa.PCIeLink
	var readErr error
	var running bool
	_, err := p.timed([]*lane{l}, []int{min(max(loops, minLoops), 4*maxLoops)}, func() {
		link, readErr = p.fs.PCIeLinkOf(p.round.PCIBusID)
		l.w.do(func(*cuda.Context) error {
			done, err := l.end.Done()
			running = err == nil && !done
			return err
		})
	})
	if err != nil || readErr != nil || !link.Speed.Valid || !link.Width.Valid {
		return
	}
	p.round.LinkUnderLoad = &LinkUnderLoad{
		Generation: numa.Generation(link.Speed.V),
		Width:      link.Width.V,
		Confirmed:  running,
	}
}

// localCopy copies within the GPU's memory. Every byte copied is read once
// and written once, and both are counted, so the result compares with the
// HBM's peak bandwidth.
func (p *gpuProbe) localCopy() Result {
	size := p.opts.SizeBytes
	r := Result{Probe: DeviceLocalCopy, Direction: DirLocal, SizeBytes: size, Samples: p.opts.Samples}
	src, err := p.alloc(p.w, size)
	if err != nil {
		return errResult(r, err)
	}
	defer p.free(p.w, src, size)
	dst, err := p.alloc(p.w, size)
	if err != nil {
		return errResult(r, err)
	}
	defer p.free(p.w, dst, size)
	p.noteMemory()
	l, err := p.newLane(p.w, dst, src, size)
	if err != nil {
		return errResult(r, err)
	}
	defer l.close()
	rate, _, err := p.bandwidth(l, p.opts.Samples)
	if err != nil {
		return errResult(r, err)
	}
	r.BytesPerSecond = 2 * rate
	return r
}

// peerProbe measures one peer probe against the GPU at addr.
func (p *gpuProbe) peerProbe(kind Kind, addr string) []Result {
	if kind == PeerLatency {
		return []Result{p.peerLatency(addr)}
	}
	size := p.opts.SizeBytes
	base := Result{Probe: kind, Peer: addr, SizeBytes: size, Samples: p.opts.Samples}
	fail := func(err error) []Result {
		a := base
		a.Direction = DirToPeer
		if kind == PeerCopy {
			return []Result{errResult(a, err)}
		}
		b := base
		b.Direction = DirFromPeer
		return []Result{errResult(a, err), errResult(b, err)}
	}
	pw, err := p.peer(addr)
	if err != nil {
		return fail(err)
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
	dirs := []string{DirToPeer}
	writers := []*worker{p.w}
	if kind == PeerBidirectional {
		dirs, writers = append(dirs, DirFromPeer), append(writers, pw)
	}
	for i, w := range writers {
		reader := pw
		if i == 1 {
			reader = p.w
		}
		src, err := get(w)
		if err != nil {
			return fail(err)
		}
		dst, err := get(reader)
		if err != nil {
			return fail(err)
		}
		l, err := p.newLane(w, dst, src, size)
		if err != nil {
			return fail(err)
		}
		lanes = append(lanes, l)
	}
	p.noteMemory()
	rates, err := p.measure(lanes)
	if err != nil {
		return fail(err)
	}
	out := make([]Result, len(lanes))
	for i := range lanes {
		r := base
		r.Direction, r.BytesPerSecond = dirs[i], rates[i]
		out[i] = r
	}
	return out
}

// launchCount launches are timed for the launch latency, after
// launchWarmup untimed ones, as the reference (latency_ref.cu) does. With
// 200 after 20 the median moved 5-29% between rounds on the same GPU,
// against the reference's 1-6% (bench/RESULTS.md, 2026-11-21). On an idle
// GPU all 1100 take about 11 ms. Beside a job each launch waits for a time
// slice (2.4 ms under a GEMM on an H200) and costs the job one, so the
// launches stop at launchBudget: the job then loses a few slices, not 1100
// (2.8% of its throughput at a 10 s interval, measured 2026-11-22), and the
// warm-up shrinks to the first half of what ran.
const (
	launchCount  = 1000
	launchWarmup = 100
	launchBudget = 40 * time.Millisecond
)

// launchLatency is the time from launching an empty kernel to the host
// seeing it finish: the floor under every small GPU operation.
func (p *gpuProbe) launchLatency() Result {
	r := Result{Probe: LaunchLatency, Samples: launchCount}
	var d []float64
	err := p.w.do(func(c *cuda.Context) error {
		s, err := c.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		times, err := s.TimeLaunches(p.empty, launchWarmup+launchCount, launchBudget)
		if err != nil {
			return err
		}
		warm := launchWarmup
		if len(times) < 2*launchWarmup {
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
		return errResult(r, err)
	}
	r.Seconds, r.Samples = median(d), len(d)
	return r
}

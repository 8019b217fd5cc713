package probe

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda"
)

// lane is one stream of copies in a timed sample: its owner's context, the
// copy it repeats, and the events that time it.
type lane struct {
	w          *worker
	s          *cuda.Stream
	start, end *cuda.Event
	dst, src   cuda.DevicePtr
	n          int64
}

func (p *gpuProbe) newLane(w *worker, dst, src cuda.DevicePtr, n int64) (*lane, error) {
	l := &lane{w: w, dst: dst, src: src, n: n}
	err := w.do(func(c *cuda.Context) (err error) {
		if l.s, err = c.NewStream(); err != nil {
			return err
		}
		if l.start, err = c.NewEvent(); err != nil {
			return err
		}
		l.end, err = c.NewEvent()
		return err
	})
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

func (l *lane) close() {
	_ = l.w.do(func(*cuda.Context) error { // releasing: nothing to do with an error
		for _, e := range []*cuda.Event{l.start, l.end} {
			if e != nil {
				e.Destroy()
			}
		}
		if l.s != nil {
			_ = l.s.Synchronize()
			l.s.Destroy()
		}
		return nil
	})
}

func closeLanes(lanes []*lane) {
	for _, l := range lanes {
		if l != nil {
			l.close()
		}
	}
}

// timed runs one sample the way nvbandwidth does: a spin kernel holds the
// first lane's stream shut, the other lanes wait on an event behind it,
// every lane queues its start event, loops copies and end event, and only
// then does the host open the gate. So all lanes start together and the
// timing holds no enqueue cost. Lane i queues loops[i] copies.
// whileRunning, if set, runs after the gate opens and before the host
// waits. It returns each lane's GPU time.
func (p *gpuProbe) timed(lanes []*lane, loops []int, whileRunning func()) ([]time.Duration, error) {
	atomic.StoreUint32(p.gateWord(), 0)
	atomic.StoreUint32(p.timedOutWord(), 0)
	first := lanes[0]
	var gone *cuda.Event
	err := first.w.do(func(c *cuda.Context) (err error) {
		if err = first.s.Launch(p.spin, cuda.U64(uint64(p.ctlDev)), cuda.U64(uint64(gateTimeout.Nanoseconds())), cuda.U64(uint64(p.ctlDev)+4)); err != nil {
			return err
		}
		if len(lanes) == 1 {
			return nil
		}
		if gone, err = c.NewEvent(); err != nil {
			return err
		}
		return gone.Record(first.s)
	})
	if gone != nil {
		defer func() { _ = first.w.do(func(*cuda.Context) error { return gone.Destroy() }) }()
	}
	if err != nil {
		atomic.StoreUint32(p.gateWord(), 1)
		return nil, err
	}
	for i, l := range lanes {
		err := l.w.do(func(*cuda.Context) error {
			if i > 0 {
				if err := l.s.Wait(gone); err != nil {
					return err
				}
			}
			if err := l.start.Record(l.s); err != nil {
				return err
			}
			for range loops[i] {
				if err := l.s.Copy(l.dst, l.src, l.n); err != nil {
					return err
				}
			}
			return l.end.Record(l.s)
		})
		if err != nil {
			atomic.StoreUint32(p.gateWord(), 1)
			return nil, err
		}
	}
	atomic.StoreUint32(p.gateWord(), 1)
	if whileRunning != nil {
		whileRunning()
	}
	out := make([]time.Duration, len(lanes))
	for i, l := range lanes {
		err := l.w.do(func(*cuda.Context) (err error) {
			if err = l.end.Synchronize(); err != nil {
				return err
			}
			out[i], err = l.end.Since(l.start)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	if atomic.LoadUint32(p.timedOutWord()) != 0 {
		return nil, errGateTimedOut
	}
	p.busy += slices.Max(out)
	return out, nil
}

// Each timed sample aims to last this long: long beside the events'
// half-microsecond resolution and the launch of the first copy, short
// because a job running beside a probe loses GPU time to it.
const (
	sampleTarget = 5 * time.Millisecond
	minLoops     = 2
	maxLoops     = 64
)

// loopsFor is how many copies of n bytes fill a sample, given one warm-up
// sample of warmLoops copies that took d.
func loopsFor(d time.Duration, warmLoops int) int {
	if d <= 0 {
		return maxLoops
	}
	per := float64(d) / float64(warmLoops)
	return min(maxLoops, max(minLoops, int(math.Ceil(float64(sampleTarget)/per))))
}

// same is n copies for each of k lanes.
func same(k, n int) []int {
	out := make([]int, k)
	for i := range out {
		out[i] = n
	}
	return out
}

// bandwidth measures one lane: a warm-up sample that also sets the loop
// count, then samples timed samples. It returns the median bytes per
// second (of bytes copied) with the slowest and fastest sample, and the
// loop count used.
func (p *gpuProbe) bandwidth(l *lane, samples int) (probes.Measured, int, error) {
	warm, err := p.timed([]*lane{l}, []int{minLoops}, nil)
	if err != nil {
		return probes.Measured{}, 0, err
	}
	loops := loopsFor(warm[0], minLoops)
	var rates []float64
	for range samples {
		if err := p.ctx.Err(); err != nil {
			return probes.Measured{}, 0, err
		}
		d, err := p.timed([]*lane{l}, []int{loops}, nil)
		if err != nil {
			return probes.Measured{}, 0, err
		}
		if d[0] <= 0 {
			return probes.Measured{}, 0, fmt.Errorf("a sample of %d copies took no measurable time", loops)
		}
		rates = append(rates, float64(l.n)*float64(loops)/d[0].Seconds())
	}
	return probes.Sampled(rates), loops, nil
}

// bidirectional measures two lanes that run at once, each in samples of
// its own: the measured lane queues its copies and the other lane half as
// many again and one more, so the other direction is running for the whole
// of the measured one. Timing both lanes of one sample instead counts the
// end of whichever finishes last running alone, and drifted by 3% between
// runs on an H200. It returns each lane's median bytes per second, with
// its extremes.
func (p *gpuProbe) bidirectional(lanes [2]*lane, samples int) ([2]probes.Measured, error) {
	var out [2]probes.Measured
	warm, err := p.timed(lanes[:], same(2, minLoops), nil)
	if err != nil {
		return out, err
	}
	loops := loopsFor(slices.Max(warm), minLoops)
	cover := (3*loops+1)/2 + 1
	for measured := range 2 {
		n := []int{cover, cover}
		n[measured] = loops
		var rates []float64
		for range samples {
			if err := p.ctx.Err(); err != nil {
				return out, err
			}
			d, err := p.timed(lanes[:], n, nil)
			if err != nil {
				return out, err
			}
			if d[measured] <= 0 {
				return out, fmt.Errorf("a sample of %d copies took no measurable time", loops)
			}
			rates = append(rates, float64(lanes[measured].n)*float64(loops)/d[measured].Seconds())
		}
		out[measured] = probes.Sampled(rates)
	}
	return out, nil
}

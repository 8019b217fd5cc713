package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda/probe"
)

// Runner is the simulated node's probes.RoundRunner: it returns the round
// the probe child would print on this node, with results that follow the
// simulated links as they are now. The round is probes.MeasureRound, the
// child's own, over a probes.Measurer whose GPUs are this file's
// arithmetic: rates from the links, noise, the probe faults in force, and
// the GPU time and memory a measurement costs. It reads the node through
// the same readers the exporter uses: an NVML sample for NVLinks and
// memory, the sysfs PCIe tree for the host path, and what the path should
// give comes from probes.PathFor, so the model and the expectations cannot
// drift apart.
type Runner struct {
	n      *Node
	reader *nvml.Reader

	mu  sync.Mutex
	rng *rand.Rand
}

func newRunner(n *Node, seed uint64) *Runner {
	return &Runner{n: n, reader: nvml.NewReader(n.nvml, n.fs.Sys, nil), rng: rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc909))}
}

// cudaDriverVersion is what the modelled child reports: CUDA 12.4, as the
// fake NVML's driver says.
const cudaDriverVersion = 12040

// Context and memory a round costs beside its timed work, as measured on
// H100 and H200 (bench/RESULTS.md): creating a context, and what it holds.
const (
	contextSetupSeconds = 0.35
	peerContextSeconds  = 0.05
	contextMemoryBytes  = 530 << 20
	linkReadSeconds     = 0.015
)

// Run returns o.GPU's round. Like the child's, a round for a GPU that
// cannot be found carries the error in the round, not in err; options the
// child would refuse are a crash, as the daemon sees the child that
// refuses them exit without a round.
func (r *Runner) Run(ctx context.Context, o probes.Options) (*probes.Round, error) {
	if err := ctx.Err(); err != nil {
		return nil, &probes.RunFailure{GPU: o.GPU, Result: probes.RunError, Err: fmt.Errorf("not started: %w", err)}
	}
	if err := o.Validate(); err != nil {
		return nil, &probes.RunFailure{GPU: o.GPU, Result: probes.RunCrash, Err: err}
	}
	snap, err := r.reader.Sample(ctx)
	if snap == nil {
		return nil, &probes.RunFailure{GPU: o.GPU, Result: probes.RunError, Err: fmt.Errorf("simulated driver: %w", err)}
	}
	// A value it could not read is left out, as for the exporter.
	topo, _ := (&numa.TopologyReader{FS: r.n.fs, CuFileConfig: r.n.CuFileConfig()}).Sample(ctx)
	return probes.MeasureRound(ctx, &measurer{r: r, snap: snap, topo: topo}, []probes.Options{o}), nil
}

// measurer is one round's view of the node.
type measurer struct {
	r    *Runner
	snap *nvml.Snapshot
	topo *numa.Topology
}

func (*measurer) DriverVersion() int { return cudaDriverVersion }

// Open finds the GPU in the NVML sample, as the child finds it by PCI
// address.
func (ms *measurer) Open(_ context.Context, o probes.Options) (probes.GPU, probes.Device, error) {
	bus := pciaddr.Normalize(o.GPU)
	m := &model{r: ms.r, snap: ms.snap, topo: ms.topo, o: o, links: ms.r.n.profile.Links, index: map[string]int{}, ownNode: -1,
		peers: map[string]bool{}}
	for i := range ms.snap.GPUs {
		s := &ms.snap.GPUs[i]
		m.index[s.PCIBusID] = s.Index
		if s.PCIBusID == bus {
			m.self = s
		}
	}
	if m.self == nil || m.self.Lost {
		return nil, probes.Device{CUDADevice: -1}, fmt.Errorf("no CUDA device with PCI bus id %s", bus)
	}
	m.path = probes.PathFor(ms.snap, ms.topo, bus)
	m.host = m.currentHost(bus) * m.links.HostEfficiency
	if ms.topo != nil {
		if d := ms.topo.Device(bus); d != nil {
			m.ownNode = ms.topo.NodeOf(d)
		}
	}
	m.faults = ms.r.n.Faults()
	return m, probes.Device{CUDADevice: m.self.Index, Name: m.self.Name}, nil
}

// model is one simulated GPU opened for a round: what it measures and
// what that costs.
type model struct {
	r     *Runner
	snap  *nvml.Snapshot
	topo  *numa.Topology
	o     probes.Options
	self  *nvml.GPUState
	path  probes.Path
	links LinkModel
	// host is what a host copy reaches from the GPU's own node.
	host    float64
	ownNode int
	faults  []Fault
	index   map[string]int // GPU index by bus
	peers   map[string]bool

	// What the measurements cost so far: GPU seconds, and the most
	// memory held at once.
	busy, hostMem, devMem float64
}

// errPathUnknown is a copy whose path the model does not know.
var errPathUnknown = errors.New("simulated path unknown: the simulated sysfs tree could not be read")

func (m *model) HostToDevice(node int, readLink bool) (probes.Measured, *probes.LinkUnderLoad, error) {
	v, err := m.hostCopy(probes.HostToDevice, node)
	if err != nil || !readLink {
		return v, nil, err
	}
	m.busy += linkReadSeconds
	return v, m.r.linkUnderLoad(m.self.PCIBusID), nil
}

func (m *model) DeviceToHost(node int) (probes.Measured, error) {
	return m.hostCopy(probes.DeviceToHost, node)
}

// hostCopy is one direction between the GPU and host memory on node.
func (m *model) hostCopy(kind probes.Kind, node int) (probes.Measured, error) {
	m.hold(1, 1)
	v := m.bandwidth(kind, "", m.hostFrom(node))
	if v.Median <= 0 {
		return probes.Measured{}, errPathUnknown
	}
	m.busy += m.timed(v.Median)
	return v, nil
}

func (m *model) HostBidirectional(node int) (probes.Measured, probes.Measured, error) {
	m.hold(2, 2)
	rate := m.hostFrom(node) * hostBidirectionalShare
	in := m.bandwidth(probes.HostBidirectional, "", rate)
	out := m.bandwidth(probes.HostBidirectional, "", rate)
	if in.Median <= 0 || out.Median <= 0 {
		return probes.Measured{}, probes.Measured{}, errPathUnknown
	}
	m.busy += m.timed(min(in.Median, out.Median))
	return in, out, nil
}

func (m *model) LocalCopy() (probes.Measured, error) {
	m.hold(0, 2)
	if m.path.HBMBytesPerSecond <= 0 {
		return probes.Measured{}, errors.New("simulated GPU reports no memory clock or bus width")
	}
	v := m.bandwidth(probes.DeviceLocalCopy, "", m.path.HBMBytesPerSecond*hbmEfficiency)
	m.busy += m.timed(v.Median / 2) // each byte read and written
	return v, nil
}

func (m *model) OpenPeer(addr string) error {
	if _, ok := m.index[addr]; !ok {
		return fmt.Errorf("no CUDA device with PCI bus id %s", addr)
	}
	m.peers[addr] = true
	return nil
}

func (m *model) PeerCopy(addr string) (probes.Measured, error) {
	m.hold(0, 1)
	v := m.bandwidth(probes.PeerCopy, addr, m.peerRate(addr))
	if v.Median <= 0 {
		return probes.Measured{}, errPathUnknown
	}
	m.busy += m.timed(v.Median)
	return v, nil
}

func (m *model) PeerBidirectional(addr string) (probes.Measured, probes.Measured, error) {
	m.hold(0, 2)
	rate := m.peerRate(addr) * peerBidirectionalShare
	to := m.bandwidth(probes.PeerBidirectional, addr, rate)
	from := m.bandwidth(probes.PeerBidirectional, addr, rate)
	if to.Median <= 0 || from.Median <= 0 {
		return probes.Measured{}, probes.Measured{}, errPathUnknown
	}
	m.busy += m.timed(min(to.Median, from.Median))
	return to, from, nil
}

func (m *model) HostLatency(node int) (probes.Measured, error) {
	m.hostMem = max(m.hostMem, probes.ChaseBytes)
	lat := hostLatencySeconds
	if node >= 0 && m.ownNode >= 0 && node != m.ownNode {
		lat += remoteNodeLatencyAdd
	}
	v := m.latency(probes.HostLatency, "", lat)
	m.busy += v.Median * float64(probe.ChaseHops(probes.HostLatency, m.o.Samples))
	return v, nil
}

func (m *model) PeerLatency(addr string) (probes.Measured, error) {
	v := m.latency(probes.PeerLatency, addr, peerLatencySeconds)
	m.busy += v.Median * float64(probe.ChaseHops(probes.PeerLatency, m.o.Samples))
	return v, nil
}

// LaunchLatency: on an idle GPU every launch runs, none waiting for a
// time slice.
func (m *model) LaunchLatency() (probes.Measured, int, error) {
	v := m.latency(probes.LaunchLatency, "", launchLatencySeconds)
	m.busy += v.Median * (probe.LaunchWarmup + probe.LaunchCount)
	return v, probe.LaunchCount, nil
}

// Cost: ContextMemoryBytes is what NVML says the GPU holds, with the
// probe's context and buffers on top.
func (m *model) Cost() probes.Cost {
	c := probes.Cost{BusySeconds: m.busy, DeviceMemoryBytes: int64(m.devMem), HostMemoryBytes: int64(m.hostMem)}
	if m.self.MemoryUsed.Valid {
		c.ContextMemoryBytes = int64(m.self.MemoryUsed.V) + contextMemoryBytes + c.DeviceMemoryBytes
	}
	return c
}

// Close: the context was held for the timed work and for setting up the
// GPU's context and each peer's.
func (m *model) Close() float64 {
	return m.busy + contextSetupSeconds + peerContextSeconds*float64(len(m.peers))
}

// hold notes host and device buffers of the round's transfer size held at
// once.
func (m *model) hold(host, dev int) {
	size := float64(m.o.SizeBytes)
	m.hostMem, m.devMem = max(m.hostMem, float64(host)*size), max(m.devMem, float64(dev)*size)
}

// timed is the GPU time of one bandwidth result at rate: a warm-up and
// the samples, each moving the transfer size.
func (m *model) timed(rate float64) float64 {
	if rate <= 0 {
		return 0
	}
	return float64(m.o.Samples+1) * float64(m.o.SizeBytes) / rate
}

// currentHost is the slowest hop of the GPU's PCIe path to the CPU at its
// current state, in bytes per second: a link trained narrow or slow counts
// as it is. Without the tree, NVML's view of the GPU's own link.
func (m *model) currentHost(bus string) float64 { return currentHostRate(m.snap, m.topo, bus) }

// currentHostRate is model.currentHost for any GPU of the sample.
func currentHostRate(snap *nvml.Snapshot, topo *numa.Topology, bus string) float64 {
	if topo != nil {
		if d := topo.Device(bus); d != nil {
			if h, ok := topo.SlowestHop(d, false); ok {
				return h.Bandwidth(false)
			}
		}
	}
	for _, g := range snap.GPUs {
		if p := g.PCIe; g.PCIBusID == bus && p.Generation.Valid && p.Width.Valid {
			return numa.GenerationLaneBandwidth(p.Generation.V) * float64(p.Width.V)
		}
	}
	return 0
}

// hostFrom is a host copy with its buffer on node (-1 unbound): from
// another node the socket interconnect may bound it.
func (m *model) hostFrom(node int) float64 {
	if node >= 0 && m.ownNode >= 0 && node != m.ownNode {
		return min(m.host, m.links.InterSocketBytesPerSecond)
	}
	return m.host
}

// peerRate is one direction to the GPU at addr: the NVLinks active between
// the pair (probes.PathFor's count, at NVLink 4's payload rate) at their
// efficiency, or PCIe through the host where none are up.
func (m *model) peerRate(addr string) float64 {
	links := m.snap.NVLinkCounts()
	i, j := m.self.Index, m.index[addr]
	if i < len(links) && j < len(links[i]) && links[i][j] > 0 {
		return m.path.PeerBytesPerSecond[addr] * nvlinkEfficiency
	}
	return min(m.currentHost(m.self.PCIBusID), m.currentHost(addr)) * pcieP2PEfficiency
}

// bandwidth is rate as measured by a probe of kind (against peer, if
// any): the round's samples, each with a little noise, and the probe
// faults in force on it. 0 means the path is not known (a tree that could
// not be read); the caller reports the probe as failed.
func (m *model) bandwidth(kind probes.Kind, peer string, rate float64) probes.Measured {
	if rate <= 0 {
		return probes.Measured{}
	}
	for _, f := range m.faults {
		if f.Kind == ProbeBandwidth && m.matches(f, kind, peer) {
			rate *= f.Fraction
		}
	}
	return m.r.sampled(rate, m.o.Samples)
}

func (m *model) latency(kind probes.Kind, peer string, seconds float64) probes.Measured {
	for _, f := range m.faults {
		if f.Kind == ProbeLatency && m.matches(f, kind, peer) {
			seconds *= f.Factor
		}
	}
	return m.r.sampled(seconds, m.o.Samples)
}

// matches reports whether probe fault f applies to a measurement of this
// round by a probe of kind against peer ("" for none). A fault on GPU N
// matches N's measurements of its probe kind, narrowed to one peer by
// peer_gpu. Peer bidirectional and latency probes measure each pair once,
// in the round of the lower-addressed GPU, so a fault on the higher one
// shows there, on the measurement whose peer is N.
func (m *model) matches(f Fault, kind probes.Kind, peerAddr string) bool {
	if f.Probe != kind || f.GPU >= len(m.snap.GPUs) {
		return false
	}
	self := m.self.Index
	peer, hasPeer := m.index[peerAddr]
	switch {
	case f.GPU == self:
		return f.PeerGPU < 0 || (hasPeer && peer == f.PeerGPU)
	case kind == probes.PeerBidirectional || kind == probes.PeerLatency:
		return hasPeer && peer == f.GPU && (f.PeerGPU < 0 || f.PeerGPU == self)
	}
	return false
}

// sampled is n samples of v, each with its noise: their median and
// extremes. On a healthy link samples agree to under 1%, as they do on
// real ones.
func (r *Runner) sampled(v float64, n int) probes.Measured {
	s := make([]float64, max(n, 1))
	for i := range s {
		s[i] = v * r.noise()
	}
	return probes.Sampled(s)
}

// noise is a measurement's scatter: under 1% either way.
func (r *Runner) noise() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return 1 + clamp(0.003*r.rng.NormFloat64(), -0.009, 0.009)
}

// linkUnderLoad reads the GPU's link from the simulated sysfs, as the
// child does while its copy runs.
func (r *Runner) linkUnderLoad(bus string) *probes.LinkUnderLoad {
	l, err := numa.ReadPCIeLink(r.n.fs, bus)
	if err != nil || !l.Speed.Valid || !l.Width.Valid {
		return nil
	}
	return &probes.LinkUnderLoad{Generation: numa.Generation(l.Speed.V), Width: l.Width.V, Confirmed: true}
}

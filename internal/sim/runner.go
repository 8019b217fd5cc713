package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
)

// Runner is the simulated node's probes.RoundRunner: it returns the round
// the probe child would print on this node, with results that follow the
// simulated links as they are now. It reads the node through the same
// readers the exporter uses: an NVML sample for NVLinks and memory, the
// sysfs PCIe tree for the host path, and what the path should give comes
// from probes.PathFor, so the model and the expectations cannot drift
// apart.
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
	controlPageBytes    = 4096
	chaseBytes          = 2 << 20
	chaseStride         = 128
	chaseSampleHops     = 4096
	launchCount         = 220 // 20 warm-up and 200 timed, as the child
	linkReadSeconds     = 0.015
)

// Run returns o.GPU's round. Like the child's, a round for a GPU that
// cannot be found carries the error in the round, not in err.
func (r *Runner) Run(ctx context.Context, o probes.Options) (*probes.Round, error) {
	if err := ctx.Err(); err != nil {
		return nil, &probes.RunFailure{GPU: o.GPU, Result: probes.RunError, Err: fmt.Errorf("not started: %w", err)}
	}
	start := time.Now()
	bus := nvml.NormalizeBusID(o.GPU)
	round := &probes.Round{Version: probes.ContractVersion, Started: start.UTC(), DriverVersion: cudaDriverVersion}
	snap, err := r.reader.Sample(ctx)
	if snap == nil {
		return nil, &probes.RunFailure{GPU: o.GPU, Result: probes.RunError, Err: fmt.Errorf("simulated driver: %w", err)}
	}
	topo, _ := r.n.fs.Topology() // a value it could not read is left out, as for the exporter
	g := r.measure(ctx, snap, topo, bus, o)
	round.GPUs = []probes.GPURound{g}
	round.Seconds = g.ContextSeconds + 0.05
	return round, nil
}

// model is one round's view of the node.
type model struct {
	r     *Runner
	snap  *nvml.Snapshot
	topo  *numa.Topology
	self  *nvml.GPUState
	path  probes.Path
	links LinkModel
	// host is what a host copy reaches from the GPU's own node.
	host    float64
	ownNode int
	faults  []Fault
	index   map[string]int // GPU index by bus
}

func (r *Runner) measure(ctx context.Context, snap *nvml.Snapshot, topo *numa.Topology, bus string, o probes.Options) probes.GPURound {
	g := probes.GPURound{PCIBusID: bus, CUDADevice: -1, Results: []probes.Result{}}
	m := &model{r: r, snap: snap, topo: topo, links: r.n.profile.Links, index: map[string]int{}, ownNode: -1}
	for i := range snap.GPUs {
		s := &snap.GPUs[i]
		m.index[s.PCIBusID] = s.Index
		if s.PCIBusID == bus {
			m.self = s
		}
	}
	if m.self == nil || m.self.Lost {
		g.Error = fmt.Sprintf("no CUDA device with PCI bus id %s", bus)
		return g
	}
	g.CUDADevice, g.Name = m.self.Index, m.self.Name
	m.path = probes.PathFor(snap, topo, bus)
	m.host = m.currentHost(bus) * m.links.HostEfficiency
	if topo != nil {
		if d := topo.Device(bus); d != nil {
			m.ownNode = topo.NodeOf(d)
		}
	}
	m.faults = r.n.Faults()

	size, samples := o.SizeBytes, o.Samples
	if size <= 0 {
		size = probes.DefaultSizeBytes
	}
	if samples <= 0 {
		samples = probes.DefaultSamples
	}
	nodes := o.HostNodes
	if len(nodes) == 0 {
		nodes = []int{-1} // unbound
	}
	var busy, hostMem, devMem float64
	peerBusy := map[string]float64{}
	for _, kind := range probes.Kinds {
		if len(o.Probes) > 0 && !slices.Contains(o.Probes, kind) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		switch kind {
		case probes.HostToDevice, probes.DeviceToHost, probes.HostBidirectional:
			hostMem = max(hostMem, float64(size))
			devMem = max(devMem, float64(size))
			for _, node := range nodes {
				base := probes.Result{Probe: kind, HostNUMANode: nodeRef(node), SizeBytes: size, Samples: samples}
				rate := m.hostFrom(node)
				if kind != probes.HostBidirectional {
					res := base
					res.Direction = map[probes.Kind]string{probes.HostToDevice: probes.DirHostToDevice, probes.DeviceToHost: probes.DirDeviceToHost}[kind]
					res.BytesPerSecond = m.bandwidth(res, rate)
					busy += timed(res.BytesPerSecond, size, samples)
					g.Results = append(g.Results, res)
					if kind == probes.HostToDevice && g.LinkUnderLoad == nil {
						g.LinkUnderLoad = r.linkUnderLoad(bus)
						busy += linkReadSeconds
					}
					continue
				}
				hostMem, devMem = max(hostMem, 2*float64(size)), max(devMem, 2*float64(size))
				slowest := math.Inf(1)
				for _, dir := range []string{probes.DirHostToDevice, probes.DirDeviceToHost} {
					res := base
					res.Direction = dir
					res.BytesPerSecond = m.bandwidth(res, rate*hostBidirectionalShare)
					slowest = min(slowest, res.BytesPerSecond)
					g.Results = append(g.Results, res)
				}
				busy += timed(slowest, size, samples)
			}
		case probes.DeviceLocalCopy:
			devMem = max(devMem, 2*float64(size))
			res := probes.Result{Probe: kind, Direction: probes.DirLocal, SizeBytes: size, Samples: samples}
			if m.path.HBMBytesPerSecond <= 0 {
				res.Error = "simulated GPU reports no memory clock or bus width"
			} else {
				res.BytesPerSecond = m.bandwidth(res, m.path.HBMBytesPerSecond*hbmEfficiency)
				busy += timed(res.BytesPerSecond/2, size, samples) // each byte read and written
			}
			g.Results = append(g.Results, res)
		case probes.PeerCopy, probes.PeerBidirectional, probes.PeerLatency:
			for _, peer := range o.Peers {
				addr := nvml.NormalizeBusID(peer)
				if kind != probes.PeerCopy && addr < bus {
					continue // measured in the peer's round, as the child does
				}
				before := busy
				g.Results = append(g.Results, m.peer(kind, addr, size, samples, &busy, &devMem)...)
				peerBusy[addr] += busy - before
			}
		case probes.HostLatency:
			hostMem = max(hostMem, chaseBytes)
			for _, node := range nodes {
				res := probes.Result{Probe: kind, HostNUMANode: nodeRef(node), SizeBytes: chaseBytes, Samples: samples}
				lat := hostLatencySeconds
				if node >= 0 && m.ownNode >= 0 && node != m.ownNode {
					lat += remoteNodeLatencyAdd
				}
				res.Seconds = m.latency(res, lat)
				busy += chaseSeconds(res.Seconds, samples)
				g.Results = append(g.Results, res)
			}
		case probes.LaunchLatency:
			res := probes.Result{Probe: kind, Samples: launchCount - 20}
			res.Seconds = m.latency(res, launchLatencySeconds)
			busy += launchCount * res.Seconds
			g.Results = append(g.Results, res)
		}
	}
	for i := range g.Results {
		r := &g.Results[i]
		if r.Error == "" && r.BytesPerSecond == 0 && r.Seconds == 0 {
			r.Error = "simulated path unknown: the simulated sysfs tree could not be read"
		}
	}
	g.BusySeconds = busy
	if len(peerBusy) > 0 {
		g.PeerBusySeconds = peerBusy
	}
	g.ContextSeconds = busy + contextSetupSeconds + peerContextSeconds*float64(len(o.Peers))
	g.DeviceMemoryBytes = int64(devMem)
	g.HostMemoryBytes = int64(hostMem) + controlPageBytes
	if m.self.MemoryUsed.Valid {
		g.ContextMemoryBytes = int64(m.self.MemoryUsed.V) + contextMemoryBytes + g.DeviceMemoryBytes
	}
	return g
}

// peer measures one peer probe against the GPU at addr.
func (m *model) peer(kind probes.Kind, addr string, size int64, samples int, busy, devMem *float64) []probes.Result {
	base := probes.Result{Probe: kind, Peer: addr, SizeBytes: size, Samples: samples}
	if _, ok := m.index[addr]; !ok {
		base.Direction = probes.DirToPeer
		base.Error = fmt.Sprintf("no CUDA device with PCI bus id %s", addr)
		return []probes.Result{base}
	}
	if kind == probes.PeerLatency {
		base.SizeBytes = chaseBytes
		base.Seconds = m.latency(base, peerLatencySeconds)
		*busy += chaseSeconds(base.Seconds, samples)
		return []probes.Result{base}
	}
	rate := m.peerRate(addr)
	if kind == probes.PeerCopy {
		*devMem = max(*devMem, float64(size))
		base.Direction = probes.DirToPeer
		base.BytesPerSecond = m.bandwidth(base, rate)
		*busy += timed(base.BytesPerSecond, size, samples)
		return []probes.Result{base}
	}
	*devMem = max(*devMem, 2*float64(size))
	var out []probes.Result
	slowest := math.Inf(1)
	for _, dir := range []string{probes.DirToPeer, probes.DirFromPeer} {
		res := base
		res.Direction = dir
		res.BytesPerSecond = m.bandwidth(res, rate*peerBidirectionalShare)
		slowest = min(slowest, res.BytesPerSecond)
		out = append(out, res)
	}
	*busy += timed(slowest, size, samples)
	return out
}

// currentHost is the slowest hop of the GPU's PCIe path to the CPU at its
// current state, in bytes per second: a link trained narrow or slow counts
// as it is. Without the tree, NVML's view of the GPU's own link.
func (m *model) currentHost(bus string) float64 {
	if m.topo != nil {
		if d := m.topo.Device(bus); d != nil {
			if h, ok := m.topo.SlowestHop(d, false); ok {
				return h.Bandwidth(false)
			}
		}
	}
	for _, g := range m.snap.GPUs {
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

// bandwidth is rate as measured: a little noise, and the probe faults in
// force on this result. 0 means the path is not known (a tree that could
// not be read); the caller reports the probe as failed.
func (m *model) bandwidth(res probes.Result, rate float64) float64 {
	if rate <= 0 {
		return 0
	}
	v := rate * m.r.noise()
	for _, f := range m.faults {
		if f.Kind == ProbeBandwidth && m.matches(f, res) {
			v *= f.Fraction
		}
	}
	return v
}

func (m *model) latency(res probes.Result, seconds float64) float64 {
	v := seconds * m.r.noise()
	for _, f := range m.faults {
		if f.Kind == ProbeLatency && m.matches(f, res) {
			v *= f.Factor
		}
	}
	return v
}

// matches reports whether probe fault f applies to a result of this
// round. A fault on GPU N matches N's results of its probe kind, narrowed
// to one peer by peer_gpu. Peer bidirectional and latency probes measure
// each pair once, in the round of the lower-addressed GPU, so a fault on
// the higher one shows there, on the result whose peer is N.
func (m *model) matches(f Fault, res probes.Result) bool {
	if f.Probe != res.Probe || f.GPU >= len(m.snap.GPUs) {
		return false
	}
	self := m.self.Index
	peer, hasPeer := m.index[res.Peer]
	switch {
	case f.GPU == self:
		return f.PeerGPU < 0 || (hasPeer && peer == f.PeerGPU)
	case res.Probe == probes.PeerBidirectional || res.Probe == probes.PeerLatency:
		return hasPeer && peer == f.GPU && (f.PeerGPU < 0 || f.PeerGPU == self)
	}
	return false
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
	l, err := r.n.fs.PCIeLinkOf(bus)
	if err != nil || !l.Speed.Valid || !l.Width.Valid {
		return nil
	}
	return &probes.LinkUnderLoad{Generation: numa.Generation(l.Speed.V), Width: l.Width.V, Confirmed: true}
}

// timed is the GPU time of one bandwidth result: a warm-up and the
// samples, each moving size bytes.
func timed(rate float64, size int64, samples int) float64 {
	if rate <= 0 {
		return 0
	}
	return float64(samples+1) * float64(size) / rate
}

// chaseSeconds is the GPU time of a pointer chase: a whole cycle to warm
// up, then the samples.
func chaseSeconds(perHop float64, samples int) float64 {
	return perHop * float64(chaseBytes/chaseStride+samples*chaseSampleHops)
}

func nodeRef(node int) *int {
	if node < 0 {
		return nil
	}
	return &node
}

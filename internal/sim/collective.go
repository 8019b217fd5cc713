package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
)

// The collectives of the simulated node. RunCollectives makes Runner the
// node's probes.CollectiveRunner: probes.MeasureCollectiveRound, the NCCL
// child's own round, over a probes.CollectiveMeasurer whose communicator
// is this file's arithmetic. Every collective crosses the slowest link
// between any two of its ranks (NCCL's rings and all-to-all use them
// all): NVLinks at their count and rate from the NVML sample, so a GPU
// with links down slows every collective it is in; PCIe peer to peer or
// host memory where a pair has no NVLink; and where an nccl_transport
// fault is in force, host shared memory or the network at the GPUs'
// nearest NICs' rates, as NCCL falls back when peer to peer is refused.

// ncclVersionCode is what the modelled child's NCCL reports: 2.27.3.
const ncclVersionCode = 22703

// What the modelled collectives reach.
const (
	// nvlinkCollectiveEfficiency is the share of a pair's NVLinks that
	// NCCL's collectives and send/recv reach: with the per-operation
	// latency on top, 0.84 of an H100's 450 GB/s gives the 370 GB/s
	// all-reduce bus bandwidth nccl-tests measures on a DGX H100 at 256
	// MiB (and about 372 GB/s send/recv, 365 on a p5).
	nvlinkCollectiveEfficiency = 0.84
	// shmBytesPerSecond is what NCCL's shared-memory transport carries
	// between two GPUs of a node through host memory, where the GPUs'
	// PCIe paths allow that much.
	shmBytesPerSecond = 20e9
	// netEfficiency is the share of the slower GPU's nearest NICs' rate
	// NCCL's network transport reaches between two GPUs of one node.
	netEfficiency = 0.8
	// commInitSeconds is what making the communicator costs, beside a
	// context per GPU.
	commInitSeconds = 0.8
)

// collectiveLatency is the time of one operation at a size small enough
// that only the latency counts, over NVLink; other transports add theirs.
var collectiveLatency = map[probes.Collective]float64{
	probes.AllReduce: 25e-6, probes.AllGather: 18e-6, probes.ReduceScatter: 18e-6,
	probes.AllToAll: 30e-6, probes.SendRecv: 10e-6,
}

// transportLatency is what a transport adds to an operation's latency,
// and channelsOf how many channels NCCL connects a pair with on it.
var (
	transportLatency = map[string]float64{probes.TransportP2P: 0, probes.TransportSHM: 8e-6, probes.TransportNet: 12e-6}
	channelsOf       = map[string]int{probes.TransportP2P: 16, probes.TransportSHM: 2, probes.TransportNet: 4}
	transportDetail  = map[string]string{probes.TransportP2P: "P2P/CUMEM/read", probes.TransportSHM: "SHM/direct/direct",
		probes.TransportNet: "NET/IB/0/GDRDMA"}
)

// RunCollectives returns the collective round the NCCL child would print
// on this node, with results that follow the simulated links as they are
// now. Options the child would refuse are a crash, as the daemon sees the
// child that refuses them exit without a round; a run cut short by ctx's
// deadline is a timeout, as the daemon sees a child it killed.
func (r *Runner) RunCollectives(ctx context.Context, o probes.CollectiveOptions, ids chan<- string) (*probes.CollectiveRound, error) {
	gpus := strings.Join(o.GPUs, ",")
	fail := func(result string, err error) (*probes.CollectiveRound, error) {
		return nil, &probes.RunFailure{GPU: gpus, Collectives: true, Result: result, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return fail(probes.RunError, fmt.Errorf("not started: %w", err))
	}
	if err := o.Validate(); err != nil {
		return fail(probes.RunCrash, err)
	}
	snap, err := r.reader.Sample(ctx)
	if snap == nil {
		return fail(probes.RunError, fmt.Errorf("simulated driver: %w", err))
	}
	topo, _ := r.n.fs.Topology() // a value it could not read is left out, as for the exporter
	round := probes.MeasureCollectiveRound(ctx, &collectiveMeasurer{r: r, snap: snap, topo: topo}, o, ids)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return round, &probes.RunFailure{GPU: gpus, Collectives: true, Result: probes.RunTimeout, Err: errors.New("no round within the deadline; child killed")}
	}
	return round, nil
}

// collectiveMeasurer is one collective round's view of the node.
type collectiveMeasurer struct {
	r    *Runner
	snap *nvml.Snapshot
	topo *numa.Topology
}

func (*collectiveMeasurer) NCCLVersion() int { return ncclVersionCode }

// OpenComm finds every GPU in the NVML sample, as the child finds them by
// PCI address. The simulated node has no other node to join: every rank
// is one of its GPUs.
func (ms *collectiveMeasurer) OpenComm(_ context.Context, o probes.CollectiveOptions, _ chan<- string) (probes.Communicator, error) {
	if o.Ranks != len(o.GPUs) || o.FirstRank != 0 || o.UniqueID != "" {
		return nil, fmt.Errorf("the simulated node runs collectives over its own GPUs only: %d ranks from %d, %d GPUs here",
			o.Ranks, o.FirstRank, len(o.GPUs))
	}
	c := &comm{r: ms.r, o: o, snap: ms.snap, topo: ms.topo, faults: ms.r.n.Faults(), channels: map[probes.Transport]bool{}}
	for _, addr := range o.GPUs {
		bus := nvml.NormalizeBusID(addr)
		var g *nvml.GPUState
		for i := range ms.snap.GPUs {
			if s := &ms.snap.GPUs[i]; s.PCIBusID == bus && !s.Lost {
				g = s
			}
		}
		if g == nil {
			return nil, fmt.Errorf("no CUDA device with PCI bus id %s", bus)
		}
		if slices.Contains(c.gpus, g) {
			return nil, fmt.Errorf("GPU %s given twice", bus)
		}
		c.gpus = append(c.gpus, g)
	}
	c.links = c.pairLinks()
	return c, nil
}

// link is how NCCL connects one rank to another, and what it carries.
type link struct {
	kind string
	rate float64 // bytes per second one direction; 0 when no path
}

// comm is the simulated communicator: the GPUs in rank order and the link
// between each pair.
type comm struct {
	r      *Runner
	o      probes.CollectiveOptions
	snap   *nvml.Snapshot
	topo   *numa.Topology
	faults []Fault
	gpus   []*nvml.GPUState
	links  [][]link

	// What the round has done so far: the connections made, GPU seconds,
	// the most device memory held at once.
	channels map[probes.Transport]bool
	busy     float64
	devMem   int64
}

// pairLinks works out every ordered pair's link.
func (c *comm) pairLinks() [][]link {
	n := len(c.gpus)
	out := make([][]link, n)
	nvlinks := c.snap.NVLinkCounts()
	paths := make([]probes.Path, n)
	host := make([]float64, n)
	for i, g := range c.gpus {
		paths[i] = probes.PathFor(c.snap, c.topo, g.PCIBusID)
		host[i] = currentHostRate(c.snap, c.topo, g.PCIBusID)
	}
	var nics map[string]float64 // by GPU address, read once if a fault needs it
	for i, a := range c.gpus {
		out[i] = make([]link, n)
		for j, b := range c.gpus {
			if i == j {
				continue
			}
			if f := c.transportFault(a.Index, b.Index); f != nil {
				if f.Transport == probes.TransportNet {
					if nics == nil {
						nics = c.nicRates()
					}
					out[i][j] = link{probes.TransportNet, min(nics[a.PCIBusID], nics[b.PCIBusID]) * netEfficiency}
					continue
				}
				out[i][j] = link{probes.TransportSHM, min(shmBytesPerSecond, host[i], host[j])}
				continue
			}
			switch {
			case a.Index < len(nvlinks) && b.Index < len(nvlinks[a.Index]) && nvlinks[a.Index][b.Index] > 0:
				out[i][j] = link{probes.TransportP2P, paths[i].PeerBytesPerSecond[b.PCIBusID] * nvlinkCollectiveEfficiency}
			case c.p2pWrite(a.Index, b.Index):
				out[i][j] = link{probes.TransportP2P, min(host[i], host[j]) * pcieP2PEfficiency}
			default:
				out[i][j] = link{probes.TransportSHM, min(shmBytesPerSecond, host[i], host[j])}
			}
		}
	}
	return out
}

// transportFault is the nccl_transport fault that covers the pair of GPUs
// a and b (NVML indices), nil if none does.
func (c *comm) transportFault(a, b int) *Fault {
	for i, f := range c.faults {
		if f.Kind == NCCLTransport && (f.GPUs == "" || f.GPUs.Has(a) || f.GPUs.Has(b)) {
			return &c.faults[i]
		}
	}
	return nil
}

// p2pWrite reports whether NVML says GPU a can write into GPU b over PCIe.
func (c *comm) p2pWrite(a, b int) bool {
	for _, p := range c.snap.Pairs {
		if (p.GPU == a && p.Peer == b) || (p.GPU == b && p.Peer == a) {
			return p.P2P["write"]
		}
	}
	return false
}

// nicRates is, by GPU address, the rate of the up ports of the GPU's
// nearest NICs: what NCCL's network transport has from that GPU. It reads
// the ports through the exporter's own NIC reader, so a nic_rate or
// nic_down fault shows.
func (c *comm) nicRates() map[string]float64 {
	out := map[string]float64{}
	if c.topo == nil {
		return out
	}
	snap, _ := (&nic.Reader{FS: c.r.n.fs}).Sample(context.Background())
	if snap == nil {
		return out
	}
	for _, g := range c.gpus {
		d := c.topo.Device(g.PCIBusID)
		if d == nil {
			continue
		}
		nearest, _ := c.topo.NearestNICs(d)
		for _, n := range nearest {
			for _, p := range snap.Ports {
				if up := p.Up(); slices.Contains(n.RDMANames, p.Device) && up.Valid && up.V && p.RateBytes.Valid {
					out[g.PCIBusID] += p.RateBytes.V
				}
			}
		}
	}
	return out
}

// slowest is the slowest link among the ranks, with its ranks; rate 0
// where a pair has no path.
func (c *comm) slowest() (link, int, int) {
	best, from, to := link{}, -1, -1
	for i := range c.links {
		for j := range c.links[i] {
			if l := c.links[i][j]; i != j && (from < 0 || l.rate < best.rate) {
				best, from, to = l, i, j
			}
		}
	}
	return best, from, to
}

// worstLatency is the most latency any of the links' transports adds.
func (c *comm) worstLatency() float64 {
	worst := 0.0
	for i := range c.links {
		for j := range c.links[i] {
			if i != j {
				worst = max(worst, transportLatency[c.links[i][j].kind])
			}
		}
	}
	return worst
}

// Collective times op over every rank: nccl-tests' size over the slowest
// link, scaled by the bus factor (what each rank's link carries), plus
// the operation's latency.
func (c *comm) Collective(op probes.Collective, size int64) (probes.Measured, error) {
	l, from, to := c.slowest()
	if l.rate <= 0 {
		return probes.Measured{}, fmt.Errorf("ncclSystemError: no %s path from rank %d to rank %d", l.kind, from, to)
	}
	n := len(c.gpus)
	c.hold(op, size)
	if op == probes.AllToAll {
		for i := range n {
			for j := range n {
				if i != j {
					c.connect(i, j)
				}
			}
		}
	} else {
		for i := range n {
			c.connect(i, (i+1)%n) // the ring
		}
	}
	seconds := collectiveLatency[op] + c.worstLatency() + float64(size)*probes.BusFactor(op, n)/l.rate
	return c.timed(seconds), nil
}

// SendRecv times rank from sending size bytes to rank to over their link.
func (c *comm) SendRecv(from, to int, size int64) (probes.Measured, error) {
	if from < 0 || to < 0 || from >= len(c.gpus) || to >= len(c.gpus) || from == to {
		return probes.Measured{}, fmt.Errorf("ncclInvalidArgument: send/recv from rank %d to rank %d of %d", from, to, len(c.gpus))
	}
	l := c.links[from][to]
	if l.rate <= 0 {
		return probes.Measured{}, fmt.Errorf("ncclSystemError: no %s path from rank %d to rank %d", l.kind, from, to)
	}
	c.hold(probes.SendRecv, size)
	c.connect(from, to)
	return c.timed(collectiveLatency[probes.SendRecv] + transportLatency[l.kind] + float64(size)/l.rate), nil
}

// connect notes the channels NCCL connects rank from to rank to with.
func (c *comm) connect(from, to int) {
	kind := c.links[from][to].kind
	for ch := range channelsOf[kind] {
		c.channels[probes.Transport{Channel: ch, FromRank: from, ToRank: to, Kind: kind, Detail: transportDetail[kind]}] = true
	}
}

// timed is an operation of seconds as the round measures it: the samples
// of the averaged iterations, each with its noise, after the warm-up; all
// of that is the GPUs' busy time.
func (c *comm) timed(seconds float64) probes.Measured {
	c.busy += seconds * float64(c.o.Warmup+c.o.Iterations*max(c.o.Samples, 1))
	return c.r.sampled(seconds, c.o.Samples)
}

// hold notes the buffers an operation of size takes on each GPU, as
// nccl-tests allocates them: a send and a receive buffer, the gathered
// or scattered one size and the other size/n.
func (c *comm) hold(op probes.Collective, size int64) {
	mem := 2 * size
	if op == probes.AllGather || op == probes.ReduceScatter {
		mem = size + size/int64(len(c.gpus))
	}
	c.devMem = max(c.devMem, mem)
}

// Transports are the connections made so far, by channel, then ranks.
func (c *comm) Transports() []probes.Transport {
	out := make([]probes.Transport, 0, len(c.channels))
	for t := range c.channels {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b probes.Transport) int {
		if a.Channel != b.Channel {
			return a.Channel - b.Channel
		}
		if a.FromRank != b.FromRank {
			return a.FromRank - b.FromRank
		}
		return a.ToRank - b.ToRank
	})
	return out
}

func (c *comm) Cost() probes.Cost {
	return probes.Cost{BusySeconds: c.busy, DeviceMemoryBytes: c.devMem}
}

// Close: a context on every GPU and the communicator were held for the
// timed work and for setting them up.
func (c *comm) Close() float64 { return c.busy + contextSetupSeconds + commInitSeconds }

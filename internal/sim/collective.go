package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
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
// A communicator with ranks in another process (a node-to-node session)
// adds each local GPU's link to the other node (nodetonode.go); this
// process models, and reports, only what its own GPUs do.

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
	transportDetail  = map[string]string{probes.TransportP2P: "P2P/CUMEM/read", probes.TransportSHM: "SHM/direct/direct"}
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
	topo, _ := numa.ReadTopology(r.n.fs) // a value it could not read is left out, as for the exporter
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
// PCI address. With ranks in another process it first makes the unique id
// and hands it out, or takes the one given, as the child does.
func (ms *collectiveMeasurer) OpenComm(ctx context.Context, o probes.CollectiveOptions, ids chan<- string) (probes.Communicator, error) {
	if o.Ranks > len(o.GPUs) {
		if err := openPeers(ctx, o, ids); err != nil {
			return nil, err
		}
	}
	c := &comm{r: ms.r, o: o, snap: ms.snap, topo: ms.topo, faults: ms.r.n.Faults(), logged: map[[3]int]bool{}}
	for _, addr := range o.GPUs {
		bus := pciaddr.Normalize(addr)
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
	// The NIC ports are read once, through the exporter's own NIC reader,
	// for everything the communicator works out when it opens.
	c.ports, c.portsErr = (&nic.Reader{FS: c.r.n.fs}).Sample(context.Background())
	c.net0 = c.readNet()
	c.links = c.pairLinks()
	if o.Ranks > len(o.GPUs) {
		c.net = c.netLinks()
	}
	return c, nil
}

// link is how NCCL connects one rank to another, and what it carries.
type link struct {
	kind string
	rate float64 // bytes per second one direction; 0 when no path
	// why there is no path, where rate is 0 and that is known.
	why string
	// details are NCCL's names of the connection, channel by channel in
	// turn; none: the kind's usual one.
	details []string
}

// detail is NCCL's name for the connection on channel ch.
func (l link) detail(ch int) string {
	if len(l.details) == 0 {
		return transportDetail[l.kind]
	}
	return l.details[ch%len(l.details)]
}

// comm is the simulated communicator: this process's GPUs in rank order
// from o.FirstRank, the link between each pair of them and, when other
// ranks are another node's, each one's link to that node.
type comm struct {
	r      *Runner
	o      probes.CollectiveOptions
	snap   *nvml.Snapshot
	topo   *numa.Topology
	faults []Fault
	gpus   []*nvml.GPUState
	links  [][]link
	net    []link

	// ports are the NIC ports as the communicator opened (nil, and
	// portsErr why, where they could not be read).
	ports    *nic.Snapshot
	portsErr error

	// net0 is the networks NCCL found when the communicator opened.
	net0 netSetup

	// What the round has done so far: NCCL's log of the connections made
	// (after net0's lines), which were, GPU seconds, the most device
	// memory held at once.
	log    []string
	logged map[[3]int]bool
	busy   float64
	devMem int64
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
					out[i][j] = link{kind: probes.TransportNet, rate: min(nics[a.PCIBusID], nics[b.PCIBusID]) * netEfficiency,
						details: []string{c.net0.detail(pciaddr.Normalize(a.PCIBusID), nil)}}
					continue
				}
				out[i][j] = link{kind: probes.TransportSHM, rate: min(shmBytesPerSecond, host[i], host[j])}
				continue
			}
			switch {
			case a.Index < len(nvlinks) && b.Index < len(nvlinks[a.Index]) && nvlinks[a.Index][b.Index] > 0:
				out[i][j] = link{kind: probes.TransportP2P, rate: paths[i].PeerBytesPerSecond[b.PCIBusID] * nvlinkCollectiveEfficiency}
			case c.p2pWrite(a.Index, b.Index):
				out[i][j] = link{kind: probes.TransportP2P, rate: min(host[i], host[j]) * pcieP2PEfficiency}
			default:
				out[i][j] = link{kind: probes.TransportSHM, rate: min(shmBytesPerSecond, host[i], host[j])}
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
// nearest NICs: what NCCL's network transport has from that GPU. The
// ports are the exporter's NIC reader's (c.ports), so a nic_rate or
// nic_down fault shows.
func (c *comm) nicRates() map[string]float64 {
	out := map[string]float64{}
	if c.topo == nil {
		return out
	}
	snap := c.ports
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

// linkFrom is the link from this process's GPU i to rank to.
func (c *comm) linkFrom(i, to int) link {
	if j, ok := c.o.Local(to); ok {
		return c.links[i][j]
	}
	return c.net[i]
}

// outgoing calls f with every link from one of this process's ranks to
// another rank, and the two ranks: what this process knows of the
// communicator.
func (c *comm) outgoing(f func(l link, from, to int)) {
	for i := range c.gpus {
		from := c.o.FirstRank + i
		for to := range c.o.Ranks {
			if to != from {
				f(c.linkFrom(i, to), from, to)
			}
		}
	}
}

// slowest is the slowest link from this process's ranks, with its ranks;
// rate 0 where a pair has no path.
func (c *comm) slowest() (link, int, int) {
	best, from, to := link{}, -1, -1
	c.outgoing(func(l link, a, b int) {
		if from < 0 || l.rate < best.rate {
			best, from, to = l, a, b
		}
	})
	return best, from, to
}

// worstLatency is the most latency any of the links' transports adds.
func (c *comm) worstLatency() float64 {
	worst := 0.0
	c.outgoing(func(l link, _, _ int) { worst = max(worst, transportLatency[l.kind]) })
	return worst
}

// noPath is NCCL's failure on a link without a path.
func noPath(l link, from, to int) error {
	err := fmt.Errorf("ncclSystemError: no %s path from rank %d to rank %d", l.kind, from, to)
	if l.why != "" {
		err = fmt.Errorf("%w: %s", err, l.why)
	}
	return err
}

// Collective times op over every rank: nccl-tests' size over the slowest
// link from this process's ranks, scaled by the bus factor over all the
// ranks (what each rank's link carries), plus the operation's latency.
// This process connects its own ranks: to the next in the ring, or to
// every other for the all-to-all.
func (c *comm) Collective(op probes.Collective, size int64) (probes.Measured, error) {
	l, from, to := c.slowest()
	if l.rate <= 0 {
		return probes.Measured{}, noPath(l, from, to)
	}
	n := c.o.Ranks
	c.hold(op, size)
	c.outgoing(func(l link, from, to int) {
		if op == probes.AllToAll || to == (from+1)%n {
			c.connect(from, to, l)
		}
	})
	seconds := collectiveLatency[op] + c.worstLatency() + float64(size)*probes.BusFactor(op, n)/l.rate
	return c.timed(seconds), nil
}

// SendRecv times rank from sending size bytes to rank to over their link.
// A process holding only the receiver times its side through its own
// link to the sender's node; one holding neither returns at once.
func (c *comm) SendRecv(from, to int, size int64) (probes.Measured, error) {
	if from < 0 || to < 0 || from >= c.o.Ranks || to >= c.o.Ranks || from == to {
		return probes.Measured{}, fmt.Errorf("ncclInvalidArgument: send/recv from rank %d to rank %d of %d", from, to, c.o.Ranks)
	}
	var l link
	if i, ok := c.o.Local(from); ok {
		l = c.linkFrom(i, to)
	} else if j, ok := c.o.Local(to); ok {
		l = c.net[j]
	} else {
		return probes.Measured{}, nil
	}
	if l.rate <= 0 {
		return probes.Measured{}, noPath(l, from, to)
	}
	c.hold(probes.SendRecv, size)
	c.connect(from, to, l)
	return c.timed(collectiveLatency[probes.SendRecv] + transportLatency[l.kind] + float64(size)/l.rate), nil
}

// connect notes the channels NCCL connects rank from to rank to with,
// over l.
func (c *comm) connect(from, to int, l link) {
	for ch := range channelsOf[l.kind] {
		c.logConnection(ch, from, to, l.detail(ch))
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
		mem = size + size/int64(c.o.Ranks)
	}
	c.devMem = max(c.devMem, mem)
}

func (c *comm) Cost() probes.Cost {
	return probes.Cost{BusySeconds: c.busy, DeviceMemoryBytes: c.devMem}
}

// Close: a context on every GPU and the communicator were held for the
// timed work and for setting them up.
func (c *comm) Close() float64 { return c.busy + contextSetupSeconds + commInitSeconds }

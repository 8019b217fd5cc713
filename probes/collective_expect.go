package probes

import (
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/numa"
)

// What a collective round should give: the bus bandwidth of a collective
// is what each rank's link carries (nccl-tests' busbw), so it compares with
// one direction of the slowest link the collective crosses. Among GPUs all
// joined by NVLink that is the slowest pair's NVLinks (on an NVSwitch
// machine every GPU's own switch bandwidth: 450 GB/s for an H100's 18
// links); a pair without NVLink goes over PCIe, bounded by the slower of
// the two GPUs' host paths. A send/recv compares with its pair's link.
//
// nccl-tests does not reach the link rate: on an 8x H100 SXM node
// all-reduce gives about 370 GB/s bus bandwidth against the 450 GB/s of
// NV18 (480 GB/s only with NVLink SHARP, which stays off), and send/recv
// about 365 GB/s. A healthy ratio is about 0.8: alerts on the ratio must
// not fire there (NCCLBusBandwidthLow uses 0.5, and the
// round's own 7-day best for finer drops).

// PairTransport is the transport NCCL should connect GPU to Peer with (PCI
// addresses): one of the Transport* kinds.
type PairTransport struct {
	GPU, Peer string
	Kind      string
}

// CollectivePath is what the links among a set of GPUs should give, worked
// out from the discovered hardware as Path is.
type CollectivePath struct {
	// GPUs are the GPUs by PCI address, in the round's rank order.
	GPUs []string
	// rate[i][j] is one direction from GPUs[i] to GPUs[j], bytes per
	// second; 0 when unknown.
	rate [][]float64
	// transport[i][j] is what GPUs[i] should reach GPUs[j] with; "" when
	// a GPU is not in the NVML sample.
	transport [][]string
}

// CollectivePathFor works out the CollectivePath of gpus (sysfs form) from
// an NVML snapshot and the PCIe topology; either may be nil, and what only
// it would give is then unknown.
func CollectivePathFor(snap *nvml.Snapshot, topo *numa.Topology, gpus []string) CollectivePath {
	n := len(gpus)
	p := CollectivePath{GPUs: gpus, rate: make([][]float64, n), transport: make([][]string, n)}
	host := make([]float64, n)
	state := make([]*nvml.GPUState, n)
	for i, g := range gpus {
		host[i], state[i] = hostRate(snap, topo, g), snapshotGPU(snap, g)
	}
	for i := range n {
		p.rate[i], p.transport[i] = make([]float64, n), make([]string, n)
		for j := range n {
			if i == j {
				continue
			}
			a, b := state[i], state[j]
			nvlink := 0.0
			if a != nil && b != nil {
				nvlink = nvlinkPeerRate(a, b)
				// Peer to peer over NVLink, or over PCIe where NVML says
				// the platform lets one GPU write into the other;
				// otherwise NCCL goes through host memory.
				p.transport[i][j] = TransportSHM
				if nvlink > 0 || PeerReachable(snap, a.Index, b.Index) {
					p.transport[i][j] = TransportP2P
				}
			}
			p.rate[i][j] = nvlink
			if nvlink == 0 {
				// PCIe up one GPU's path and down the other's.
				p.rate[i][j] = min(host[i], host[j])
			}
		}
	}
	return p
}

// rank is the index in GPUs of a rank of r, -1 when another process holds
// it.
func (p CollectivePath) rank(r *CollectiveRound, rank int) int {
	i, held := r.Local(rank)
	if !held || i >= len(p.GPUs) || r.GPUs[i] != p.GPUs[i] {
		return -1
	}
	return i
}

// Expect is what res, a result of r, should give in bus bandwidth; 0 when
// not known: for a latency, a link unknown, or a collective with ranks
// in other processes (a node-to-node probe knows its own network path).
func (p CollectivePath) Expect(r *CollectiveRound, res CollectiveResult) float64 {
	if res.Collective == SendRecv {
		if res.FromRank == nil || res.ToRank == nil {
			return 0
		}
		i, j := p.rank(r, *res.FromRank), p.rank(r, *res.ToRank)
		if i < 0 || j < 0 || i == j {
			return 0
		}
		return p.rate[i][j]
	}
	if r.Ranks != len(r.GPUs) || len(r.GPUs) != len(p.GPUs) || len(p.GPUs) < 2 {
		return 0
	}
	slowest := 0.0
	for i := range p.GPUs {
		if p.rank(r, r.FirstRank+i) != i {
			return 0
		}
		for j := range p.GPUs {
			if i == j {
				continue
			}
			if p.rate[i][j] <= 0 {
				return 0
			}
			if slowest == 0 || p.rate[i][j] < slowest {
				slowest = p.rate[i][j]
			}
		}
	}
	return slowest
}

// Annotate sets ExpectedBusBytesPerSecond on every result of r and returns
// the transport each ordered pair of its GPUs should use.
func (p CollectivePath) Annotate(r *CollectiveRound) []PairTransport {
	for i := range r.Results {
		r.Results[i].ExpectedBusBytesPerSecond = p.Expect(r, r.Results[i])
	}
	return p.Transports()
}

// Transports are the transport each ordered pair of GPUs should use, the
// pairs whose GPUs NVML knows.
func (p CollectivePath) Transports() []PairTransport {
	var out []PairTransport
	for i, a := range p.GPUs {
		for j, b := range p.GPUs {
			if k := p.transport[i][j]; k != "" {
				out = append(out, PairTransport{GPU: a, Peer: b, Kind: k})
			}
		}
	}
	return out
}

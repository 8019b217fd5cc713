package probes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nccllog"
)

// Collective probes: what NCCL builds over the links. A collective round
// creates one communicator over GPUs that are all idle and times each
// collective as nccl-tests times it (warm-up, then iterations between
// CUDA events), reporting algorithm and bus bandwidth as nccl-tests
// reports them, and the transport NCCL chose between each pair of ranks.
// The same round structure serves a node's own GPUs (one process, every
// rank local) and a node-to-node probe (two processes on two nodes, each
// with its ranks, joined by an NCCL unique id handed over by the
// exporters).

// CollectiveContractVersion changes whenever the JSON of CollectiveRound
// changes incompatibly.
const CollectiveContractVersion = 1

// Collective names one NCCL operation, as nccl-tests names its tests.
type Collective string

// The collectives, in the order a round runs them.
const (
	AllReduce     Collective = "all_reduce"
	AllGather     Collective = "all_gather"
	ReduceScatter Collective = "reduce_scatter"
	// AllToAll is grouped send/recv, each rank sending size/n to every
	// rank, as nccl-tests' alltoall.
	AllToAll Collective = "all_to_all"
	// SendRecv is one rank sending to one other: each pair of GPUs once,
	// from the lower rank to the higher (bus factor 1).
	SendRecv Collective = "send_recv"
)

// Collectives lists every collective in run order.
var Collectives = []Collective{AllReduce, AllGather, ReduceScatter, AllToAll, SendRecv}

// CollectiveNames are the collectives as strings, in run order (for flags
// and error messages).
func CollectiveNames() []string { return asStrings(Collectives) }

// BusFactor is nccl-tests' factor from algorithm bandwidth to bus
// bandwidth for a collective over n ranks: what each rank's link must
// carry per byte of the operation's size. 0 for an unknown collective
// or n < 1.
func BusFactor(c Collective, n int) float64 {
	if n < 1 {
		return 0
	}
	f := float64(n)
	switch c {
	case AllReduce:
		return 2 * (f - 1) / f
	case AllGather, ReduceScatter, AllToAll:
		return (f - 1) / f
	case SendRecv:
		return 1
	}
	return 0
}

// Transport kinds NCCL connects two ranks with.
const (
	TransportP2P     = nccllog.KindP2P     // CUDA peer to peer: NVLink, or PCIe where the platform allows
	TransportSHM     = nccllog.KindSHM     // through host shared memory
	TransportNet     = nccllog.KindNet     // the network plugin: sockets, IB verbs, EFA...
	TransportCollNet = nccllog.KindCollNet // in-network reduction
	TransportNVLS    = nccllog.KindNVLS    // NVLink SHARP (multicast); off unless the operator turns it on
	TransportUnknown = nccllog.KindUnknown
)

// Transport is one connection NCCL made from one rank to another on one
// channel, as its INFO log names it ("Channel 00/0 : 0[0] -> 1[1] via
// P2P/CUMEM/read").
type Transport struct {
	Channel  int `json:"channel"`
	FromRank int `json:"from_rank"`
	ToRank   int `json:"to_rank"`
	// Kind is one of the Transport* kinds.
	Kind string `json:"kind"`
	// Detail is NCCL's own name for it: "P2P/CUMEM/read", "NET/Socket/0",
	// "NET/IB/0/GDRDMA", "SHM/direct/direct".
	Detail string `json:"detail,omitempty"`
	// Network is the fabric that carries a net or collnet connection, as
	// nccllog names it: Socket, IB, RoCE, EFA, or "other" where the log
	// does not tell; "" for the others. The plugin's own name is in
	// Detail (Labels' plugin). GDR says GPUDirect RDMA carries it (its detail has
	// "/GDRDMA"); false for the others.
	Network string `json:"network,omitempty"`
	GDR     bool   `json:"gdr,omitempty"`
}

// CollectiveOptions are what a collective round measures and how hard.
type CollectiveOptions struct {
	// GPUs are this process's GPUs by PCI address, in rank order from
	// FirstRank.
	GPUs []string
	// Collectives to run; empty means all.
	Collectives []Collective
	// SizeBytes is the operation's size for the bandwidth results, as
	// nccl-tests' -b: the buffer of an all-reduce, the gathered buffer of
	// an all-gather, the scattered one of a reduce-scatter, each rank's
	// whole send buffer of an all-to-all, one send of a send/recv.
	SizeBytes int64
	// SmallBytes is the size the latency results are taken at.
	SmallBytes int64
	// Warmup operations run before the timed ones, Iterations are timed
	// between two CUDA events and averaged (nccl-tests' -w and -n), and
	// that is repeated Samples times for the median and extremes.
	Warmup, Iterations, Samples int

	// Ranks is the communicator's size: len(GPUs) on one node, more when
	// other processes (on other nodes) hold the other ranks.
	Ranks int
	// FirstRank is the rank of GPUs[0].
	FirstRank int
	// UniqueID is the NCCL unique id (hex) the communicator is joined
	// with. Empty: this process makes it (it must then hold rank 0) and,
	// when other processes take part, hands it out before initialising.
	UniqueID string
	// Peer names the other node in a node-to-node probe (the target as
	// Prometheus gave it); empty inside a node.
	Peer string
	// SendRecvOffset, when above 0, limits send/recv to each rank r to
	// rank r+SendRecvOffset: between two nodes of k GPUs each (offset k),
	// each GPU to its counterpart on the other node, the pairs a
	// node-to-node probe reports. 0 is every pair of ranks.
	SendRecvOffset int
}

// CollectiveResult is one collective at one size. Seconds is the time of
// one operation; the bandwidths follow from it and SizeBytes as nccl-tests
// computes them. Error is set instead when it gave no value.
type CollectiveResult struct {
	Collective Collective `json:"collective"`
	SizeBytes  int64      `json:"size_bytes"`
	// Ranks took part: all the communicator's, or two for send/recv.
	Ranks int `json:"ranks"`
	// FromRank and ToRank are the sender and receiver of a send/recv.
	FromRank *int `json:"from_rank,omitempty"`
	ToRank   *int `json:"to_rank,omitempty"`
	// Seconds is one operation's time (the median over Samples of the
	// average over Iterations); SampleMin and SampleMax the fastest and
	// slowest sample's.
	Seconds   float64 `json:"seconds,omitempty"`
	SampleMin float64 `json:"sample_min,omitempty"`
	SampleMax float64 `json:"sample_max,omitempty"`
	// AlgBytesPerSecond is SizeBytes / Seconds; BusBytesPerSecond that
	// times BusFactor.
	AlgBytesPerSecond float64 `json:"alg_bytes_per_second,omitempty"`
	BusBytesPerSecond float64 `json:"bus_bytes_per_second,omitempty"`
	// ExpectedBusBytesPerSecond is what the slowest link the operation
	// crosses should carry (the daemon fills it in); 0 when not known.
	ExpectedBusBytesPerSecond float64 `json:"expected_bus_bytes_per_second,omitempty"`

	Error string `json:"error,omitempty"`
}

// CollectiveRound is what one run of the collective child prints.
type CollectiveRound struct {
	Version int       `json:"version"`
	Started time.Time `json:"started"`
	PID     int       `json:"pid,omitempty"`
	Seconds float64   `json:"seconds"`
	// NCCLVersion is ncclGetVersion's code: 22703 for 2.27.3.
	NCCLVersion int `json:"nccl_version,omitempty"`
	// GPUs are this process's GPUs, in rank order from FirstRank.
	GPUs      []string `json:"gpus"`
	Ranks     int      `json:"ranks"`
	FirstRank int      `json:"first_rank"`
	Peer      string   `json:"peer,omitempty"`

	Results    []CollectiveResult `json:"results"`
	Transports []Transport        `json:"transports,omitempty"`

	// The round's cost on each of this process's GPUs (they all work at
	// once): GPU time of the timed work and warm-up, the most device
	// memory the buffers took, and how long a context was held.
	BusySeconds       float64 `json:"busy_seconds"`
	DeviceMemoryBytes int64   `json:"device_memory_bytes"`
	ContextSeconds    float64 `json:"context_seconds"`

	// Error is set when no communicator could be made (no NCCL library,
	// a GPU that could not be opened, the other node never joined).
	Error string `json:"error,omitempty"`
	// NoLibrary is set with Error when the cause was ErrNoLibrary: the
	// child could not load NCCL. It carries the error's type across the
	// process, so the daemon reads it with errors.Is (Err), not by text.
	NoLibrary bool `json:"no_library,omitempty"`

	// Contention is what shared the round's GPUs while it ran, as the
	// daemon (or the collectives command) watched them: every GPU of a
	// collective takes part in every result, so one shared GPU makes all
	// of them contended (Reasons). Nil when nobody watched.
	Contention *Contention `json:"contention,omitempty"`
}

// ErrNoLibrary is why a round could not start on a node without the
// library it needs (NCCL could not be loaded). That is no fault of the
// GPUs: the daemon counts a no_library skip, not a failed round. The child
// wraps the binding's load error with NoLibrary; the round carries it as
// CollectiveRound.NoLibrary, and Err gives it back.
var ErrNoLibrary = errors.New("library cannot be loaded")

// NoLibrary marks err (the binding's load error) as ErrNoLibrary, keeping
// its text.
func NoLibrary(err error) error { return noLibraryError{err} }

type noLibraryError struct{ error }

func (e noLibraryError) Unwrap() []error { return []error{e.error, ErrNoLibrary} }

// Err is why no communicator was made, nil when one was: Error's text,
// wrapping ErrNoLibrary when NoLibrary says so.
func (r *CollectiveRound) Err() error {
	switch {
	case r.Error == "":
		return nil
	case r.NoLibrary:
		return NoLibrary(errors.New(r.Error))
	}
	return errors.New(r.Error)
}

// CollectiveMeasurer is the collective seam: NCCL over CUDA in the
// collective child, the link model in the simulated node.
type CollectiveMeasurer interface {
	// NCCLVersion is the library's version code, 0 when unknown.
	NCCLVersion() int
	// OpenComm makes this process's part of the communicator o describes.
	// When o.UniqueID is empty and o.Ranks > len(o.GPUs), the new id is
	// sent on ids (hex) before the other ranks are waited for. ctx bounds
	// everything done through the communicator: at its end a hung
	// communicator is aborted.
	OpenComm(ctx context.Context, o CollectiveOptions, ids chan<- string) (Communicator, error)
}

// Communicator is this process's ranks of one communicator. Every process
// of the communicator makes the same calls in the same order; a call
// involving no local rank returns at once.
type Communicator interface {
	// Collective times c at size bytes over every rank (nccl-tests'
	// meaning of size): seconds per operation.
	Collective(c Collective, size int64) (Measured, error)
	// SendRecv times rank from sending size bytes to rank to. Each
	// process times its own side; one holding neither rank returns zero
	// and no error at once.
	SendRecv(from, to int, size int64) (Measured, error)
	// Transports are the connections NCCL has made so far.
	Transports() []Transport
	// Cost is what the round has cost each local GPU so far.
	Cost() Cost
	// Close destroys the communicator (aborting it when a call failed or
	// timed out) and returns how long a context was held, in seconds.
	Close() float64
}

// CollectiveRunner runs one collective round: in a child process for
// real, in process for the simulated node. With o.UniqueID empty and
// o.Ranks > len(o.GPUs) the id is sent on ids as soon as it exists.
type CollectiveRunner interface {
	RunCollectives(ctx context.Context, o CollectiveOptions, ids chan<- string) (*CollectiveRound, error)
}

// MeasureCollectiveRound runs one collective round over m: every
// collective asked for, in run order, at o.SizeBytes for the bandwidth and
// o.SmallBytes for the latency; send/recv once per pair of ranks, lower
// to higher (or only those o.SendRecvOffset apart). Every process of a
// communicator runs it with the same options but its own GPUs, so all
// make the same calls in the same order.
// A send/recv is reported by every process holding either of its ranks:
// one holding both times both GPUs in one group, each sample the slower
// GPU's; with the sender and the receiver in two processes (two nodes)
// each reports its own side, and whoever joins the rounds takes the
// slower (SlowerSide): the operation is done when both sides are.
func MeasureCollectiveRound(ctx context.Context, m CollectiveMeasurer, o CollectiveOptions, ids chan<- string) *CollectiveRound {
	round := &CollectiveRound{Version: CollectiveContractVersion, Started: time.Now().UTC(), PID: os.Getpid(),
		NCCLVersion: m.NCCLVersion(), GPUs: slices.Clone(o.GPUs), Ranks: o.Ranks, FirstRank: o.FirstRank,
		Peer: o.Peer, Results: []CollectiveResult{}}
	defer func() { round.Seconds = time.Since(round.Started).Seconds() }()
	if round.GPUs == nil {
		round.GPUs = []string{}
	}
	comm, err := m.OpenComm(ctx, o, ids)
	if err != nil {
		round.Error, round.NoLibrary = err.Error(), errors.Is(err, ErrNoLibrary)
		return round
	}
	defer func() {
		c := comm.Cost()
		round.BusySeconds, round.DeviceMemoryBytes = c.BusySeconds, c.DeviceMemoryBytes
		round.Transports = comm.Transports()
		round.ContextSeconds = comm.Close()
	}()
	for _, c := range inRunOrder(Collectives, o.Collectives) {
		for _, size := range []int64{o.SizeBytes, o.SmallBytes} {
			if ctx.Err() != nil {
				return round
			}
			if c != SendRecv {
				t, err := comm.Collective(c, size)
				round.Results = append(round.Results, collectiveResult(CollectiveResult{Collective: c, SizeBytes: size, Ranks: o.Ranks}, t, err))
				continue
			}
			for _, p := range sendRecvPairs(o.Ranks, o.SendRecvOffset) {
				if ctx.Err() != nil {
					return round
				}
				from, to := p[0], p[1]
				t, err := comm.SendRecv(from, to, size)
				_, sends := o.Local(from)
				_, receives := o.Local(to)
				if !sends && !receives {
					continue // both sides are in other processes
				}
				round.Results = append(round.Results, collectiveResult(CollectiveResult{Collective: c, SizeBytes: size, Ranks: 2, FromRank: &from, ToRank: &to}, t, err))
			}
		}
	}
	return round
}

// Local is the index among o.GPUs of rank, and whether this process
// holds it at all: with other processes (nodes) holding ranks, each
// process of a communicator holds only its GPUs' ranks, FirstRank onwards.
func (o CollectiveOptions) Local(rank int) (int, bool) { return local(o.FirstRank, len(o.GPUs), rank) }

// Local is the index among r.GPUs of rank, and whether r's process held
// it (CollectiveOptions.Local).
func (r *CollectiveRound) Local(rank int) (int, bool) { return local(r.FirstRank, len(r.GPUs), rank) }

func local(first, n, rank int) (int, bool) {
	i := rank - first
	return i, i >= 0 && i < n
}

// SlowerSide is the result of one operation that two processes (two
// nodes) each timed over their own ranks, for the operation as a whole:
// the slower side's, as a process holding every rank takes each sample's
// slowest GPU (and as bench/ref/nccl_ref.py takes the slowest rank). Each
// sample on both sides starts after a barrier both take part in, so the
// samples are the same operations; the slower median is a lower bound of
// the median of each sample's slower side, and close to it when the sides
// move together. A side with an error is the result (the operation did
// not complete there); a nil side, one the other process did not report
// (an exporter from before both sides reported send/recv), leaves the
// other.
func SlowerSide(a, b *CollectiveResult) *CollectiveResult {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.Error != "":
		return a
	case b.Error != "":
		return b
	case b.Seconds > a.Seconds:
		return b
	}
	return a
}

// sendRecvPairs is every pair of ranks once, lower to higher, in order;
// with offset above 0 only each rank to the one offset above it.
func sendRecvPairs(ranks, offset int) [][2]int {
	var out [][2]int
	for a := range ranks {
		if offset > 0 {
			if a+offset < ranks {
				out = append(out, [2]int{a, a + offset})
			}
			continue
		}
		for b := a + 1; b < ranks; b++ {
			out = append(out, [2]int{a, b})
		}
	}
	return out
}

// collectiveResult is r with its time and the bandwidths nccl-tests
// derives from it, or with why it has none.
func collectiveResult(r CollectiveResult, t Measured, err error) CollectiveResult {
	switch {
	case err != nil:
		r.Error = err.Error()
		return r
	case t.Median <= 0:
		r.Error = fmt.Sprintf("non-positive time %g s", t.Median)
		return r
	}
	r.Seconds, r.SampleMin, r.SampleMax = t.Median, t.Min, t.Max
	r.AlgBytesPerSecond = float64(r.SizeBytes) / t.Median
	r.BusBytesPerSecond = r.AlgBytesPerSecond * BusFactor(r.Collective, r.Ranks)
	return r
}

package probes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
)

// The probe seam. What a GPU can measure is an interface with two
// implementations: the probe child's over the CUDA driver (cudaMeasurer,
// probes/cuda/probe/child.go) and the simulated node's over its model
// (internal/sim).
// MeasureRound owns a round's structure over it: which probes run in which
// order, which GPU of a pair measures it, the host nodes, what each result
// is labelled with, and what the round cost. An implementation only
// measures.

// Measurer opens GPUs for a round.
type Measurer interface {
	// DriverVersion is the CUDA driver's version (12040 for 12.4), 0 when
	// unknown.
	DriverVersion() int
	// Open readies the GPU at o.GPU for measuring with o's size and
	// samples; ctx bounds every measurement made through it. Device says
	// what was found of the GPU, also when err is set (CUDADevice -1 when
	// the GPU itself was not). An error means the GPU cannot be measured
	// at all; its text is the round's GPU error. A GPU returned with an
	// error was opened part way: it measures nothing, but is closed and
	// its cost counted.
	Open(ctx context.Context, o Options) (GPU, Device, error)
}

// Device is what a Measurer found of a GPU.
type Device struct {
	// CUDADevice is the CUDA ordinal; -1 when no device has the address.
	CUDADevice int
	Name       string
}

// GPU is one opened GPU and what it can measure. Rates are bytes per
// second and latencies seconds, each the median of the Options' samples
// with the lowest and highest sample (Measured). A host node is a NUMA
// node to place the pinned host buffer on, -1 for unbound memory. A peer
// is a PCI address (sysfs form) passed to OpenPeer first.
type GPU interface {
	// HostToDevice copies from pinned host memory on node. With readLink
	// it also reads the GPU's PCIe link while the copies move data; link
	// is nil when that read gave nothing.
	HostToDevice(node int, readLink bool) (rate Measured, link *LinkUnderLoad, err error)
	DeviceToHost(node int) (Measured, error)
	// HostBidirectional copies both ways at once.
	HostBidirectional(node int) (toDevice, toHost Measured, err error)
	// LocalCopy copies within the GPU's memory; the rate counts every
	// byte read and every byte written.
	LocalCopy() (Measured, error)
	// OpenPeer readies the peer for the peer probes, once per peer; its
	// error is every peer result's against it.
	OpenPeer(peer string) error
	// PeerCopy writes into the peer's memory.
	PeerCopy(peer string) (Measured, error)
	// PeerBidirectional has both GPUs write into each other at once.
	PeerBidirectional(peer string) (toPeer, fromPeer Measured, err error)
	// HostLatency is one round trip to pinned host memory on node.
	HostLatency(node int) (Measured, error)
	// PeerLatency is one round trip to the peer's memory.
	PeerLatency(peer string) (Measured, error)
	// LaunchLatency is an empty kernel's launch to completion as the host
	// sees it, over samples launches.
	LaunchLatency() (seconds Measured, samples int, err error)
	// Cost is what the measurements so far cost the GPU.
	Cost() Cost
	// Close gives back the GPU and the peers it opened; it returns how
	// long it held a context on the GPU, in seconds.
	Close() float64
}

// StorageGPU is a GPU that can measure storage: the probe child's and the
// simulated node's. The file is the GPU's own, in dir, o.StorageBytes
// long; the first call makes it, and Close removes it. A *Skip error says
// the probe did not run for a reason of its setting (a missing directory, a
// full disk, a filesystem without O_DIRECT).
type StorageGPU interface {
	// StorageWrite writes the file from GPU memory, once.
	StorageWrite(dir string) (StorageMeasured, error)
	// StorageRead reads the file into GPU memory, Samples times.
	StorageRead(dir string) (StorageMeasured, error)
}

// StorageMeasured is a storage probe's rate and how it got it: the
// Result fields of the same names.
type StorageMeasured struct {
	Rate       Measured
	Mode       string
	Filesystem string
	Drive      string
	Note       string
}

// Measured is one measurement: the median of its samples, and the lowest
// and highest of them (0 where not known).
type Measured struct {
	Median, Min, Max float64
}

// Sampled is the median and extremes of a non-empty sample.
func Sampled(v []float64) Measured {
	if len(v) == 0 {
		return Measured{}
	}
	return Measured{Median: median(v), Min: slices.Min(v), Max: slices.Max(v)}
}

// Scaled is m with every value multiplied by f.
func (m Measured) Scaled(f float64) Measured {
	return Measured{Median: m.Median * f, Min: m.Min * f, Max: m.Max * f}
}

// Cost is what measuring has cost a GPU so far: the GPURound fields of the
// same names.
type Cost struct {
	BusySeconds        float64
	DeviceMemoryBytes  int64
	ContextMemoryBytes int64
	HostMemoryBytes    int64
}

// MeasureRound runs a round over m: each GPU of opts in turn, in order,
// until ctx ends. The options must be valid (Options.Validate).
func MeasureRound(ctx context.Context, m Measurer, opts []Options) *Round {
	round := &Round{Version: ContractVersion, Started: time.Now().UTC(), PID: os.Getpid(), GPUs: []GPURound{}}
	round.DriverVersion = m.DriverVersion()
	for _, o := range opts {
		if ctx.Err() != nil {
			break
		}
		round.GPUs = append(round.GPUs, measureGPU(ctx, m, o))
	}
	round.Seconds = time.Since(round.Started).Seconds()
	return round
}

// measureGPU is one GPU's part of a round: every probe kind asked for, in
// run order, each once per host node or peer as it applies.
func measureGPU(ctx context.Context, m Measurer, o Options) (g GPURound) {
	g = GPURound{PCIBusID: pciaddr.Normalize(o.GPU), CUDADevice: -1, Results: []Result{}}
	dev, found, err := m.Open(ctx, o)
	g.CUDADevice, g.Name = found.CUDADevice, found.Name
	if dev != nil {
		defer func() {
			c := dev.Cost()
			g.BusySeconds = c.BusySeconds
			g.DeviceMemoryBytes, g.ContextMemoryBytes, g.HostMemoryBytes = c.DeviceMemoryBytes, c.ContextMemoryBytes, c.HostMemoryBytes
			g.ContextSeconds = dev.Close()
		}()
	}
	if err != nil {
		g.Error = err.Error()
		return g
	}
	r := &gpuRound{dev: dev, o: o, g: &g}
	for _, kind := range inRunOrder(Kinds, o.Probes) {
		if ctx.Err() != nil {
			break
		}
		if slices.Contains(StorageKinds, kind) && o.StorageDir == "" {
			continue // off unless a directory is named
		}
		g.Results = append(g.Results, r.run(kind)...)
	}
	return g
}

// gpuRound is one GPU's round in progress.
type gpuRound struct {
	dev GPU
	o   Options
	g   *GPURound
}

// inRunOrder is what of all want names, in all's order; all when want is
// empty. Probe kinds and collectives both run in their lists' order
// whatever order the flags named them in.
func inRunOrder[T comparable](all, want []T) []T {
	if len(want) == 0 {
		return all
	}
	var out []T
	for _, v := range all {
		if slices.Contains(want, v) {
			out = append(out, v)
		}
	}
	return out
}

// run runs one probe kind, once per host node or peer as it applies.
func (r *gpuRound) run(kind Kind) []Result {
	switch kind {
	case HostToDevice, DeviceToHost, HostBidirectional, HostLatency:
		var out []Result
		for _, node := range r.o.hostNodes() {
			out = append(out, r.host(kind, node)...)
		}
		return out
	case PeerCopy, PeerBidirectional, PeerLatency:
		var out []Result
		for _, p := range r.o.Peers {
			addr := pciaddr.Normalize(p)
			if kind != PeerCopy && addr < r.g.PCIBusID {
				continue // measured in the peer's round
			}
			before := r.dev.Cost().BusySeconds
			out = append(out, r.peer(kind, addr)...)
			if r.g.PeerBusySeconds == nil {
				r.g.PeerBusySeconds = map[string]float64{}
			}
			r.g.PeerBusySeconds[addr] += r.dev.Cost().BusySeconds - before
		}
		return out
	case DeviceLocalCopy:
		res := Result{Probe: kind, Direction: DirLocal, SizeBytes: r.o.SizeBytes, Samples: r.o.Samples}
		rate, err := r.dev.LocalCopy()
		return []Result{withRate(res, rate, err)}
	case LaunchLatency:
		seconds, n, err := r.dev.LaunchLatency()
		return []Result{withSeconds(Result{Probe: kind, Samples: n}, seconds, err)}
	case DeviceToStorage, StorageToDevice:
		return []Result{r.storage(kind)}
	}
	return []Result{{Probe: kind, Error: fmt.Sprintf("unknown probe %q", kind)}}
}

// hostNodes are the nodes to bind host buffers to in turn; -1 alone means
// unbound.
func (o Options) hostNodes() []int {
	if len(o.HostNodes) == 0 {
		return []int{-1}
	}
	return o.HostNodes
}

// host measures one host probe with the host buffer on node. The link is
// read under load during the round's first host-to-device copy, or the
// next one if that read gave nothing.
func (r *gpuRound) host(kind Kind, node int) []Result {
	base := Result{Probe: kind, HostNUMANode: nodeRef(node), SizeBytes: r.o.SizeBytes, Samples: r.o.Samples}
	switch kind {
	case HostToDevice:
		rate, link, err := r.dev.HostToDevice(node, r.g.LinkUnderLoad == nil)
		if link != nil && err == nil {
			r.g.LinkUnderLoad = link
		}
		return []Result{withRate(directed(base, DirHostToDevice), rate, err)}
	case DeviceToHost:
		rate, err := r.dev.DeviceToHost(node)
		return []Result{withRate(directed(base, DirDeviceToHost), rate, err)}
	case HostBidirectional:
		in, out, err := r.dev.HostBidirectional(node)
		return []Result{withRate(directed(base, DirHostToDevice), in, err), withRate(directed(base, DirDeviceToHost), out, err)}
	}
	base.SizeBytes = ChaseBytes
	seconds, err := r.dev.HostLatency(node)
	return []Result{withSeconds(base, seconds, err)}
}

// peer measures one peer probe against the GPU at addr.
func (r *gpuRound) peer(kind Kind, addr string) []Result {
	base := Result{Probe: kind, Peer: addr, SizeBytes: r.o.SizeBytes, Samples: r.o.Samples}
	if kind == PeerLatency {
		base.SizeBytes = ChaseBytes
	}
	err := r.dev.OpenPeer(addr)
	switch kind {
	case PeerCopy:
		var rate Measured
		if err == nil {
			rate, err = r.dev.PeerCopy(addr)
		}
		return []Result{withRate(directed(base, DirToPeer), rate, err)}
	case PeerBidirectional:
		var to, from Measured
		if err == nil {
			to, from, err = r.dev.PeerBidirectional(addr)
		}
		return []Result{withRate(directed(base, DirToPeer), to, err), withRate(directed(base, DirFromPeer), from, err)}
	}
	var seconds Measured
	if err == nil {
		seconds, err = r.dev.PeerLatency(addr)
	}
	return []Result{withSeconds(base, seconds, err)}
}

// storage measures one storage probe in o.StorageDir.
func (r *gpuRound) storage(kind Kind) Result {
	res := Result{Probe: kind, Direction: DirStorageToDevice, SizeBytes: r.o.StorageBytes, Samples: r.o.Samples}
	if kind == DeviceToStorage {
		res.Direction, res.Samples = DirDeviceToStorage, 1
	}
	sg, ok := r.dev.(StorageGPU)
	if !ok {
		return errResult(res, errors.New("this measurer cannot measure storage"))
	}
	var m StorageMeasured
	var err error
	if kind == DeviceToStorage {
		m, err = sg.StorageWrite(r.o.StorageDir)
	} else {
		m, err = sg.StorageRead(r.o.StorageDir)
	}
	res.StorageMode, res.StorageFilesystem, res.StorageDrive, res.StorageNote = m.Mode, m.Filesystem, m.Drive, m.Note
	if skip, ok := errors.AsType[*Skip](err); ok {
		res.Skipped = skip
		return res
	}
	return withRate(res, m.Rate, err)
}

func directed(r Result, dir string) Result {
	r.Direction = dir
	return r
}

// withRate is r with its rate and the extremes of its samples, or with
// why it has none.
func withRate(r Result, rate Measured, err error) Result {
	if err != nil {
		return errResult(r, err)
	}
	r.BytesPerSecond = rate.Median
	r.SampleMin, r.SampleMax = rate.Min, rate.Max
	return r
}

func withSeconds(r Result, seconds Measured, err error) Result {
	if err != nil {
		return errResult(r, err)
	}
	r.Seconds = seconds.Median
	r.SampleMin, r.SampleMax = seconds.Min, seconds.Max
	return r
}

func nodeRef(node int) *int {
	if node < 0 {
		return nil
	}
	return &node
}

// errResult is a probe that gave no value, with why.
func errResult(r Result, err error) Result {
	r.Error = err.Error()
	return r
}

// median of a non-empty sample; the mean of the middle two for an even
// count.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ChaseBytes is the size of what the latency probes chase, nvbandwidth's
// 2 MiB, and so the SizeBytes of a latency result.
const ChaseBytes = 2 << 20

package probes

// This file is the JSON contract between the probe child and the daemon.

import "time"

// ContractVersion changes whenever the JSON below changes incompatibly; the
// daemon refuses a round of another version rather than misread it.
const ContractVersion = 1

// Kind names one probe. Each kind is one function in the child.
type Kind string

// The probes, in the order a round runs them.
const (
	HostToDevice      Kind = "host_to_device"     // copy engine, pinned host memory
	DeviceToHost      Kind = "device_to_host"     // copy engine, pinned host memory
	HostBidirectional Kind = "host_bidirectional" // both at once, one result per direction
	DeviceLocalCopy   Kind = "device_local_copy"  // HBM to HBM on one GPU, read and write bytes counted
	PeerCopy          Kind = "peer_copy"          // this GPU's copy engine writes into the peer
	// PeerBidirectional and PeerLatency measure each pair once, in the round
	// of its lower-addressed GPU: both are symmetric, and each pair costs
	// both GPUs a context and GPU time.
	PeerBidirectional Kind = "peer_bidirectional" // both GPUs write into each other at once
	HostLatency       Kind = "host_latency"       // pointer chase by one GPU thread in pinned host memory
	PeerLatency       Kind = "peer_latency"       // pointer chase in the peer's memory
	LaunchLatency     Kind = "launch_latency"     // empty kernel, launch to completion seen by the host
	// The storage probes run only where Options.StorageDir names a
	// directory: they spend a drive's bandwidth. The write comes first, since
	// it makes the file the read reads.
	DeviceToStorage Kind = "device_to_storage" // GPU memory written to a file of the probe's own
	StorageToDevice Kind = "storage_to_device" // that file read into GPU memory (cuFile, else O_DIRECT and a copy)
)

// Kinds lists every probe kind in run order.
var Kinds = []Kind{HostToDevice, DeviceToHost, HostBidirectional, DeviceLocalCopy,
	PeerCopy, PeerBidirectional, HostLatency, PeerLatency, LaunchLatency,
	DeviceToStorage, StorageToDevice}

// StorageKinds are the probes that touch a drive.
var StorageKinds = []Kind{DeviceToStorage, StorageToDevice}

// KindNames are the probe kinds as strings, in run order (for flags and
// error messages).
func KindNames() []string { return asStrings(Kinds) }

// asStrings is v as strings: probe kinds and collectives as flags and
// messages name them.
func asStrings[T ~string](v []T) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = string(x)
	}
	return out
}

// Directions a bandwidth result counts bytes in.
const (
	DirHostToDevice = "host_to_device"
	DirDeviceToHost = "device_to_host"
	// DirLocal counts every byte read and every byte written, so a local
	// copy compares directly with the HBM's peak bandwidth.
	DirLocal    = "local"
	DirToPeer   = "to_peer"   // written by this GPU into the peer
	DirFromPeer = "from_peer" // written by the peer into this GPU
	// DirStorageToDevice and DirDeviceToStorage are the storage probes'.
	DirStorageToDevice = "storage_to_device"
	DirDeviceToStorage = "device_to_storage"
)

// How a storage probe moved its bytes (Result.StorageMode).
const (
	// StorageNative: cuFile with nvidia-fs serving the file's storage,
	// DMA between drive and GPU memory.
	StorageNative = "native"
	// StorageCompat: cuFile in compatibility mode, which bounces through
	// host memory: what GDS does silently when nvidia-fs is not loaded or
	// does not serve the filesystem.
	StorageCompat = "compat"
	// StoragePOSIX: no cuFile (the library is absent or its driver would
	// not open): O_DIRECT reads into pinned host memory, then a copy.
	StoragePOSIX = "posix"
)

// Why a storage probe did not run (Skip.Reason).
const (
	SkipStorageMissingDir = "missing_dir"  // the directory is not there, or not a directory
	SkipStorageDiskFull   = "disk_full"    // too little free space for the probe's file
	SkipStorageNoDirectIO = "no_direct_io" // the filesystem refuses O_DIRECT (tmpfs, some FUSE)
	SkipStoragePermission = "permission"   // the probe may not create a file there
)

// Skip is a probe that did not run, and why; not a failure of the path.
type Skip struct {
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

func (s *Skip) Error() string { return s.Reason + ": " + s.Detail }

// Result is one measurement. Exactly one of BytesPerSecond and Seconds is
// set when Error is empty.
type Result struct {
	Probe     Kind   `json:"probe"`
	Direction string `json:"direction,omitempty"`
	// Peer is the peer GPU's PCI address (sysfs form) for peer probes.
	Peer string `json:"peer,omitempty"`
	// HostNUMANode is the node the pinned host buffer's pages were bound to
	// and verified on; absent for probes that touch no host memory and when
	// the buffer was left unbound (a kernel without NUMA support).
	HostNUMANode *int `json:"host_numa_node,omitempty"`
	// SizeBytes is the size of one transfer (bandwidth) or of the chased
	// buffer (latency).
	SizeBytes int64 `json:"size_bytes"`
	// Samples is how many timed samples the median was taken over.
	Samples int `json:"samples"`

	BytesPerSecond float64 `json:"bytes_per_second,omitempty"`
	Seconds        float64 `json:"seconds,omitempty"`
	// SampleMin and SampleMax are the lowest and highest of the timed
	// samples the median was taken over, in the unit of the value; absent
	// where not known. Their spread says whether something shared the GPU
	// or the link while the samples ran (see Spread).
	SampleMin float64 `json:"sample_min,omitempty"`
	SampleMax float64 `json:"sample_max,omitempty"`
	// ExpectedBytesPerSecond is what the path should give at most (see
	// Expect); 0 when the path is not known.
	ExpectedBytesPerSecond float64 `json:"expected_bytes_per_second,omitempty"`

	// Storage probes: how the bytes moved (StorageNative, StorageCompat,
	// StoragePOSIX), the filesystem the file was on, and the NVMe drive
	// under it (sysfs form; empty where it is no local NVMe drive).
	StorageMode       string `json:"storage_mode,omitempty"`
	StorageFilesystem string `json:"storage_filesystem,omitempty"`
	StorageDrive      string `json:"storage_drive,omitempty"`
	// StorageNote says, in posix mode, why cuFile did not move the bytes.
	StorageNote string `json:"storage_note,omitempty"`
	// Skipped is set, and nothing else of the outcome, when the probe did
	// not run for a reason of its setting rather than of the path.
	Skipped *Skip `json:"skipped,omitempty"`

	Error string `json:"error,omitempty"`
}

// LinkUnderLoad is the GPU's PCIe link state read while a host-to-device
// copy was moving data: idle GPUs lower their link generation, so only this
// reading proves a downtrained link.
type LinkUnderLoad struct {
	Generation int `json:"generation"`
	Width      int `json:"width"`
	// Confirmed is true when the copy was verifiably still running after
	// the link was read.
	Confirmed bool `json:"confirmed"`
}

// GPURound is one GPU's part of a round.
type GPURound struct {
	PCIBusID string `json:"pci_bus_id"`
	// CUDADevice is the CUDA ordinal the bus id resolved to in the child.
	CUDADevice int      `json:"cuda_device"`
	Name       string   `json:"name,omitempty"`
	Results    []Result `json:"results"`

	LinkUnderLoad *LinkUnderLoad `json:"link_under_load,omitempty"`

	// BusySeconds is the GPU time the probes' timed work took (the sum of
	// every event-timed interval and latency kernel, warm-up included).
	BusySeconds float64 `json:"busy_seconds"`
	// PeerBusySeconds is the part of BusySeconds spent on peer probes, by
	// peer address: that time loaded the peer too.
	PeerBusySeconds map[string]float64 `json:"peer_busy_seconds,omitempty"`
	// ContextSeconds is how long the child held a context on the GPU.
	ContextSeconds float64 `json:"context_seconds"`
	// DeviceMemoryBytes is the most device memory the probes allocated on
	// this GPU at once; ContextMemoryBytes the device memory in use on the
	// GPU, every process's, with the context and those allocations in
	// place (0 if unknown): under the idle policy, the probe's footprint.
	DeviceMemoryBytes  int64 `json:"device_memory_bytes"`
	ContextMemoryBytes int64 `json:"context_memory_bytes,omitempty"`
	// HostMemoryBytes is the pinned host memory held at most at once.
	HostMemoryBytes int64 `json:"host_memory_bytes"`

	// Error is set when the GPU could not be probed at all (no context);
	// single probes that fail carry their own Error.
	Error string `json:"error,omitempty"`

	// Contention is what the daemon saw share the GPU, or a peer it
	// measured against, while the round ran (the scheduler fills it in;
	// the child never does). nil when nothing was judged.
	Contention *Contention `json:"contention,omitempty"`
}

// Round is what one run of the child prints on stdout.
type Round struct {
	Version int       `json:"version"`
	Started time.Time `json:"started"`
	// PID is the process that measured, as the daemon's PID namespace
	// sees it (the runner that started it sets it): its own contexts are
	// on the GPUs it probes and are no contention.
	PID           int        `json:"pid,omitempty"`
	Seconds       float64    `json:"seconds"`
	DriverVersion int        `json:"cuda_driver_version"` // 13000 for CUDA 13.0
	GPUs          []GPURound `json:"gpus"`
}

// OK reports whether every probe of the GPU produced a value.
func (g *GPURound) OK() bool {
	if g.Error != "" {
		return false
	}
	for _, r := range g.Results {
		if r.Error != "" {
			return false
		}
	}
	return true
}

// Options are what a round measures and how hard; the daemon passes them to
// the child as flags and the child's table mode takes the same ones.
type Options struct {
	// GPU is the PCI address of the GPU to probe.
	GPU string
	// Peers are the PCI addresses of GPUs to run peer probes against;
	// pairs without peer access are reported as errors, not skipped.
	Peers []string
	// HostNodes are the NUMA nodes to place the pinned host buffer on in
	// turn; empty means unbound memory (no NUMA support).
	HostNodes []int
	// Probes to run; empty means all.
	Probes []Kind
	// SizeBytes is one transfer's size for bandwidth probes.
	SizeBytes int64
	// Samples is how many timed samples each result's median is taken
	// over, after one warm-up.
	Samples int
	// StorageDir is where the storage probes write their file; empty
	// leaves them out of the round.
	StorageDir string
	// StorageBytes is the size of the storage probes' file: written once,
	// read Samples times.
	StorageBytes int64
}

// Default sizes: 64 MiB transfers sit where the borrowed H200's host copies
// reach their plateau (55.4 GB/s at 64 MiB against 55.6 at 512 MiB) while a
// round stays within a few hundred MiB of device memory. Three samples
// after the warm-up: copies agree with the reference to 0.7% or better and
// move less than that between samples, and each sample a job beside the
// probe does not lose counts (bench/RESULTS.md, 2026-11-22).
const (
	DefaultSizeBytes = 64 << 20
	DefaultSamples   = 3
	// DefaultStorageBytes: 1 GiB is a few tenths of a second on an NVMe
	// drive, long enough that opening the file and the first request's
	// latency are a small part of it.
	DefaultStorageBytes = 1 << 30
)

package probes

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/alecthomas/units"
)

// Defaults of the collective options, as nccl-tests' -w 5 -n 20 and a size
// past the all-reduce plateau of an 8-GPU NVLink node (about 256 MiB in
// nccl-tests' sweeps); 8 KiB is deep in the latency-bound range at any
// rank count the probe uses.
const (
	DefaultCollectiveSizeBytes  = 256 << 20
	DefaultCollectiveSmallBytes = 8 << 10
	DefaultCollectiveWarmup     = 5
	DefaultCollectiveIterations = 20
	DefaultCollectiveSamples    = 3
)

// Limits of the collective options. The size has the copy probes' range
// and reason (each GPU holds a send and a receive buffer of it). The small
// size measures latency: past 1 MiB an operation is bandwidth-bound on
// every link NCCL uses, and below 1 KiB nothing is faster, so the range
// only keeps a latency from being mislabelled; it must also give every
// rank at least one float. Warm-up and iterations are bounded so that a
// round at the largest size still ends in minutes on a slow transport.
const (
	MinCollectiveSmallBytes = 1 << 10
	MaxCollectiveSmallBytes = 1 << 20
	MaxCollectiveWarmup     = 1000
	MaxCollectiveIterations = 1000
	// MaxCollectiveRanks bounds a communicator: two nodes of the largest
	// NVLink domains the probe is meant for, with room to spare.
	MaxCollectiveRanks = 1024
)

// DefaultCollectiveOptions are the options with every size and count at
// its default: what the daemon's flags and the command's give unless set.
func DefaultCollectiveOptions() CollectiveOptions {
	return CollectiveOptions{SizeBytes: DefaultCollectiveSizeBytes, SmallBytes: DefaultCollectiveSmallBytes,
		Warmup: DefaultCollectiveWarmup, Iterations: DefaultCollectiveIterations, Samples: DefaultCollectiveSamples}
}

// Validate checks the collective options: sizes, counts and collectives,
// which the daemon checks when it starts (naming its flags), and, once a
// round's GPUs or ranks are set, that the ranks add up and the unique id
// is one. Zero is not a default, except Ranks with no GPUs: the daemon's
// template, whose ranks each round fills in.
func (o CollectiveOptions) Validate() error {
	switch {
	case o.SizeBytes < MinSizeBytes || o.SizeBytes > MaxSizeBytes:
		return &OptionError{Flag: "--collective.size", Value: units.Base2Bytes(o.SizeBytes).String(),
			Want: fmt.Sprintf("want %s to %s", units.Base2Bytes(MinSizeBytes), units.Base2Bytes(MaxSizeBytes))}
	case o.SmallBytes < MinCollectiveSmallBytes || o.SmallBytes > MaxCollectiveSmallBytes:
		return &OptionError{Flag: "--collective.small-size", Value: units.Base2Bytes(o.SmallBytes).String(),
			Want: fmt.Sprintf("want %s to %s", units.Base2Bytes(MinCollectiveSmallBytes), units.Base2Bytes(MaxCollectiveSmallBytes))}
	case o.Warmup < 0 || o.Warmup > MaxCollectiveWarmup:
		return &OptionError{Flag: "--collective.warmup", Value: strconv.Itoa(o.Warmup), Want: fmt.Sprintf("want 0 to %d", MaxCollectiveWarmup)}
	case o.Iterations < 1 || o.Iterations > MaxCollectiveIterations:
		return &OptionError{Flag: "--collective.iterations", Value: strconv.Itoa(o.Iterations), Want: fmt.Sprintf("want 1 to %d", MaxCollectiveIterations)}
	case o.Samples < 1 || o.Samples > MaxSamples:
		return &OptionError{Flag: "--collective.samples", Value: strconv.Itoa(o.Samples), Want: fmt.Sprintf("want 1 to %d", MaxSamples)}
	}
	for _, c := range o.Collectives {
		if !slices.Contains(Collectives, c) {
			return &OptionError{Flag: "--collective.kind", Value: string(c), Want: "unknown collective; known: " + CollectiveList()}
		}
	}
	if o.Ranks == 0 && len(o.GPUs) == 0 {
		return nil
	}
	return o.validateRanks()
}

// validateRanks checks a round's communicator. These options come from
// the exporter, not from a daemon flag: the errors name the collectives
// command's flags.
func (o CollectiveOptions) validateRanks() error {
	local := len(o.GPUs)
	switch {
	case o.Ranks < 2 || o.Ranks > MaxCollectiveRanks:
		return &OptionError{Flag: "--ranks", Value: strconv.Itoa(o.Ranks), Want: fmt.Sprintf("want 2 to %d: a collective needs two ranks", MaxCollectiveRanks)}
	case o.Ranks < local:
		return &OptionError{Flag: "--ranks", Value: strconv.Itoa(o.Ranks), Want: fmt.Sprintf("want at least the %d GPUs given: each takes a rank", local)}
	case local == 0:
		return &OptionError{Flag: "--gpu", Value: "", Want: "want at least one GPU"}
	case o.FirstRank < 0 || o.FirstRank+local > o.Ranks:
		return &OptionError{Flag: "--first-rank", Value: strconv.Itoa(o.FirstRank),
			Want: fmt.Sprintf("want 0 to %d: %d GPUs from it must fit in %d ranks", o.Ranks-local, local, o.Ranks)}
	case o.UniqueID == "" && o.FirstRank != 0:
		return &OptionError{Flag: "--unique-id", Value: "", Want: "want the id rank 0 made: only the process holding rank 0 makes it"}
	case o.SendRecvOffset < 0 || o.SendRecvOffset >= o.Ranks:
		return &OptionError{Flag: "--send-recv-offset", Value: strconv.Itoa(o.SendRecvOffset),
			Want: fmt.Sprintf("want 0 (every pair) to %d", o.Ranks-1)}
	case o.SmallBytes < 4*int64(o.Ranks):
		return &OptionError{Flag: "--collective.small-size", Value: units.Base2Bytes(o.SmallBytes).String(),
			Want: fmt.Sprintf("want at least 4 bytes (one float) for each of %d ranks", o.Ranks)}
	}
	if o.UniqueID != "" {
		if _, err := ParseUniqueID(o.UniqueID); err != nil {
			return &OptionError{Flag: "--unique-id", Value: shorten(o.UniqueID, 16), Want: "want an NCCL unique id as rank 0 printed it: " + err.Error()}
		}
	}
	for i, g := range o.GPUs {
		if slices.Contains(o.GPUs[:i], g) {
			return &OptionError{Flag: "--gpu", Value: g, Want: "want each GPU once: NCCL gives a GPU one rank"}
		}
	}
	return nil
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// CollectiveList is the collectives for a message or flag help.
func CollectiveList() string { return strings.Join(CollectiveNames(), ", ") }

// Args are the collectives child's flags for o, in a fixed order. o is
// sent as it is: the child validates it again.
func (o CollectiveOptions) Args() []string {
	args := make([]string, 0, 10+len(o.GPUs)+len(o.Collectives))
	for _, g := range o.GPUs {
		args = append(args, "--gpu="+g)
	}
	for _, c := range o.Collectives {
		args = append(args, "--collective="+string(c))
	}
	args = append(args,
		"--size="+strconv.FormatInt(o.SizeBytes, 10),
		"--small-size="+strconv.FormatInt(o.SmallBytes, 10),
		"--warmup="+strconv.Itoa(o.Warmup),
		"--iters="+strconv.Itoa(o.Iterations),
		"--samples="+strconv.Itoa(o.Samples),
		"--ranks="+strconv.Itoa(o.Ranks),
		"--first-rank="+strconv.Itoa(o.FirstRank))
	if o.UniqueID != "" {
		args = append(args, "--unique-id="+o.UniqueID)
	}
	if o.Peer != "" {
		args = append(args, "--peer="+o.Peer)
	}
	if o.SendRecvOffset > 0 {
		args = append(args, "--send-recv-offset="+strconv.Itoa(o.SendRecvOffset))
	}
	return args
}

package probes

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/alecthomas/units"
)

// Limits of the options: below 1 MiB a copy measures launch cost, not the
// link; above 4 GiB a round would hold more memory than a probe should.
// More than 100 samples only makes a round longer.
const (
	MinSizeBytes = 1 << 20
	MaxSizeBytes = 4 << 30
	MaxSamples   = 100
	// MaxStorageBytes bounds the storage probes' file: what a drive gives
	// shows within a second or two, and a probe should not fill a disk.
	MaxStorageBytes = 64 << 30
)

// OptionError is an option out of its range. It names the daemon's flag
// for the option; the probe command names its own.
type OptionError struct {
	Flag  string // --probe.size, --probe.samples or --probe.kind
	Value string
	// Want says what the flag takes.
	Want string
}

func (e *OptionError) Error() string { return fmt.Sprintf("%s=%s: %s", e.Flag, e.Value, e.Want) }

// Validate checks the options a round measures with: the transfer size,
// the samples and the probe kinds. The daemon checks them when it starts,
// the probe child and the simulated node before a round. Zero is not a
// default: the flags have theirs.
func (o Options) Validate() error {
	if o.SizeBytes < MinSizeBytes || o.SizeBytes > MaxSizeBytes {
		return &OptionError{Flag: "--probe.size", Value: units.Base2Bytes(o.SizeBytes).String(),
			Want: fmt.Sprintf("want %s to %s", units.Base2Bytes(MinSizeBytes), units.Base2Bytes(MaxSizeBytes))}
	}
	if o.Samples < 1 || o.Samples > MaxSamples {
		return &OptionError{Flag: "--probe.samples", Value: strconv.Itoa(o.Samples), Want: fmt.Sprintf("want 1 to %d", MaxSamples)}
	}
	for _, k := range o.Probes {
		if !slices.Contains(Kinds, k) {
			return &OptionError{Flag: "--probe.kind", Value: string(k), Want: "unknown probe; known: " + KindList()}
		}
		if slices.Contains(StorageKinds, k) && o.StorageDir == "" {
			return &OptionError{Flag: "--probe.kind", Value: string(k), Want: "the storage probes need a directory (--probe.storage-dir)"}
		}
	}
	if o.StorageDir == "" {
		return nil
	}
	// O_DIRECT moves whole blocks: a file of whole MiB is whole blocks on
	// every drive and filesystem.
	if o.StorageBytes < MinSizeBytes || o.StorageBytes > MaxStorageBytes || o.StorageBytes%MinSizeBytes != 0 {
		return &OptionError{Flag: "--probe.storage-size", Value: units.Base2Bytes(o.StorageBytes).String(),
			Want: fmt.Sprintf("want whole MiB from %s to %s", units.Base2Bytes(MinSizeBytes), units.Base2Bytes(MaxStorageBytes))}
	}
	return nil
}

// KindList is the probe kinds for a message or flag help.
func KindList() string { return strings.Join(KindNames(), ", ") }

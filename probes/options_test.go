package probes

import (
	"strings"
	"testing"
)

func TestOptionsValidate(t *testing.T) {
	ok := Options{SizeBytes: DefaultSizeBytes, Samples: DefaultSamples}
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string // "" for valid
	}{
		{"defaults", func(*Options) {}, ""},
		{"smallest", func(o *Options) { o.SizeBytes, o.Samples = 1<<20, 1 }, ""},
		{"largest", func(o *Options) { o.SizeBytes, o.Samples = 4<<30, 100 }, ""},
		{"every kind", func(o *Options) { o.Probes, o.StorageDir, o.StorageBytes = Kinds, "/data", DefaultStorageBytes }, ""},
		{"storage without a directory", func(o *Options) { o.Probes = []Kind{StorageToDevice} },
			"--probe.kind=storage_to_device: the storage probes need a directory (--probe.storage-dir)"},
		{"storage size not whole MiB", func(o *Options) { o.StorageDir, o.StorageBytes = "/data", 1<<20+4096 },
			"--probe.storage-size=1MiB4KiB: want whole MiB from 1MiB to 64GiB"},
		{"storage size zero", func(o *Options) { o.StorageDir = "/data" }, "--probe.storage-size=0B: want whole MiB"},
		{"size zero", func(o *Options) { o.SizeBytes = 0 }, "--probe.size=0B: want 1MiB to 4GiB"},
		{"size below", func(o *Options) { o.SizeBytes = 1<<20 - 1 }, "--probe.size=1023KiB1023B: want 1MiB to 4GiB"},
		{"size above", func(o *Options) { o.SizeBytes = 8 << 30 }, "--probe.size=8GiB: want 1MiB to 4GiB"},
		{"size negative", func(o *Options) { o.SizeBytes = -1 }, "--probe.size=-1B: want 1MiB to 4GiB"},
		{"samples zero", func(o *Options) { o.Samples = 0 }, "--probe.samples=0: want 1 to 100"},
		{"samples negative", func(o *Options) { o.Samples = -3 }, "--probe.samples=-3: want 1 to 100"},
		{"samples above", func(o *Options) { o.Samples = 500 }, "--probe.samples=500: want 1 to 100"},
		{"unknown kind", func(o *Options) { o.Probes = []Kind{HostToDevice, "warp_drive"} },
			"--probe.kind=warp_drive: unknown probe; known: host_to_device, device_to_host, host_bidirectional,"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

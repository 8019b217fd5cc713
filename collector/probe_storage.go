package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/probes"
)

// probeStorageDescs are what the storage probes report beside their
// bandwidth (gpulink_probe_bandwidth_bytes_per_second with probe
// storage_to_device or device_to_storage): how the bytes moved, and why a
// probe did not run.
type probeStorageDescs struct {
	mode, skipped *prometheus.Desc
}

func newProbeStorageDescs() probeStorageDescs {
	return probeStorageDescs{
		mode: gpuDesc("probe", "storage_mode_info",
			"How the GPU's latest storage probe moved its bytes: mode native (cuFile with nvidia-fs, drive to GPU memory directly), compat "+
				"(cuFile's compatibility mode, through a host bounce buffer: what GPUDirect Storage does silently when nvidia-fs is missing or "+
				"does not serve the filesystem) or posix (no cuFile: O_DIRECT into pinned host memory, then a copy); the filesystem and the "+
				"NVMe drives under the probe's directory (comma-joined for a RAID, empty for none); value 1.",
			"probe", "mode", "filesystem", "drive_pci_bus_id"),
		skipped: gpuDesc("probe", "storage_skipped",
			"Present, at 1, for a storage probe of the GPU's latest round that did not run for a reason of its setting: missing_dir, "+
				"disk_full, no_direct_io (the filesystem refuses O_DIRECT), permission. Not a failure of the path.",
			"probe", "reason"),
	}
}

func (d *probeStorageDescs) describe(ch chan<- *prometheus.Desc) { ch <- d.mode; ch <- d.skipped }

// render renders r if it is a storage probe's mode or skip, and reports
// whether it was a skip (which has no value, and is no failure).
func (d *probeStorageDescs) render(o *probeOut, r probes.Result) (skipped bool) {
	if r.Skipped != nil {
		o.once(d.skipped, prometheus.GaugeValue, 1, string(r.Probe), r.Skipped.Reason)
		return true
	}
	if r.StorageMode != "" && r.Error == "" {
		o.once(d.mode, prometheus.GaugeValue, 1, string(r.Probe), r.StorageMode, r.StorageFilesystem, r.StorageDrive)
	}
	return false
}

package collector_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/scrape/scrapetest"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// The DGX H100 as modelled (its four drives' RAID 0 on /raid, XFS,
// nvidia-fs loaded), with nvidia-fs's counters, and a cuFile
// configuration that forbids compatibility mode.
func TestTopologyStorageMetrics(t *testing.T) {
	fs := fixtureFS(t, "dgx-h100")
	for _, err := range []error{
		os.MkdirAll(filepath.Join(fs.Proc, "driver", "nvidia-fs"), 0o755),
		os.WriteFile(filepath.Join(fs.Proc, "driver", "nvidia-fs", "stats"), []byte("NVFS Driver(version: 2:17:5)\nReads : err=1 io_state_err=0\nWrites : err=0\nOps : Read=10 Write=2 BatchIO=0\n"), 0o644),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	config := filepath.Join(t.TempDir(), "cufile.json")
	if err := os.WriteFile(config, []byte(`{"properties": {"allow_compat_mode": false}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := topologyCollectorWith(t, fs, config, identities{{Index: 0, UUID: "GPU-a", PCIBusID: "0000:18:00.0"}})
	scrapetest.CheckText(t, c)
	g0 := func(kv ...string) string {
		return labels(append([]string{"gpu", "0", "pci_bus_id", "0000:18:00.0", "uuid", "GPU-a"}, kv...)...)
	}
	values := gatherByLabels(t, c)
	for series, want := range map[string]float64{
		`gpulink_topology_gpu_drive_path` + g0("drive_pci_bus_id", "0000:1a:00.0", "path", "PIX"):                                                                     10,
		`gpulink_topology_gpu_drive_path` + g0("drive_pci_bus_id", "0000:bc:00.0", "path", "SYS"):                                                                     50,
		`gpulink_topology_gpu_nearest_drive_info` + g0("drive_pci_bus_id", "0000:1a:00.0", "path", "PIX"):                                                             1,
		`gpulink_storage_mount_info` + labels("drive_pci_bus_id", "0000:1a:00.0", "fstype", "xfs", "gds_native", "true", "mountpoint", "/raid", "source", "/dev/md0"): 1,
		`gpulink_storage_mount_info` + labels("drive_pci_bus_id", "0000:bc:00.0", "fstype", "xfs", "gds_native", "true", "mountpoint", "/raid", "source", "/dev/md0"): 1,
		`gpulink_gds_mount_native` + labels("fstype", "xfs", "mountpoint", "/raid"):                                                                                   1,
		`gpulink_gds_nvidia_fs_loaded{}`:                                1,
		`gpulink_gds_nvidia_fs_info` + labels("version", "2.17.5"):      1,
		`gpulink_gds_nvidia_fs_operations_total` + labels("op", "read"): 10,
		`gpulink_gds_nvidia_fs_errors_total` + labels("op", "read"):     1,
		`gpulink_gds_cufile_config_found` + labels("path", config):      1,
		`gpulink_gds_compat_mode_allowed{}`:                             0,
	} {
		if got, ok := values[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if _, ok := values[`gpulink_gds_mount_native`+labels("fstype", "overlay", "mountpoint", "/")]; ok {
		t.Error("a mount on no drive is exported")
	}
}

func TestProbeStorageMetrics(t *testing.T) {
	round := &probes.GPURound{PCIBusID: "0000:00:06.0", Results: []probes.Result{
		{Probe: probes.StorageToDevice, Direction: probes.DirStorageToDevice, SizeBytes: 1 << 30, Samples: 3, BytesPerSecond: 6.5e9,
			ExpectedBytesPerSecond: 7.88e9, StorageMode: probes.StorageCompat, StorageFilesystem: "xfs", StorageDrive: "0000:1a:00.0"},
		{Probe: probes.DeviceToStorage, Direction: probes.DirDeviceToStorage, SizeBytes: 1 << 30,
			Skipped: &probes.Skip{Reason: probes.SkipStorageDiskFull, Detail: "/data has 10 MiB free"}},
	}}
	c := collector.NewProbeCollector(fixed(&schedule.Status{Policy: "idle", GPUs: []schedule.GPUStatus{
		{Index: 0, UUID: "GPU-a", PCIBusID: "0000:00:06.0", Last: round, Runs: map[string]uint64{}, Skips: map[string]uint64{}}}}))
	scrapetest.CheckText(t, c)
	values := gathered(t, c)
	for series, want := range map[string]float64{
		`gpulink_probe_storage_mode_info` + g0("drive_pci_bus_id", "0000:1a:00.0", "filesystem", "xfs", "mode", "compat", "probe", "storage_to_device"):                                        1,
		`gpulink_probe_storage_skipped` + g0("probe", "device_to_storage", "reason", "disk_full"):                                                                                              1,
		`gpulink_probe_bandwidth_bytes_per_second` + g0("direction", "storage_to_device", "host_numa_node", "", "peer", "", "probe", "storage_to_device", "transfer_size_bytes", "1073741824"): 6.5e9,
		`gpulink_probe_expected_bandwidth_bytes_per_second` + g0("peer", "", "probe", "storage_to_device"):                                                                                     7.88e9,
	} {
		if got, ok := values[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	for series := range values {
		if len(series) > 21 && series[:21] == "gpulink_probe_failed{" {
			t.Errorf("a skipped storage probe rendered as failed: %s", series)
		}
	}
}

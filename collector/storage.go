package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/numa"
)

// storageDescs are the topology's storage side: for every GPU its path to
// each NVMe drive and the nearest ones, the mounts on the drives, and
// GPUDirect Storage's state. A drive's link against its maximum is
// gpulink_pcie_link_width and the rest, which every device has.
type storageDescs struct {
	gpuDrive, gpuNearestDrive, mount          *prometheus.Desc
	nvfsLoaded, nvfsInfo, nvfsOps, nvfsErrors *prometheus.Desc
	configFound, compatAllowed, mountNative   *prometheus.Desc
}

func newStorageDescs() storageDescs {
	return storageDescs{
		gpuDrive: gpuDesc("topology", "gpu_drive_path",
			"PCIe path class from the GPU to an NVMe drive, as for NICs (label path); the value is NVML's level: 10 PIX, 20 PXB, 30 PHB, 40 NODE, 50 SYS. "+
				"Data read from a drive across the socket interconnect (SYS) crosses it twice with GPUDirect Storage's bounce.",
			"drive_pci_bus_id", "path"),
		gpuNearestDrive: gpuDesc("topology", "gpu_nearest_drive_info",
			"The NVMe drives closest to the GPU (all that tie); value 1.", "drive_pci_bus_id", "path"),
		mount: newDesc("storage", "mount_info",
			"A filesystem mounted on an NVMe drive (one series per drive under it: an md RAID has several), as this process's mount table shows it; "+
				"gds_native is true where cuFile can serve the filesystem directly once nvidia-fs is loaded (ext4 but for data=journal, XFS, "+
				"the distributed filesystems GDS supports); value 1.",
			"mountpoint", "fstype", "source", "drive_pci_bus_id", "gds_native"),
		nvfsLoaded: newDesc("gds", "nvidia_fs_loaded",
			"1 if the nvidia_fs module (GPUDirect Storage's kernel driver) is loaded; without it cuFile reads bounce through host memory "+
				"(compatibility mode) or fail. Absent where sysfs has no module directory."),
		nvfsInfo: newDesc("gds", "nvidia_fs_info",
			"nvidia-fs as /proc/driver/nvidia-fs/stats describes itself; value 1.", "version"),
		nvfsOps: newDesc("gds", "nvidia_fs_operations_total",
			"Reads and writes nvidia-fs served directly between storage and GPU memory (op read or write).", "op"),
		nvfsErrors: newDesc("gds", "nvidia_fs_errors_total",
			"Reads and writes nvidia-fs failed (op read or write).", "op"),
		configFound: newDesc("gds", "cufile_config_found",
			"1 if cuFile's configuration file is where cuFile looks (label path: $CUFILE_ENV_PATH_JSON or /etc/cufile.json); GDS's "+
				"packages install it, so 0 says GDS is not installed here.", "path"),
		compatAllowed: newDesc("gds", "compat_mode_allowed",
			"1 if cuFile's configuration lets it fall back to compatibility mode (POSIX I/O through a host bounce buffer) where it "+
				"cannot go direct (properties.allow_compat_mode; cuFile's default is 1); 0: such reads fail instead."),
		mountNative: newDesc("gds", "mount_native",
			"1 if cuFile would read this mount's files directly into GPU memory: nvidia-fs loaded, a filesystem it serves, and the "+
				"configuration not forcing compatibility mode (properties.force_compat_mode); 0 if "+
				"it would fall back to compatibility mode (or fail where that is not allowed). One series per mount on an NVMe drive.",
			"mountpoint", "fstype"),
	}
}

func (d *storageDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.gpuDrive, d.gpuNearestDrive, d.mount, d.nvfsLoaded, d.nvfsInfo,
		d.nvfsOps, d.nvfsErrors, d.configFound, d.compatAllowed, d.mountNative} {
		ch <- x
	}
}

// renderGPU renders one GPU's paths to the drives; o.Labels are the GPU's.
func (d *storageDescs) renderGPU(o *out, t *numa.Topology, g *numa.PCIDevice) {
	for _, n := range t.NVMe {
		p := t.Path(g, n)
		o.gauge(d.gpuDrive, float64(p), n.Address, p.String())
	}
	nearest, p := t.NearestDrives(g)
	for _, n := range nearest {
		o.gauge(d.gpuNearestDrive, 1, n.Address, p.String())
	}
}

// render renders the mounts and GDS's state.
func (d *storageDescs) render(o *out, t *numa.Topology) {
	o.Labels = nil
	g := &t.GDS
	o.optBool(d.nvfsLoaded, g.NVFSLoaded)
	if s := g.NVFS; s != nil {
		if s.Version != "" {
			o.gauge(d.nvfsInfo, 1, s.Version)
		}
		o.optUint(d.nvfsOps, prometheus.CounterValue, s.Reads, "read")
		o.optUint(d.nvfsOps, prometheus.CounterValue, s.Writes, "write")
		o.optUint(d.nvfsErrors, prometheus.CounterValue, s.ReadErrors, "read")
		o.optUint(d.nvfsErrors, prometheus.CounterValue, s.WriteErrors, "write")
	}
	if g.Config.Path != "" {
		o.gauge(d.configFound, boolFloat(g.Config.Found), g.Config.Path)
		o.gauge(d.compatAllowed, boolFloat(g.Config.AllowCompat))
	}
	direct := g.NVFSLoaded.Valid && g.NVFSLoaded.V && !g.Config.ForceCompat
	seen := map[string]bool{}
	for _, m := range t.Mounts {
		capable := numa.NativeFilesystem(m.FSType, m.Options)
		for _, drive := range m.Drives {
			o.gauge(d.mount, 1, m.MountPoint, m.FSType, m.Source, drive, boolString(capable))
		}
		// A mount point mounted over twice shows its top mount's.
		if !seen[m.MountPoint] {
			seen[m.MountPoint] = true
			o.gauge(d.mountNative, boolFloat(direct && capable), m.MountPoint, m.FSType)
		}
	}
}

func boolString(b bool) string { return strconv.FormatBool(b) }

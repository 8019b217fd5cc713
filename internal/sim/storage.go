package sim

import (
	"slices"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
)

// The storage fault: nvidia_fs_missing unloads nvidia-fs on a node with
// GPUDirect Storage installed, so cuFile silently falls back to
// compatibility mode there. A drive's link trained narrow is pcie_width
// with the drive as its device.

// checkNVFSMissing refuses a node where the fault would change nothing:
// nvidia-fs not loaded already.
func checkNVFSMissing(m *machine.Machine) string {
	if !slices.Contains(m.Modules, "nvidia_fs") {
		return "this node has no nvidia_fs loaded: nothing to take away"
	}
	return ""
}

func applyStorage(m *machine.Machine, f Fault) {
	if f.Kind == NVFSMissing {
		m.Modules = slices.DeleteFunc(slices.Clone(m.Modules), func(name string) bool { return name == "nvidia_fs" })
	}
}

// The storage probes of the simulated node: what a drive's file reads at
// from the topology the daemon samples (mounts, drives, links, nvidia-fs,
// cuFile's configuration). cuFile always loads here, as from a
// framework's wheel; it goes direct where GDS is installed, nvidia-fs is
// loaded and the filesystem is one it serves, and bounces through host
// memory otherwise.
const (
	// nvmeReadEfficiency: a Gen4 x4 drive reads 7.0 of its link's 7.88
	// GB/s; writes come in lower.
	nvmeReadEfficiency  = 0.89
	nvmeWriteEfficiency = 0.7
	// compatShare is what the host bounce leaves of it.
	compatShare = 0.6
)

func (m *model) StorageWrite(dir string) (probes.StorageMeasured, error) {
	return m.storage(probes.DeviceToStorage, dir, nvmeWriteEfficiency, 1)
}

func (m *model) StorageRead(dir string) (probes.StorageMeasured, error) {
	return m.storage(probes.StorageToDevice, dir, nvmeReadEfficiency, m.o.Samples)
}

func (m *model) storage(kind probes.Kind, dir string, efficiency float64, passes int) (probes.StorageMeasured, error) {
	if m.topo == nil {
		return probes.StorageMeasured{}, errPathUnknown
	}
	var mount *numa.DriveMount
	for i, mt := range m.topo.Mounts {
		if (dir == mt.MountPoint || strings.HasPrefix(dir, strings.TrimSuffix(mt.MountPoint, "/")+"/")) &&
			(mount == nil || len(mt.MountPoint) > len(mount.MountPoint)) {
			mount = &m.topo.Mounts[i]
		}
	}
	if mount == nil {
		return probes.StorageMeasured{}, &probes.Skip{Reason: probes.SkipStorageMissingDir,
			Detail: "stat " + dir + ": no such file or directory (no filesystem of the simulated node's drives holds it)"}
	}
	gds := m.topo.GDS
	res := probes.StorageMeasured{Mode: probes.StorageCompat, Filesystem: mount.FSType, Drive: strings.Join(mount.Drives, ",")}
	if gds.Config.Found && !gds.Config.ForceCompat && gds.NVFSLoaded.Valid && gds.NVFSLoaded.V && numa.NativeFilesystem(mount.FSType, mount.Options) {
		res.Mode = probes.StorageNative
	}
	gpu := m.topo.Device(m.self.PCIBusID)
	rate := 0.0
	for _, addr := range mount.Drives {
		if d := m.topo.Device(addr); d != nil && gpu != nil {
			if h, ok := m.topo.SlowestHopBetween(gpu, d, false); ok {
				rate += h.Bandwidth(false)
			}
		}
	}
	rate = min(rate, m.currentHost(m.self.PCIBusID)) * efficiency
	if res.Mode == probes.StorageCompat {
		rate *= compatShare
	}
	m.hold(0, 1)
	if res.Rate = m.bandwidth(kind, "", rate); res.Rate.Median <= 0 {
		return res, errPathUnknown
	}
	m.busy += float64(passes) * float64(m.o.StorageBytes) / res.Rate.Median
	return res, nil
}

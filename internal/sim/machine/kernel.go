package machine

import (
	"fmt"
	"slices"
)

// What the kernel says of itself and its drivers, and what GPUDirect
// depends on: the release, the NVIDIA driver's flavour and version, the
// loaded modules (nvidia_peermem among them) and the IOMMU groups.

// nvidiaVersionFile is /proc/driver/nvidia/version as the two flavours of
// the driver print it: the build line (flavour, version, build date), then
// the compiler. The open kernel modules say "Open Kernel Module".
func nvidiaVersionFile(d *NVIDIADriver) string {
	const gcc = "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n"
	if d.Open {
		return "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  " + d.Version +
			"  Release Build  (dvs-builder@U16-I3-B03-4-3)  Fri May 31 09:30:47 UTC 2024\n" + gcc
	}
	return "NVRM version: NVIDIA UNIX x86_64 Kernel Module  " + d.Version + "  Tue Mar  5 22:42:15 UTC 2024\n" + gcc
}

// kernel writes proc/sys/kernel/osrelease, proc/driver/nvidia/version,
// sys/module and sys/kernel/iommu_groups.
func (w *writer) kernel() {
	m, t := w.m, w.t
	if m.Kernel != "" {
		t.line("proc/sys/kernel/osrelease", m.Kernel)
	}
	if d := m.NVIDIADriver; d != nil {
		t.file("proc/driver/nvidia/version", nvidiaVersionFile(d))
	}
	for _, name := range slices.Sorted(slices.Values(m.Modules)) {
		dir := "sys/module/" + name
		t.line(dir+"/initstate", "live")
		if name == "nvidia" && m.NVIDIADriver != nil {
			t.line(dir+"/version", m.NVIDIADriver.Version)
		}
	}
	if m.IOMMU != "" {
		w.iommuGroups()
	}
}

// iommuGroups writes one IOMMU group per root port, holding the port and
// every function below it, and one per other function on a root bus. It
// is what the kernel forms when no port below a root port isolates its
// functions (ACS redirect off, as the profiles have it): a function joins
// the group of the bridge above it unless ACS is enabled on the whole path.
// Groups are formed at boot: a fault that turns redirect on later does not
// regroup.
func (w *writer) iommuGroups() {
	n := 0
	for _, hb := range w.m.HostBridges {
		for _, top := range hb.Devices {
			dir := fmt.Sprintf("sys/kernel/iommu_groups/%d", n)
			w.t.line(dir+"/type", w.m.IOMMU)
			var join func(parent string, d *Device)
			join = func(parent string, d *Device) {
				path := parent + "/" + d.Addr
				w.t.link(dir+"/devices/"+d.Addr, path)
				w.t.link(path+"/iommu_group", dir)
				for _, c := range d.Children {
					join(path, c)
				}
			}
			join("sys/devices/"+hb.Name(), top)
			n++
		}
	}
}

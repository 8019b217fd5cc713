package sim

import (
	"fmt"
	"slices"

	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
)

// The GPUDirect faults: what keeps peer and NIC traffic from the direct
// path although every link is up. acs_redirect turns on ACS redirect at
// one root or downstream port, as the kernel does on every port with ACS
// when the IOMMU translates, or a firmware update does; peermem_missing
// leaves GPUDirect RDMA no way into GPU memory: nvidia_peermem not loaded
// and the driver the proprietary flavour, which offers no dma-buf.

// acsPort is the port an acs_redirect fault names: the one directly above
// its GPU, or its device.
func acsPort(m *machine.Machine, gpus []*machine.Device, f Fault) *machine.Device {
	if f.Device != "" {
		return m.Device(f.Device)
	}
	return m.Parent(gpus[f.GPU].Addr)
}

// checkACSRedirect says what is wrong with an acs_redirect fault on m, or
// "" (with the field) when it fits: the port must have ACS, which root and
// downstream ports do.
func checkACSRedirect(m *machine.Machine, gpus []*machine.Device, f Fault) (field, problem string) {
	port := acsPort(m, gpus, f)
	switch {
	case f.Device == "" && port == nil:
		return "gpu", fmt.Sprintf("GPU %d sits on a root bus: no port above it", f.GPU)
	case port == nil:
		return "device", fmt.Sprintf("no PCI function %s on this node", f.Device)
	case port.MaxGen == 0 || (port.Kind != machine.RootPort && port.Kind != machine.DownstreamPort):
		field := "device"
		if f.Device == "" {
			field = "gpu"
		}
		return field, fmt.Sprintf("%s is not a root or downstream port: only those have ACS", port.Addr)
	}
	return "", ""
}

// checkPeermemMissing refuses a node where the fault would change nothing:
// peermem not loaded and no dma-buf from the driver already.
func checkPeermemMissing(m *machine.Machine) string {
	if !slices.Contains(m.Modules, "nvidia_peermem") && (m.NVIDIADriver == nil || !m.NVIDIADriver.Open) {
		return "this node has neither nvidia_peermem loaded nor an NVIDIA driver that offers dma-buf: nothing to take away"
	}
	return ""
}

// applyGPUDirect lays one GPUDirect fault over m.
func applyGPUDirect(m *machine.Machine, gpus []*machine.Device, f Fault) {
	switch f.Kind {
	case ACSRedirect:
		acsPort(m, gpus, f).ACSControl = machine.ACSRedirect
	case PeermemMissing:
		m.Modules = slices.DeleteFunc(slices.Clone(m.Modules), func(name string) bool { return name == "nvidia_peermem" })
		if d := m.NVIDIADriver; d != nil {
			m.NVIDIADriver = &machine.NVIDIADriver{Version: d.Version}
		}
	}
}

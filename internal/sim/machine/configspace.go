package machine

import (
	"encoding/binary"

	"github.com/gpulink/gpulink_exporter/internal/pciconfig"
)

// A PCIe port's configuration space as sysfs shows it to root
// (/sys/bus/pci/devices/<addr>/config, 4096 bytes): what internal/pciconfig
// reads to tell whether ACS redirects peer traffic below the port. Only
// ports get one; nothing reads an endpoint's.
//
// The layout is the one of internal/pciconfig's fixtures (testdata/
// acs-redirect-on.bin and acs-redirect-off.bin, which TestConfigSpace
// rebuilds byte for byte): the IDs and class in the header, and from 0x100
// the extended capabilities AER (0x100), ACS (0x148) and DPC (0x160).
// Offsets and IDs follow the PCIe Base Specification and the kernel's
// include/uapi/linux/pci_regs.h.

// configSize is the extended configuration space of a PCIe function.
const configSize = 4096

// Extended capability IDs (ACS is pciconfig.ExtCapACS) and where the image
// puts them.
const (
	extCapAER = 0x0001
	extCapDPC = 0x001d
	aerAt     = 0x100
	acsAt     = 0x148
	dpcAt     = 0x160
)

// ACSRedirect is the ACS control the kernel writes into every port that
// has ACS when an IOMMU translates DMA (pci_std_enable_acs: source
// validation, request and completion redirect, upstream forwarding): peer
// requests and completions below the port are sent up to the root complex.
// A port without redirect, as a DGX is set up for GPUDirect, reads 0.
const ACSRedirect = pciconfig.SourceValidation | pciconfig.P2PRequestRedirect | pciconfig.P2PCompletionRedirect | pciconfig.UpstreamForwarding

// acsCapability is the ACS capability register of the ports modelled: every
// control bit from source validation to direct translated P2P implemented.
const acsCapability = 0x007f

// ConfigSpace is a port's configuration space image: vendor, device,
// revision and class in the header; AER, then, where hasACS, the ACS
// capability with its capability register and control, then DPC. A
// switch's upstream port has no ACS (the PCIe specification gives it to
// root ports, downstream ports and multi-function devices): its AER
// capability is the last.
func ConfigSpace(vendor, device uint16, class uint32, rev uint8, hasACS bool, acsControl uint16) []byte {
	b := make([]byte, configSize)
	le := binary.LittleEndian
	le.PutUint16(b[0x00:], vendor)
	le.PutUint16(b[0x02:], device)
	le.PutUint32(b[0x08:], class<<8|uint32(rev))
	if !hasACS {
		le.PutUint32(b[aerAt:], extCapHeader(extCapAER, 1, 0))
		return b
	}
	le.PutUint32(b[aerAt:], extCapHeader(extCapAER, 1, acsAt))
	le.PutUint32(b[acsAt:], extCapHeader(pciconfig.ExtCapACS, 1, dpcAt))
	le.PutUint16(b[acsAt+4:], acsCapability)
	le.PutUint16(b[acsAt+6:], acsControl)
	le.PutUint32(b[dpcAt:], extCapHeader(extCapDPC, 1, 0))
	return b
}

// extCapHeader is an extended capability header: ID in bits 0-15, version
// in 16-19, the next capability's offset in 20-31.
func extCapHeader(id, version, next uint32) uint32 { return id | version<<16 | next<<20 }

// hasConfig says whether the model writes d's config file: PCIe ports.
func (d *Device) hasConfig() bool { return d.Kind != Endpoint && d.MaxGen > 0 }

// hasACS says whether a port has the ACS capability: root and downstream
// ports do, upstream ports do not.
func (d *Device) hasACS() bool { return d.Kind == RootPort || d.Kind == DownstreamPort }

// config is d's configuration space image.
func (d *Device) config() []byte {
	return ConfigSpace(d.Vendor, d.DeviceID, d.Class, d.Revision, d.hasACS(), d.ACSControl)
}

// Package pciconfig reads a PCI function's configuration space as sysfs
// gives it (/sys/bus/pci/devices/<addr>/config), read-only: the Access
// Control Services (ACS) extended capability of PCIe bridges, which decides
// whether peer-to-peer traffic below a switch goes straight across or is
// redirected up through the root complex.
//
// Layout (PCIe Base Specification, "Advanced Error Reporting"... "ACS
// Extended Capability"; Linux include/uapi/linux/pci_regs.h): extended
// capabilities start at offset 0x100; each header is 32 bits, capability
// ID in bits 0-15, version 16-19, next offset 20-31 (0 ends the list). The
// ACS capability (ID 0x000D) has its 16-bit Capability register at +4 and
// its 16-bit Control register at +6.
package pciconfig

import (
	"encoding/binary"
	"os"
)

// ExtendedSize is the size of a PCIe function's configuration space. sysfs
// gives unprivileged readers only the first 64 (or 256) bytes: a shorter
// file says nothing of the extended capabilities.
const ExtendedSize = 4096

const (
	extCapStart = 0x100
	// ExtCapACS is the ACS extended capability ID.
	ExtCapACS = 0x000d
	acsCap    = 0x04
	acsCtrl   = 0x06
)

// ACS control (and capability) bits.
const (
	SourceValidation      = 1 << 0
	TranslationBlocking   = 1 << 1
	P2PRequestRedirect    = 1 << 2
	P2PCompletionRedirect = 1 << 3
	UpstreamForwarding    = 1 << 4
	P2PEgressControl      = 1 << 5
	DirectTranslatedP2P   = 1 << 6
)

// ACS is a function's ACS capability.
type ACS struct {
	// Known says the extended configuration space was readable; when false
	// nothing else is meaningful (unknown, not "off").
	Known bool
	// Present says the function has the ACS capability.
	Present bool
	// Capability and Control are the registers (0 when not Present).
	Capability, Control uint16
}

// Enabled reports whether every bit of mask is set in the Control register.
func (a ACS) Enabled(mask uint16) bool { return a.Present && a.Control&mask == mask }

// ParseACS finds the ACS capability in a configuration space image. An
// image shorter than ExtendedSize is unknown. A malformed list (a loop, an
// offset out of range) ends the walk: what was found before counts.
func ParseACS(config []byte) ACS {
	if len(config) < ExtendedSize {
		return ACS{}
	}
	a := ACS{Known: true}
	le := binary.LittleEndian
	off := extCapStart
	// At most one capability per dword of the extended space: a loop ends.
	for range (ExtendedSize - extCapStart) / 4 {
		if off < extCapStart || off+4 > len(config) {
			break
		}
		h := le.Uint32(config[off:])
		if h == 0 || h == 0xffffffff {
			break
		}
		if h&0xffff == ExtCapACS && off+acsCtrl+2 <= len(config) {
			a.Present = true
			a.Capability = le.Uint16(config[off+acsCap:])
			a.Control = le.Uint16(config[off+acsCtrl:])
			return a
		}
		next := int(h>>20) & 0xffc
		if next == 0 {
			break
		}
		off = next
	}
	return a
}

// ReadACS reads the ACS capability from a sysfs config file, never
// writing. A file that cannot be read is unknown, with the error.
func ReadACS(path string) (ACS, error) {
	f, err := os.Open(path)
	if err != nil {
		return ACS{}, err
	}
	defer f.Close()
	buf := make([]byte, ExtendedSize)
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if err != nil || m == 0 {
			break
		}
	}
	return ParseACS(buf[:n]), nil
}

package sysfs

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
)

// ChainOf splits a device's resolved sysfs path into its host bridge and
// the PCI functions from the top of the tree down to the device itself. It
// stops at the first component that is neither, so a netdev path such as
// .../0000:00:03.0/virtio2/net/eth0 yields the function 0000:00:03.0.
func ChainOf(devicesRel string) (hostBridge string, chain []string) {
	for _, part := range strings.Split(filepath.ToSlash(devicesRel), "/") {
		switch {
		case hostBridge == "" && strings.HasPrefix(part, "pci") && strings.Contains(part, ":"):
			hostBridge = part
		case hostBridge != "" && pciaddr.IsSysfs(part):
			chain = append(chain, part)
		case hostBridge != "":
			return hostBridge, chain
		}
	}
	return hostBridge, chain
}

// ResolveDevicePath returns link's target relative to <sysRoot>/devices.
func ResolveDevicePath(sysRoot, link string) (string, error) {
	target, err := filepath.EvalSymlinks(link)
	if err != nil {
		return "", err
	}
	devices, err := filepath.EvalSymlinks(filepath.Join(sysRoot, "devices"))
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(devices, target)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("%s resolves outside %s", link, devices)
	}
	return rel, nil
}

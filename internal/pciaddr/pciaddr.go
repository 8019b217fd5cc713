// Package pciaddr holds the forms a PCI bus id takes: sysfs's
// 0000:18:00.0 (lower case, 4-digit domain), the form every gpulink label
// and join uses, and NVML's and CUDA's 00000000:18:00.0. It knows nothing
// of GPUs and imports nothing of the module, so a source, the probe
// contract and a cgo binding can all name a device the same way without
// importing one another.
package pciaddr

import "strings"

// Normalize turns any of the usual forms (NVML's 00000000:18:00.0, CUDA's,
// sysfs's, any case) into sysfs's 0000:18:00.0, so GPUs join with sysfs
// devices and other exporters.
func Normalize(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	dom, rest, ok := strings.Cut(id, ":")
	if !ok {
		return id
	}
	if len(dom) > 4 {
		dom = dom[len(dom)-4:]
	}
	for len(dom) < 4 {
		dom = "0" + dom
	}
	return dom + ":" + rest
}

// IsSysfs reports whether s is in sysfs's form, dddd:bb:dd.f in lower-case
// hex.
func IsSysfs(s string) bool {
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return false
	}
	for i, c := range s {
		if i == 4 || i == 7 || i == 10 {
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// NVMLForm turns sysfs's 0000:18:00.0 into NVML's 00000000:18:00.0, as
// nvmlDeviceGetPciInfo writes it (the simulated NVML answers in it).
func NVMLForm(sysfs string) string {
	return strings.ToUpper("0000" + sysfs)
}

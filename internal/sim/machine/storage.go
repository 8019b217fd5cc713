package machine

import (
	"fmt"
	"strings"
)

// What the kernel shows of the NVMe drives' storage: each drive's
// controller and namespace under its PCI function (nvme/nvme<i>/nvme<i>n1,
// block device 259:<i> in address order, as the kernel numbers them at
// boot), an md RAID over several (md<k>, 9:<k>) and the mount table.

// Mount is a filesystem mounted on NVMe drives: on a drive's namespace,
// or on an md RAID over several.
type Mount struct {
	Point, FSType string
	// Drives are the PCI addresses of the drives under it.
	Drives []string
}

// CuFileConfigPath is where, under the root, the tree holds cuFile's
// configuration.
const CuFileConfigPath = "etc/cufile.json"

// nvmeClass is an NVMe controller's PCI class code.
const nvmeClass = 0x010802

// namespace writes an NVMe drive's controller and namespace under its
// function's directory and the block device's link.
func (w *writer) namespace(dir string, d *Device) {
	i := len(w.nvme)
	ns := fmt.Sprintf("%s/nvme/nvme%d/nvme%dn1", dir, i, i)
	dev := fmt.Sprintf("259:%d", i)
	w.t.line(ns+"/dev", dev)
	w.t.link("sys/dev/block/"+dev, ns)
	w.nvme[d.Addr] = nvmeNamespace{dir: ns, dev: dev, name: fmt.Sprintf("nvme%dn1", i)}
}

type nvmeNamespace struct{ dir, dev, name string }

// storage writes the RAIDs and the mount table, and cuFile's
// configuration.
func (w *writer) storage() {
	if w.m.CuFileConfig != "" {
		w.t.file(CuFileConfigPath, w.m.CuFileConfig)
	}
	if len(w.m.Mounts) == 0 {
		return
	}
	var b strings.Builder
	// The container's root, on no drive.
	b.WriteString("21 1 0:30 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/overlay\n")
	md := 0
	for i, m := range w.m.Mounts {
		var dev, source string
		if len(m.Drives) == 1 {
			ns := w.nvme[m.Drives[0]]
			dev, source = ns.dev, "/dev/"+ns.name
		} else {
			dir := fmt.Sprintf("sys/devices/virtual/block/md%d", md)
			dev, source = fmt.Sprintf("9:%d", md), fmt.Sprintf("/dev/md%d", md)
			w.t.line(dir+"/dev", dev)
			w.t.link("sys/dev/block/"+dev, dir)
			for _, d := range m.Drives {
				ns := w.nvme[d]
				w.t.link(dir+"/slaves/"+ns.name, ns.dir)
			}
			md++
		}
		fmt.Fprintf(&b, "%d 21 %s / %s rw,relatime - %s %s rw\n", 30+i, dev, m.Point, m.FSType, source)
	}
	w.t.file("proc/self/mountinfo", b.String())
}

package numa

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sysfs"
)

// The storage side of the topology: which NVMe drive a block device (and
// so a mount, and so a file) sits on, the mounts on each drive, and the
// PCIe path between a GPU and a drive.

// Mount is one mounted filesystem from mountinfo.
type Mount struct {
	MountPoint string
	FSType     string
	// Source is what was mounted (/dev/md0, /dev/nvme0n1p2).
	Source string
	// Device is the major:minor the kernel gives the filesystem.
	Device string
	// Options are the per-mount and the filesystem's options, joined.
	Options string
}

// DriveMount is a mount and the NVMe drives under it: one, or several
// under a RAID.
type DriveMount struct {
	Mount
	Drives []string
}

// maxBlockDepth bounds the walk through RAID and multipath layers: an md
// over dm over a multipath head is three; a loop in a broken tree stops.
const maxBlockDepth = 8

// BlockDeviceDrives are the PCI addresses (sysfs form) of the NVMe drives a
// block device major:minor is on, sorted: one for a namespace or a
// partition of it, every member for an md RAID or device-mapper volume
// over them, the controllers' for a native-multipath namespace. None for a
// block device on no NVMe drive (or not there at all).
func BlockDeviceDrives(root hostfs.Root, majorMinor string) []string {
	f := reader{root}
	var out []string
	f.drivesUnder(f.sys("dev", "block", majorMinor), 0, &out)
	slices.Sort(out)
	return slices.Compact(out)
}

func (f reader) drivesUnder(link string, depth int, out *[]string) {
	if depth > maxBlockDepth {
		return
	}
	rel, err := sysfs.ResolveDevicePath(f.Sys, link)
	if err != nil {
		return
	}
	dir := f.sys("devices", rel)
	// A partition's directory sits in its disk's.
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		dir, rel = filepath.Dir(dir), filepath.Dir(rel)
	}
	// A namespace on a controller's PCI path: .../0000:42:00.0/nvme/nvme0/nvme0n1.
	if parts := strings.Split(rel, "/"); slices.Contains(parts, "nvme") {
		for i := len(parts) - 1; i >= 0; i-- {
			if pciaddr.IsSysfs(parts[i]) {
				*out = append(*out, parts[i])
				return
			}
		}
	}
	// RAID and device-mapper members, and the paths of a multipath head
	// (devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1/multipath/nvme0c0n1).
	for _, sub := range []string{"slaves", "multipath"} {
		entries, _ := os.ReadDir(filepath.Join(dir, sub))
		for _, e := range entries {
			f.drivesUnder(filepath.Join(dir, sub, e.Name()), depth+1, out)
		}
	}
}

// ReadMounts reads the mount table as procfs shows it to this process
// (<proc>/self/mountinfo): the container's own where the exporter runs in
// one. Lines that do not parse are counted and skipped.
func ReadMounts(root hostfs.Root) ([]Mount, error) {
	b, err := os.ReadFile(root.ProcPath("self", "mountinfo"))
	if err != nil {
		return nil, err
	}
	return parseMountInfo(b)
}

// parseMountInfo parses proc(5)'s mountinfo: ID, parent, major:minor,
// root, mount point, options, optional fields up to "-", then the
// filesystem type, source and superblock options. Paths escape space, tab,
// newline and backslash in octal.
func parseMountInfo(b []byte) ([]Mount, error) {
	var t sampler.Tally
	var out []Mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 6 || sep < 6 || len(fields) < sep+3 || !strings.Contains(fields[2], ":") {
			if len(fields) > 0 {
				t.Add(fmt.Errorf("mountinfo line %d: %q: want id parent major:minor root mountpoint options ... - fstype source options", n, sc.Text()))
			}
			continue
		}
		m := Mount{MountPoint: unescapeMount(fields[4]), Device: fields[2], Options: fields[5],
			FSType: fields[sep+1], Source: unescapeMount(fields[sep+2])}
		if len(fields) > sep+3 {
			m.Options += "," + fields[sep+3]
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		t.Add(fmt.Errorf("mountinfo: %w", err))
	}
	return out, t.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// driveMounts are the mounts on NVMe drives, in mount table order: what a
// job reads its data from and writes its checkpoints to when it stays on
// the node. A filesystem mounted twice (bind mounts) is listed at each
// mount point.
func (f reader) driveMounts(t *sampler.Tally, nvme []*PCIDevice) []DriveMount {
	if len(nvme) == 0 {
		return nil
	}
	mounts, err := ReadMounts(f.Root)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Merge(err)
	}
	var out []DriveMount
	drives := map[string][]string{}
	for _, m := range mounts {
		d, seen := drives[m.Device]
		if !seen {
			d = BlockDeviceDrives(f.Root, m.Device)
			drives[m.Device] = d
		}
		if len(d) > 0 {
			out = append(out, DriveMount{Mount: m, Drives: d})
		}
	}
	return out
}

// SlowestHopBetween is the hop that bounds traffic between a and b, at
// current (max false) or best supported (max true) state: each device's
// links up to where their paths meet, and the uplinks to the CPU where
// they meet only there. ok is false when no hop's state is known.
func (t *Topology) SlowestHopBetween(a, b *PCIDevice, max bool) (hop Hop, ok bool) {
	shared := map[string]bool{}
	if a.HostBridge == b.HostBridge {
		ca, cb := a.chain(), b.chain()
		for k := 0; k < len(ca) && k < len(cb) && ca[k] == cb[k]; k++ {
			shared[ca[k]] = true
		}
	}
	for _, d := range []*PCIDevice{a, b} {
		for _, h := range t.HostPath(d) {
			bw := h.Bandwidth(max)
			if shared[h.Device.Address] || bw == 0 {
				continue
			}
			if !ok || bw < hop.Bandwidth(max) {
				hop, ok = h, true
			}
		}
	}
	return hop, ok
}

// NearestDrives are the NVMe drives with the closest path class to d, in
// address order, and that class: where a GPU should read its data from.
// None when the machine has no NVMe drive.
func (t *Topology) NearestDrives(d *PCIDevice) ([]*PCIDevice, PathClass) {
	return t.nearest(d, t.NVMe)
}

// linkString is a link as lspci's LnkSta reads: "Gen4 x4", with its
// maximum where it trained below it.
func linkString(l PCIeLink) string {
	gen := func(s sampler.Opt[float64]) string {
		if !s.Valid || Generation(s.V) == 0 {
			return "Gen?"
		}
		return fmt.Sprintf("Gen%d", Generation(s.V))
	}
	width := func(w sampler.Opt[int]) string {
		if !w.Valid {
			return "x?"
		}
		return fmt.Sprintf("x%d", w.V)
	}
	cur := gen(l.Speed) + " " + width(l.Width)
	if max := gen(l.MaxSpeed) + " " + width(l.MaxWidth); max != cur {
		return cur + " (of " + max + ")"
	}
	return cur
}

// StorageSummary is what the topology command prints after the matrix:
// for each GPU, in the matrix's order, the NVMe drives nearest it (as the
// matrix gives NICs); each drive's link and the mounts on it; and
// GPUDirect Storage's state. Empty on a machine without NVMe drives.
func (t *Topology) StorageSummary(gpus []MatrixGPU) string {
	if len(t.NVMe) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nNVMe drives nearest each GPU:\n\n")
	for i, g := range gpus {
		d := t.Device(g.Address)
		if d == nil {
			continue
		}
		near, class := t.NearestDrives(d)
		names := make([]string, len(near))
		for j, n := range near {
			names[j] = n.Address
		}
		fmt.Fprintf(&b, "  GPU%d: %s %s\n", i, class, strings.Join(names, " "))
	}
	b.WriteString("\nNVMe drives:\n\n")
	for _, n := range t.NVMe {
		var mounts []string
		for _, m := range t.Mounts {
			if slices.Contains(m.Drives, n.Address) {
				mounts = append(mounts, m.MountPoint+" ("+m.FSType+")")
			}
		}
		if len(mounts) == 0 {
			mounts = []string{"none"}
		}
		fmt.Fprintf(&b, "  %s: link %s, mounts %s\n", n.Address, linkString(n.Link), strings.Join(mounts, ", "))
	}
	g := t.GDS
	nvfs := "unknown (no /sys/module)"
	if g.NVFSLoaded.Valid {
		nvfs = map[bool]string{true: "loaded", false: "not loaded"}[g.NVFSLoaded.V]
	}
	if g.NVFS != nil && g.NVFS.Version != "" {
		nvfs += " (" + g.NVFS.Version + ")"
	}
	fmt.Fprintf(&b, "\nGPUDirect Storage: nvidia-fs %s", nvfs)
	if c := g.Config; c.Path != "" {
		switch {
		case !c.Found:
			fmt.Fprintf(&b, "; no cuFile configuration at %s", c.Path)
		default:
			fmt.Fprintf(&b, "; cuFile configuration %s, compatibility mode %s", c.Path,
				map[bool]string{true: "allowed", false: "not allowed"}[c.AllowCompat])
			if c.ForceCompat {
				b.WriteString(" and forced")
			}
		}
	}
	b.WriteString("\n")
	return b.String()
}

#!/usr/bin/env python3
"""Capture the sysfs and procfs files gpulink_exporter reads, as a txtar archive.

Run as root on a GPU machine (reading PCI config space past its first 64 bytes
needs root); stdlib only, so it runs where there is no Go:

    python3 scripts/capture-machine.py --pid <gpu-process-pid> > h200-vm.txtar

The archive is the format internal/sim/machine reads (ExtractTxtar, Load):
"-- path --" and the content, "-- path -> target --" for a symlink, and
"-- path [hex N] --" with rows "<offset>: <bytes>" for a file that is not
text (PCI config space). Paths start at sys/ and proc/, so the extracted
tree is a --path.sysfs root (root/sys) and a --path.procfs root (root/proc).

Only what the exporter reads is kept (an allowlist, as node_exporter's
fixtures keep what its collectors read): every PCI device and its ancestors
up to the root complex with their identity, link and NUMA attributes and
config space; the network, InfiniBand and NVMe devices below them; the NUMA
nodes; the nvidia modules; the IOMMU groups; the block devices, mounts,
nvidia-fs counters and cuFile configuration; and for --pid, the process's
cgroup, comm, numa_maps, stat, status, environ and every thread's stat.
Nothing is written anywhere but standard output: this script only reads.
"""

import argparse
import glob
import os
import sys

# Attributes of a PCI device directory that the topology source reads
# (numa/pci.go, numa/link.go), and the config space (internal/pciconfig).
PCI_FILES = {
    "class", "vendor", "device", "subsystem_vendor", "subsystem_device",
    "revision", "numa_node", "local_cpulist", "local_cpus",
    "current_link_speed", "current_link_width", "max_link_speed",
    "max_link_width", "secondary_bus_number", "subordinate_bus_number",
    "config", "ari_enabled",
}
PCI_LINKS = {"driver", "subsystem", "iommu_group", "physfn"}

# A network interface's files (internal/nic).
NET_FILES = {
    "address", "carrier", "carrier_changes", "carrier_down_count",
    "carrier_up_count", "dev_port", "duplex", "ifindex", "mtu", "operstate",
    "speed", "type", "dev_id",
}
NET_LINKS = {"device", "subsystem"}

# An InfiniBand/RoCE/EFA port's files.
IB_PORT_FILES = {"state", "phys_state", "rate", "link_layer", "lid", "sm_lid"}

MODULES = ("nvidia*", "nv_peer_mem", "nvme", "nvme_core", "ib_*", "mlx5_*", "rdma_*", "efa", "ena", "irdma", "bnxt_re", "bnxt_en", "ice", "i40e")

MAX_FILE = 1 << 16

# ROOT is "/" on a machine; --root points it at an extracted tree, which is
# how the tests check that this allowlist keeps every file the exporter's
# modelled trees hold (numa/testdata).
ROOT = "/"


def R(path):
    """path, an absolute path on the machine, under ROOT."""
    return os.path.join(ROOT, path.lstrip("/"))


class Archive:
    def __init__(self):
        self.entries = {}  # path -> ("file", bytes) | ("link", target)

    def file(self, path):
        rel = os.path.relpath(path, ROOT)
        if rel in self.entries:
            return
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE)
        except OSError:
            return  # unreadable (EACCES, EIO, EINVAL): the exporter counts those
        self.entries[rel] = ("file", data)

    def link(self, path):
        rel = os.path.relpath(path, ROOT)
        if rel in self.entries:
            return
        try:
            self.entries[rel] = ("link", os.readlink(path))
        except OSError:
            return

    def any(self, path):
        if os.path.islink(path):
            self.link(path)
        elif os.path.isfile(path):
            self.file(path)

    def write(self, out):
        for rel in sorted(self.entries):
            kind, v = self.entries[rel]
            if kind == "link":
                out.write("-- %s -> %s --\n" % (rel, v))
                continue
            text = None
            try:
                text = v.decode("utf-8")
            except UnicodeDecodeError:
                pass
            if text is not None and "\0" not in text and (text == "" or text.endswith("\n")) \
                    and not any(l.startswith("-- ") and l.endswith(" --") for l in text.split("\n")):
                out.write("-- %s --\n%s" % (rel, text))
                continue
            out.write("-- %s [hex %d] --\n" % (rel, len(v)))
            for off in range(0, len(v), 16):
                row = v[off:off + 16]
                if row.strip(b"\0") == b"":
                    continue
                out.write("%04x: %s\n" % (off, " ".join("%02x" % b for b in row)))


def files_in(a, d, names, links):
    for n in names:
        p = os.path.join(d, n)
        if os.path.isfile(p) and not os.path.islink(p):
            a.file(p)
    for n in links:
        p = os.path.join(d, n)
        if os.path.islink(p):
            a.link(p)


def capture_net(a, d):
    files_in(a, d, NET_FILES, NET_LINKS)
    for p in glob.glob(os.path.join(d, "statistics", "*")):
        a.file(p)


def capture_ib(a, d):
    files_in(a, d, {"node_guid", "sys_image_guid", "node_type", "fw_ver", "hca_type", "board_id"}, {"device"})
    for port in glob.glob(os.path.join(d, "ports", "*")):
        files_in(a, port, IB_PORT_FILES, set())
        for p in glob.glob(os.path.join(port, "counters", "*")) + glob.glob(os.path.join(port, "hw_counters", "*")):
            a.file(p)
        for p in glob.glob(os.path.join(port, "gid_attrs", "ndevs", "0")) + glob.glob(os.path.join(port, "gid_attrs", "types", "0")):
            a.file(p)


def capture_pci(a, real):
    # The device and each ancestor up to /sys/devices/pciDDDD:BB.
    d = real
    while os.path.basename(d).count(":") >= 1 and d.startswith(R("/sys/devices/pci")):
        files_in(a, d, PCI_FILES, PCI_LINKS)
        drv = os.path.join(d, "driver")
        if os.path.islink(drv):
            bdf = os.path.basename(d)
            a.any(os.path.join(os.path.realpath(drv), bdf))
        d = os.path.dirname(d)
    # What sits below it: network interfaces (also under virtio children),
    # RDMA devices, NVMe controllers and their namespaces.
    for n in glob.glob(os.path.join(real, "net", "*")) + glob.glob(os.path.join(real, "virtio*", "net", "*")):
        capture_net(a, n)
    for v in glob.glob(os.path.join(real, "virtio*")):
        files_in(a, v, {"device", "vendor"}, {"subsystem", "driver"})
    for ib in glob.glob(os.path.join(real, "infiniband", "*")):
        capture_ib(a, ib)
    for c in glob.glob(os.path.join(real, "nvme", "nvme*")):
        files_in(a, c, {"model", "firmware_rev", "transport", "state", "numa_node"}, {"device", "subsystem"})
        for ns in glob.glob(os.path.join(c, "nvme*n*")):
            files_in(a, ns, {"size", "dev"}, set())


def capture_sys(a):
    for p in sorted(glob.glob(R("/sys/bus/pci/devices/*"))):
        a.link(p)
        capture_pci(a, os.path.realpath(p))
    for cls, fn in (("net", capture_net), ("infiniband", capture_ib)):
        for p in glob.glob(R("/sys/class/%s/*" % cls)):
            a.link(p)
            real = os.path.realpath(p)
            if real.startswith(R("/sys/devices/virtual/")):
                fn(a, real)
    for p in glob.glob(R("/sys/class/nvme/*")) + glob.glob(R("/sys/bus/virtio/devices/*")):
        a.link(p)
    for p in ("online", "possible", "has_cpu", "has_memory", "has_normal_memory"):
        a.any(R("/sys/devices/system/node/" + p))
    for n in glob.glob(R("/sys/devices/system/node/node[0-9]*")):
        files_in(a, n, {"cpulist", "cpumap", "distance", "meminfo", "numastat"}, set())
    for p in ("online", "possible", "present"):
        a.any(R("/sys/devices/system/cpu/" + p))
    # The drivers of what the exporter watches: GPUs, GPUDirect RDMA and
    # Storage, RDMA and NVMe.
    for pat in MODULES:
        for m in glob.glob(R("/sys/module/" + pat)):
            files_in(a, m, {"initstate", "version"}, set())
    for g in glob.glob(R("/sys/kernel/iommu_groups/*")):
        files_in(a, g, {"type"}, set())
        for d in glob.glob(os.path.join(g, "devices", "*")):
            a.link(d)


def capture_storage(a):
    # What numa/storage.go and numa/gds.go read: every block device's link
    # and, where it leads, its dev number, whether it is a partition, and
    # the layers below it (md and device-mapper members, a native-multipath
    # head's paths); the mount table the exporter sees; nvidia-fs's
    # counters; cuFile's configuration.
    for p in glob.glob(R("/sys/dev/block/*")):
        a.link(p)
        real = os.path.realpath(p)
        files_in(a, real, {"dev", "partition"}, set())
        for sub in ("slaves", "multipath"):
            for s in glob.glob(os.path.join(real, sub, "*")):
                a.link(s)
    for p in ("/proc/self/mountinfo", "/proc/driver/nvidia-fs/stats", "/etc/cufile.json"):
        a.any(R(p))


def capture_proc(a, pid):
    base = R("/proc/%d" % pid)
    for n in ("cgroup", "comm", "numa_maps", "stat", "status", "environ"):
        a.file(os.path.join(base, n))
    for t in glob.glob(os.path.join(base, "task", "*", "stat")):
        a.file(t)
    for p in glob.glob(R("/proc/driver/nvidia/gpus/*/information")) + [R("/proc/driver/nvidia/version")]:
        a.any(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pid", type=int, action="append", default=[], help="a GPU process whose procfs files to keep (repeatable)")
    ap.add_argument("--root", default="/", help="read the machine's files under this folder (tests: an extracted tree)")
    args = ap.parse_args()
    global ROOT
    ROOT = args.root
    if ROOT == "/" and os.geteuid() != 0:
        print("capture-machine: run as root: PCI config space past 64 bytes is root-only", file=sys.stderr)
        return 2
    a = Archive()
    capture_sys(a)
    capture_storage(a)
    a.any(R("/proc/sys/kernel/osrelease"))
    for pid in args.pid:
        if not os.path.isdir(R("/proc/%d" % pid)):
            print("capture-machine: --pid %d: no such process" % pid, file=sys.stderr)
            return 2
        capture_proc(a, pid)
    sys.stdout.write("Captured by scripts/capture-machine.py, kernel %s.\n" % os.uname().release)
    a.write(sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

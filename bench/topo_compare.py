"""Compare `gpulink_exporter topology` with `nvidia-smi topo -m`.

Usage: python3 topo_compare.py NVSMI_TOPO OURS_TOPO

Compares every GPU row cell by cell: the GPU-GPU cells (NV# or PCIe path
class), the GPU-NIC cells, CPU affinity and NUMA affinity. nvidia-smi's
last column, GPU NUMA ID, has no sysfs source and is left out. Exits 1 on a
difference.
"""
import re
import sys


def rows(path):
    out = {}
    for line in open(path):
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)  # nvidia-smi underlines the header
        f = line.split()
        if f and re.fullmatch(r"GPU\d+", f[0]):
            out[f[0]] = f[1:]
    return out


theirs, ours = rows(sys.argv[1]), rows(sys.argv[2])
bad = 0
print(f"{'row':<6} {'nvidia-smi topo -m':<40} {'gpulink_exporter topology':<40}")
for name in sorted(set(theirs) | set(ours), key=lambda s: int(s[3:])):
    t, o = theirs.get(name, []), ours.get(name, [])
    same = t[: len(o)] == o and len(t) - len(o) in (0, 1)
    bad += not same
    print(f"{name:<6} {' '.join(t):<40} {' '.join(o):<40} {'ok' if same else 'DIFFERENT'}")
if not theirs:
    print("no GPU rows in", sys.argv[1])
    bad += 1
sys.exit(1 if bad else 0)

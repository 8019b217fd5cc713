#!/usr/bin/env python3
"""smaps.py SMAPS BINARY: a process's resident memory by what holds it, in kB,
as one tab-separated line:

  total  binary  nvml  nvml_bss  libcuda  other_files  anon

binary is the executable's own mappings; nvml is libnvidia-ml's file pages
and nvml_bss the anonymous mapping right after its last one (its .bss,
which NVML fills at init); libcuda is libcuda's mappings and the anonymous
one after them (nvmlInit maps it); other_files every other file (libc,
libm, ld.so); anon every other anonymous mapping (the Go heap, stacks,
malloc). With -h it prints the header line instead.
"""
import os
import re
import sys

COLUMNS = ["total", "binary", "nvml", "nvml_bss", "libcuda", "other_files", "anon"]


def mappings(path):
    """Yields (name, rss_kb) per mapping, name '' for anonymous ones."""
    name, rss = None, 0
    with open(path) as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                if name is not None:
                    yield name, rss
                fields = line.split(None, 5)
                name, rss = (fields[5].strip() if len(fields) > 5 else ""), 0
            elif line.startswith("Rss:"):
                rss = int(line.split()[1])
    if name is not None:
        yield name, rss


def summary(path, binary):
    real = os.path.realpath(binary)
    out = dict.fromkeys(COLUMNS, 0)
    prev = ""
    for name, rss in mappings(path):
        out["total"] += rss
        if name == real or name == binary:
            out["binary"] += rss
        elif "libnvidia-ml" in name:
            out["nvml"] += rss
        elif "libcuda" in name:
            out["libcuda"] += rss
        elif name == "" and "libnvidia-ml" in prev:
            out["nvml_bss"] += rss
        elif name == "" and "libcuda" in prev:
            out["libcuda"] += rss
        elif name.startswith("/"):
            out["other_files"] += rss
        else:
            out["anon"] += rss
        prev = name
    return out


def main():
    if sys.argv[1:] == ["-h"]:
        print("\t".join(COLUMNS))
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    s = summary(sys.argv[1], sys.argv[2])
    print("\t".join(str(s[c]) for c in COLUMNS))


if __name__ == "__main__":
    main()

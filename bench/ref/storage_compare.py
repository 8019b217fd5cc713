#!/usr/bin/env python3
"""Judges bench/storage.sh's runs: the storage probe's read bandwidth
(storage_to_device, median of its samples) against the reference on the
same drive in the same run, median of runs against median of runs, within
TOLERANCE (10%). The reference is gdsio where it ran and the probe went
through cuFile too (native or compat: GPUDirect Storage's own tool, the
same path), else storage_ref.py's O_DIRECT read with a copy to the GPU
(the probe's posix path); dd iflag=direct is printed beside as the drive's
bare read rate.
Also prints the mode the probe reported beside what gdscheck -p said.

Usage: storage_compare.py OUTDIR   (writes OUTDIR/compare.txt and .json)
Exit 0 when the comparison passes, 1 when it fails, 2 with nothing to judge.
"""
import glob
import json
import os
import re
import statistics
import sys

TOLERANCE = 0.10


def probe_run(path):
    try:
        with open(path) as f:
            round_ = json.load(f)
    except (OSError, ValueError):
        return None
    out = {}
    for g in round_.get("gpus", []):
        for r in g.get("results", []):
            if r.get("probe") in ("storage_to_device", "device_to_storage"):
                out[r["probe"]] = r
    return out


def gdsio_rate(path):
    """gdsio prints 'Throughput: 6.512345 GiB/sec'."""
    try:
        text = open(path).read()
    except OSError:
        return None
    m = re.search(r"Throughput:\s*([0-9.]+)\s*GiB/sec", text)
    return float(m.group(1)) * (1 << 30) if m else None


def dd_rate(path):
    """dd's last line: '... copied, 0.3 s, 6.5 GB/s'."""
    try:
        text = open(path).read()
    except OSError:
        return None
    m = re.search(r"copied, ([0-9.]+) s", text)
    b = re.search(r"^(\d+) bytes", text, re.M)
    return int(b.group(1)) / float(m.group(1)) if m and b and float(m.group(1)) > 0 else None


def med(v):
    v = [x for x in v if x]
    return statistics.median(v) if v else None


def main():
    out = sys.argv[1]
    runs = sorted(glob.glob(os.path.join(out, "run*")))
    lines, probe_reads, probe_writes, modes, notes = [], [], [], set(), set()
    gdsio, torch_ref, dd = [], [], []
    for d in runs:
        p = probe_run(os.path.join(d, "probe.json")) or {}
        r, w = p.get("storage_to_device", {}), p.get("device_to_storage", {})
        probe_reads.append(r.get("bytes_per_second"))
        probe_writes.append(w.get("bytes_per_second"))
        if r.get("storage_mode"):
            modes.add(r["storage_mode"])
        if r.get("storage_note"):
            notes.add(r["storage_note"])
        if r.get("skipped") or r.get("error"):
            lines.append(f"{os.path.basename(d)}: probe read {r.get('skipped') or r.get('error')}")
        gdsio.append(gdsio_rate(os.path.join(d, "gdsio.txt")))
        dd.append(dd_rate(os.path.join(d, "dd.txt")))
        try:
            t = json.load(open(os.path.join(d, "ref.json")))
            torch_ref.append(statistics.median(t["read_to_gpu"]))
        except (OSError, ValueError, KeyError, statistics.StatisticsError):
            torch_ref.append(None)
        def gb(x):
            return f"{x / 1e9:.3f} GB/s" if x else "-"
        lines.append(f"{os.path.basename(d)}: probe read {gb(probe_reads[-1])} write {gb(probe_writes[-1])}"
                     f" | gdsio {gb(gdsio[-1])} | O_DIRECT+copy (torch) {gb(torch_ref[-1])} | dd iflag=direct {gb(dd[-1])}")
    # gdsio goes through cuFile: the reference where the probe did too
    # (native or compat); the probe's posix path is storage_ref.py's.
    through_cufile = modes and modes <= {"native", "compat"}
    if med(gdsio) and through_cufile:
        ref_name, ref = "gdsio", med(gdsio)
    else:
        ref_name, ref = "O_DIRECT+copy (torch)", med(torch_ref)
    probe = med(probe_reads)
    result = {"probe_read_median": probe, "probe_write_median": med(probe_writes), "reference": ref_name,
              "reference_median": ref, "dd_median": med(dd), "modes": sorted(modes), "notes": sorted(notes)}
    try:
        result["gdscheck"] = [l.strip() for l in open(os.path.join(out, "gdscheck.txt"))
                              if re.search(r"NVMe|nvidia_fs|compat|Platform verification", l, re.I)]
    except OSError:
        result["gdscheck"] = "not present"
    status = 2
    if probe and ref:
        result["ratio"] = probe / ref
        result["pass"] = abs(probe / ref - 1) <= TOLERANCE
        status = 0 if result["pass"] else 1
    lines.append(f"probe mode {sorted(modes)} {sorted(notes)}; gdscheck -p: {result['gdscheck']}")
    if probe and ref:
        lines.append(f"{'PASS' if status == 0 else 'FAIL'} read: probe {probe / 1e9:.3f} GB/s, {ref_name} {ref / 1e9:.3f} GB/s, "
                     f"ratio {probe / ref:.3f} (within {TOLERANCE:.0%})")
    else:
        lines.append("NOREF: no probe read or no reference to judge")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    with open(os.path.join(out, "compare.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "compare.json"), "w") as f:
        json.dump(result, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())

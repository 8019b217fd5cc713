#!/usr/bin/env python3
"""Judge a probe against a reference run in pairs (bench/node-probe.sh).

Sockets over a VM's loopback move with the moment: one call's reference
read 3.29 then 3.67 GB/s. So each probe sample Prometheus stored is divided
by the reference run made right after it, in the gap before the next
scrape, and the median of those ratios is judged. A reference that
overlapped a probe (two NCCL sessions time-slicing the GPUs) makes its pair
say nothing about either tool: that fails the check instead of being
dropped.

Pairs alone do not make a 5% check hold there. On two H200s (2026-11-28)
a pair's ratio ran 0.89-1.20 with its probe and reference 10 s apart, and
one reference run's own 10 samples 14.3-19.7 ms: the noise changes faster
than a run. A median of 5 pairs then has a standard error near 7%, and a
probe exactly as good as the reference would fail a fixed 5% about half
the time. The limit is therefore the larger of TOLERANCE and what the
run's own reference noise resolves (see judge), and a run whose noise
resolves nothing finer than CEILING is INCONCLUSIVE rather than a pass.

Usage: pairs.py SIZE TOLERANCE CEILING OUTDIR [OUTDIR...]
Several OUTDIRs (runs of node-probe.sh) are judged as one: all their
pairs, the reference's noise from consecutive runs inside each. Each
OUTDIR holds prom-samples.json
(gpulink_node_probe_bus_bandwidth_bytes_per_second over the run),
prom-durations.json (probe_duration_seconds over the run),
and per reference run k pair-k.window (start and end, Unix seconds, one a
line) and pair-k-0.json (ref/nccl_ref.py's output). Prints a line per pair
and a verdict per collective; exits 1 when send/recv's median ratio is off
by more than the limit, the limit is over CEILING, a pair overlapped, or a
reference went unpaired.
"""
import glob
import json
import math
import os
import re
import statistics
import sys
from dataclasses import dataclass, field

JUDGED = "send_recv"  # all_reduce is shown, not judged


@dataclass
class Sample:
    t: float  # scrape start, Unix seconds
    seconds: float  # probe_duration_seconds of that scrape
    bw: dict = field(default_factory=dict)  # collective -> bytes/s


@dataclass
class Reference:
    name: str
    start: float
    end: float
    bw: dict  # collective -> bytes/s
    run: str = ""  # the OUTDIR it came from


@dataclass
class Pair:
    sample: Sample
    ref: Reference
    problems: list


def pair(samples, refs):
    """Each reference with the latest sample that began before it, and
    what is wrong with the pair: an overlap with any probe, or no sample."""
    samples = sorted(samples, key=lambda s: s.t)
    pairs, unpaired = [], []
    for r in sorted(refs, key=lambda r: r.start):
        before = [s for s in samples if s.t <= r.start]
        if not before:
            unpaired.append(r)
            continue
        problems = ["overlaps the probe scraped at %+.1f s (%.1f s long)" % (s.t - r.start, s.seconds)
                    for s in samples if s.t < r.end and s.t + s.seconds > r.start]
        pairs.append(Pair(before[-1], r, problems))
    used = {}
    for p in pairs:
        used.setdefault(p.sample.t, []).append(p.ref.name)
    for t, names in used.items():
        if len(names) > 1:
            for p in pairs:
                if p.sample.t == t:
                    p.problems.append("sample shared by %s: no scrape between them" % " and ".join(names))
    return pairs, unpaired


def noise(*runs):
    """The spread of two runs of one tool: the root mean square of the log
    ratio of each reference run to the one before it in the same OUTDIR.
    Both are runs of the same code on the same path, so their ratio is
    noise alone, and this is the spread a pair's ratio would have if the
    probe were the reference. None with fewer than two such ratios."""
    diffs = []
    for values in runs:
        logs = [math.log(v) for v in values]
        diffs += [b - a for a, b in zip(logs, logs[1:])]
    if len(diffs) < 2:
        return None
    return math.sqrt(sum(d * d for d in diffs) / len(diffs))


def judge(pairs, unpaired, collective, tolerance, ceiling=None):
    """(verdict line, ok) for one collective; tolerance None: shown only.

    The median of the pair ratios must be within the limit of 1. The limit
    is tolerance, or twice the standard error the reference's own noise
    gives a median of this many pairs (1.2533 sigma / sqrt(n)) when that is
    larger: a run can't claim agreement finer than its own noise resolves,
    and a probe as good as the reference passes about 95 runs in 100. When
    that limit passes ceiling the run is too noisy to judge: INCONCLUSIVE,
    which is not a pass."""
    ratios = [p.sample.bw[collective] / p.ref.bw[collective] for p in pairs
              if p.sample.bw.get(collective) and p.ref.bw.get(collective)]
    if not ratios or len(ratios) != len(pairs):
        return "FAIL %s: %d of %d pairs have both figures" % (collective, len(ratios), len(pairs)), tolerance is None
    d = statistics.median(ratios) - 1
    bad = [p.ref.name for p in pairs if p.problems]
    runs = {}
    for p in sorted(pairs, key=lambda p: p.ref.start):
        runs.setdefault(p.ref.run, []).append(p.ref.bw[collective])
    sigma = noise(*runs.values())
    limit, why = tolerance, ""
    if tolerance is not None:
        if sigma is None:
            why = "; too few pairs to measure the reference's noise"
        else:
            resolved = 2 * 1.2533 * sigma / math.sqrt(len(ratios))
            limit = max(tolerance, resolved)
            why = ("; the reference's run-to-run noise %.1f%% resolves +-%.1f%% with %d pairs, the limit is the larger of that and %.0f%%" % (
                sigma * 100, resolved * 100, len(ratios), tolerance * 100))
    if tolerance is None:
        verdict, ok = "shown", True
    elif bad or unpaired:
        verdict, ok = "FAIL", False
    elif ceiling is not None and limit > ceiling:
        verdict, ok = "INCONCLUSIVE", False
        why += "; over the %.0f%% this check can be judged at" % (ceiling * 100)
    else:
        verdict, ok = ("PASS" if abs(d) <= limit else "FAIL"), abs(d) <= limit
    probe = [p.sample.bw[collective] / 1e9 for p in pairs]
    ref = [p.ref.bw[collective] / 1e9 for p in pairs]
    line = ("%s %s: median of %d pair ratios %+.2f%%%s (probe %.3f-%.3f GB/s, reference %.3f-%.3f GB/s)%s" % (
        verdict, collective, len(ratios), d * 100,
        "" if tolerance is None else " against +-%.1f%%" % (limit * 100),
        min(probe), max(probe), min(ref), max(ref), why))
    if tolerance is not None and bad:
        line += "; pairs that say nothing: %s" % ", ".join(bad)
    if tolerance is not None and unpaired:
        line += "; references with no sample before them: %s" % ", ".join(r.name for r in unpaired)
    return line, ok


def read(path):
    with open(path) as f:
        return f.read()


def load(out, size):
    samples = {}
    for r in json.loads(read(os.path.join(out, "prom-samples.json")))["data"]["result"]:
        for t, v in r["values"]:
            samples.setdefault(float(t), Sample(float(t), 0.0)).bw[r["metric"]["collective"]] = float(v)
    for r in json.loads(read(os.path.join(out, "prom-durations.json")))["data"]["result"]:
        for t, v in r["values"]:
            if float(t) in samples:
                samples[float(t)].seconds = float(v)
    refs = []
    for w in glob.glob(os.path.join(out, "pair-*.window")):
        name = os.path.basename(w)[:-len(".window")]
        times = [float(x) for x in read(w).split()]
        if len(times) != 2:
            raise SystemExit("%s: want a start and an end, got %r" % (w, times))
        res = json.loads(read(os.path.join(out, name + "-0.json")))["results"]
        refs.append(Reference(name, times[0], times[1],
                              {x["collective"]: x["bus_bytes_per_second"] for x in res if x["size_bytes"] == size}, out))
    refs.sort(key=lambda r: int(re.sub(r"\D", "", r.name) or 0))
    return list(samples.values()), refs


def main(argv):
    if len(argv) < 5:
        raise SystemExit("usage: pairs.py SIZE TOLERANCE CEILING OUTDIR [OUTDIR...]")
    size, tolerance, ceiling, outs = int(argv[1]), float(argv[2]), float(argv[3]), argv[4:]
    pairs, unpaired = [], []
    for out in outs:
        samples, refs = load(out, size)
        if len(outs) > 1:
            for r in refs:
                r.name = "%s/%s" % (out, r.name)
        ps, un = pair(samples, refs)
        pairs += ps
        unpaired += un
        t0 = min([s.t for s in samples] + [r.start for r in refs])
        for p in ps:
            print("%s: probe at %6.1f s (%.1f s) send/recv %.3f all-reduce %.3f GB/s; reference %6.1f-%6.1f s send/recv %.3f all-reduce %.3f GB/s; ratio %.3f%s" % (
                p.ref.name, p.sample.t - t0, p.sample.seconds, p.sample.bw.get("send_recv", 0) / 1e9,
                p.sample.bw.get("all_reduce", 0) / 1e9, p.ref.start - t0, p.ref.end - t0,
                p.ref.bw.get("send_recv", 0) / 1e9, p.ref.bw.get("all_reduce", 0) / 1e9,
                p.sample.bw.get(JUDGED, 0) / p.ref.bw[JUDGED] if p.ref.bw.get(JUDGED) else float("nan"),
                "" if not p.problems else "; " + "; ".join(p.problems)))
    ok = True
    for c, tol in ((JUDGED, tolerance), ("all_reduce", None)):
        line, good = judge(pairs, unpaired, c, tol, ceiling)
        print(line)
        ok = ok and good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

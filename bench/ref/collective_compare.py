#!/usr/bin/env python3
"""Compares collective rounds of `gpulink_exporter collectives` (or a node
probe's results) with nccl_ref.py's, for bench/collective-accuracy.sh and
bench/node-probe.sh.

Usage: collective_compare.py --probe P.json [--probe P2.json ...]
                             --ref R.json [--ref R2.json ...]
                             [--tolerance 0.03] [--transport p2p]
                             [--size BYTES] [--json OUT]

Each key (collective, size, from_rank, to_rank) is judged at --size (the
bandwidth size; default: the largest size in the reference): the median of
the probe's runs against the median of the reference's runs, bus bandwidth,
within --tolerance either way. Small-size times are printed, not judged.
With --transport, every transport the probe rounds report must be of that
kind and there must be at least one. Exits 1 when any judgement fails, 2
when a side has no results.
"""
import argparse
import json
import statistics
import sys


def key(r):
    return (r["collective"], r["size_bytes"], r.get("from_rank"), r.get("to_rank"))


def load(paths):
    rounds = []
    for p in paths:
        with open(p) as f:
            rounds.append(json.load(f))
    return rounds


def by_key(rounds):
    out = {}
    for rnd in rounds:
        for r in rnd.get("results", []):
            if r.get("error") or not r.get("bus_bytes_per_second") and r.get("ranks", 0) > 1:
                continue
            out.setdefault(key(r), []).append(r)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--probe", action="append", required=True)
    p.add_argument("--ref", action="append", required=True)
    p.add_argument("--tolerance", type=float, default=0.03)
    p.add_argument("--transport", default="")
    p.add_argument("--size", type=int, default=0)
    p.add_argument("--json", default="")
    a = p.parse_args()
    probe, ref = load(a.probe), load(a.ref)
    pk, rk = by_key(probe), by_key(ref)
    if not pk or not rk:
        print("no results: probe %d keys, reference %d keys" % (len(pk), len(rk)))
        for rnd in probe:
            if rnd.get("error"):
                print("probe round error:", rnd["error"])
        return 2
    size = a.size or max(k[1] for k in rk)
    fails, rows = 0, []
    print("%-15s %11s %9s  %12s %12s %8s  %s" % ("collective", "size", "pair", "probe GB/s", "ref GB/s", "diff", "verdict"))
    for k in sorted(set(pk) | set(rk), key=lambda k: (k[1] != size, k)):
        c, sz, fr, to = k
        pair = "" if fr is None else "%d->%d" % (fr, to)
        pv = [r["bus_bytes_per_second"] for r in pk.get(k, [])]
        rv = [r["bus_bytes_per_second"] for r in rk.get(k, [])]
        pt = [r["seconds"] for r in pk.get(k, [])]
        rt = [r["seconds"] for r in rk.get(k, [])]
        row = {"collective": c, "size_bytes": sz, "pair": pair, "probe_runs": pv, "ref_runs": rv,
               "probe_seconds": pt, "ref_seconds": rt}
        if sz != size:
            verdict = "time only"
            if pt and rt:
                verdict = "time %.1f us vs %.1f us" % (statistics.median(pt) * 1e6, statistics.median(rt) * 1e6)
            print("%-15s %11d %9s  %12s %12s %8s  %s" % (c, sz, pair, "", "", "", verdict))
        elif not pv or not rv:
            verdict = "FAIL missing on the %s side" % ("probe" if not pv else "reference")
            fails += 1
            print("%-15s %11d %9s  %12s %12s %8s  %s" % (c, sz, pair, "", "", "", verdict))
        else:
            pm, rm = statistics.median(pv), statistics.median(rv)
            diff = pm / rm - 1 if rm else float("inf")
            ok = abs(diff) <= a.tolerance
            fails += not ok
            verdict = "PASS" if ok else "FAIL"
            row.update(probe=pm, ref=rm, diff=diff)
            print("%-15s %11d %9s  %12.2f %12.2f %+7.2f%%  %s" % (c, sz, pair, pm / 1e9, rm / 1e9, diff * 100, verdict))
        row["verdict"] = verdict
        rows.append(row)
    transports = [t for rnd in probe for t in rnd.get("transports") or []]
    kinds = sorted({t["kind"] for t in transports})
    details = sorted({t.get("detail", "") for t in transports})
    print("transports: %s (%s), %d connections" % (",".join(kinds) or "none", ", ".join(details), len(transports)))
    if a.transport:
        ok = bool(transports) and kinds == [a.transport]
        fails += not ok
        print("transport %s: %s" % (a.transport, "PASS" if ok else "FAIL"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"size": size, "tolerance": a.tolerance, "rows": rows, "transports": kinds, "fails": fails}, f, indent=1)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Summarise bench/collective-net.sh: per kind of run (child, quiet, ref),
every round's send/recv at SIZE with each side's own time, the operation's
(the slower side, as the exporter and the reference both take it), and
each kind's run-to-run noise as bench/pairs.py measures the reference's
(the root mean square of the log ratio of consecutive runs). Judges
nothing; exits 1 only when a run left no result.

Usage: collective_net.py SIZE OUTDIR
Reads OUTDIR/<kind>-<round>-<rank>.json: the exporter's `collectives
--output=json` round of each rank (its own side of send/recv 0->1), or
ref/nccl_ref.py's output (rank 0's holds the slowest rank's time and each
rank's own in rank_seconds).
"""
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pairs import noise  # noqa: E402

KINDS = ("child", "quiet", "ref")


def find(results, collective, size):
    for r in results or []:
        if r.get("collective") == collective and r.get("size_bytes") == size:
            return r
    return None


def run(out, kind, k, size):
    """(sender s, receiver s, operation s) of send/recv 0->1, or why not."""
    if kind == "ref":
        try:
            r = find(json.load(open(f"{out}/{kind}-{k}-0.json"))["results"], "send_recv", size)
        except (OSError, ValueError, KeyError) as e:
            return None, f"{kind}-{k}: {e}"
        if not r:
            return None, f"{kind}-{k}: no send_recv"
        own = r.get("rank_seconds") or [0, 0]
        return (own[0], own[1], r["seconds"]), ""
    sides = []
    for rank in (0, 1):
        try:
            r = find(json.load(open(f"{out}/{kind}-{k}-{rank}.json")).get("results"), "send_recv", size)
        except (OSError, ValueError) as e:
            return None, f"{kind}-{k}-{rank}: {e}"
        if not r or r.get("error") or not r.get("seconds"):
            return None, f"{kind}-{k}-{rank}: {r.get('error') if r else 'no send_recv'}"
        sides.append(r["seconds"])
    return (sides[0], sides[1], max(sides)), ""


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    size, out = int(argv[1]), argv[2]
    rounds = sorted({int(m.group(1)) for f in glob.glob(f"{out}/*-*-0.json")
                     if (m := re.search(r"-(\d+)-0\.json$", f))})
    ok = True
    ops = {kind: {} for kind in KINDS}
    gbs = lambda s: size / s / 1e9  # noqa: E731
    print(f"send/recv 0->1 at {size >> 20} MiB, GB/s: sender's side, receiver's side, operation (slower side)")
    for k in rounds:
        for kind in KINDS:
            got, why = run(out, kind, k, size)
            if got is None:
                print(f"  round {k} {kind:5s} NO RESULT: {why}")
                ok = False
                continue
            snd, rcv, op = got
            ops[kind][k] = op
            line = f"  round {k} {kind:5s} {gbs(snd) if snd else 0:.3f} {gbs(rcv) if rcv else 0:.3f} {gbs(op):.3f}"
            if snd and rcv:
                line += f"  (receiver/sender time {rcv / snd:.3f})"
            print(line)
    for kind in KINDS:
        v = [ops[kind][k] for k in sorted(ops[kind])]
        if not v:
            continue
        n = noise(v)
        print(f"{kind:5s}: median {gbs(statistics.median(v)):.3f} GB/s over {len(v)} runs, "
              f"run-to-run noise {'%.1f%%' % (100 * n) if n is not None else 'n/a (under 3 runs)'}")
    for kind in ("child", "quiet"):
        ratios = [ops["ref"][k] / ops[kind][k] for k in rounds if k in ops[kind] and k in ops["ref"]]
        if ratios:
            print(f"{kind} / ref bandwidth, same round: {' '.join('%.3f' % r for r in ratios)}; "
                  f"median {statistics.median(ratios):.3f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env bash
# Small-message latency and large-message bus bandwidth of
# `gpulink_exporter collectives` against nccl-tests on a 2-GPU machine
# (issue 24, item 1): for each collective the exporter's 8 KiB latency
# against nccl-tests' (`-b 8K -e 8K -n 20 -w 5 -g 2`, out-of-place time),
# within 25%; and the 256 MiB bus bandwidth of all-reduce, all-gather,
# reduce-scatter and all-to-all against nccl-tests' (`-b 256M -e 256M -n 20
# -w 5 -g 2`), within 3%. Two rounds each, interleaved (exporter, then every
# nccl-tests run, then the exporter again...); each side's two rounds are
# averaged and every round is printed.
#
# NCCLTESTS names the directory of nccl-tests binaries built from source
# against the same libnccl (all_reduce_perf all_gather_perf
# reduce_scatter_perf alltoall_perf sendrecv_perf). The library is the
# nvidia-nccl wheel's (NCCL_LIBRARY overrides); nccl-tests load it through
# LD_LIBRARY_PATH. The exporter runs as the daemon runs its child
# (--no-sharing-check: the daemon watches from outside).
# NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
# NVSHMEM_DISABLE_NVLS=1 are exported for every process.
#
# Needs no Go: carry .device (bench/device-build.sh) and run
#   NCCLTESTS=/tmp/ntb .device/collective-latency.sh OUTDIR
# Exits 1 when a comparison fails, 2 when a run gave nothing to compare.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
. "$here/common.sh"
bench_out "${1:-}"
ROUNDS=${ROUNDS:-2}
export CUDA_DEVICE_ORDER=PCI_BUS_ID
: "${NCCLTESTS:?set NCCLTESTS to the directory of the nccl-tests binaries}"
lib=${NCCL_LIBRARY:-$(nccl_wheel_lib)}
[ -r "$lib" ] || { echo "no libnccl at $lib (set NCCL_LIBRARY)"; exit 2; }
[ -x "$bin" ] || { echo "no exporter at $bin"; exit 2; }
declare -A nt=([all_reduce]=all_reduce_perf [all_gather]=all_gather_perf [reduce_scatter]=reduce_scatter_perf
  [all_to_all]=alltoall_perf [send_recv]=sendrecv_perf)
for c in "${!nt[@]}"; do
  [ -x "$NCCLTESTS/${nt[$c]}" ] || { echo "no $NCCLTESTS/${nt[$c]}"; exit 2; }
done
ntlib=$(dirname "$lib")
# nccltests COLLECTIVE SIZE ROUND: one nccl-tests run of COLLECTIVE at SIZE
# (8K or 256M) on 2 GPUs, into nccltests-COLLECTIVE-size-ROUND.txt.
nccltests() {
  local c=$1 size=$2 i=$3
  echo "== round $i: nccl-tests ${nt[$c]} $size"
  LD_LIBRARY_PATH=$ntlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 300 "$NCCLTESTS/${nt[$c]}" \
    -b "$size" -e "$size" -n 20 -w 5 -g 2 >"$out/nccltests-$c-${size,,}-$i.txt" 2>&1
  echo "exit $?"
}

echo "== machine"
{
  nvidia-smi -L
  nvidia-smi --query-gpu=index,pci.bus_id,name,driver_version --format=csv
  echo "libnccl: $lib"
  echo "nccl-tests: $NCCLTESTS"
  date -u
} 2>&1 | tee "$out/machine.txt"
ngpu=$(nvidia-smi -L | grep -c '^GPU')
[ "$ngpu" -ge 2 ] || { echo "want 2 GPUs, have $ngpu"; exit 2; }

for i in $(seq "$ROUNDS"); do
  echo "== round $i: exporter"
  timeout 300 "$bin" collectives --gpu=0 --gpu=1 --library="$lib" --output=json --no-sharing-check \
    --size=256MiB --small-size=8KiB --warmup=5 --iters=20 \
    >"$out/exporter-$i.json" 2>"$out/exporter-$i.err"
  echo "exit $?"; tail -3 "$out/exporter-$i.err"
  for c in all_reduce all_gather reduce_scatter all_to_all send_recv; do
    nccltests "$c" 8K "$i"
    [ "$c" = send_recv ] || nccltests "$c" 256M "$i"
  done
done
# The nccl-tests tables of round 1, for the record.
grep -h -E 'nThread|Using devices|Rank|NCCL version' "$out"/nccltests-all_reduce-8k-1.txt 2>/dev/null | head -5

python3 - "$out" "$ROUNDS" <<'PY'
import json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
small, big = 8 << 10, 256 << 20
colls = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]

def exporter(i):
    try:
        with open(os.path.join(out, f"exporter-{i}.json")) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        print(f"exporter round {i}: {e}")
        return {}
    if r.get("error"):
        print(f"exporter round {i}: {r['error']}")
    got = {}
    for res in r.get("results", []):
        if res.get("error") or not res.get("seconds"):
            continue
        key = (res["collective"], res["size_bytes"])
        got.setdefault(key, (res["seconds"] * 1e6, res.get("bus_bytes_per_second", 0) / 1e9))
    return got

def nccltests(c, size, i):
    # The data line: size first; from the end, out-of-place time (us),
    # algbw, busbw (GB/s), #wrong, then the in-place four.
    name = f"nccltests-{c}-{'8k' if size == small else '256m'}-{i}.txt"
    try:
        lines = open(os.path.join(out, name)).read().splitlines()
    except OSError:
        return None
    for l in lines:
        t = l.split()
        if len(t) >= 9 and t[0] == str(size):
            try:
                return float(t[-8]), float(t[-6])
            except ValueError:
                return None
    return None

ex = [exporter(i) for i in range(1, rounds + 1)]
fails, missing = 0, 0
print()
print(f"{'collective':15} {'size':>6} {'what':>10} {'exporter (rounds)':>26} {'nccl-tests (rounds)':>26} {'diff':>8} {'limit':>6}  verdict")
for c in colls:
    for size, what, limit in ((small, "time us", 0.25), (big, "busbw GB/s", 0.03)):
        if size == big and c == "send_recv":
            continue
        idx = 0 if size == small else 1
        e = [r[(c, size)][idx] for r in ex if (c, size) in r]
        n = [v[idx] for v in (nccltests(c, size, i) for i in range(1, rounds + 1)) if v]
        label = "8KiB" if size == small else "256MiB"
        if len(e) < rounds or len(n) < rounds:
            print(f"{c:15} {label:>6} {what:>10} {' '.join(f'{v:.2f}' for v in e):>26} {' '.join(f'{v:.2f}' for v in n):>26} {'':>8} {limit:>6.0%}  MISSING")
            missing += 1
            continue
        em, nm = statistics.mean(e), statistics.mean(n)
        diff = (em - nm) / nm
        ok = abs(diff) <= limit
        fails += not ok
        print(f"{c:15} {label:>6} {what:>10} {' '.join(f'{v:.2f}' for v in e):>26} {' '.join(f'{v:.2f}' for v in n):>26} {diff:>+8.1%} {limit:>6.0%}  {'PASS' if ok else 'FAIL'}")
print()
if missing:
    print(f"{missing} comparison(s) without data")
    sys.exit(2)
print("all within limits" if not fails else f"{fails} comparison(s) outside the limit")
sys.exit(1 if fails else 0)
PY

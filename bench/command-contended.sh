#!/usr/bin/env bash
# The probe and collectives commands say what shared their GPUs (issue 24,
# item 2), on a GPU machine:
#   1. bench/load.py copies host->device on GPU 0 in another process;
#      `gpulink_exporter probe --gpu=0` and `collectives` (2 GPUs or more)
#      run beside it, as table and as JSON: stderr must say GPU 0 was
#      shared, naming the load's pid; the table must show the "shared:"
#      line and the contended marks; the JSON must mark GPU 0's results (the
#      probe's gpus[0].contention, the collective round's contention) with
#      other_process and the load's pid on GPU 0;
#   2. the load stops; the same commands alone must mark nothing, and must
#      still have listed the processes (contention.process_checks >= 2).
# The host-to-device bandwidth of both probe runs is printed side by side.
# NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
# NVSHMEM_DISABLE_NVLS=1 are exported for every process. Only read-only
# nvidia-smi queries are used.
# Needs no Go: carry .device (bench/device-build.sh) and run
#   .device/command-contended.sh OUTDIR
# Exits 1 when a check fails, 2 when the machine is not ready (GPU 0 busy
# already, the load never appeared).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
. "$here/common.sh"
# shellcheck source=bench/gpu0.sh
. "$here/gpu0.sh"
bench_out "${1:-}"
export CUDA_DEVICE_ORDER=PCI_BUS_ID
lib=${NCCL_LIBRARY:-$(nccl_wheel_lib)}
ngpu=$(nvidia-smi -L | grep -c '^GPU')
bus0=$(gpu0_bus)
load=
stop_load() { [ -n "$load" ] && kill "$load" 2>/dev/null; wait "$load" 2>/dev/null; load=; }
trap stop_load EXIT

# jcheck FILE KIND PID: the JSON's contention of GPU 0 (KIND probe: the
# first GPU round's; collectives: the round's). PID: want other_process and
# PID on GPU 0; PID "": want a clean, checked contention.
jcheck() {
  python3 - "$1" "$2" "$3" "$bus0" <<'PY'
import json, sys
path, kind, pid, bus = sys.argv[1:5]
try:
    r = json.load(open(path))
except (OSError, ValueError) as e:
    sys.exit(f"{path}: {e}")
c = (r["gpus"][0] if kind == "probe" else r).get("contention")
if c is None:
    sys.exit(f"{path}: no contention: sharing was not checked")
reasons, procs = c.get("reasons") or [], c.get("processes") or {}
if pid:
    if "other_process" not in reasons or int(pid) not in procs.get(bus, []):
        sys.exit(f"{path}: contention {c}: want other_process and pid {pid} on {bus}")
else:
    if reasons or c.get("peers") or c.get("process_checks", 0) < 2:
        sys.exit(f"{path}: contention {c}: want nothing shared, and at least 2 listings")
print(f"{path}: contention {c}")
PY
}
# h2d FILE: the probe's host-to-device results, GB/s.
h2d() {
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(" ".join("%.2f" % (x["bytes_per_second"] / 1e9) for x in r["gpus"][0].get("results", [])
               if x.get("probe") == "host_to_device" and x.get("bytes_per_second")))' "$1" 2>/dev/null
}

# run NAME ARGS...: the command as table and as JSON, into OUT/NAME.*
# Each run waits 3 s first: NVML averages utilisation over up to a second,
# and the command reads it right before it starts, so the previous run's
# own kernels must be out of it (the daemon knows its own rounds; a
# command does not).
run() {
  local name=$1; shift
  sleep 3
  timeout 600 "$bin" "$@" --output=table >"$out/$name.txt" 2>"$out/$name.table.err"
  echo "$name table: exit $?"
  sleep 3
  timeout 600 "$bin" "$@" --output=json >"$out/$name.json" 2>"$out/$name.err"
  echo "$name json: exit $?"
  cat "$out/$name.err"
}

echo "== 0. $ngpu GPU(s); GPU 0 at $bus0; libnccl $lib"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader | tee "$out/gpus.txt"
gpu0_busy && exit 2

echo "== 1. host->device copies on GPU 0 in another process"
python3 "$here/load.py" h2d 1200 256 >"$out/load.log" 2>&1 &
load=$!
for _ in $(seq 120); do
  gpu0_runs "$load" && break
  sleep 0.5
done
if ! gpu0_runs "$load"; then
  echo "the load (pid $load) never appeared on GPU 0"; cat "$out/load.log"
  exit 2
fi
echo "load pid $load on GPU 0"
sleep 2
run probe-shared probe --gpu=0
check "probe beside the load: stderr says GPU 0 was shared, naming the load" \
  grep -q "GPU $bus0 was shared while it was measured.*other_process" "$out/probe-shared.err"
check "probe beside the load: stderr names pid $load" grep -q "pid $load" "$out/probe-shared.err"
check "probe beside the load: the table says GPU 0 was shared" grep -q "shared: GPU $bus0: other compute processes: pid $load" "$out/probe-shared.txt"
check "probe beside the load: the table marks results other_process" grep -q "other_process" "$out/probe-shared.txt"
check "probe beside the load: JSON marks GPU 0's results" jcheck "$out/probe-shared.json" probe "$load"
if [ "$ngpu" -ge 2 ]; then
  run collectives-shared collectives --library="$lib"
  check "collectives beside the load: stderr says the GPUs were shared" \
    grep -q "every result is marked contended (other_process" "$out/collectives-shared.err"
  check "collectives beside the load: stderr names pid $load on GPU 0" grep -q "GPU $bus0: other compute processes: pid $load" "$out/collectives-shared.err"
  check "collectives beside the load: the table says contended" grep -q "^# contended (other_process" "$out/collectives-shared.txt"
  check "collectives beside the load: JSON marks the round" jcheck "$out/collectives-shared.json" collectives "$load"
fi
stop_load
cat "$out/load.log"

echo "== 2. alone"
for _ in $(seq 60); do
  [ -z "$(gpu0_pids)" ] && break
  sleep 0.5
done
[ -z "$(gpu0_pids)" ] || echo "GPU 0 still has compute processes: $(gpu0_pids | tr '\n' ' ')"
sleep 3 # the load's utilisation out of NVML's average
run probe-alone probe --gpu=0
check "probe alone: stderr says nothing was shared" bash -c "! grep -q 'was shared' '$out/probe-alone.err'"
check "probe alone: the table marks nothing" bash -c "! grep -q -e 'shared:' -e 'other_process' -e 'utilization' '$out/probe-alone.txt'"
check "probe alone: JSON checked and marks nothing" jcheck "$out/probe-alone.json" probe ""
if [ "$ngpu" -ge 2 ]; then
  run collectives-alone collectives --library="$lib"
  check "collectives alone: stderr says nothing was shared" bash -c "! grep -q 'contended' '$out/collectives-alone.err'"
  check "collectives alone: the table marks nothing" bash -c "! grep -q '^# contended' '$out/collectives-alone.txt'"
  check "collectives alone: JSON checked and marks nothing" jcheck "$out/collectives-alone.json" collectives ""
fi

echo "== host-to-device GB/s, GPU 0: beside the load | alone"
echo "$(h2d "$out/probe-shared.json") | $(h2d "$out/probe-alone.json")"
echo "== tables"
for f in probe-shared probe-alone collectives-shared collectives-alone; do
  [ -f "$out/$f.txt" ] && { echo "-- $f"; cat "$out/$f.txt"; }
done
[ "$fail" = 0 ] && echo "ALL PASS" || echo "SOME CHECKS FAILED"
exit "$fail"

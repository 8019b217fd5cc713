#!/usr/bin/env bash
# Probe results another process disturbed (issue 12, item 4), on a GPU
# machine with the real daemon:
#   1. a pinned host->device copy loop runs in another process on GPU 0
#      (PyTorch); the daemon, under policy always, probes GPU 0 beside it:
#      the round must be marked contended (gpulink_probe_contended 1,
#      counted under other_process), and on a machine with a second GPU
#      GPU 1's results against GPU 0 must be too;
#   2. the loop stops; the next round of GPU 0 has the GPU to itself and
#      must not be contended.
# The host copy bandwidths of both rounds are printed beside each other.
# Needs no Go: carry .device (bench/device-build.sh) and run
#   .device/probe-contended.sh OUTDIR
# Exits non-zero when a check fails. Only read-only nvidia-smi queries are
# used; no GPU setting is changed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
. "$here/common.sh"
# shellcheck source=bench/gpu0.sh
. "$here/gpu0.sh"
bench_out "${1:-}"
addr=127.0.0.1:9849
url=http://$addr/metrics
unpack_tools promtool
ngpu=$(nvidia-smi -L | grep -c '^GPU')
bus0=$(gpu0_bus)
metric() { # metric REGEX: sum of matching series in the last scrape
  awk -v re="$1" '$0 ~ "^"re {s += $NF} END {print s + 0}' "$out/scrape.txt"
}
scrape() { curl -sf $url >"$out/scrape.txt"; }
# GPU 0's latest round start in seconds, all digits (metric prints six).
last_round() {
  awk '$0 ~ /^gpulink_probe_last_round_timestamp_seconds\{gpu="0",/ {printf "%.3f\n", $NF}' "$out/scrape.txt"
}
# The host copies of GPU 0 from a saved scrape, one "probe/node/what
# value" line each, GB/s or the ratio to its probe's expectation (the
# exporter exports that once per probe, not per result).
host_copies() {
  awk '
    function label(name) {
      return match($0, name "=\"[^\"]*\"") ? substr($0, RSTART + length(name) + 2, RLENGTH - length(name) - 3) : ""
    }
    !/[{,]gpu="0",/ { next }
    /^gpulink_probe_expected_bandwidth_bytes_per_second\{/ { expected[label("probe")] = $NF; next }
    /^gpulink_probe_bandwidth_bytes_per_second\{/ {
      p = label("probe")
      if (p != "host_to_device" && p != "device_to_host") next
      k = p "/node" label("host_numa_node"); bw[k] = $NF; kind[k] = p
    }
    END {
      for (k in bw) {
        printf "%s/GB_per_s %.2f\n", k, bw[k] / 1e9
        if (expected[kind[k]] > 0) printf "%s/ratio %.3f\n", k, bw[k] / expected[kind[k]]
      }
    }' "$1" | sort
}
epid= load=
stop_exporter() { [ -n "$epid" ] && kill "$epid" 2>/dev/null; wait "$epid" 2>/dev/null; epid=; }
stop_load() { [ -n "$load" ] && kill "$load" 2>/dev/null; wait "$load" 2>/dev/null; load=; }
trap 'stop_exporter; stop_load' EXIT

echo "== 0. $ngpu GPU(s); GPU 0 at $bus0"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader | tee "$out/gpus.txt"
if gpu0_busy; then
  echo "FAIL GPU 0 is not free for the copy loop"
  exit 1
fi

echo "== 1. a pinned host->device copy loop on GPU 0 in another process"
# Copies until killed; says "copying" once the first copies are done, and
# every 5 s the rate it gets.
python3 - >"$out/load.log" 2>&1 <<'EOF' &
import time, torch
n = 256 << 20
src = torch.empty(n, dtype=torch.uint8, pin_memory=True)
dst = torch.empty(n, dtype=torch.uint8, device='cuda:0')
stream = torch.cuda.Stream(device=0)
copies, t0, said = 0, time.perf_counter(), False
with torch.cuda.stream(stream):
    while True:
        for _ in range(8):
            dst.copy_(src, non_blocking=True)
        stream.synchronize()
        copies += 8
        now = time.perf_counter()
        if not said:
            print("copying", flush=True)
            said = True
        if now - t0 >= 5:
            print("GB/s %.1f" % (copies * n / (now - t0) / 1e9), flush=True)
            copies, t0 = 0, now
EOF
load=$!
for _ in $(seq 120); do grep -q '^copying' "$out/load.log" && break; sleep 0.5; done
check "the copy loop runs (pid $load)" grep -q '^copying' "$out/load.log"
loadpid=$load
check "NVML lists the copy loop on GPU 0" gpu0_runs "$loadpid"

"$bin" --web.listen-address=$addr --nvml.interval=1s --probe.policy=always --probe.interval=10s --probe.max-duty=1 \
  --probe.first-delay=1s --log.level=debug >"$out/exporter.log" 2>&1 &
epid=$!
t0=$(date +%s)
for _ in $(seq 240); do
  scrape 2>/dev/null
  [ "$(metric 'gpulink_probe_runs_total\{gpu="0",')" -ge 1 ] &&
    { [ "$ngpu" -lt 2 ] || [ "$(metric 'gpulink_probe_runs_total\{gpu="1",')" -ge 1 ]; } && break
  sleep 0.5
done
echo "first round of every GPU after $(( $(date +%s) - t0 )) s"
cp "$out/scrape.txt" "$out/metrics-contended.txt"
grep -E '^gpulink_probe_(contended|runs_total)' "$out/metrics-contended.txt" | grep -v ' 0$'
check "GPU 0 was probed beside the loop" test "$(metric 'gpulink_probe_runs_total\{gpu="0",.*result="(success|partial)"')" -ge 1
check "GPU 0's round is contended" test "$(metric 'gpulink_probe_contended\{gpu="0",.*peer="",')" = 1
check "counted as contended by another process" test "$(metric 'gpulink_probe_contended_rounds_total\{gpu="0",.*reason="other_process"')" -ge 1
if [ "$ngpu" -ge 2 ]; then
  check "GPU 1's results against GPU 0 are contended" test "$(metric 'gpulink_probe_contended\{gpu="1",.*peer="'"$bus0"'",')" = 1
  # Not a check: GPU 1's own copies share the host's memory with the loop.
  echo "NOTE GPU 1's own results contended: $(metric 'gpulink_probe_contended\{gpu="1",.*peer="",')"
fi
check "promtool check metrics on the scrape" sh -c "'$here/promtool' check metrics <'$out/metrics-contended.txt' >'$out/promtool.txt' 2>&1"
cat "$out/promtool.txt"
grep 'shared the GPU' "$out/exporter.log" | head -4
host_copies "$out/metrics-contended.txt" >"$out/host-contended.txt"

echo "== 2. the loop stops; the next round of GPU 0 is alone"
stop_load
cat "$out/load.log"
# The probe child may be listed too, while a round runs.
for _ in $(seq 60); do gpu0_runs "$loadpid" || break; sleep 0.5; done
check "NVML no longer lists the copy loop" test -z "$(gpu0_pids | grep -x "$loadpid")"
# A round that starts once NVML no longer lists the loop.
sleep 2
stopped=$(date +%s)
for _ in $(seq 180); do
  scrape
  awk -v l="$(last_round)" -v s="$stopped" 'BEGIN {exit !(l > s)}' && break
  sleep 0.5
done
cp "$out/scrape.txt" "$out/metrics-alone.txt"
grep -E '^gpulink_probe_(contended|runs_total)' "$out/metrics-alone.txt" | grep -v ' 0$'
check "GPU 0 probed again after the loop stopped" awk -v l="$(last_round)" -v s="$stopped" 'BEGIN {exit !(l > s)}'
check "GPU 0's round alone is not contended" test "$(metric 'gpulink_probe_contended\{gpu="0",')" = 0
if [ "$ngpu" -ge 2 ]; then
  echo "NOTE GPU 1's results against GPU 0 contended now: $(metric 'gpulink_probe_contended\{gpu="1",.*peer="'"$bus0"'",') (GPU 1's round may predate the stop)"
fi
host_copies "$out/metrics-alone.txt" >"$out/host-alone.txt"

echo "== host copies of GPU 0: beside the loop (contended) and alone"
join -a1 -a2 -e - -o 0,1.2,2.2 "$out/host-contended.txt" "$out/host-alone.txt" |
  awk 'BEGIN {printf "%-36s %10s %10s\n", "result", "contended", "alone"} {printf "%-36s %10s %10s\n", $1, $2, $3}' |
  tee "$out/host-copies.txt"
exit $fail

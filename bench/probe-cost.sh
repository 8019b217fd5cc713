#!/usr/bin/env bash
# What the probes cost a job on the same GPU: a PyTorch bf16 GEMM loop
# (8192 x 8192 matmuls, TFLOP/s every second, ref/gemm_loop.py) runs on GPU
# $GPU (default 0) throughout:
#   warm-up   WARM s (not counted)
#   alone     60 s
#   with      60 s while the daemon probes every GPU every 10 s with
#             --probe.policy=always. Under the default policy (idle) the
#             daemon would skip this GPU, since the GEMM is a compute process
#             on it; always is forced so the probes run beside the job.
#   idle      20 s with --probe.policy=idle: expect no round on this GPU, a skip
#   after     20 s alone again, to show drift (clocks, power, heat)
#   splits    SPLIT_S s (default 30) per entry of SPLIT, a space-separated
#             list of NAME=kind,kind...: policy always with only those probe
#             kinds, to tell which probes cost the job (reported, not judged)
# then reports throughput alone vs with probes and the loss in %, and from
# the daemon's /metrics the probes' busy and context seconds per round,
# device and context memory, round duration and runs by result
# (ref/cost_summary.py). nvidia-smi logs SM clock, power and temperature
# every second beside it.
# Needs no Go: carry .device (bench/device-build.sh) and run
#   .device/probe-cost.sh OUTDIR            (default $OUT/probe-cost)
# Writes everything to OUTDIR first, then exits 1 if the loss is over 1%
# (MAX_LOSS) or the daemon ran no round. About 3.5 minutes.
# Only read-only nvidia-smi queries are used; no GPU setting is changed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:+$OUT/probe-cost}}
out=${out:-$(mktemp -d)}
mkdir -p "$out"
bin=${BIN:-$here/gpulink_exporter}
ref=$here/ref
GPU=${GPU:-0}
WARM=${WARM:-10}
ALONE=${ALONE:-60}
WITH=${WITH:-60}
IDLE=${IDLE:-20}
AFTER=${AFTER:-20}
SPLIT=${SPLIT:-}
SPLIT_S=${SPLIT_S:-30}
MAX_LOSS=${MAX_LOSS:-1}
addr=127.0.0.1:9849
url=http://$addr/metrics
phases=$out/phases.txt
: >"$phases"
mark() { echo "$1 $(date +%s.%N)" >>"$phases"; }
gemm_pid='' smi_pid='' dpid=''
stop() { # stop PID: TERM, then KILL after 10 s
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}
# shellcheck disable=SC2317 # called by the trap
cleanup() { stop "$dpid"; stop "$gemm_pid"; stop "$smi_pid"; }
trap cleanup EXIT

nvidia-smi -L | tee "$out/nvidia-smi-L.txt"
nvidia-smi --query-gpu=index,pci.bus_id,name,driver_version,power.limit,clocks.max.sm --format=csv | tee "$out/gpus.csv"

# daemon POLICY LOGNAME [FLAGS...]: start it, wait for /metrics.
daemon() {
  local policy=$1 log=$2
  shift 2
  "$bin" --probe.policy="$policy" --web.listen-address=$addr "$@" >"$out/$log" 2>&1 &
  dpid=$!
  for _ in $(seq 100); do
    curl -sf $url >/dev/null 2>&1 && return 0
    kill -0 "$dpid" 2>/dev/null || break
    sleep 0.1
  done
  echo "daemon ($policy) did not come up; its log:"
  tail -n 20 "$out/$log"
  return 1
}

# stop_daemon: TERM it; end any probe child it left behind, by pid.
stop_daemon() {
  local kids
  kids=$(pgrep -P "$dpid" 2>/dev/null)
  stop "$dpid"
  dpid=''
  for k in $kids; do
    if kill -0 "$k" 2>/dev/null; then
      echo "probe child $k outlived the daemon: $(tr '\0' ' ' <"/proc/$k/cmdline" 2>/dev/null)"
      stop "$k"
    fi
  done
}

nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,memory.used \
  --format=csv -lms 1000 >"$out/nvidia-smi-1s.csv" 2>&1 &
smi_pid=$!

echo "== GEMM on GPU $GPU: starting"
python3 "$ref/gemm_loop.py" --gpu "$GPU" --seconds 900 "$out/gemm.jsonl" >"$out/gemm.log" 2>&1 &
gemm_pid=$!
for _ in $(seq 120); do
  [ -s "$out/gemm.jsonl" ] && break
  kill -0 "$gemm_pid" 2>/dev/null || break
  sleep 0.5
done
if ! [ -s "$out/gemm.jsonl" ]; then
  echo "GEMM loop produced nothing:"
  cat "$out/gemm.log"
  exit 1
fi
mark warm_start
sleep "$WARM"

echo "== alone, $ALONE s"
mark alone_start
sleep "$ALONE"

echo "== with the daemon, policy always, probes every 10 s, $WITH s"
mark with_start
if daemon always exporter-always.log --probe.interval=10s --probe.max-duty=1 --probe.first-delay=1s; then
  sleep "$WITH"
  curl -sf $url >"$out/metrics-always.txt"
fi
mark with_end
stop_daemon

sleep 2
echo "== with the daemon, policy idle, $IDLE s"
mark idle_start
if daemon idle exporter-idle.log --probe.interval=5s --probe.max-duty=1 --probe.first-delay=3s; then
  sleep "$IDLE"
  curl -sf $url >"$out/metrics-idle.txt"
fi
mark idle_end
stop_daemon

sleep 2
echo "== alone again, $AFTER s"
mark after_start
sleep "$AFTER"
mark after_end
split_args=()
for entry in $SPLIT; do
  name=${entry%%=*} kinds=()
  IFS=, read -ra ks <<<"${entry#*=}"
  for k in "${ks[@]}"; do kinds+=(--probe.kind="$k"); done
  sleep 2
  echo "== split $name: policy always, probes every 10 s, only ${entry#*=}, $SPLIT_S s"
  mark "split_${name}_start"
  if daemon always "exporter-split-$name.log" --probe.interval=10s --probe.max-duty=1 --probe.first-delay=1s "${kinds[@]}"; then
    sleep "$SPLIT_S"
    curl -sf $url >"$out/metrics-split-$name.txt"
  fi
  mark "split_${name}_end"
  stop_daemon
  split_args+=(--split "$name=$out/metrics-split-$name.txt")
done
stop "$gemm_pid"
gemm_pid=''
stop "$smi_pid"
smi_pid=''

grep -h '^gpulink_probe_' "$out/metrics-always.txt" >"$out/probe-series-always.txt" 2>/dev/null
grep -h '^gpulink_probe_' "$out/metrics-idle.txt" >"$out/probe-series-idle.txt" 2>/dev/null
echo "== summary"
python3 "$ref/cost_summary.py" --samples "$out/gemm.jsonl" --phases "$phases" --gpu "$GPU" \
  --metrics-always "$out/metrics-always.txt" --metrics-idle "$out/metrics-idle.txt" \
  "${split_args[@]}" --max-loss "$MAX_LOSS" --json "$out/summary.json" | tee "$out/summary.txt"
exit "${PIPESTATUS[0]}"

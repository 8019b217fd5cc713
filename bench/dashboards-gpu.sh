#!/usr/bin/env bash
# The shipped dashboards against real hardware: the real exporter (probes
# forced every 20 s, every source at 1-2 s) with a PyTorch process holding
# GPU 0, scraped every second by a real Prometheus evaluating the shipped
# rules; after WAIT seconds (default 75: three probe rounds and a full 1m
# rate window) every dashboard query runs (ref/dashboard_queries.py) and
# the script prints which return data.
# Needs no Go: carry .device (bench/device-build.sh --dashboards) and run
#   .device/dashboards-gpu.sh OUTDIR        (default $OUT/dashboards-gpu)
# Exits as dashboard_queries.py does (1: a query erred or returned nothing).
# Only read-only nvidia-smi queries; no GPU setting is changed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:+$OUT/dashboards-gpu}}
out=${out:-$(mktemp -d)}
mkdir -p "$out"
WAIT=${WAIT:-75}
work=$(mktemp -d)
pids=()
# shellcheck disable=SC2317 # called by the trap
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
gunzip -c "$here/prometheus.gz" >"$work/prometheus" && chmod +x "$work/prometheus"

nvidia-smi -L | tee "$out/nvidia-smi-L.txt"
python3 "$here/hold.py" 0 512 >"$out/hold.log" 2>&1 &
pids+=($!)
"$here/gpulink_exporter" --web.listen-address=127.0.0.1:9849 --probe.policy=always --probe.interval=20s \
  --probe.first-delay=1s --probe.max-duty=1 --nvml.interval=1s --nic.interval=1s --topology.interval=1s \
  --process.interval=2s >"$out/exporter.log" 2>&1 &
pids+=($!)
cat >"$work/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ['$here/rules/gpulink.rules.yml']
scrape_configs:
  - job_name: gpulink
    static_configs: [{targets: ['127.0.0.1:9849']}]
YML
"$work/prometheus" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address=127.0.0.1:9090 >"$out/prometheus.log" 2>&1 &
pids+=($!)
echo "waiting $WAIT s for samples, probe rounds and rate windows"
sleep "$WAIT"
curl -sf http://127.0.0.1:9849/metrics >"$out/metrics.txt"
python3 "$here/ref/dashboard_queries.py" --prometheus http://127.0.0.1:9090 --instance 127.0.0.1:9849 \
  --dashboards "$here/dashboards" --json "$out/dashboard-queries.json" | tee "$out/dashboard-queries.txt"
exit "${PIPESTATUS[0]}"

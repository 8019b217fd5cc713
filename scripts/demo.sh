#!/usr/bin/env bash
# make demo: the exporter's simulated DGX H100 (--sim=dgx-h100, its GPU
# processes in Kubernetes pods) and AWS p5 (--sim=aws-p5, its GPU processes
# Slurm job steps: jobs 4242 and 4343), scraped every 5 s by a real
# Prometheus that evaluates the shipped rules
# (deploy/prometheus/gpulink.rules.yml, production timings) and alerts to a
# real Alertmanager. Everything listens on localhost, keeps its data in a
# temporary directory and stops with Ctrl-C.
#
#   FAULTS=faults.yml make demo    # inject faults; edit the file while it runs
#
# The fault file (the DGX's) syntax is in README.md ("Simulated node");
# P5_FAULTS=file does the same for the p5. Probes run every
# 30 s under policy always, so the probe panels fill quickly; throttling
# and link alerts fire after their `for:` (minutes), as in production.
# Ports: EXPORTER (9849), EXPORTER_P5 (9850), PROMETHEUS_PORT (9090),
# ALERTMANAGER_PORT (9093).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BIN:-$repo/gpulink_exporter}
tools=${TOOLS_BIN:-$repo/.tools/bin}
exp_port=${EXPORTER:-9849} p5_port=${EXPORTER_P5:-9850} prom_port=${PROMETHEUS_PORT:-9090} am_port=${ALERTMANAGER_PORT:-9093}
faults=${FAULTS:-} p5_faults=${P5_FAULTS:-}
for b in "$bin" "$tools/prometheus" "$tools/alertmanager"; do
  [[ -x $b ]] || { echo "demo: $b missing: run make build tools" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

# simulate PROFILE PORT FAULTS LOG: one simulated node in the background.
simulate() {
  local args=(--sim="$1" --web.listen-address="127.0.0.1:$2"
    --probe.policy=always --probe.interval=30s --probe.first-delay=0 --probe.max-duty=1)
  if [[ -n $3 ]]; then
    args+=(--sim.faults="$3")
  fi
  "$bin" "${args[@]}" >"$work/$4" 2>&1 &
  pids+=($!)
}
absolute() { # a fault file's absolute path, made empty if missing
  local f
  f=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
  [[ -e $f ]] || echo "faults: []" >"$f"
  echo "$f"
}
[[ -z $faults ]] || faults=$(absolute "$faults")
[[ -z $p5_faults ]] || p5_faults=$(absolute "$p5_faults")
simulate dgx-h100 "$exp_port" "$faults" exporter.log
simulate aws-p5 "$p5_port" "$p5_faults" exporter-p5.log

cat >"$work/alertmanager.yml" <<YML
route: {receiver: log, group_by: [alertname, instance], group_wait: 10s, group_interval: 1m, repeat_interval: 4h}
receivers: [{name: log}]
YML
"$tools/alertmanager" --config.file="$work/alertmanager.yml" --storage.path="$work/am" \
  --web.listen-address=127.0.0.1:$am_port --cluster.listen-address= >"$work/alertmanager.log" 2>&1 &
pids+=($!)

cat >"$work/prometheus.yml" <<YML
global: {scrape_interval: 5s, evaluation_interval: 5s}
rule_files: ['$repo/deploy/prometheus/gpulink.rules.yml']
alerting: {alertmanagers: [{static_configs: [{targets: ['127.0.0.1:$am_port']}]}]}
scrape_configs:
  - job_name: gpulink
    static_configs: [{targets: ['127.0.0.1:$exp_port', '127.0.0.1:$p5_port']}]
YML
"$tools/prometheus" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prom" \
  --web.listen-address=127.0.0.1:$prom_port >"$work/prometheus.log" 2>&1 &
pids+=($!)

cat <<TXT
simulated DGX H100:  http://127.0.0.1:$exp_port/metrics
simulated AWS p5:    http://127.0.0.1:$p5_port/metrics (Slurm jobs: gpulink_gpu_job_info)
Prometheus:          http://127.0.0.1:$prom_port/alerts
Alertmanager:        http://127.0.0.1:$am_port
fault files:         DGX ${faults:-none (FAULTS=file to inject faults)}, p5 ${p5_faults:-none (P5_FAULTS=file)}
logs:                $work/*.log
Grafana: add http://127.0.0.1:$prom_port as a Prometheus data source and import dashboards/*.json.
Ctrl-C stops everything.
TXT
wait -n "${pids[@]}" || true
echo "demo: a process ended; its log:" >&2
tail -n 20 "$work"/*.log >&2

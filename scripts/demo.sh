#!/usr/bin/env bash
# make demo: the exporter's simulated DGX H100 (--sim=dgx-h100), scraped
# every 5 s by a real Prometheus that evaluates the shipped rules
# (deploy/prometheus/gpulink.rules.yml, production timings) and alerts to a
# real Alertmanager. Everything listens on localhost, keeps its data in a
# temporary directory and stops with Ctrl-C.
#
#   FAULTS=faults.yml make demo    # inject faults; edit the file while it runs
#
# The fault file syntax is in README.md ("Simulated node"). Probes run every
# 30 s under policy always, so the probe panels fill quickly; throttling
# and link alerts fire after their `for:` (minutes), as in production.
# Ports: EXPORTER (9849), PROMETHEUS_PORT (9090), ALERTMANAGER_PORT (9093).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BIN:-$repo/gpulink_exporter}
tools=${TOOLS_BIN:-$repo/.tools/bin}
exp_port=${EXPORTER:-9849} prom_port=${PROMETHEUS_PORT:-9090} am_port=${ALERTMANAGER_PORT:-9093}
faults=${FAULTS:-}
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

sim_args=(--sim=dgx-h100 --web.listen-address=127.0.0.1:$exp_port
  --probe.policy=always --probe.interval=30s --probe.first-delay=0 --probe.max-duty=1)
if [[ -n $faults ]]; then
  faults=$(cd "$(dirname "$faults")" && pwd)/$(basename "$faults")
  [[ -e $faults ]] || echo "faults: []" >"$faults"
  sim_args+=(--sim.faults="$faults")
fi
"$bin" "${sim_args[@]}" >"$work/exporter.log" 2>&1 &
pids+=($!)

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
    static_configs: [{targets: ['127.0.0.1:$exp_port']}]
YML
"$tools/prometheus" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prom" \
  --web.listen-address=127.0.0.1:$prom_port >"$work/prometheus.log" 2>&1 &
pids+=($!)

cat <<TXT
simulated DGX H100:  http://127.0.0.1:$exp_port/metrics
Prometheus:          http://127.0.0.1:$prom_port/alerts
Alertmanager:        http://127.0.0.1:$am_port
fault file:          ${faults:-none (FAULTS=file to inject faults)}
logs:                $work/*.log
Grafana: add http://127.0.0.1:$prom_port as a Prometheus data source and import dashboards/*.json.
Ctrl-C stops everything.
TXT
wait -n "${pids[@]}" || true
echo "demo: a process ended; its log:" >&2
tail -n 20 "$work"/*.log >&2

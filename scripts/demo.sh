#!/usr/bin/env bash
# make demo: the exporter's simulated DGX H100 (--sim=dgx-h100, its GPU
# processes in Kubernetes pods) and AWS p5 (--sim=aws-p5, its GPU processes
# Slurm job steps: jobs 4242 and 4343), scraped every 5 s by a real
# Prometheus that evaluates the shipped rules
# (deploy/prometheus/gpulink.rules.yml, production timings) and alerts to a
# real Alertmanager. The two nodes probe each other node to node through
# the ring the README recommends (deploy/prometheus/scrape-config.example.yml,
# job gpulink-node-probe: a file_sd file whose targets name their prober),
# so every dashboard row has data. Everything listens on 127.0.0.1, keeps
# its data in a temporary directory and stops with Ctrl-C.
#
#   make demo FAULTS=scripts/demo-faults.yml   # the example faults; edit the file while it runs
#
# The fault file (the DGX's) syntax is in README.md ("Simulated node");
# P5_FAULTS=file does the same for the p5. Probes and collective rounds run
# every 30 s under policy always, so their panels fill within a minute;
# alerts fire after their `for:` as in production: GPUXIDResetRequired of
# the example file at once, the others within 2 to 15 minutes.
#
# Ports (each checked before anything starts; one in use stops the demo
# naming it): EXPORTER (9849), EXPORTER_P5 (9850), PROMETHEUS_PORT (9090),
# ALERTMANAGER_PORT (9093). BIN, PROMETHEUS, ALERTMANAGER: the binaries
# (default ./gpulink_exporter and .tools/bin's). A process that ends or
# does not come up stops the demo, naming the process and its log, with a
# non-zero status; the logs are then kept.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BIN:-$repo/gpulink_exporter}
tools=${TOOLS_BIN:-$repo/.tools/bin}
prometheus=${PROMETHEUS:-$tools/prometheus} alertmanager=${ALERTMANAGER:-$tools/alertmanager}
# Prometheus's web UI (scripts/fetch-prom-tools.sh puts it beside the
# binaries' folder): Debian's prometheus has no assets built in.
web=${PROMETHEUS_WEB:-$(dirname "$(dirname "$prometheus")")/share/prometheus}
exp_port=${EXPORTER:-9849} p5_port=${EXPORTER_P5:-9850} prom_port=${PROMETHEUS_PORT:-9090} am_port=${ALERTMANAGER_PORT:-9093}
faults=${FAULTS:-} p5_faults=${P5_FAULTS:-}

fail() {
	echo "demo: $*" >&2
	exit 1
}
# listening PORT: whether something accepts connections on 127.0.0.1:PORT.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Every port before anything starts: a port in use would otherwise show
# up as a process that ends at once, after the banner.
for var in EXPORTER:$exp_port EXPORTER_P5:$p5_port PROMETHEUS_PORT:$prom_port ALERTMANAGER_PORT:$am_port; do
	name=${var%%:*} port=${var#*:}
	[[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) || fail "$name=$port is not a port number"
	if listening "$port"; then
		fail "port $port ($name) is in use on 127.0.0.1: stop what listens there or choose another, e.g. make demo $name=$((port + 10000))"
	fi
done

for b in "$bin" "$prometheus" "$alertmanager"; do
	[[ -x $b ]] || fail "$b missing: run make build tools"
done
[[ -e $web/web/templates/alerts.html ]] || fail "Prometheus's web UI missing under $web/web: run make tools"

work=$(mktemp -d)
keep=0
declare -A proc_pid=()
cleanup() {
	trap - INT TERM
	for p in "${proc_pid[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	((keep)) || rm -rf "$work"
}
trap cleanup EXIT
# Ctrl-C: stop everything quietly. The processes run in their own
# sessions (setsid), so the terminal's SIGINT reaches this script alone,
# and none of them ends before the script knows it is stopping.
trap 'exit 0' INT TERM

# died NAME STATUS: a process ended or did not come up: name it and its
# log, keep the logs, fail.
died() {
	keep=1
	echo "demo: $1 $2; its log, $work/$1.log:" >&2
	tail -n 20 "$work/$1.log" >&2 || true
	exit 1
}

# launch NAME CMD...: runs CMD in the background, its output in NAME.log.
launch() {
	local name=$1
	shift
	setsid "$@" >"$work/$name.log" 2>&1 </dev/null &
	proc_pid[$name]=$!
}

# ready NAME PORT: waits until NAME listens on PORT; fails naming it if it
# ends first or takes more than 60 s.
ready() {
	local i
	for ((i = 0; i < 600; i++)); do
		listening "$2" && return 0
		kill -0 "${proc_pid[$1]}" 2>/dev/null || {
			local rc=0
			wait "${proc_pid[$1]}" || rc=$?
			died "$1" "exited with status $rc before listening on 127.0.0.1:$2"
		}
		sleep 0.1
	done
	died "$1" "is not listening on 127.0.0.1:$2 after 60 s"
}

absolute() { # a fault file's absolute path, made empty if missing
	local f
	f=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
	[[ -e $f ]] || echo "faults: []" >"$f"
	echo "$f"
}
[[ -z $faults ]] || faults=$(absolute "$faults")
[[ -z $p5_faults ]] || p5_faults=$(absolute "$p5_faults")

# The ring's shared token (--node-probe.token-file), as the README's
# example wants it: the exporters refuse /probe, reserve and join without
# it, and Prometheus sends it to /probe. A new one every run.
token=$work/node-probe-token
(umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$token")

# simulate NAME PROFILE PORT FAULTS STORAGE_DIR: one simulated node.
# Probes and collective rounds every 30 s with no bound on their duty;
# the storage probes on the profile's data drives (GDS native on the
# DGX's /raid, compatibility mode on the p5's /opt/dlami/nvme); each node
# takes part in node-to-node sessions as target (--node-probe.enabled),
# at most one per role every 15 s, inside the ring's 30 s.
simulate() {
	local args=(--sim="$2" --web.listen-address="127.0.0.1:$3"
		--probe.policy=always --probe.interval=30s --probe.first-delay=0 --probe.max-duty=1
		--probe.storage-dir="$5"
		--collective.interval=30s --collective.warmup=1 --collective.iterations=5 --collective.samples=1
		--node-probe.enabled --node-probe.min-interval=15s --node-probe.token-file="$token")
	if [[ -n $4 ]]; then
		args+=(--sim.faults="$4")
	fi
	launch "$1" "$bin" "${args[@]}"
}
simulate exporter dgx-h100 "$exp_port" "$faults" /raid
simulate exporter-p5 aws-p5 "$p5_port" "$p5_faults" /opt/dlami/nvme

cat >"$work/alertmanager.yml" <<YML
route: {receiver: log, group_by: [alertname, instance], group_wait: 10s, group_interval: 1m, repeat_interval: 4h}
receivers: [{name: log}]
YML
launch alertmanager "$alertmanager" --config.file="$work/alertmanager.yml" --storage.path="$work/am" \
	--web.listen-address="127.0.0.1:$am_port" --cluster.listen-address=

# The ring, written as the README's example writes it from a list of
# exporters in ring order: each target names its prober (the one before
# it) in __prober__.
printf '%s\n' "127.0.0.1:$exp_port" "127.0.0.1:$p5_port" >"$work/ring.txt"
awk '{a[NR]=$1} END {for (i=1; i<=NR; i++)
	printf "- targets: [\"%s\"]\n  labels: {__prober__: \"%s\"}\n", a[i], a[i==1 ? NR : i-1]}' \
	"$work/ring.txt" >"$work/gpulink-node-probe-ring.yml"

cat >"$work/prometheus.yml" <<YML
global: {scrape_interval: 5s, evaluation_interval: 5s}
rule_files: ['$repo/deploy/prometheus/gpulink.rules.yml']
alerting: {alertmanagers: [{static_configs: [{targets: ['127.0.0.1:$am_port']}]}]}
scrape_configs:
  - job_name: gpulink
    static_configs: [{targets: ['127.0.0.1:$exp_port', '127.0.0.1:$p5_port']}]
  # deploy/prometheus/scrape-config.example.yml's gpulink-node-probe, every
  # 30 s rather than 5 m.
  - job_name: gpulink-node-probe
    metrics_path: /probe
    params:
      module: [nccl_ring]
    scrape_interval: 30s
    scrape_timeout: 25s
    authorization:
      credentials_file: '$token'
    file_sd_configs:
      - files: ['$work/gpulink-node-probe-ring.yml']
    relabel_configs:
      - source_labels: [__address__]
        target_label: __param_target
      - source_labels: [__param_target]
        target_label: instance
      - source_labels: [__prober__]
        target_label: prober
      - source_labels: [__prober__]
        target_label: __address__
YML
launch prometheus "$prometheus" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prom" \
	--web.listen-address="127.0.0.1:$prom_port" \
	--web.local-assets="$web/web" --web.console.templates="$web/consoles" --web.console.libraries="$web/console_libraries"

ready exporter "$exp_port"
ready exporter-p5 "$p5_port"
ready alertmanager "$am_port"
ready prometheus "$prom_port"

example=scripts/demo-faults.yml
cat <<TXT
simulated DGX H100:  http://127.0.0.1:$exp_port/metrics
simulated AWS p5:    http://127.0.0.1:$p5_port/metrics (Slurm jobs: gpulink_gpu_job_info)
node-to-node ring:   each node probes the other (job gpulink-node-probe; the ring's token: $token)
Prometheus:          http://127.0.0.1:$prom_port/classic/alerts (/classic/graph, /classic/rules, /classic/targets)
Alertmanager:        http://127.0.0.1:$am_port
fault files:         DGX ${faults:-none}, p5 ${p5_faults:-none}
example faults:      make demo FAULTS=$example (edit it while the demo runs: alerts fire and resolve)
logs:                $work/*.log
Grafana: add http://127.0.0.1:$prom_port as a Prometheus data source and import dashboards/*.json.
Ports: EXPORTER, EXPORTER_P5, PROMETHEUS_PORT, ALERTMANAGER_PORT (make demo PROMETHEUS_PORT=19090).
Ctrl-C stops everything.
TXT

# Whatever ends first, unless Ctrl-C, is a failure: name it.
rc=0
wait -n "${proc_pid[@]}" || rc=$?
for name in "${!proc_pid[@]}"; do
	if ! kill -0 "${proc_pid[$name]}" 2>/dev/null; then
		died "$name" "ended (status $rc)"
	fi
done
died prometheus "stopped waiting (status $rc)"

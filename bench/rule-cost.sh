#!/usr/bin/env bash
# Rule cost at fleet scale (issue 37): each rule group's evaluation time in a
# real Prometheus over N nodes' day of history, for two rule files (before
# and after a change), so that the cost per node and the node count at which
# the slowest group needs longer than its interval can be read off.
#
# The history is the simulated DGX H100's /metrics (one scrape of
# `gpulink_exporter --sim=dgx-h100` with probes and collective rounds run),
# copied to each node (instance and node "node-NNNN", job gpulink) every
# STEP over a day up to now and 3 hours past it, by bench/rulehistory,
# and turned into blocks by `promtool tsdb create-blocks-from openmetrics`,
# a file per 2-hour block (a node-day is about a gigabyte of text at 30 s).
# Prometheus first opens the blocks without rules until its compactions are
# done, then evaluates each rule file every INTERVAL;
# /api/v1/rules gives each group's evaluationTime, sampled once per
# interval, and the median of the last SAMPLES evaluations is reported.
#
# Usage: bench/rule-cost.sh [OUTDIR]
#   NODES="5 10"   node counts (each written and measured on its own)
#   STEP=30s       scrape interval of the history (kube-prometheus-stack's)
#   INTERVAL=30s   rule evaluation interval
#   SAMPLES=4      evaluations per measurement after two to warm up
#   BEFORE=FILE    the rules measured first (default: 5531cf1's, from git,
#                  or rules/gpulink.rules.5531cf1.yml beside the script)
#   AFTER=FILE     the rules measured second (default: the working tree's,
#                  or rules/gpulink.rules.yml beside the script)
#   BIN, PROMTOOL, PROMETHEUS: the binaries (default: built here, .tools/bin)
#
# On a GPU machine (no Go): `bench/device-build.sh --dashboards` puts the
# exporter, rulehistory, promtool, Prometheus and both rule files into
# .device/, and `.device/rule-cost.sh OUTDIR` runs from there.
#   WORK=DIR       where the history and Prometheus's data go (gigabytes;
#                  default: a new temporary folder, removed at the end)
# Writes OUTDIR/cost.tsv (rules, nodes, group, median evaluation seconds)
# and prints it; the logs and each evaluation's /api/v1/rules beside it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=bench/common.sh
. "$here/common.sh"
bench_out "${1:-}"
work=${WORK:-}
if [ -z "$work" ]; then
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
fi
if [ -f "$here/rulehistory" ] || [ -f "$here/promtool.gz" ]; then
	# .device/ (bench/device-build.sh): everything beside the script.
	unpack_tools promtool prometheus
	BIN=${BIN:-$here/gpulink_exporter} PROMTOOL=${PROMTOOL:-$here/promtool} PROMETHEUS=${PROMETHEUS:-$here/prometheus}
	BEFORE=${BEFORE:-$here/rules/gpulink.rules.5531cf1.yml} AFTER=${AFTER:-$here/rules/gpulink.rules.yml}
fi
BIN=${BIN:-$root/gpulink_exporter}
PROMTOOL=${PROMTOOL:-$root/.tools/bin/promtool}
PROMETHEUS=${PROMETHEUS:-$root/.tools/bin/prometheus}
NODES=${NODES:-5 10}
STEP=${STEP:-30s}
INTERVAL=${INTERVAL:-30s}
SAMPLES=${SAMPLES:-4}
secs() { case $1 in *m) echo $((${1%m} * 60)) ;; *s) echo "${1%s}" ;; *) echo "$1" ;; esac; }
interval_s=$(secs "$INTERVAL")

[ -x "$BIN" ] || (cd "$root" && make build >/dev/null)
if [ -z "${BEFORE:-}" ]; then
	BEFORE=$out/rules-before.yml
	git -C "$root" show 5531cf1:deploy/prometheus/gpulink.rules.yml >"$BEFORE"
fi
# A copy: edits to the working tree during the run change nothing.
cp "${AFTER:-$root/deploy/prometheus/gpulink.rules.yml}" "$out/rules-after.yml"
AFTER=$out/rules-after.yml
if [ -f "$here/rulehistory" ]; then
	cp "$here/rulehistory" "$out/rulehistory"
else
	go build -o "$out/rulehistory" "$root/bench/rulehistory"
fi

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# One scrape of the simulated node once its probes and a collective round
# have run.
p=$(port)
"$BIN" --sim=dgx-h100 --web.listen-address="127.0.0.1:$p" --probe.policy=always --probe.interval=5s \
	--probe.first-delay=0 --probe.max-duty=1 --collective.interval=1s --collective.warmup=1 \
	--collective.iterations=5 --collective.samples=1 >"$out/exporter.log" 2>&1 &
exporter=$!
for _ in $(seq 120); do
	if curl -sf "127.0.0.1:$p/metrics" >"$out/scrape.txt" &&
		grep -q '^gpulink_probe_bandwidth_bytes_per_second' "$out/scrape.txt" &&
		grep -q '^gpulink_collective_bus_bandwidth_bytes_per_second' "$out/scrape.txt"; then
		break
	fi
	sleep 1
done
kill "$exporter"
wait "$exporter" 2>/dev/null || true
grep -q '^gpulink_collective_bus_bandwidth_bytes_per_second' "$out/scrape.txt" || {
	echo "rule-cost: the simulated node gave no probe and collective results in 2 minutes" >&2
	exit 1
}

# A day of history up to now and 3 hours past it (generating a node takes
# minutes here), so the instant selectors still find a latest sample while
# Prometheus evaluates, however long the generation took.
end=$(($(date +%s) + 3 * 3600))
hist() { # NODES DIR: that many nodes' history into DIR's blocks, one
	# file per 2-hour block (promtool reads its whole input again for
	# every block it writes), blocks aligned as promtool aligns them
	local from
	for ((from = (end - 27 * 3600) / 7200 * 7200; from <= end; from += 7200)); do
		"$out/rulehistory" -scrape "$out/scrape.txt" -rules "$BEFORE,$AFTER" -nodes "$1" \
			-step "$STEP" -duration 27h -end "$end" -from "$from" -to $((from + 7200)) >"$work/block.om"
		"$PROMTOOL" tsdb create-blocks-from openmetrics "$work/block.om" "$2" >>"$out/promtool.log"
	done
	rm -f "$work/block.om"
}

# prom DATA RULES LOG: Prometheus on DATA evaluating RULES ("" none) in the
# background; its address in addr, its pid in prom.
prom() {
	local cfg=$out/prometheus.yml
	{
		echo "global: {evaluation_interval: $INTERVAL}"
		[ -z "$2" ] || echo "rule_files: ['$2']"
	} >"$cfg"
	addr=127.0.0.1:$(port)
	"$PROMETHEUS" --config.file="$cfg" --storage.tsdb.path="$1" --storage.tsdb.retention.time=30d \
		--web.listen-address="$addr" >"$3" 2>&1 &
	prom=$!
	for _ in $(seq 300); do
		curl -sf "$addr/-/ready" >/dev/null && return
		sleep 1
	done
	echo "rule-cost: Prometheus on $1 not ready in 5 minutes" >&2
	exit 1
}
metric() { curl -sf "$addr/api/v1/query" --data-urlencode "query=$1" | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'; }

printf 'rules\tnodes\tgroup\tevaluation_seconds\n' >"$out/cost.tsv"
for n in $NODES; do
	data=$work/data-$n
	mkdir -p "$data"
	hist "$n" "$data"
	# Let Prometheus compact the 2-hour blocks first, so that no
	# compaction runs while it evaluates.
	prom "$data" "" "$out/compact-$n.log"
	last="" same=0
	while [ "$same" -lt 3 ]; do
		sleep 20
		now=$(metric 'prometheus_tsdb_compactions_total + prometheus_tsdb_vertical_compactions_total + prometheus_tsdb_blocks_loaded')
		if [ "$now" = "$last" ]; then same=$((same + 1)); else same=0 last=$now; fi
	done
	kill "$prom"
	wait "$prom" 2>/dev/null || true
	for which in before after; do
		rules=$BEFORE
		[ "$which" = after ] && rules=$AFTER
		prom "$data" "$rules" "$out/prometheus-$which-$n.log"
		sleep $((interval_s * 2 + 5))
		: >"$out/evals-$which-$n.json"
		for _ in $(seq "$SAMPLES"); do
			curl -sf "$addr/api/v1/rules" >>"$out/evals-$which-$n.json"
			echo >>"$out/evals-$which-$n.json"
			sleep "$interval_s"
		done
		kill "$prom"
		wait "$prom" 2>/dev/null || true
		rm -rf "$data/wal" "$data/chunks_head"
		python3 - "$which" "$n" "$out/evals-$which-$n.json" >>"$out/cost.tsv" <<'EOF'
import json, statistics, sys
which, nodes, path = sys.argv[1:]
times = {}
for line in open(path):
    if line.strip():
        for g in json.loads(line)["data"]["groups"]:
            times.setdefault(g["name"], []).append(g["evaluationTime"])
for name, ts in sorted(times.items()):
    print(f"{which}\t{nodes}\t{name}\t{statistics.median(ts):.4f}")
EOF
	done
done
column -t "$out/cost.tsv" 2>/dev/null || cat "$out/cost.tsv"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs" | tee "$out/load.txt"

#!/usr/bin/env bash
# Rule cost at fleet scale (issue 37): each rule group's evaluation time in a
# real Prometheus over N nodes' day of history, for two rule files (before
# and after a change), so that the cost per node and the node count at which
# the slowest group needs longer than its interval can be read off.
#
# The history is the simulated DGX H100's /metrics (one scrape of
# `gpulink_exporter --sim=dgx-h100` with probes and collective rounds run),
# copied to each node (instance and node "node-NNNN", job gpulink) every
# STEP over 27 hours, by bench/rulehistory, and turned into blocks by
# `promtool tsdb create-blocks-from openmetrics`, a file per 2-hour block.
# The recording rules that rules read over a range (a day's level, a "seen
# up" reading its own hour) get their history too, level by level, from
# `promtool tsdb create-blocks-from rules` (rulehistory -backfill says
# which), each rule file on its own copy of the blocks. The history ends
# LEAD seconds after the start, when that is done; from then on, as in
# users' Prometheus, a Prometheus on each copy scrapes the fleet live
# (rulehistory -serve) and appends the rules' outputs to its head: a
# history that ran past the evaluation would make Prometheus refuse every
# rule output as out of bounds, with a logged warning each, so that the
# rules' readers of their own outputs read nothing and the measurement
# would be wrong (it was, before 2026-12-07's later run: bench/RESULTS.md).
# Each Prometheus in turn evaluates its rule file every INTERVAL (added and
# removed by a reload); /api/v1/rules gives each group's evaluationTime,
# sampled once per interval, and the median of the last SAMPLES
# evaluations is reported, with the count of refused samples (0 expected).
#
# Usage: bench/rule-cost.sh [OUTDIR]
#   NODES="5 10"   node counts (each written and measured on its own)
#   STEP=30s       scrape interval of the history (kube-prometheus-stack's)
#   INTERVAL=30s   rule evaluation interval
#   SAMPLES=4      evaluations per measurement after two to warm up
#   LEAD=SECONDS   from the start to the end of the history (default
#                  240 + 90 per node): writing, compacting and backfilling
#                  must be done by then, or the script stops saying so
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
# Writes OUTDIR/cost.tsv (rules, nodes, group, its interval, median
# evaluation seconds)
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


hist() { # NODES DIR: that many nodes' 27 hours up to $end into DIR's
	# blocks, one file per 2-hour block (promtool reads its whole input
	# again for every block it writes), blocks aligned as promtool aligns
	# them
	local from
	for ((from = (end - 27 * 3600) / 7200 * 7200; from <= end; from += 7200)); do
		"$out/rulehistory" -scrape "$out/scrape.txt" -rules "$BEFORE,$AFTER" -nodes "$1" \
			-step "$STEP" -duration 27h -end "$end" -from "$from" -to $((from + 7200)) >"$work/block.om"
		"$PROMTOOL" tsdb create-blocks-from openmetrics "$work/block.om" "$2" >>"$out/promtool.log"
	done
	rm -f "$work/block.om"
}

# prom DATA LOG [RULES]: Prometheus on DATA in the background, scraping the
# fleet (when fleet is set) and evaluating RULES; its address in addr, its
# pid in prom, its configuration in cfg ($cfgs/<pid>.yml, rewritten by
# config). --web.enable-lifecycle: the measurement adds and removes the
# rules with a reload, the scrapes going on.
cfgs=$work/config
mkdir -p "$cfgs"
config() { # FILE RULES: the configuration, with RULES ("" none)
	{
		echo "global: {evaluation_interval: $INTERVAL, scrape_interval: $STEP}"
		[ -z "$2" ] || echo "rule_files: ['$2']"
		if [ -n "${fleet:-}" ]; then
			echo "scrape_configs:"
			echo "  - job_name: gpulink"
			echo "    honor_labels: true"
			echo "    static_configs:"
			for ((i = 0; i < nodes; i++)); do
				printf "      - {targets: ['%s'], labels: {instance: node-%04d, __param_node: '%d'}}\n" "$fleet" "$i" "$i"
			done
		fi
	} >"$1"
}
prom() {
	cfg=$cfgs/$(basename "$1").yml
	config "$cfg" "${3:-}"
	addr=127.0.0.1:$(port)
	"$PROMETHEUS" --config.file="$cfg" --storage.tsdb.path="$1" --storage.tsdb.retention.time=30d \
		--web.listen-address="$addr" --web.enable-lifecycle >"$2" 2>&1 &
	prom=$!
	for _ in $(seq 300); do
		curl -sf "$addr/-/ready" >/dev/null && return
		sleep 1
	done
	echo "rule-cost: Prometheus on $1 not ready in 5 minutes" >&2
	exit 1
}
metric() { curl -sf "$addr/api/v1/query" --data-urlencode "query=$1" | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'; }
# settle DATA LOG: Prometheus on DATA until its compactions are done (three
# looks 20 s apart see the same counts), so that none runs while it
# evaluates.
settle() {
	local last="" same=0 now
	prom "$1" "$2"
	while [ "$same" -lt 3 ]; do
		sleep 20
		now=$(metric 'prometheus_tsdb_compactions_total + prometheus_tsdb_vertical_compactions_total + prometheus_tsdb_blocks_loaded')
		if [ "$now" = "$last" ]; then same=$((same + 1)); else same=0 last=$now; fi
	done
	kill "$prom"
	wait "$prom" 2>/dev/null || true
}

printf 'rules\tnodes\tgroup\tinterval_seconds\tevaluation_seconds\n' >"$out/cost.tsv"
for nodes in $NODES; do
	# The history ends LEAD seconds from now, when writing it, its
	# compaction and the backfill of the recording rules are done: then
	# Prometheus scrapes the fleet live from the end of the history on, as
	# users' Prometheus does, and appends the rules' outputs to its head
	# (a sample older than the newest block is refused).
	end=$(($(date +%s) + ${LEAD:-$((240 + 90 * nodes))}))
	raw=$work/raw-$nodes
	mkdir -p "$raw"
	hist "$nodes" "$raw"
	settle "$raw" "$out/compact-$nodes.log"
	for which in before after; do
		rules=$BEFORE
		[ "$which" = after ] && rules=$AFTER
		data=$work/$which-$nodes
		rm -rf "$data" "$work/levels" && mkdir -p "$work/levels"
		cp -a "$raw" "$data"
		# The recording rules that rules read over a range (a day's
		# level, a "seen up" reading its own hour), level by level, each
		# evaluated by promtool through a Prometheus that has the blocks
		# of the levels before.
		for level in $("$out/rulehistory" -rules "$rules" -backfill "$work/levels"); do
			prom "$data" "$out/backfill-$which-$nodes.log"
			rm -rf "$work/backfill"
			"$PROMTOOL" tsdb create-blocks-from rules --url="http://$addr" --start=$((end - 27 * 3600)) --end="$end" \
				--eval-interval="$INTERVAL" --output-dir="$work/backfill" "$level" >>"$out/promtool.log"
			kill "$prom"
			wait "$prom" 2>/dev/null || true
			mv "$work/backfill"/* "$data/" 2>/dev/null || true
		done
		settle "$data" "$out/compact-$which-$nodes.log"
	done
	now=$(date +%s)
	if [ "$now" -gt "$end" ]; then
		echo "rule-cost: $nodes nodes' history and backfill took until $((now - end)) s after the history's end: set LEAD (seconds) higher than ${LEAD:-$((240 + 90 * nodes))}" >&2
		exit 1
	fi
	sleep $((end - now + 1))

	# Both Prometheus scrape the fleet from here on; each evaluates its
	# rules in turn, the other only scraping.
	fport=$(port)
	"$out/rulehistory" -scrape "$out/scrape.txt" -rules "$BEFORE,$AFTER" -serve "127.0.0.1:$fport" >"$out/fleet.log" 2>&1 &
	fleetpid=$!
	fleet=127.0.0.1:$fport
	declare -A addrs pids cfgfile
	for which in before after; do
		prom "$work/$which-$nodes" "$out/prometheus-$which-$nodes.log"
		addrs[$which]=$addr pids[$which]=$prom cfgfile[$which]=$cfg
	done
	for which in before after; do
		rules=$BEFORE
		[ "$which" = after ] && rules=$AFTER
		addr=${addrs[$which]}
		config "${cfgfile[$which]}" "$rules"
		curl -sf -X POST "$addr/-/reload"
		sleep $((interval_s * 2 + 5))
		: >"$out/evals-$which-$nodes.json"
		for _ in $(seq "$SAMPLES"); do
			curl -sf "$addr/api/v1/rules" >>"$out/evals-$which-$nodes.json"
			echo >>"$out/evals-$which-$nodes.json"
			sleep "$interval_s"
		done
		# A group with a longer interval (gpulink.daily, 5m) may not
		# have run yet: sample on until it has, for up to 6 minutes.
		for _ in $(seq $((360 / interval_s))); do
			j=$(curl -sf "$addr/api/v1/rules")
			echo "$j" >>"$out/evals-$which-$nodes.json"
			grep -q '"lastEvaluation":"0001-' <<<"$j" || break
			sleep "$interval_s"
		done
		config "${cfgfile[$which]}" ""
		curl -sf -X POST "$addr/-/reload"
		# Samples the rules could not write (out of bounds, out of order)
		# would make the measurement wrong: each is a logged warning, and
		# a rule reading its own output reads nothing.
		refused=$(curl -sf "$addr/metrics" | awk '/^prometheus_tsdb_out_of_(bound|order)_samples_total/ {n += $2} END {print n + 0}')
		echo "$which, $nodes nodes: samples refused: $refused" | tee -a "$out/refused.txt"
		python3 - "$which" "$nodes" "$out/evals-$which-$nodes.json" >>"$out/cost.tsv" <<'PY'
import json, statistics, sys
which, nodes, path = sys.argv[1:]
times, intervals = {}, {}
for line in open(path):
    if line.strip():
        for g in json.loads(line)["data"]["groups"]:
            intervals[g["name"]] = g["interval"]
            # Not evaluated yet since the reload: no time to count.
            if not g["lastEvaluation"].startswith("0001-"):
                times.setdefault(g["name"], []).append(g["evaluationTime"])
for name, ts in sorted(times.items()):
    print(f"{which}\t{nodes}\t{name}\t{intervals[name]:g}\t{statistics.median(ts):.4f}")
PY
	done
	for which in before after; do
		kill "${pids[$which]}"
		wait "${pids[$which]}" 2>/dev/null || true
	done
	kill "$fleetpid"
	wait "$fleetpid" 2>/dev/null || true
	fleet=""
	rm -rf "$raw" "$work/before-$nodes" "$work/after-$nodes"
done
column -t "$out/cost.tsv" 2>/dev/null || cat "$out/cost.tsv"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs" | tee "$out/load.txt"

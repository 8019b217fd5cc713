#!/usr/bin/env bash
# Resident memory of exporters side by side, in turns, each scraped the way
# Prometheus does while it runs at its default intervals; by mapping, so
# that NVML's share is told from the exporter's own (bench/smaps.py).
#
# Usage: bench/rss.sh [-r ROUNDS] [-d SECONDS] [-e EVERY] [-p PORT] -o OUTDIR NAME=COMMAND ...
#
# Each COMMAND (one argument, split on spaces) starts an exporter that takes
# --web.listen-address, which the script appends: gpulink_exporter, or
# bench/rssfloor, the smallest NVML exporter these libraries make, as the
# reference. `env GOGC=50 ./gpulink_exporter` runs one with another setting.
# Every round runs each in turn for SECONDS (default 60) after it answers,
# scraped every EVERY seconds (default 1), then reads its memory and stops
# it. OUTDIR gets rss.tsv (a row per round and exporter, in kB), each
# run's smaps, last scrape and log, and the median of each column per exporter on
# standard output.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rounds=3 seconds=60 every=1 port=19836 out=
while getopts r:d:e:p:o: opt; do
	case $opt in
	r) rounds=$OPTARG ;;
	d) seconds=$OPTARG ;;
	e) every=$OPTARG ;;
	p) port=$OPTARG ;;
	o) out=$OPTARG ;;
	*) sed -n '2,17p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [[ -z $out || $# -eq 0 ]]; then
	sed -n '2,17p' "$0" >&2
	exit 2
fi
# shellcheck source=bench/exporter.sh
. "$here/exporter.sh"
trap exporter_stop EXIT
mkdir -p "$out"
printf 'round\tname\t%s\n' "$(python3 "$here/smaps.py" -h)" >"$out/rss.tsv"

for round in $(seq "$rounds"); do
	for entry in "$@"; do
		name=${entry%%=*} cmd=${entry#*=}
		read -r -a argv <<<"$cmd"
		# The binary is the first word that is not env or a VAR=value.
		bin=
		for w in "${argv[@]}"; do
			[[ $w == env || $w == *=* ]] && continue
			bin=$w
			break
		done
		exporter_start "$out/$name.$round.log" "${argv[@]}" --web.listen-address=127.0.0.1:$port
		pid=$EXPORTER_PID
		if ! exporter_wait 127.0.0.1:$port "" 30; then
			echo "$name: its log:" >&2
			tail -n 20 "$out/$name.$round.log" >&2
			exporter_stop
			exit 1
		fi
		end=$((SECONDS + seconds))
		while ((SECONDS < end)); do
			curl -s -o /dev/null -H 'Accept-Encoding: gzip' "http://127.0.0.1:$port/metrics"
			sleep "$every"
		done
		cp "/proc/$pid/smaps" "$out/$name.$round.smaps"
		curl -s -o "$out/$name.$round.metrics" "http://127.0.0.1:$port/metrics"
		printf '%s\t%s\t%s\n' "$round" "$name" "$(python3 "$here/smaps.py" "$out/$name.$round.smaps" "$(readlink -f "$bin")")" >>"$out/rss.tsv"
		exporter_stop
	done
done

python3 - "$out/rss.tsv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
cols = [c for c in rows[0] if c not in ("round", "name")]
names = list(dict.fromkeys(r["name"] for r in rows))
print("median of %d rounds, MB (1e6 bytes)" % max(int(r["round"]) for r in rows))
print("%-12s" % "name" + "".join("%12s" % c for c in cols))
for n in names:
    rs = [r for r in rows if r["name"] == n]
    print("%-12s" % n + "".join("%12.1f" % (statistics.median(int(r[c]) for r in rs) * 1024 / 1e6) for c in cols))
PY

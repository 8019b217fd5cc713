#!/usr/bin/env bash
# The exporter's scrape latency against the floor: a server sending the
# same bytes and doing nothing else (scrapebench's reference), scraped
# between the exporter's scrapes in the same run, at the same GOMAXPROCS.
# Each exporter given is measured paced (a scrape every EVERY, as
# Prometheus does: most scrapes meet a new snapshot) and back to back, at
# each GOMAXPROCS of PROCS; the runs of several exporters alternate, so
# that a before and an after meet the same moments of the machine.
#
# Usage: bench/scrape-floor.sh [-s SCRAPEBENCH] [-o OUTDIR] NAME=BINARY... [-- EXPORTER_ARGS...]
#
#   NAME=BINARY  an exporter to measure under NAME (before=/tmp/old/gpulink_exporter);
#                without any, the one scrape.sh finds, as "exporter"
#   -s, -o       as scrape.sh's; OUTDIR/NAME-gPROCS-PACE-rROUND/ holds each
#                run's scrape.sh output, OUTDIR/summary.txt the table
#
# Environment: EVERY (default 250ms), N_PACED (default 400 scrapes),
# N_B2B (default 2000), PROCS (default "1 default": 1, and Go's default,
# the number of CPUs this process may use), ROUNDS (default 1), IDLE
# (default 2s), ADDR (default 127.0.0.1:9849).
#
# Example, the simulated DGX H100 (the issue's measurement):
#   bench/scrape-floor.sh -o /tmp/floor before=/tmp/old/gpulink_exporter after=./gpulink_exporter -- --sim=dgx-h100
# On a GPU machine, from .device/ (bench/device-build.sh), the real node:
#   .device/scrape-floor.sh -o "$OUT/floor" exporter=.device/gpulink_exporter
#
# summary.txt has one line a run: name, GOMAXPROCS, pace, scrapes, fresh
# (scrapes that met a new body), the exporter's p50 and p99, the
# reference's, and the exporter's over the reference's at each.
# Needs bash and the binaries only, as scrape.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sb_flag=() out=""
while getopts "s:o:h" opt; do
	case $opt in
	s) sb_flag=(-s "$OPTARG") ;;
	o) out=$OPTARG ;;
	*)
		sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
		exit 2
		;;
	esac
done
shift $((OPTIND - 1))
names=() bins=()
while [[ $# -gt 0 && $1 != -- ]]; do
	[[ $1 == *=* ]] || { echo "scrape-floor.sh: $1 is not NAME=BINARY" >&2; exit 2; }
	names+=("${1%%=*}") bins+=("${1#*=}")
	shift
done
[[ ${1:-} == -- ]] && shift
if [[ ${#names[@]} -eq 0 ]]; then
	names=(exporter) bins=("")
fi
[[ -n $out ]] || out=$(mktemp -d "${TMPDIR:-/tmp}/scrape-floor.XXXXXX")
mkdir -p "$out"
summary=$out/summary.txt

# json NUMBERFIELD FILE: a number from scrapebench's result.json.
json() { sed -n "s/^  \"$1\": \\([0-9.e+-]*\\),\\{0,1\\}\$/\\1/p" "$2"; }

printf '%-10s %5s %-12s %6s %6s %9s %9s %9s %9s %7s %7s\n' name procs pace scrapes fresh p50_ms p99_ms ref_p50 ref_p99 p50_x p99_x | tee "$summary"
for ((round = 1; round <= ${ROUNDS:-1}; round++)); do
	for procs in ${PROCS:-1 default}; do
		g=$procs
		[[ $g == default ]] && g=$(nproc)
		for pace in paced back-to-back; do
			every=${EVERY:-250ms} n=${N_PACED:-400}
			[[ $pace == back-to-back ]] && every=0 n=${N_B2B:-2000}
			for i in "${!names[@]}"; do
				run=$out/${names[$i]}-g$procs-$pace-r$round
				bin_flag=()
				[[ -n ${bins[$i]} ]] && bin_flag=(-b "${bins[$i]}")
				if ! GOMAXPROCS=$g EVERY=$every N=$n IDLE=${IDLE:-2s} "$here/scrape.sh" "${bin_flag[@]}" "${sb_flag[@]}" -o "$run" -- "$@" >"$run.log" 2>&1; then
					echo "scrape-floor.sh: ${names[$i]} at GOMAXPROCS $g, $pace failed; see $run.log" >&2
					tail -n 5 "$run.log" >&2
					exit 1
				fi
				r=$run/result.json
				printf '%-10s %5s %-12s %6s %6s %9.3f %9.3f %9.3f %9.3f %7.2f %7.2f\n' "${names[$i]}" "$g" \
					"$([[ $pace == paced ]] && echo "every $every" || echo "$pace")" \
					"$(json scrapes "$r")" "$(json fresh_scrapes "$r")" "$(json p50_ms "$r")" "$(json p99_ms "$r")" \
					"$(json reference_p50_ms "$r")" "$(json reference_p99_ms "$r")" \
					"$(json p50_over_reference "$r")" "$(json p99_over_reference "$r")" | tee -a "$summary"
			done
		done
	done
done
echo "results in $out"

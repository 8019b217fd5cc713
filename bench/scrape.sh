#!/usr/bin/env bash
# Start the exporter, measure its scrape cost with scrapebench, stop it.
#
# Usage: bench/scrape.sh [-b BINARY] [-s SCRAPEBENCH] [-o OUTDIR] [-- EXPORTER_ARGS...]
#
#   -b  exporter binary   (default: gpulink_exporter next to this script, in
#                          <repo>/.device, in the current directory, in <repo>)
#   -s  scrapebench binary (looked up the same way)
#   -o  output directory for exporter.log, result.txt, result.json,
#       latencies.txt (one line a scrape), metrics.txt and the exporter's
#       smaps.txt and smaps_rollup.txt at the end (default: a new
#       directory under ${TMPDIR:-/tmp})
#
# Environment:
#   ADDR         listen address (default 127.0.0.1:9849)
#   N            number of scrapes (default 1000)
#   EVERY        start a scrape every EVERY (a Go duration, e.g. 200ms);
#                default 0: back to back. Set it to the exporter's
#                --nvml.interval for the pattern a real Prometheus makes,
#                every scrape meeting a new snapshot (scrapebench reports
#                how many did as "fresh"), e.g.
#                  EVERY=200ms N=300 bench/scrape.sh -- --sim=dgx-h100 --nvml.interval=200ms
#   IDLE         idle baseline window (default 10s)
#   REFERENCE    1 (default): scrape scrapebench's reference server between
#                the exporter's scrapes, the exporter's own response from a
#                server that does nothing else, to tell the machine's tail
#                from the exporter's; 0: do not. It runs at GOMAXPROCS (the
#                variable, which the exporter reads too; default 1, the
#                exporter's own default)
#   TRACE        1: also take an execution trace of the exporter over the
#                scrapes (at most a minute of them) into trace.out, with
#                --web.enable-pprof added to its flags; bench/tracelat reads
#                it beside latencies.txt and says where slow scrapes waited
#   WAIT_METRIC  substring to wait for (up to 60 s) before measuring.
#                Default: where an NVIDIA driver is loaded (/dev/nvidiactl),
#                'gpulink_source_up{source="nvml"} 1', so the first NVML
#                sample is in; elsewhere the same metric with either value
#                (without a GPU it stays 0). '' only waits until the exporter
#                answers.
#
# Needs only bash and the two binaries (no Go), so it runs as is on a GPU
# machine from the bundle that `bench/device-build.sh` puts into .device/.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

usage() {
	sed -n '3,39p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

# find NAME: first executable NAME in the default places.
find_bin() {
	local d
	for d in "$here" "$repo/.device" "$PWD" "$repo"; do
		if [[ -f $d/$1 && -x $d/$1 ]]; then
			echo "$d/$1"
			return 0
		fi
	done
	return 1
}

bin="" sb="" out=""
while getopts "b:s:o:h" opt; do
	case $opt in
	b) bin=$OPTARG ;;
	s) sb=$OPTARG ;;
	o) out=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1)) # getopts also consumes a "--"; the rest go to the exporter

[[ -n $bin ]] || bin=$(find_bin gpulink_exporter) || { echo "scrape.sh: no gpulink_exporter found; use -b" >&2; exit 1; }
[[ -n $sb ]] || sb=$(find_bin scrapebench) || { echo "scrape.sh: no scrapebench found; use -s" >&2; exit 1; }
for f in "$bin" "$sb"; do
	[[ -x $f ]] || { echo "scrape.sh: $f is not an executable file" >&2; exit 1; }
done
[[ -n $out ]] || out=$(mktemp -d "${TMPDIR:-/tmp}/scrape.XXXXXX")
# scrapebench's flags for the reference and the trace; one does not turn
# the other off.
sb_args=()
[[ ${REFERENCE:-1} == 1 ]] && sb_args+=(-reference -reference-gomaxprocs "${GOMAXPROCS:-1}")
if [[ ${TRACE:-} == 1 ]]; then
	set -- --web.enable-pprof "$@"
	sb_args+=(-trace "$out/trace.out")
fi
mkdir -p "$out"

# shellcheck source=bench/exporter.sh
. "$here/exporter.sh"
addr=${ADDR:-127.0.0.1:9849}
wait_metric=${WAIT_METRIC-"$(nvml_up_text)"}

# Refuse to measure some other process that already holds the port.
if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
	echo "scrape.sh: something already listens on $addr; stop it or set ADDR" >&2
	exit 1
fi

EXPORTER_PID="" sbpid=""
cleanup() { # stop scrapebench (if running) and the exporter
	[[ -n $sbpid ]] && kill -TERM "$sbpid" 2>/dev/null || true
	[[ -n $EXPORTER_PID ]] || return 0
	# Where the resident memory lies, by mapping, for the RSS figure.
	cp "/proc/$EXPORTER_PID/smaps_rollup" "$out/smaps_rollup.txt" 2>/dev/null || true
	cp "/proc/$EXPORTER_PID/smaps" "$out/smaps.txt" 2>/dev/null || true
	exporter_stop
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "exporter:    $bin --web.listen-address=$addr $*"
echo "output:      $out"
echo "waiting for: ${wait_metric:-(exporter answering)}"
exporter_start "$out/exporter.log" "$bin" "--web.listen-address=$addr" "$@"
pid=$EXPORTER_PID

# scrapebench runs in the background and we wait for it, so that a signal
# to this script runs the traps at once instead of after scrapebench ends.
"$sb" -url "http://$addr/metrics" -pid "$pid" -n "${N:-1000}" -every "${EVERY:-0}" -idle "${IDLE:-10s}" \
	-wait-metric "$wait_metric" -json "$out/result.json" -latencies "$out/latencies.txt" -save-body "$out/metrics.txt" \
	"${sb_args[@]}" \
	>"$out/result.txt" &
sbpid=$!
rc=0
wait "$sbpid" || rc=$?
sbpid=""
cleanup

cat "$out/result.txt"
if [[ $rc -ne 0 ]]; then
	echo "scrape.sh: scrapebench failed (rc $rc); last lines of $out/exporter.log:" >&2
	tail -n 20 "$out/exporter.log" >&2 || true
	exit "$rc"
fi

# On a machine with an NVIDIA driver, a measurement without NVML is most
# likely not what was wanted: say so loudly.
if [[ -e /dev/nvidiactl ]] && grep -q '^gpulink_source_up{source="nvml"} 0' "$out/metrics.txt"; then
	echo "WARNING: /dev/nvidiactl exists but gpulink_source_up{source=\"nvml\"} is 0: NVML was not used" >&2
fi
echo "results in $out"

#!/usr/bin/env bash
# Where the exporter's own CPU and memory go while nobody scrapes it: start
# it with --web.enable-pprof, let it settle, take a CPU profile over WINDOW,
# a heap profile, the process's CPU time and RSS over the same window (from
# /proc, as scrapebench's idle figure) and one scrape, then stop it.
#
# Usage: bench/profile.sh [-b BINARY] OUTDIR [-- EXPORTER_ARGS...]
#
# Environment: ADDR (default 127.0.0.1:9849), SETTLE (default 20: seconds
# after the first NVML sample before the window), WINDOW (default 60).
# Writes OUTDIR/cpu.pprof, heap.pprof, idle.txt, metrics.txt, exporter.log;
# read them with `go tool pprof -top BINARY OUTDIR/cpu.pprof`.
# Needs only bash, curl and the binary, so it runs from .device/ on a GPU
# machine (bench/device-build.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$here/gpulink_exporter
[[ -x $bin ]] || bin=$here/../gpulink_exporter
if [[ ${1:-} == -b ]]; then bin=$2; shift 2; fi
out=${1:?usage: profile.sh [-b BINARY] OUTDIR [-- EXPORTER_ARGS...]}
shift
[[ ${1:-} == -- ]] && shift
mkdir -p "$out"
addr=${ADDR:-127.0.0.1:9849} settle=${SETTLE:-20} window=${WINDOW:-60}

# shellcheck source=bench/exporter.sh
. "$here/exporter.sh"
exporter_start "$out/exporter.log" "$bin" "--web.listen-address=$addr" --web.enable-pprof "$@"
pid=$EXPORTER_PID
trap exporter_stop EXIT
if ! exporter_wait "$addr" "$(nvml_up_text)"; then
	echo "profile.sh: last lines of $out/exporter.log:" >&2
	tail -n 5 "$out/exporter.log" >&2
	exit 1
fi
sleep "$settle"

# ticks: utime+stime of the exporter in clock ticks (fields 14 and 15).
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
t0=$(ticks) s0=$(date +%s.%N)
curl -sf -o "$out/cpu.pprof" "http://$addr/debug/pprof/profile?seconds=$window"
t1=$(ticks) s1=$(date +%s.%N)
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
curl -sf -o "$out/heap.pprof" "http://$addr/debug/pprof/heap"
curl -sf -o "$out/metrics.txt" "http://$addr/metrics"
awk -v t="$((t1 - t0))" -v hz="$hz" -v s0="$s0" -v s1="$s1" -v rss="$rss" 'BEGIN {
	printf "idle CPU %.1f ms/s over %.1f s (profiling on); RSS %.1f MB\n", t / hz * 1000 / (s1 - s0), s1 - s0, rss * 1024 / 1e6
}' | tee "$out/idle.txt"
grep -E '^gpulink_source_duration_seconds|^go_memstats_(heap_inuse|sys)_bytes|^process_resident' "$out/metrics.txt" | tee -a "$out/idle.txt" || true

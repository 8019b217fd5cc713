#!/usr/bin/env bash
# Soak of the simulated DGX H100 (issue 12): probes every 20 s (policy
# always, no duty stretch), a collective round every minute, and one
# scrape a second, for DURATION (default 1h). Every minute it samples the
# exporter's RSS (VmRSS), goroutines (go_goroutines from the scrape) and
# open files (/proc/PID/fd) and the Go heap in use
# (go_memstats_heap_inuse_bytes, to tell heap growth from memory outside
# Go), then prints the least-squares slope of each
# after WARMUP (default 5m) and writes soak.csv.
# HEAP=1 also turns on --web.enable-pprof and saves the live heap after a
# forced collection every 10 minutes (heap-MM.pb.gz, MM the minute), so
# that growth between two of them shows by allocation site:
#   go tool pprof -base heap-10.pb.gz -sample_index=inuse_space -top BINARY heap-60.pb.gz
# Usage: bench/soak.sh [-b BINARY] OUTDIR
set -uo pipefail
bin=./gpulink_exporter
[ "${1:-}" = -b ] && { bin=$2; shift 2; }
out=${1:?usage: $0 [-b BINARY] OUTDIR}
mkdir -p "$out"
DURATION=${DURATION:-3600}
WARMUP=${WARMUP:-300}
addr=127.0.0.1:${PORT:-9881}
pprof=()
[ "${HEAP:-0}" = 1 ] && pprof=(--web.enable-pprof)
# shellcheck source=bench/exporter.sh
. "$(dirname "$0")/exporter.sh"
exporter_start "$out/exporter.log" "$bin" "${pprof[@]}" --sim=dgx-h100 --web.listen-address=$addr --probe.policy=always \
  --probe.interval=20s --probe.first-delay=0s --probe.max-duty=1 --collective.interval=1m
pid=$EXPORTER_PID
scraper=
trap '[ -n "$scraper" ] && kill $scraper 2>/dev/null; exporter_stop' EXIT
exporter_wait $addr || exit 1
( while kill -0 $pid 2>/dev/null; do curl -s -o /dev/null http://$addr/metrics; sleep 1; done ) &
scraper=$!
echo "t_seconds,rss_kb,goroutines,fds,scrape_series,heap_inuse_kb" >"$out/soak.csv"
t0=$SECONDS
while [ $((SECONDS - t0)) -le "$DURATION" ]; do
  kill -0 $pid 2>/dev/null || { echo "exporter exited" >&2; exit 1; }
  rss=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status)
  fds=$(ls /proc/$pid/fd | wc -l)
  curl -s http://$addr/metrics >"$out/last.txt"
  gor=$(awk '/^go_goroutines / {print $2}' "$out/last.txt")
  series=$(grep -vc '^#' "$out/last.txt")
  heap=$(awk '/^go_memstats_heap_inuse_bytes / {printf "%d", $2 / 1024}' "$out/last.txt")
  echo "$((SECONDS - t0)),$rss,$gor,$fds,$series,$heap" | tee -a "$out/soak.csv"
  m=$(( (SECONDS - t0 + 30) / 60 ))
  if [ "${HEAP:-0}" = 1 ] && [ $((m % 10)) = 0 ]; then
    curl -s -o "$out/heap-$(printf %02d $m).pb.gz" "http://$addr/debug/pprof/heap?gc=1"
  fi
  sleep 60
done
python3 - "$out/soak.csv" "$WARMUP" <<'PY' | tee "$out/slope.txt"
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if int(r["t_seconds"]) >= int(sys.argv[2])]
def slope(key):
    xs = [int(r["t_seconds"]) / 3600 for r in rows]; ys = [float(r[key]) for r in rows]
    n = len(xs); mx = sum(xs) / n; my = sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return (sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0), min(ys), max(ys)
for key, unit in (("rss_kb", "kB"), ("heap_inuse_kb", "kB"), ("goroutines", ""), ("fds", ""), ("scrape_series", "")):
    s, lo, hi = slope(key)
    print("%-13s slope %+9.1f %s/hour after warm-up; range %g-%g over %d samples" % (key, s, unit, lo, hi, len(rows)))
PY

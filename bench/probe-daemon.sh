#!/usr/bin/env bash
# The probe scheduler inside the real daemon on a GPU machine:
#   1. policy always, every 10 s: every GPU gets rounds, every probe family
#      is exported, and promtool check metrics passes on the real scrape;
#   2. a probe child killed with SIGKILL in mid-round: the daemon keeps
#      serving, counts a crash, and the next round succeeds;
#   3. policy idle with a PyTorch process holding GPU 0: GPU 0 is skipped
#      as busy, and its peers' peer probes leave it out.
# Needs no Go: carry .device (bench/device-build.sh) and run
#   .device/probe-daemon.sh OUTDIR
# Only read-only nvidia-smi queries are used; no GPU setting is changed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(mktemp -d)}
mkdir -p "$out"
bin=$here/gpulink_exporter
addr=127.0.0.1:9849
url=http://$addr/metrics
[ -x "$here/promtool" ] || { gunzip -kf "$here/promtool.gz" && chmod +x "$here/promtool"; }
ngpu=$(nvidia-smi -L | grep -c '^GPU')
fail=0
check() { # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "PASS $what"; else echo "FAIL $what"; fail=1; fi
}
metric() { # metric REGEX: sum of matching series in the last scrape
  awk -v re="$1" '$0 ~ "^"re {s += $NF} END {print s + 0}' "$out/scrape.txt"
}
scrape() { curl -sf $url >"$out/scrape.txt"; }
epid=
stop_exporter() { [ -n "$epid" ] && kill "$epid" 2>/dev/null; wait "$epid" 2>/dev/null; epid=; }
trap 'stop_exporter; kill $hold 2>/dev/null' EXIT

echo "== 1. policy always, interval 10s, $ngpu GPU(s)"
"$bin" --web.listen-address=$addr --nvml.interval=1s --probe.policy=always --probe.interval=10s --probe.max-duty=1 \
  --probe.first-delay=1s --log.level=debug >"$out/exporter-always.log" 2>&1 &
epid=$!
t0=$(date +%s)
for _ in $(seq 120); do
  scrape 2>/dev/null
  [ "$(metric 'gpulink_probe_runs_total\{.*result="success"')" -ge "$ngpu" ] && break
  sleep 0.5
done
echo "first success on every GPU after $(( $(date +%s) - t0 )) s"
cp "$out/scrape.txt" "$out/metrics-always.txt"
grep -E '^gpulink_probe_' "$out/metrics-always.txt" | sed 's/{.*}//' | sort | uniq -c | tee "$out/probe-families.txt"
for fam in bandwidth_bytes_per_second expected_bandwidth_bytes_per_second latency_seconds \
  pcie_link_generation_under_load pcie_link_width_under_load last_success_timestamp_seconds last_round_timestamp_seconds \
  round_duration_seconds runs_total skips_total busy_seconds_total context_seconds_total device_memory_bytes \
  context_memory_bytes host_memory_bytes policy_info; do
  check "family gpulink_probe_$fam exported" grep -q "^gpulink_probe_$fam" "$out/metrics-always.txt"
done
check "promtool check metrics on the real scrape" sh -c "'$here/promtool' check metrics <'$out/metrics-always.txt' >'$out/promtool.txt' 2>&1"
cat "$out/promtool.txt"
grep -E '^gpulink_probe_(bandwidth_bytes_per_second|expected_bandwidth|latency_seconds|pcie_link|busy_seconds|device_memory|round_duration)' "$out/metrics-always.txt"

echo "== 2. a probe child killed in mid-round"
crash0=$(metric 'gpulink_probe_runs_total\{.*result="crash"')
killed=
for _ in $(seq 400); do
  child=$(pgrep -f "gpulink_exporter probe " | head -1)
  if [ -n "$child" ]; then
    sleep 0.2
    kill -9 "$child" 2>/dev/null && killed=$child && break
  fi
  sleep 0.05
done
echo "killed probe child pid ${killed:-none}"
sleep 1
scrape
check "daemon still serving after the kill" test -s "$out/scrape.txt"
check "the kill is counted as a crash" test "$(metric 'gpulink_probe_runs_total\{.*result="crash"')" -gt "$crash0"
succ=$(metric 'gpulink_probe_runs_total\{.*result="success"')
for _ in $(seq 60); do
  scrape
  [ "$(metric 'gpulink_probe_runs_total\{.*result="success"')" -gt "$succ" ] && break
  sleep 0.5
done
check "a later round succeeds" test "$(metric 'gpulink_probe_runs_total\{.*result="success"')" -gt "$succ"
check "no probe child left behind" test -z "$(pgrep -f 'gpulink_exporter probe ' | grep -v "^$killed$")"
grep -E 'gpulink_probe_runs_total|gpulink_source_up\{source="probe"' "$out/scrape.txt"
stop_exporter

echo "== 3. policy idle with a job on GPU 0"
python3 "$here/hold.py" 0 1024 >"$out/hold.log" 2>&1 &
hold=$!
for _ in $(seq 120); do grep -q '^ready' "$out/hold.log" && break; sleep 0.5; done
"$bin" --web.listen-address=$addr --nvml.interval=1s --probe.policy=idle --probe.interval=10s --probe.max-duty=1 \
  --probe.first-delay=1s >"$out/exporter-idle.log" 2>&1 &
epid=$!
for _ in $(seq 120); do
  scrape 2>/dev/null
  [ "$(metric 'gpulink_probe_skips_total\{gpu="0".*reason="busy_other_process"')" -ge 1 ] &&
    { [ "$ngpu" -lt 2 ] || [ "$(metric 'gpulink_probe_runs_total\{gpu="1".*result="success"')" -ge 1 ]; } && break
  sleep 0.5
done
cp "$out/scrape.txt" "$out/metrics-idle.txt"
grep -E 'gpulink_probe_(skips|runs)_total' "$out/metrics-idle.txt" | grep -v ' 0$'
check "GPU 0 skipped as busy" test "$(metric 'gpulink_probe_skips_total\{gpu="0".*reason="busy_other_process"')" -ge 1
check "GPU 0 never probed while busy" test "$(metric 'gpulink_probe_runs_total\{gpu="0"')" -eq 0
if [ "$ngpu" -ge 2 ]; then
  check "GPU 1 probed" test "$(metric 'gpulink_probe_runs_total\{gpu="1".*result="success"')" -ge 1
  check "GPU 1 left busy GPU 0 out of its peer probes" test "$(metric 'gpulink_probe_skips_total\{gpu="1".*reason="peer_busy_other_process"')" -ge 1
  check "no peer result against busy GPU 0" test "$(grep -c 'gpulink_probe_bandwidth_bytes_per_second{.*peer="'"$(nvidia-smi -i 0 --query-gpu=pci.bus_id --format=csv,noheader | tr 'A-F' 'a-f' | sed 's/^0000//')"'"' "$out/metrics-idle.txt")" -eq 0
fi
exit $fail

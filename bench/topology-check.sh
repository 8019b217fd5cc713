#!/usr/bin/env bash
# The topology, NIC and process sources on a real GPU machine, each checked
# against an independent reading in the same run:
#   - `gpulink_exporter topology` against `nvidia-smi topo -m`;
#   - eight GPU processes (one under numactl --cpunodebind, one under
#     taskset on part of the CPUs, six plain) against /proc read by Python;
#   - how long the process source takes to sample them;
#   - scrape cost with every source on, and promtool on the real scrape.
# Needs no Go: carry .device (bench/device-build.sh) and run
#   .device/topology-check.sh OUTDIR
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
ncpu=$(nproc)
numactl -H | tee "$out/numactl-H.txt"

echo "== topology matrix: nvidia-smi topo -m vs gpulink_exporter topology"
nvidia-smi topo -m >"$out/topo-nvsmi.txt"
"$bin" topology >"$out/topo-ours.txt" 2>"$out/topo-ours.log"
cat "$out/topo-ours.txt"
python3 "$here/topo_compare.py" "$out/topo-nvsmi.txt" "$out/topo-ours.txt"

echo "== eight GPU processes"
pids=() expect=()
start() { # start EXPECTED_CPUS CMD...: EXPECTED_CPUS is what Cpus_allowed_list must say, or ""
  local e=$1; shift
  "$@" >>"$out/hold.log" 2>&1 &
  pids+=($!) expect+=("$e")
}
start "0-$((ncpu - 1))" numactl --cpunodebind=0 --membind=0 python3 "$here/hold.py" 0 1024
start "0-7" taskset -c 0-7 python3 "$here/hold.py" $((1 % ngpu)) 1024
for i in 2 3 4 5 6 7; do start "" python3 "$here/hold.py" $((i % ngpu)) 256; done
trap 'kill ${pids[*]} $epid 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 120); do [ "$(grep -c '^ready' "$out/hold.log")" -ge 8 ] && break; sleep 0.5; done
grep -c '^ready' "$out/hold.log"
nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv | tee "$out/compute-apps.csv"

"$bin" --web.listen-address=$addr --nvml.interval=1s --process.interval=1s --topology.interval=2s \
  --nic.interval=1s >"$out/exporter.log" 2>&1 &
epid=$!
for _ in $(seq 100); do
  n=$(curl -sf $url 2>/dev/null | awk '/^gpulink_gpu_processes\{/ {s += $2} END {print s + 0}')
  [ "$n" -ge 8 ] && break
  sleep 0.2
done
echo "processes seen by the exporter: $n"
: >"$out/process-durations.txt"
for _ in $(seq 30); do
  curl -sf $url | awk '/^gpulink_source_sample_duration_seconds\{source="process"\}/ {print $2}' >>"$out/process-durations.txt"
  sleep 1
done
curl -sf $url >"$out/metrics.txt"
echo "== process source sample duration, 30 samples, 8 processes (ms)"
sort -g "$out/process-durations.txt" | awk '{v[NR]=$1*1000} END {printf "min %.2f median %.2f p90 %.2f max %.2f\n", v[1], v[int((NR+1)/2)], v[int(NR*0.9)], v[NR]}'
echo "== sample durations of every source (ms)"
grep '^gpulink_source_sample_duration_seconds' "$out/metrics.txt" | awk '{printf "%s %.2f\n", $1, $2*1000}'

echo "== placement: exporter vs /proc"
args=()
for i in "${!pids[@]}"; do
  # numactl and taskset exec python: the pid is the GPU process itself.
  args+=("${pids[$i]}${expect[$i]:+:${expect[$i]}}")
done
python3 "$here/placement_compare.py" "$out/metrics.txt" "${args[@]}"
grep -E '^gpulink_gpu_(processes|misaffine_processes)' "$out/metrics.txt"

echo "== promtool check metrics (real scrape, every source)"
"$here/promtool" check metrics <"$out/metrics.txt" && echo "promtool: clean"
grep -E '^gpulink_(topology|pcie_link|numa_node_(info|distance)|net_interface_(up|info)|nic_port_up)' "$out/metrics.txt" >"$out/topology-series.txt"
cat "$out/topology-series.txt"

kill $epid; wait $epid 2>/dev/null
echo "== scrape cost, every source on, 8 GPU processes running"
N=${N:-1000} "$here/scrape.sh" -b "$bin" -s "$here/scrapebench" -o "$out/scrape" -- --process.interval=5s

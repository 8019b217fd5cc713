#!/usr/bin/env bash
# The collective round inside the real daemon on a GPU machine: policy
# always, the first probe pass at once and a collective round after it;
# every gpulink_collective_* family exported, promtool check metrics clean
# on the real scrape, the transport the node's pairs should use, and the
# round's cost (GPU time, device memory) as the daemon exports it.
# (gpulink_collective_skips_total appears once a round was skipped.)
# NCCL_NVLS_ENABLE=0 and the other multicast switches are exported; the
# daemon keeps NVLS off itself too (--nccl.nvls is not given).
# Needs no Go: carry .device (bench/device-build.sh) and run
#   .device/collective-daemon.sh OUTDIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
. "$here/common.sh"
bench_out "${1:-}"
lib=$(nccl_wheel_lib)
unpack_tools promtool
addr=127.0.0.1:9849
"$bin" --web.listen-address=$addr --nvml.interval=1s --probe.policy=always --probe.first-delay=0s \
  --nccl.library="$lib" --log.level=debug >"$out/exporter.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT
t0=$SECONDS
for _ in $(seq 240); do
  curl -sf http://$addr/metrics >"$out/scrape.txt" 2>/dev/null
  grep -qE '^gpulink_collective_runs_total\{result="(success|partial|error|timeout|crash)"\} [1-9]' "$out/scrape.txt" && break
  sleep 0.5
done
echo "first collective round counted after $((SECONDS - t0)) s"
grep -E '^gpulink_collective_' "$out/scrape.txt" | tee "$out/collective.txt"
"$here/promtool" check metrics <"$out/scrape.txt" >"$out/promtool.txt" 2>&1
check "promtool check metrics on the real scrape" [ ! -s "$out/promtool.txt" ]
check "a successful collective round" grep -q '^gpulink_collective_runs_total{result="success"} 1' "$out/scrape.txt"
for fam in bus_bandwidth_bytes_per_second algorithm_bandwidth_bytes_per_second expected_bus_bandwidth_bytes_per_second \
  bus_bandwidth_ratio latency_seconds ranks send_recv_bandwidth_bytes_per_second send_recv_expected_bandwidth_bytes_per_second \
  send_recv_bandwidth_ratio send_recv_latency_seconds channels expected_transport_info runs_total \
  last_round_timestamp_seconds busy_seconds_total device_memory_bytes info; do
  check "family gpulink_collective_$fam exported" grep -q "^gpulink_collective_$fam" "$out/scrape.txt"
done
check "every channel p2p" sh -c "! grep -E '^gpulink_collective_channels\{' '$out/scrape.txt' | grep -v 'transport=\"p2p\"' | grep -q ."
exit $fail

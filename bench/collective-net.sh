#!/usr/bin/env bash
# The exporter's collectives child as two "nodes" on one host, outside any
# daemon, against the reference in the same places: is the child's
# send/recv over sockets as steady from run to run as the reference's, and
# where do its two sides differ? For issue 28, whose bench/node-probe.sh
# found the probe's runs spreading more than the reference's: this tells
# the child (and its sides) apart from the daemons around it.
#
# ROUNDS (default 4) times, one after the other:
#   child    `gpulink_exporter collectives` as two processes, rank 0 on the
#            first GPU and the first half of the CPUs, rank 1 on the second
#            GPU and the other half (as node-probe.sh places its daemons),
#            send/recv 0->1 and all-reduce at SIZE, MODULE_SAMPLES samples,
#            with the commands' process check (NVML every 250 ms, as a
#            daemon watches a session);
#   quiet    the same without the process check (--no-sharing-check);
#   ref      ref/nccl_ref.py as two processes in the same places.
# NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 hold NCCL to its network transport
# in every process; NVLS and the other multicast switches are off
# (common.sh). Each run's JSON is OUTDIR/<kind>-<round>-<rank>.json; then
# bench/collective_net.py prints, per kind, every run's send/recv with
# each side's own time and the run-to-run noise. It judges nothing: what
# it shows chooses between explanations, written down in bench/RESULTS.md.
# Needs two GPUs and no Go: carry .device and run
#   .device/collective-net.sh OUTDIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
. "$here/common.sh"
bench_out "${1:-}"
SIZE=${SIZE:-$((64 << 20))}
MODULE_SAMPLES=${MODULE_SAMPLES:-10}
ROUNDS=${ROUNDS:-4}
export CUDA_DEVICE_ORDER=PCI_BUS_ID NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
export TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING=false
lib=$(nccl_wheel_lib)
ncpu=$(nproc)
cpus=("0-$((ncpu / 2 - 1))" "$((ncpu / 2))-$((ncpu - 1))")
if [ "$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | wc -l)" -lt 2 ]; then
  echo "collective-net.sh needs two GPUs"
  exit 1
fi

# child NAME [FLAG...]: the exporter's two processes; rank 0 makes the id
# and hands it out on descriptor 3, rank 1 joins with it.
child() {
  local name=$1
  shift
  local common=(collectives --library="$lib" --gpu=0 --ranks=2 --collective=send_recv --collective=all_reduce
    --size="$SIZE" --samples="$MODULE_SAMPLES" --send-recv-offset=1 --timeout=100s --output=json "$@")
  rm -f "$out/$name.id"
  CUDA_VISIBLE_DEVICES=0 taskset -c "${cpus[0]}" "$bin" "${common[@]}" --first-rank=0 --id-fd=3 \
    >"$out/$name-0.json" 2>"$out/$name-0.err" 3>"$out/$name.id" &
  local r0=$!
  for _ in $(seq 200); do
    [ -s "$out/$name.id" ] && break
    sleep 0.05
  done
  CUDA_VISIBLE_DEVICES=1 taskset -c "${cpus[1]}" "$bin" "${common[@]}" --first-rank=1 \
    --unique-id="$(head -1 "$out/$name.id")" >"$out/$name-1.json" 2>"$out/$name-1.err"
  wait "$r0"
}

ref() {
  local name=$1 pids=()
  for r in 0 1; do
    CUDA_VISIBLE_DEVICES=$r timeout 200 taskset -c "${cpus[$r]}" python3 "$here/ref/nccl_ref.py" --gpus 0 --world 2 \
      --rank-base $r --master 127.0.0.1:29621 --collectives send_recv,all_reduce --size "$SIZE" \
      --samples "$MODULE_SAMPLES" >"$out/$name-$r.json" 2>"$out/$name-$r.err" &
    pids+=($!)
  done
  wait "${pids[@]}"
}

for k in $(seq "$ROUNDS"); do
  echo "== round $k"
  child "child-$k"
  child "quiet-$k" --no-sharing-check
  ref "ref-$k"
done
python3 "$here/collective_net.py" "$SIZE" "$out" | tee "$out/summary.txt"

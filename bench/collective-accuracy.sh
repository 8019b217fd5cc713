#!/usr/bin/env bash
# Accuracy of `gpulink_exporter collectives` on a real GPU machine: every
# collective's bus bandwidth at the default size against torch.distributed
# on NCCL (ref/nccl_ref.py: one process per GPU, timed and reported as
# nccl-tests does), in the same command; target: within 3%, and every
# connection NCCL made reported as P2P (NVLink) where TRANSPORT=p2p (the
# default; TRANSPORT= checks none).
# Probe and reference run interleaved RUNS times (default 3); the medians are
# compared (ref/collective_compare.py).
# NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
# NVSHMEM_DISABLE_NVLS=1 are exported for every process: multicast can put a
# shared host's GPUs out of service.
# Needs no Go: carry .device (bench/device-build.sh) and run
#   .device/collective-accuracy.sh OUTDIR
# Exits 1 if a comparison failed, 2 with no usable round. With one GPU it
# runs both sides once as a smoke test of the real library (nothing to
# compare: one rank moves no bytes between GPUs).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
. "$here/common.sh"
bench_out "${1:-${OUT:+$OUT/collective-accuracy}}"
RUNS=${RUNS:-3}
SIZE=${SIZE:-$((256 << 20))}
SMALL=${SMALL:-8192}
TRANSPORT=${TRANSPORT-p2p}
export CUDA_DEVICE_ORDER=PCI_BUS_ID
lib=${NCCL_LIBRARY:-$(nccl_wheel_lib)}

echo "== machine"
{
  nvidia-smi -L
  nvidia-smi --query-gpu=index,pci.bus_id,name,driver_version --format=csv
  nvidia-smi topo -m
  echo "libnccl: $lib"
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
} 2>&1 | tee "$out/machine.txt"
ngpu=$(nvidia-smi -L | grep -c '^GPU')
[ "$ngpu" -ge 2 ] || RUNS=1

probes=() refs=()
for i in $(seq "$RUNS"); do
  echo "== run $i: exporter"
  timeout 300 "$bin" collectives --library="$lib" --output=json --size="$SIZE" --small-size="$SMALL" \
    >"$out/probe-$i.json" 2>"$out/probe-$i.err"
  echo "exit $?"; tail -3 "$out/probe-$i.err"
  probes+=(--probe "$out/probe-$i.json")
  echo "== run $i: reference"
  timeout 300 python3 "$here/ref/nccl_ref.py" --size="$SIZE" --small-size="$SMALL" \
    >"$out/ref-$i.json" 2>"$out/ref-$i.err"
  echo "exit $?"; tail -3 "$out/ref-$i.err"
  refs+=(--ref "$out/ref-$i.json")
done
"$bin" collectives --library="$lib" --output=table --size="$SIZE" --small-size="$SMALL" >"$out/table.txt" 2>&1
cat "$out/table.txt"
if [ "$ngpu" -lt 2 ]; then
  python3 "$here/ref/collective_compare.py" "${probes[@]}" "${refs[@]}" --tolerance=1e9 --json "$out/compare.json" | tee "$out/compare.txt"
  exit 0
fi
python3 "$here/ref/collective_compare.py" "${probes[@]}" "${refs[@]}" --size="$SIZE" \
  ${TRANSPORT:+--transport="$TRANSPORT"} --json "$out/compare.json" | tee "$out/compare.txt"
exit "${PIPESTATUS[0]}"

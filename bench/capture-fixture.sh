#!/usr/bin/env bash
# On a GPU machine, as root: capture the sysfs and procfs files the exporter
# reads (scripts/capture-machine.py) with a real GPU process running, placed
# in a Slurm-like cgroup v2 path when the tree is writable, so the captured
# procfs carries what the process and Slurm sources read from a real one.
# Writes OUT/<name>.txtar (the fixture, committed under
# numa/testdata/captured/) and what nvidia-smi says of the same machine
# beside it (read-only queries), to check the tests' expectations against.
#
#   bench/capture-fixture.sh OUTDIR NAME
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${1:?OUTDIR}; name=${2:?NAME}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"

# A GPU process with a small, known environment (environ is captured).
env -i PATH="$PATH" HOME=/tmp CUDA_VISIBLE_DEVICES=0 SLURM_JOB_ID=4242 SLURM_STEP_ID=0 \
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
  python3 -c 'import torch, time
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
print("allocated", flush=True)
time.sleep(120)' > "$out/gpu-process.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT

cg=/sys/fs/cgroup/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0
if mkdir -p "$cg" 2>/dev/null && echo "$pid" > "$cg/cgroup.procs" 2>/dev/null; then
  echo "moved $pid into $cg"
else
  echo "could not place $pid in $cg; it stays in $(cat /proc/$pid/cgroup)"
fi
for _ in $(seq 60); do grep -q allocated "$out/gpu-process.log" && break; sleep 1; done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$out/$name.nvidia-smi-apps.txt" || true

python3 "$here/../scripts/capture-machine.py" --pid "$pid" > "$out/$name.txtar"
{
  nvidia-smi -q
  nvidia-smi topo -m
  nvidia-smi nvlink --status
  lspci -tv 2>/dev/null || true
  uname -a
} > "$out/$name.nvidia-smi.txt" 2>&1 || true
echo "pid $pid"; cat "/proc/$pid/cgroup"
grep -c '^-- ' "$out/$name.txtar"

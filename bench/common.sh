# shellcheck shell=bash
# Sourced by the bench scripts that check something on a GPU machine
# (collective-accuracy.sh, collective-daemon.sh, collective-latency.sh, collective-net.sh,
# command-contended.sh, node-probe.sh, probe-contended.sh, slurm-check.sh):
# the preamble they share. Bash only, so that it runs from .device/ on a GPU
# machine as the scripts do.

# NVLink multicast stays off in every process a script starts: it can put
# a shared host's GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# bench_out [OUTDIR]: where a script writes, made (a new temporary folder
# when none is given), into out; the exporter it runs, BIN or the one
# beside the scripts, into bin.
# shellcheck disable=SC2034 # out and bin: the scripts use them
out="" bin=""
# shellcheck disable=SC2034
bench_out() {
  out=${1:-$(mktemp -d)}
  mkdir -p "$out"
  bin=${BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/gpulink_exporter}
}

# check DESCRIPTION CONDITION...: runs CONDITION and prints PASS or FAIL
# with DESCRIPTION; a failure sets fail, which the scripts exit with.
fail=0
# shellcheck disable=SC2034 # fail: the scripts exit with it
check() {
  local what=$1
  shift
  if "$@"; then echo "PASS $what"; else echo "FAIL $what"; fail=1; fi
}

# unpack_tools TOOL...: .device carries promtool and prometheus gzipped
# (bench/device-build.sh); each is unpacked beside the scripts once.
unpack_tools() {
  local dir t
  dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  for t; do
    [ -x "$dir/$t" ] || { gunzip -kf "$dir/$t.gz" && chmod +x "$dir/$t"; }
  done
}

# nccl_wheel_lib: the libnccl.so.2 of the nvidia-nccl wheel that PyTorch
# loads, the library the scripts give the exporter.
nccl_wheel_lib() {
  echo "$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')/lib/libnccl.so.2"
}

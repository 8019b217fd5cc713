#!/usr/bin/env bash
# Accuracy of `gpulink_exporter probe` on a real GPU machine: every probe
# result against an independent reference on the same GPUs, in the same run.
#   - bandwidth, host<->device (each way, and both at once with each
#     direction measured while the other runs longer) and local HBM copy:
#     ref/torch_ref.py, PyTorch copies timed with CUDA events; target: within
#     3%;
#   - bandwidth, peer copy one way and both ways: ref/latency_ref.cu
#     (--kinds peer_bw), cudaMemcpyAsync behind a host-released spin gate
#     (PyTorch's cross-device copy_ synchronises streams around every copy
#     and reads 5-8% low); target: within 3%;
#   - latency (pointer chase in pinned host memory and in the peer's memory,
#     kernel launch): ref/latency_ref.cu, CUDA C built here with nvcc;
#     target: within 10%.
# Each key has exactly one reference (probe_compare.py fails a key that two
# give).
# Probe and reference run interleaved RUNS times (default 3: probe, ref,
# probe, ref, probe, ref) so drift between them shows; ref/probe_compare.py
# prints every run side by side and judges the median of the probe's runs
# against the median of the reference's (both move between runs).
# Host buffers: the probe gets --host-node for every NUMA node with memory
# (HOST_NODES="" passes none), the references run once per node under
# numactl --membind.
# Needs no Go: carry .device (bench/device-build.sh) and run
#   .device/probe-accuracy.sh OUTDIR        (default $OUT/probe-accuracy)
# Writes every log, the JSON of each run and compare.txt/compare.json to
# OUTDIR, then exits 1 if any comparison failed (2: no usable probe round).
# 1, 2 or 4 GPUs; about 2 minutes, under 8 even if every step hits its
# timeout (run 2 and the table are then skipped). BIN=path overrides the
# binary. Only read-only nvidia-smi queries are used; no GPU setting is changed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:+$OUT/probe-accuracy}}
out=${out:-$(mktemp -d)}
mkdir -p "$out"
bin=${BIN:-$here/gpulink_exporter}
ref=$here/ref
SIZE=${SIZE:-$((64 << 20))}
# One GPU numbering for everything: the probe resolves by bus id anyway, the
# references number GPUs in PCI order as nvidia-smi does.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
t0=$SECONDS
elapsed() { echo "$((SECONDS - t0)) s"; }

echo "== machine"
{
  nvidia-smi -L
  echo "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
  nvidia-smi --query-gpu=index,pci.bus_id,name,compute_cap,pcie.link.gen.max,pcie.link.width.max --format=csv
  nproc
} 2>&1 | tee "$out/machine.txt"
nvidia-smi topo -m >"$out/topo.txt" 2>&1
numactl -H >"$out/numactl-H.txt" 2>&1
ngpu=$(nvidia-smi -L | grep -c '^GPU')
echo "$ngpu GPUs"

# NUMA nodes with memory: "0" or "0-1" or "0,2-3" -> 0 1 2 3
expand() {
  local IFS=, r
  for r in $1; do
    if [[ $r == *-* ]]; then seq "${r%-*}" "${r#*-}"; else echo "$r"; fi
  done
}
nodes=()
if [ -n "${HOST_NODES+set}" ]; then
  read -r -a nodes <<<"$HOST_NODES"
elif command -v numactl >/dev/null && [ -r /sys/devices/system/node/has_memory ]; then
  mapfile -t nodes < <(expand "$(cat /sys/devices/system/node/has_memory)")
fi
host_flags=()
for n in ${nodes[@]+"${nodes[@]}"}; do host_flags+=("--host-node=$n"); done
echo "host NUMA nodes: ${nodes[*]:-none (unbound host memory)}"

echo "== build latency_ref ($(elapsed))"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
[[ $cap =~ ^[0-9]+$ ]] || cap=90
arch=sm_$cap
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
latref=$work/latency_ref
if timeout 120 "$nvcc" -O2 -std=c++17 -arch="$arch" -o "$latref" "$ref/latency_ref.cu" >"$out/nvcc.log" 2>&1; then
  echo "built with $("$nvcc" --version | tail -1) for $arch"
else
  cat "$out/nvcc.log"
  echo "latency_ref did not build: latency and peer bandwidth rows will show NOREF"
fi

# run_probe DIR: one probe round of every GPU and pair, JSON.
run_probe() {
  echo "== probe, $(basename "$1") ($(elapsed))"
  timeout 150 "$bin" probe --gpu=all ${host_flags[@]+"${host_flags[@]}"} --size="$SIZE" --output=json \
    >"$1/probe.json" 2>"$1/probe.log"
  local rc=$?
  echo "probe rc $rc, $(wc -c <"$1/probe.json") bytes of JSON"
  [ "$rc" -eq 0 ] || tail -n 20 "$1/probe.log"
}

# run_refs DIR: the references; host kinds once per node (pinned memory
# bound there), the rest once (with the first node's binding): torch_ref
# host,local and latency_ref host,peer,launch,peer_bw (peer copies from
# latency_ref only).
run_refs() {
  local d=$1 n first=1 bind nodeflag tag tk lk
  echo "== references, $(basename "$d") ($(elapsed))"
  for n in ${nodes[@]+"${nodes[@]}"} unbound; do
    if [ "$n" = unbound ]; then
      [ "$first" -eq 1 ] || break # nodes given: no unbound run
      bind=() nodeflag=() tag=unbound
    else
      bind=(numactl --membind="$n") nodeflag=(--node "$n") tag=n$n
    fi
    tk=host lk=host
    if [ "$first" -eq 1 ]; then tk=host,local lk=host,peer,launch,peer_bw; fi
    first=0
    timeout 120 ${bind[@]+"${bind[@]}"} python3 "$ref/torch_ref.py" --kinds "$tk" ${nodeflag[@]+"${nodeflag[@]}"} \
      --size "$SIZE" >"$d/ref-torch-$tag.json" 2>>"$d/ref.log" || echo "torch_ref ($tag) failed: rc $?, see ref.log"
    if [ -x "$latref" ]; then
      timeout 60 ${bind[@]+"${bind[@]}"} "$latref" --kinds "$lk" ${nodeflag[@]+"${nodeflag[@]}"} \
        --size "$SIZE" >"$d/ref-lat-$tag.json" 2>>"$d/ref.log" || echo "latency_ref ($tag) failed: rc $?, see ref.log"
    fi
  done
  ls "$d"
}

# Worst case (every step at its timeout) stays under 8 minutes: later runs
# and the table are skipped when time is short.
RUNS=${RUNS:-3}
runs=()
for r in $(seq "$RUNS"); do
  if [ "$r" -gt 1 ] && [ $((SECONDS - t0)) -gt 200 ]; then
    echo "== run $r skipped: $(elapsed) gone"
    break
  fi
  mkdir -p "$out/run$r"
  run_probe "$out/run$r"
  run_refs "$out/run$r"
  runs+=("$r")
done

echo "== compare ($(elapsed))"
args=()
for r in "${runs[@]}"; do args+=(--run "$out/run$r/probe.json" "$out/run$r"/ref-*.json); done
python3 "$ref/probe_compare.py" "${args[@]}" --json "$out/compare.json" >"$out/compare.txt" 2>&1
rc=$?
cat "$out/compare.txt"

# The human table of one more round, for the log, while time allows.
if [ $((SECONDS - t0)) -lt 300 ]; then
  echo "== probe table ($(elapsed))"
  timeout 100 "$bin" probe --gpu=all ${host_flags[@]+"${host_flags[@]}"} --size="$SIZE" --output=table \
    >"$out/probe-table.txt" 2>"$out/probe-table.log"
  cat "$out/probe-table.txt"
else
  echo "== probe table skipped: $(elapsed) gone"
fi
echo "== done in $(elapsed); compare rc $rc; everything in $out"
exit "$rc"

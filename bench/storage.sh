#!/usr/bin/env bash
# The storage probe on a real GPU machine: its read bandwidth
# (storage_to_device) beside a reference on the same drive in the same
# run, and the GDS mode it reports beside what gdscheck -p says.
#   - reference: gdsio from the CUDA toolkit where present (GPUDirect
#     Storage's own benchmark, through cuFile as the probe is when cuFile
#     loads), else ref/storage_ref.py: O_DIRECT reads into pinned memory
#     with a PyTorch copy to the GPU, two buffers taking turns (the probe's
#     posix path); dd iflag=direct beside it, the drive's bare read rate;
#   - target: the probe's median read within 10% of the reference's median
#     (ref/storage_compare.py).
# The probe writes its own file (unlinked at once); the references read
# one file of the same size written once with dd oflag=direct into the
# same directory and removed at the end. Probe and references run
# interleaved RUNS times (default 3). Every read is O_DIRECT: the page
# cache plays no part.
# cuFile: the probe is given the first libcufile.so.0 found (CUFILE_LIB,
# the CUDA toolkit's, ldconfig's, PyTorch's nvidia-cufile wheel); without
# one it reads through O_DIRECT and a copy, and says so.
# Needs no Go: carry .device (bench/device-build.sh) and run
#   .device/storage.sh OUTDIR        (default $OUT/storage)
# STORAGE_DIR: the directory to probe (default a new one under /var/tmp,
# on the root disk); SIZE: the file (default 2 GiB); CHUNK: one request
# (default 64 MiB). Writes logs, probe JSON, reference output and
# compare.txt/compare.json to OUTDIR; exits 1 if the comparison failed, 2
# if there was nothing to judge. Only reads state (nvidia-smi queries,
# gdscheck -p, lsmod); changes no GPU or driver setting.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
. "$here/common.sh"
bench_out "${1:-${OUT:+$OUT/storage}}"
ref=$here/ref
SIZE=${SIZE:-$((2 << 30))}
CHUNK=${CHUNK:-$((64 << 20))}
RUNS=${RUNS:-3}
export CUDA_DEVICE_ORDER=PCI_BUS_ID
dir=${STORAGE_DIR:-$(mktemp -d /var/tmp/gpulink-storage.XXXXXX)}
mkdir -p "$dir"
reffile=$dir/reference.bin
trap 'rm -f "$reffile"; [ -n "${STORAGE_DIR:-}" ] || rmdir "$dir" 2>/dev/null' EXIT
t0=$SECONDS
elapsed() { echo "$((SECONDS - t0)) s"; }

echo "== machine"
{
  nvidia-smi -L
  nvidia-smi --query-gpu=index,pci.bus_id,name,pcie.link.gen.max,pcie.link.width.max --format=csv
  uname -r
  echo "directory $dir: $(df -hT "$dir" | tail -1)"
  findmnt -T "$dir" -o TARGET,SOURCE,FSTYPE,OPTIONS
  lsblk -o NAME,MAJ:MIN,SIZE,TYPE,TRAN,MOUNTPOINT
  echo "nvidia_fs: $(lsmod | grep -c '^nvidia_fs' || true) loaded; /proc/driver/nvidia-fs: $(ls /proc/driver/nvidia-fs 2>&1 | tr '\n' ' ')"
  echo "cufile.json: ${CUFILE_ENV_PATH_JSON:-/etc/cufile.json} $([ -e "${CUFILE_ENV_PATH_JSON:-/etc/cufile.json}" ] && echo present || echo absent)"
} 2>&1 | tee "$out/machine.txt"
"$bin" topology >"$out/topology.txt" 2>&1

# The cuFile library for the probe, and GDS's tools, wherever they are.
cufile=${CUFILE_LIB:-}
# PyTorch's wheels bring it as nvidia-cufile (nvidia/cufile/lib, or
# nvidia/cu13/lib for CUDA 13's).
wheels=$(python3 -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null || true)
wheel=""
for w in $wheels; do
  [ -n "$wheel" ] || wheel=$(find "$w" -name 'libcufile.so.0' 2>/dev/null | head -n1)
done
for c in /usr/local/cuda/lib64/libcufile.so.0 /usr/local/cuda/targets/x86_64-linux/lib/libcufile.so.0 \
  "$(ldconfig -p 2>/dev/null | awk '/libcufile.so.0 /{print $NF; exit}')" "$wheel"; do
  [ -z "$cufile" ] && [ -n "$c" ] && [ -e "$c" ] && cufile=$c
done
gdsio=$(command -v gdsio || ls /usr/local/cuda/gds/tools/gdsio 2>/dev/null || true)
gdscheck=$(command -v gdscheck || ls /usr/local/cuda/gds/tools/gdscheck 2>/dev/null || true)
echo "cuFile library: ${cufile:-none found}; gdsio: ${gdsio:-absent}; gdscheck: ${gdscheck:-absent}" | tee -a "$out/machine.txt"
if [ -n "$gdscheck" ]; then
  timeout 60 "$gdscheck" -p >"$out/gdscheck.txt" 2>&1 || echo "gdscheck -p: rc $?" >>"$out/gdscheck.txt"
fi

echo "== reference file ($(elapsed))"
count=$((SIZE / CHUNK))
timeout 300 dd if=/dev/zero of="$reffile" bs="$CHUNK" count="$count" oflag=direct conv=fdatasync >"$out/dd-write.txt" 2>&1
tail -1 "$out/dd-write.txt"

probe_args=(probe --gpu=0 --probe=device_to_storage --probe=storage_to_device --storage-dir="$dir"
  --storage-size="$SIZE" --size="$CHUNK" --samples=3 --output=json)
[ -n "$cufile" ] && probe_args=(--cufile.library="$cufile" "${probe_args[@]}")
for i in $(seq 1 "$RUNS"); do
  d=$out/run$i
  mkdir -p "$d"
  echo "== run $i: probe ($(elapsed))"
  # cuFile logs where CUFILE_LOGFILE_PATH says; the probe sends it to its
  # stderr otherwise, which is kept here.
  timeout 300 "$bin" "${probe_args[@]}" >"$d/probe.json" 2>"$d/probe.log"
  echo "probe rc $?"
  echo "== run $i: references ($(elapsed))"
  if [ -n "$gdsio" ]; then
    # -x 0: GPU direct (cuFile; compat where cuFile falls back), -I 0 read,
    # one thread, the whole file in CHUNK requests.
    CUFILE_LOGFILE_PATH=$d/gdsio-cufile.log timeout 300 "$gdsio" -f "$reffile" -d 0 -w 1 -s "$SIZE" -i "$((CHUNK >> 10))K" -x 0 -I 0 >"$d/gdsio.txt" 2>&1 ||
      echo "gdsio rc $?"
  fi
  timeout 300 python3 "$ref/storage_ref.py" "$reffile" --chunk "$CHUNK" >"$d/ref.json" 2>"$d/ref.log" || echo "storage_ref rc $?"
  timeout 300 dd if="$reffile" of=/dev/null bs="$CHUNK" iflag=direct >"$d/dd.txt" 2>&1
done
# Nothing of the probe's is left: its file was unlinked when made.
ls -la "$dir" >"$out/dir-after.txt"

echo "== compare ($(elapsed))"
python3 "$ref/storage_compare.py" "$out"

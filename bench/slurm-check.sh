#!/usr/bin/env bash
# Slurm job attribution on a real GPU machine (issue 23), without Slurm:
# a PyTorch process holding memory on GPU 0 (hold.py) is moved into a
# cgroup v2 path as Slurm's cgroup/v2 plugin makes it, and the real
# exporter must report its job on the process series and on GPU 0's
# gpulink_gpu_job_info; a job-mapping file for GPU 1 (dcgm-exporter's
# format) must show on GPU 1's. Two runs:
#   1. /sys/fs/cgroup/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0
#      (Slurm 22.05 to 25.11): job 4242, step 0;
#   2. .../slurmstepd.scope/s5K1KKYAYG5D00/step_0/user/task_0 (26.05's
#      SLUID folder) with SLURM_JOB_ID=4343 in the process's environment:
#      job 4343, job_sluid s5K1KKYAYG5D00, step 0.
# After each run the process exits and its job must leave GPU 0's info.
# While each process runs, the health check (issue 35) must pass
# (gpulink_healthcheck: exit 0, "OK: links fit for jobs") over
# the exporter's scrape; once the exporter is stopped it must say unknown
# (exit 2).
#
# Needs root (it writes /sys/fs/cgroup, a cgroup v2 hierarchy), python3
# with torch, and two GPUs (with one, GPU 1's mapping check is skipped and
# says so). Needs no Go: carry .device (bench/device-build.sh --slurm) and run
#   .device/slurm-check.sh OUTDIR
# OUTDIR gets the log (slurm-check.log), the exporter's log, each run's
# /proc/<pid>/cgroup and scrapes. Exits 1 when a check fails, 2 when the
# machine cannot run the check. It changes no GPU setting; every cgroup it
# made is removed and every process it started is stopped on exit (a
# slurmstepd.scope that was there before is left).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
. "$here/common.sh"
bench_out "${1:-}"
out=$(cd "$out" && pwd)
exec > >(tee "$out/slurm-check.log") 2>&1
export CUDA_DEVICE_ORDER=PCI_BUS_ID

addr=127.0.0.1:9857
url=http://$addr/metrics
cg=/sys/fs/cgroup
scope=$cg/system.slice/slurmstepd.scope
sluid=s5K1KKYAYG5D00
mapjob=7777

die() { # the machine cannot run the check
	echo "CANNOT RUN: $*"
	exit 2
}

[ "$(id -u)" = 0 ] || die "needs root to write $cg"
[ "$(stat -fc %T "$cg" 2>/dev/null)" = cgroup2fs ] || die "$cg is not a cgroup v2 hierarchy ($(stat -fc %T "$cg" 2>&1))"
[ -x "$bin" ] || die "no exporter at $bin (bench/device-build.sh puts it there)"
healthcheck=${HEALTHCHECK:-$here/gpulink_healthcheck}
[ -x "$healthcheck" ] || die "no gpulink_healthcheck at $healthcheck (bench/device-build.sh --slurm puts it there)"
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || die "python3 with torch and CUDA is needed"
ngpu=$(nvidia-smi -L | grep -c '^GPU')
echo "$(date -u +%FT%TZ) $(hostname): $ngpu GPUs, $(uname -r), $("$bin" --version 2>&1 | head -1)"
nvidia-smi -L

mapdir=$(mktemp -d)
scope_was_there=false
[ -d "$scope" ] && scope_was_there=true
holds=()
# shellcheck source=bench/exporter.sh
. "$here/exporter.sh"

# Moves what is left in a cgroup made here to the root, then removes the
# cgroups leaf first.
remove_cgroups() { # remove_cgroups JOBDIR
	local job=$1 d p
	[ -d "$job" ] || return 0
	for d in "$job/step_0/user/task_0" "$job/step_0/user" "$job/step_0" "$job"; do
		[ -d "$d" ] || continue
		while read -r p; do
			[ -n "$p" ] && echo "$p" >"$cg/cgroup.procs" 2>/dev/null
		done <"$d/cgroup.procs"
	done
	for d in "$job/step_0/user/task_0" "$job/step_0/user" "$job/step_0" "$job"; do
		for _ in $(seq 50); do
			[ -d "$d" ] || break
			rmdir "$d" 2>/dev/null && break
			sleep 0.1
		done
		[ -d "$d" ] && echo "could not remove $d: $(tr '\n' ' ' <"$d/cgroup.procs" 2>/dev/null)"
	done
}

# shellcheck disable=SC2317 # run by the trap
cleanup() {
	local p
	for p in "${holds[@]}"; do
		kill "$p" 2>/dev/null
	done
	for p in "${holds[@]}"; do
		wait "$p" 2>/dev/null
	done
	exporter_stop
	remove_cgroups "$scope/job_4242"
	remove_cgroups "$scope/$sluid"
	if ! $scope_was_there && [ -d "$scope" ]; then
		rmdir "$scope" 2>/dev/null || echo "could not remove $scope"
	fi
	rm -rf "$mapdir"
}
trap cleanup EXIT

# The prolog's file for GPU 1, as soperator's writes it (printf, no
# newline).
printf '%s' "$mapjob" >"$mapdir/1"

# Only the sources the check needs: NVML (the GPUs and their processes),
# the process source (and the topology sampler it judges with), the
# mapping files.
exporter_start "$out/exporter.log" "$bin" --web.listen-address=$addr --no-collector.xid --no-collector.nic --probe.policy=off \
	--nvml.interval=1s --process.interval=1s --topology.interval=5s \
	--slurm.job-mapping-dir="$mapdir" --slurm.interval=1s --log.level=debug
up=false
exporter_wait "$addr" 'gpulink_source_up{source="process"} 1' 30 && up=true
check "exporter up with the process source" $up
$up || {
	tail -n 30 "$out/exporter.log"
	exit 1
}

# series FILE FAMILY LABEL=VALUE... : the family's lines carrying every
# label given (label order does not matter).
series() {
	local file=$1 family=$2 l
	shift 2
	local lines
	lines=$(grep "^$family{" "$file")
	for l in "$@"; do
		lines=$(grep -F -- "$l" <<<"$lines")
	done
	[ -n "$lines" ] && printf '%s\n' "$lines"
}

# run NAME JOBDIR JOBID SLUID [ENV...]: start hold.py on GPU 0 (with ENV),
# move it into JOBDIR's task 0, wait for a scrape naming the job, check,
# stop it, check the job leaves.
run() {
	local name=$1 jobdir=$2 job=$3 want_sluid=$4
	shift 4
	local task=$jobdir/step_0/user/task_0 pid='' line=
	echo "== $name: $task"
	env "$@" python3 "$here/hold.py" 0 64 >"$out/hold-$name.log" 2>&1 &
	local hp=$!
	holds+=("$hp")
	for _ in $(seq 600); do
		line=$(grep -m1 '^ready ' "$out/hold-$name.log" 2>/dev/null)
		[ -n "$line" ] && break
		kill -0 "$hp" 2>/dev/null || break
		sleep 0.2
	done
	pid=${line#ready }
	if [ -z "$line" ] || [ "$pid" != "$hp" ]; then
		echo "FAIL $name: hold.py did not get ready (pid ${pid:-none}, started $hp)"
		cat "$out/hold-$name.log"
		fail=1
		return
	fi
	if ! mkdir -p "$task" || ! echo "$pid" >"$task/cgroup.procs"; then
		echo "FAIL $name: cannot move pid $pid into $task"
		fail=1
		return
	fi
	tee "$out/cgroup-$name.txt" <"/proc/$pid/cgroup"
	tr '\0' '\n' <"/proc/$pid/environ" | grep '^SLURM_' | tee "$out/environ-$name.txt"
	check "$name: /proc/$pid/cgroup names the task" grep -qx "0::${task#"$cg"}" "$out/cgroup-$name.txt"

	local file=$out/metrics-$name.txt
	for _ in $(seq 100); do
		curl -sf "$url" >"$file" 2>/dev/null
		series "$file" gpulink_gpu_job_info 'gpu="0"' "job_id=\"$job\"" >/dev/null && break
		sleep 0.3
	done
	echo "-- process series of pid $pid:"
	series "$file" gpulink_process_gpu_memory_used_bytes "pid=\"$pid\""
	echo "-- gpulink_gpu_job_info:"
	series "$file" gpulink_gpu_job_info
	check "$name: pid $pid's series carry slurm_job_id=$job, slurm_step=0" \
		series "$file" gpulink_process_gpu_memory_used_bytes "pid=\"$pid\"" 'gpu="0"' "slurm_job_id=\"$job\"" 'slurm_step="0"'
	check "$name: gpulink_process_misaffine of pid $pid carries the job" \
		series "$file" gpulink_process_misaffine "pid=\"$pid\"" "slurm_job_id=\"$job\""
	check "$name: GPU 0's gpulink_gpu_job_info is job $job from its cgroup (job_sluid \"$want_sluid\")" \
		series "$file" gpulink_gpu_job_info 'gpu="0"' "job_id=\"$job\"" "job_sluid=\"$want_sluid\"" 'source="cgroup"' 'gpu_instance=""'
	if [ "$ngpu" -ge 2 ]; then
		check "$name: GPU 1's gpulink_gpu_job_info is job $mapjob from its mapping file" \
			series "$file" gpulink_gpu_job_info 'gpu="1"' "job_id=\"$mapjob\"" 'source="mapping_file"'
	else
		echo "SKIP $name: one GPU, no GPU 1 to map"
	fi
	echo "-- errors counted: $(grep -E '^gpulink_source_errors_total\{source="(process|slurm)"\}' "$file" | tr '\n' ' ')"

	# The health check, as slurmd would run it, over this exporter while
	# the job runs: the node's links judged by the shipped rules.
	local hc=$out/healthcheck-$name.txt rc=0
	"$healthcheck" --exporter.url="$url" --state.file="$out/healthcheck.state" >"$hc" 2>&1 || rc=$?
	cat "$hc"
	check "$name: healthcheck exits 0 (OK) with the job running (exit $rc)" [ "$rc" = 0 ]

	kill "$pid"
	wait "$pid" 2>/dev/null
	local gone=false after=$out/metrics-$name-after.txt
	for _ in $(seq 100); do
		curl -sf "$url" >"$after" 2>/dev/null
		if grep -q '^gpulink_source_up{source="process"} 1' "$after" && ! series "$after" gpulink_gpu_job_info "job_id=\"$job\"" >/dev/null &&
			{ [ "$ngpu" -lt 2 ] || series "$after" gpulink_gpu_job_info 'gpu="1"' "job_id=\"$mapjob\"" >/dev/null; }; then
			gone=true
			break
		fi
		sleep 0.3
	done
	check "$name: once the process exits, job $job leaves the info and the mapping file's stays" $gone
	remove_cgroups "$jobdir"
}

run job_id "$scope/job_4242" 4242 ""
run sluid "$scope/$sluid" 4343 "$sluid" SLURM_JOB_ID=4343 SLURM_JOB_SLUID="$sluid"

# The exporter stopped: the check cannot tell, and says so.
exporter_stop
rc=0
"$healthcheck" --exporter.url="$url" --state.file="$out/healthcheck.state" >"$out/healthcheck-stopped.txt" 2>&1 || rc=$?
cat "$out/healthcheck-stopped.txt"
check "healthcheck with the exporter stopped exits 2 (unknown), not 0 (exit $rc)" [ "$rc" = 2 ]

[ -f "$here/promtool.gz" ] && unpack_tools promtool
if [ -x "$here/promtool" ]; then
	check "promtool check metrics on the SLUID run's scrape" "$here/promtool" check metrics <"$out/metrics-sluid.txt"
fi

if [ "$fail" = 0 ]; then echo "slurm-check: all checks passed"; else echo "slurm-check: FAILED"; fi
exit "$fail"

#!/bin/sh
# Slurm Prolog and Epilog for gpulink_exporter's --slurm.job-mapping-dir
# (dcgm-exporter's --hpc-job-mapping-dir format): one file per GPU, named
# by its index, holding the ID of each job on it, a line each.
#
#   Prolog=/usr/share/gpulink_exporter/slurm/job-map.sh   (add)
#   Epilog=/usr/share/gpulink_exporter/slurm/job-map.sh   (remove)
#
# slurmd runs it as root with SLURM_SCRIPT_CONTEXT set to prolog_slurmd or
# epilog_slurmd; "add" or "remove" as the first argument says it outright
# (for a wrapper, or by hand). The job's GPUs are SLURM_JOB_GPUS, the
# node-global indices Slurm allocated, or else CUDA_VISIBLE_DEVICES, which
# Prolog and Epilog see in the same global form (not the job's own
# renumbered one). These are Slurm's GRES indices: they are NVML's where
# gres.conf lists the GPUs in PCI bus order, as AutoDetect=nvml does.
#
# The directory is GPULINK_JOB_MAPPING_DIR, default /run/gpulink/jobs.
# A GPU two jobs share (sharding, MPS, OverSubscribe) holds both IDs; the
# epilog removes only its own, and the file once empty. Exits 0 whatever
# happens, after saying what went wrong on stderr (slurmd's log): a
# mapping file is worth less than the job, and a failing Prolog drains
# the node.
set -u
dir=${GPULINK_JOB_MAPPING_DIR:-/run/gpulink/jobs}
action=${1:-}
case "$action:${SLURM_SCRIPT_CONTEXT:-}" in
add:* | :prolog*) action=add ;;
remove:* | :epilog*) action=remove ;;
*)
	echo "job-map.sh: say add or remove (or run as Slurm's Prolog/Epilog)" >&2
	exit 0
	;;
esac
job=${SLURM_JOB_ID:-}
case $job in
'' | *[!0-9]*)
	echo "job-map.sh: SLURM_JOB_ID ${job:-unset} is not a job ID" >&2
	exit 0
	;;
esac
gpus=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}
[ -n "$gpus" ] || exit 0 # a job without GPUs

# indices expands a list such as 0,2-3 to one index a line; anything else
# (a UUID) is left out with a word on stderr.
indices() {
	echo "$1" | tr ',' '\n' | while read -r g; do
		case $g in
		*[!0-9-]* | '' | -* | *-) echo "job-map.sh: GPU '$g' of job $job is not an index" >&2 ;;
		*-*) seq "${g%-*}" "${g#*-}" ;;
		*) echo "$g" ;;
		esac
	done
}

mkdir -p "$dir" || exit 0
# One job's prolog and another's epilog may touch one GPU's file at once.
exec 9>"$dir/.lock" && flock 9
for g in $(indices "$gpus"); do
	f=$dir/$g
	if [ "$action" = add ]; then
		grep -qx "$job" "$f" 2>/dev/null || echo "$job" >>"$f"
	elif [ -f "$f" ]; then
		grep -vx "$job" "$f" >"$f.tmp"
		if [ -s "$f.tmp" ]; then mv "$f.tmp" "$f"; else rm -f "$f.tmp" "$f"; fi
	fi
done
exit 0

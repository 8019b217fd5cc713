#!/usr/bin/env bash
# Install Debian's slurm-wlm and munge where they are missing, for the
# real-Slurm end-to-end test (e2e/slurm_test.go), which runs its own
# munged, slurmctld and slurmd with its own configuration. The packages'
# own services are not started: a policy-rc.d forbids it for the install
# (and is removed after, unless one was there before), so nothing runs on
# the machine afterwards that the test did not start.
#
# Usage: scripts/install-slurm.sh
#
# Needs apt-get (Debian/Ubuntu) and root or sudo. Idempotent: nothing to do
# when every program the test runs is there.
set -euo pipefail

need=(munged mungekey slurmctld slurmd sbatch srun scontrol squeue scancel sinfo)
missing=()
for p in "${need[@]}"; do
	command -v "$p" >/dev/null || [[ -x /usr/sbin/$p ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
	echo "slurm-wlm and munge already installed"
	exit 0
fi
echo "install-slurm: missing ${missing[*]}; installing slurm-wlm and munge"

command -v apt-get >/dev/null || {
	echo "install-slurm: needs apt-get (Debian/Ubuntu); install slurm-wlm and munge by hand" >&2
	exit 1
}
as_root=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null && as_root=(sudo) || {
		echo "install-slurm: needs root or sudo" >&2
		exit 1
	}
fi

policy=/usr/sbin/policy-rc.d
ours=false
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\n# install-slurm.sh: no service starts while it installs\nexit 101\n' | "${as_root[@]}" tee "$policy" >/dev/null
	"${as_root[@]}" chmod 0755 "$policy"
	ours=true
fi
cleanup() { if $ours; then "${as_root[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT

install() { "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge; }
# A fresh machine often has empty package lists: update once and retry.
if ! install; then
	echo "install-slurm: apt-get install failed; running apt-get update and retrying" >&2
	"${as_root[@]}" apt-get update -q
	install
fi
echo "install-slurm: installed slurm-wlm and munge"

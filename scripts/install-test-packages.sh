#!/usr/bin/env bash
# Debian packages the tests and the release need beyond Go and gcc,
# installed with apt-get where their commands are missing (CI is a fresh
# Debian machine; nothing is done where they are there):
#
#   chromium                 e2e TestDemo loads Prometheus's UI in it, headless
#   qemu-user-static         scripts/arm64-test.sh runs the linux/arm64 test
#                            binaries and exporter under qemu-aarch64-static
#   gcc-aarch64-linux-gnu,   the cgo cross compiler and arm64 glibc for the
#   libc6-dev-arm64-cross    linux/arm64 build (make release, arm64-test)
#
# Needs root or sudo when something is missing.
set -euo pipefail

declare -A need=(
	[chromium]=chromium
	[qemu-aarch64-static]=qemu-user-static
	[aarch64-linux-gnu-gcc]=gcc-aarch64-linux-gnu
)
pkgs=()
for cmd in "${!need[@]}"; do
	command -v "$cmd" >/dev/null || pkgs+=("${need[$cmd]}")
done
[[ -e /usr/aarch64-linux-gnu/include/stdio.h ]] || pkgs+=(libc6-dev-arm64-cross)
if ((${#pkgs[@]} == 0)); then
	echo "test packages already installed"
	exit 0
fi

as_root=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null || {
		echo "install-test-packages: ${pkgs[*]} missing, and neither root nor sudo to install them" >&2
		exit 1
	}
	as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt (a second checkout's) rather than fail on its lock.
apt_get=("${as_root[@]}" apt-get -q -y -o DPkg::Lock::Timeout=600)
if ! "${apt_get[@]}" install "${pkgs[@]}"; then
	echo "install-test-packages: apt-get install failed; running apt-get update and retrying" >&2
	"${apt_get[@]}" update
	"${apt_get[@]}" install "${pkgs[@]}"
fi

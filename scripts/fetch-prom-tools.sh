#!/usr/bin/env bash
# Install real promtool and prometheus binaries into .tools/bin from the
# Debian packages, without installing the packages (so no services are
# started, no users created and nothing outside the repository changes
# except, if needed, the apt package lists), and alertmanager built from the
# Go module proxy: Debian's alertmanager reads its notification templates
# from /usr/share/prometheus/alertmanager, which only the installed package
# provides; upstream's has them built in.
#
# Usage: scripts/fetch-prom-tools.sh [DESTDIR]   (default: <repo>/.tools/bin)
#
# Needs apt-get and dpkg (Debian/Ubuntu). apt-get update needs root or sudo;
# it is only run when the package lists do not know the packages yet.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$repo/.tools/bin}
pkgs=(prometheus)
ALERTMANAGER_VERSION=${ALERTMANAGER_VERSION:-v0.27.0}

# Idempotent: nothing to do when all tools are there and promtool runs.
if [[ -x $dest/promtool && -x $dest/prometheus && -x $dest/alertmanager && -e $dest/.alertmanager-$ALERTMANAGER_VERSION ]] &&
	"$dest/promtool" --version >/dev/null 2>&1; then
	echo "prom tools already in $dest"
	"$dest/promtool" --version 2>&1 | head -n1
	exit 0
fi

command -v apt-get >/dev/null && command -v dpkg >/dev/null || {
	echo "fetch-prom-tools: needs apt-get and dpkg (Debian/Ubuntu)" >&2
	exit 1
}

as_root=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null && as_root=(sudo) || true
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# apt-get drops privileges to _apt for downloads; let it write here so it
# does not warn about downloading unsandboxed as root.
chmod 0777 "$tmp"

download() { (cd "$tmp" && apt-get download -q "${pkgs[@]}"); }

# A fresh machine (e.g. a Docker image) often has empty package lists:
# update once and retry.
if ! download; then
	echo "fetch-prom-tools: apt-get download failed; running apt-get update and retrying" >&2
	"${as_root[@]}" apt-get update -q
	download
fi

mkdir -p "$tmp/root"
for deb in "$tmp"/*.deb; do
	dpkg -x "$deb" "$tmp/root"
done

mkdir -p "$dest"
install -m 0755 "$tmp/root/usr/bin/promtool" "$dest/promtool"
install -m 0755 "$tmp/root/usr/bin/prometheus" "$dest/prometheus"
rm -f "$dest/prometheus-alertmanager" "$dest"/.alertmanager-*
# About 40 s on two cores; go is there wherever the exporter builds.
GOFLAGS=-mod=mod GOBIN="$dest" go install "github.com/prometheus/alertmanager/cmd/alertmanager@$ALERTMANAGER_VERSION"
touch "$dest/.alertmanager-$ALERTMANAGER_VERSION"

echo "installed into $dest:"
ls -l "$dest"
"$dest/promtool" --version

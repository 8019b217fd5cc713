#!/usr/bin/env bash
# Install real promtool and prometheus binaries into .tools/bin from the
# Debian packages, without installing the packages (so no services are
# started, no users created and nothing outside the repository changes
# except, if needed, the apt package lists), and alertmanager built from the
# Go module proxy: Debian's alertmanager reads its notification templates
# from /usr/share/prometheus/alertmanager, which only the installed package
# provides; upstream's has them built in.
#
# Prometheus's web UI: Debian's prometheus is built without its assets
# compiled in and serves them from /usr/share/prometheus/web
# (--web.local-assets), whose static/ links into the libjs-* packages it
# depends on. Without them /alerts, /rules and /targets answer 404 and
# /graph "Error reading base template". So the assets are extracted too,
# links resolved, into <DESTDIR>/../share/prometheus/web, with Debian's
# example console templates beside them (consoles/, console_libraries/);
# scripts/demo.sh passes both to prometheus.
#
# Usage: scripts/fetch-prom-tools.sh [DESTDIR]   (default: <repo>/.tools/bin)
#
# Needs apt-get and dpkg (Debian/Ubuntu). apt-get update needs root or sudo;
# it is only run when the package lists do not know the packages yet.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$repo/.tools/bin}
share=$(dirname "$dest")/share/prometheus
# prometheus, and the packages its web/static/ links into (its Depends).
pkgs=(prometheus fonts-glyphicons-halflings libjs-bootstrap4 libjs-d3
	libjs-eonasdan-bootstrap-datetimepicker libjs-jquery libjs-jquery-hotkeys
	libjs-moment libjs-moment-timezone libjs-mustache libjs-popper.js libjs-rickshaw)
ALERTMANAGER_VERSION=${ALERTMANAGER_VERSION:-v0.27.0}

# Idempotent: nothing to do when all tools are there and promtool runs.
if [[ -x $dest/promtool && -x $dest/prometheus && -x $dest/alertmanager && -e $dest/.alertmanager-$ALERTMANAGER_VERSION &&
	-e $share/web/templates/alerts.html && -e $share/web/static/jquery/jquery.min.js ]] &&
	"$dest/promtool" --version >/dev/null 2>&1; then
	echo "prom tools already in $dest"
	"$dest/promtool" --version 2>&1 | head -n1
	exit 0
fi

# shellcheck source=scripts/debdownload.sh
. "$repo/scripts/debdownload.sh"
deb_fetch fetch-prom-tools "${pkgs[@]}"
# Links the packages make to absolute paths (/usr/share/nodejs/...) point
# into the extracted tree instead, so that cp -L below resolves them.
find "$deb_root" -type l -lname '/*' | while read -r link; do
	ln -sfn "$deb_root$(readlink "$link")" "$link"
done

mkdir -p "$dest"
install -m 0755 "$deb_root/usr/bin/promtool" "$dest/promtool"
install -m 0755 "$deb_root/usr/bin/prometheus" "$dest/prometheus"
# The web UI, links resolved: only what Prometheus's templates load, not
# source maps, precompressed copies or moment-timezone's 200 MB of data
# (the templates load moment-timezone-with-data.min.js, which has it).
rm -rf "$share"
mkdir -p "$share"
cp -rL "$deb_root/usr/share/prometheus/web" "$share/web"
find "$share/web" -type f \( -name '*.map' -o -name '*.gz' -o -name '*.brotli' \) -delete
find "$share/web/static/moment-timezone" -mindepth 1 -not -name moment-timezone-with-data.min.js -exec rm -rf {} +
cp -r "$deb_root/usr/share/doc/prometheus/examples/consoles" "$deb_root/usr/share/doc/prometheus/examples/console_libraries" "$share/"
rm -f "$dest/prometheus-alertmanager" "$dest"/.alertmanager-*
# About 40 s on two cores; go is there wherever the exporter builds.
GOFLAGS=-mod=mod GOBIN="$dest" go install "github.com/prometheus/alertmanager/cmd/alertmanager@$ALERTMANAGER_VERSION"
touch "$dest/.alertmanager-$ALERTMANAGER_VERSION"

echo "installed into $dest (web UI: $share/web):"
ls -l "$dest"
du -sh "$share"
"$dest/promtool" --version

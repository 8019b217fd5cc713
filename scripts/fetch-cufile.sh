#!/usr/bin/env bash
# Install Debian's real libcufile.so.0 (package libcufile0, from the non-free
# component) into .tools/lib, without installing the package, so the cuFile
# binding's test against the real library (probes/cufile) runs in make test:
# on a machine without a GPU, cuFileDriverOpen fails, and the binding must
# say how. The exporter itself never links it: the storage probe dlopens
# whatever libcufile the GPU machine has.
#
# Usage: scripts/fetch-cufile.sh [DESTDIR]   (default: <repo>/.tools/lib)
#
# Where the apt sources lack non-free, a sources file for it is added with
# the mirror and suite of the first Debian source already configured, and
# the package lists are updated (root or sudo).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$repo/.tools/lib}
pkg=libcufile0

if [[ -e $dest/libcufile.so.0 ]]; then
	echo "libcufile already in $dest"
	exit 0
fi
# shellcheck source=scripts/debdownload.sh
. "$repo/scripts/debdownload.sh"

# The mirror and suite of the first Debian source, in deb822 form
# (/etc/apt/sources.list.d/*.sources) or one-line form (sources.list).
debian_source() {
	local f uri suites
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -e $f ]] || continue
		uri=$(awk '/^URIs:/ && /debian\/?$/ {print $2; exit}' "$f")
		suites=$(awk '/^Suites:/ {$1=""; print; exit}' "$f")
		if [[ -n $uri && -n $suites ]]; then
			echo "$uri|$suites"
			return
		fi
	done
	awk '$1 == "deb" && $2 ~ /debian\/?$/ {print $2 "|" $3; exit}' /etc/apt/sources.list 2>/dev/null
}

# Where the package is not found: add non-free where no source has it
# (deb_fetch then updates the lists and tries again).
add_nonfree() {
	grep -rqs 'non-free\b' /etc/apt/sources.list /etc/apt/sources.list.d/ && return
	local src
	src=$(debian_source)
	if [[ -z $src ]]; then
		echo "fetch-cufile: no Debian apt source to take the mirror from" >&2
		exit 1
	fi
	echo "fetch-cufile: adding non-free (${src%%|*} ${src#*|}) to the apt sources" >&2
	printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: non-free contrib\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
		"${src%%|*}" "$(echo ${src#*|})" | "${deb_as_root[@]}" tee /etc/apt/sources.list.d/gpulink-nonfree.sources >/dev/null
}
deb_fetch fetch-cufile --on-missing add_nonfree "$pkg"
lib=$(find "$deb_root" -name 'libcufile.so.0' | head -n1)
[[ -n $lib ]] || {
	echo "fetch-cufile: $pkg holds no libcufile.so.0" >&2
	exit 1
}
mkdir -p "$dest"
# The soname is a link to the versioned file: install the file under both.
install -m 0644 "$(readlink -f "$lib")" "$dest/$(basename "$(readlink -f "$lib")")"
ln -sf "$(basename "$(readlink -f "$lib")")" "$dest/libcufile.so.0"
echo "installed into $dest:"
ls -l "$dest"

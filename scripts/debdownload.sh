# shellcheck shell=bash
# Sourced by scripts/fetch-prom-tools.sh and scripts/fetch-cufile.sh: Debian
# packages downloaded and unpacked into a folder of their own, never
# installed (no service started, no user made; only the package lists may
# change).
#
#   deb_fetch NAME [--on-missing FUNCTION] PACKAGE...
#
# downloads the packages into a temporary folder (removed on exit) and
# unpacks them all under deb_root, a folder inside it. Where apt-get cannot download them, it runs
# FUNCTION first when given (fetch-cufile adds the non-free component
# there), then apt-get update (as root, or through sudo), and tries once
# more. NAME prefixes the messages.
deb_fetch() {
	local name=$1 on_missing=""
	shift
	if [[ ${1:-} == --on-missing ]]; then
		on_missing=$2
		shift 2
	fi
	command -v apt-get >/dev/null && command -v dpkg >/dev/null || {
		echo "$name: needs apt-get and dpkg (Debian/Ubuntu)" >&2
		return 1
	}
	deb_as_root=()
	if [[ $(id -u) -ne 0 ]]; then
		command -v sudo >/dev/null && deb_as_root=(sudo) || true
	fi
	deb_tmp=$(mktemp -d)
	trap 'rm -rf "$deb_tmp"' EXIT
	# apt-get drops privileges to _apt for downloads; let it write here so
	# it does not warn about downloading unsandboxed as root.
	chmod 0777 "$deb_tmp"
	if ! (cd "$deb_tmp" && apt-get download -q "$@") 2>/dev/null; then
		[[ -z $on_missing ]] || "$on_missing"
		echo "$name: apt-get download failed; running apt-get update and retrying" >&2
		"${deb_as_root[@]}" apt-get update -q
		(cd "$deb_tmp" && apt-get download -q "$@")
	fi
	deb_root=$deb_tmp/root
	mkdir -p "$deb_root"
	local deb
	for deb in "$deb_tmp"/*.deb; do
		dpkg -x "$deb" "$deb_root"
	done
}

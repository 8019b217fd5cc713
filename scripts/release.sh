#!/usr/bin/env bash
# make release: the release tarballs, as promu lays out the Prometheus
# projects' (node_exporter-1.8.2.linux-arm64.tar.gz holding
# node_exporter-1.8.2.linux-arm64/{node_exporter,LICENSE,NOTICE}), one per
# platform, each with gpulink_exporter and gpulink_healthcheck (Slurm's
# HealthCheckProgram, NHC, node-problem-detector: deploy/slurm/README.md), with their SHA-256 sums in sha256sums.txt (the file the
# Prometheus projects publish beside them), in dist/.
#
#   gpulink_exporter-<VERSION>.linux-amd64.tar.gz
#   gpulink_exporter-<VERSION>.linux-arm64.tar.gz   (Grace: GH200, GB200)
#   sha256sums.txt                                   (sha256sum -c checks it)
#
# Each binary is built with cgo (go-nvml) for its platform: gcc for the
# machine's own, Debian's aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu,
# libc6-dev-arm64-cross: make test-packages installs them) for linux/arm64 from
# amd64. glibc is linked dynamically, so a binary runs on the glibc it was
# built against (Debian 12's 2.36 here) or newer; the image (Dockerfile)
# builds against Ubuntu 24.04's instead.
#
# Environment: PLATFORMS (default "linux/amd64 linux/arm64"), LDFLAGS
# (the Makefile's version stamp), DIST (default dist).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
version=$(cat VERSION)
platforms=${PLATFORMS:-linux/amd64 linux/arm64}
dist=${DIST:-$repo/dist}
ldflags=${LDFLAGS:-}
export CGO_ENABLED=1
export CGO_CFLAGS=${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}

# compiler OS ARCH: the C compiler cgo needs to build for OS/ARCH here.
compiler() {
	local host_arch
	host_arch=$(go env GOHOSTARCH)
	if [[ $1 == linux && $2 == "$host_arch" ]]; then
		echo "${CC:-gcc}"
		return
	fi
	case $2 in
	arm64) echo aarch64-linux-gnu-gcc ;;
	amd64) echo x86_64-linux-gnu-gcc ;;
	*)
		echo "release: no C cross compiler known for $1/$2" >&2
		return 1
		;;
	esac
}

rm -rf "$dist"
mkdir -p "$dist"
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
tarballs=()
for platform in $platforms; do
	os=${platform%/*} arch=${platform#*/}
	cc=$(compiler "$os" "$arch")
	command -v "$cc" >/dev/null || {
		echo "release: $cc (the C compiler for $platform) is missing: make test-packages installs it" >&2
		exit 1
	}
	name=gpulink_exporter-$version.$os-$arch
	mkdir -p "$staging/$name"
	echo ">> building $name with $cc"
	GOOS=$os GOARCH=$arch CC=$cc go build -ldflags "$ldflags" -o "$staging/$name/gpulink_exporter" .
	# The node health check ships beside the exporter, as promtool does
	# beside prometheus: pure Go, so no C compiler for it.
	GOOS=$os GOARCH=$arch CGO_ENABLED=0 go build -ldflags "$ldflags" -o "$staging/$name/gpulink_healthcheck" ./cmd/gpulink_healthcheck
	cp LICENSE "$staging/$name/"
	[[ ! -e NOTICE ]] || cp NOTICE "$staging/$name/"
	# Reproducible archives: fixed owner, order and times.
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$(git log -1 --format=%ct 2>/dev/null || echo 0)" \
		-C "$staging" -czf "$dist/$name.tar.gz" "$name"
	tarballs+=("$name.tar.gz")
done
(cd "$dist" && sha256sum "${tarballs[@]}" >sha256sums.txt)
echo ">> $dist:"
cat "$dist/sha256sums.txt"

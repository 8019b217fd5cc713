#!/usr/bin/env bash
# Puts everything a GPU machine (which has no Go) needs for the checks in
# bench/ into .device/, the tree a device call carries: the exporter, the
# Go benchmark binary, rssfloor, the GPU test binary (-tags gpu), with --collector-test the collector test
# binary, the scripts and references of bench/, the dashboards, the rules
# and promtool. There, run .device/scrape.sh, .device/gpu-check.sh OUTDIR
# and the others (see each script's header).
#
# Usage: bench/device-build.sh [--dashboards | --collector-test | --slurm]
#
# --slurm: for .device/slurm-check.sh, the exporter and gpulink_healthcheck
# (18 MB: it links Prometheus' PromQL engine) without the test binaries,
# rssfloor and scrapebench, which that run does not need.
# --collector-test: add the collector test binary (21 MB) for gpu-check.sh's
# Go scrape benchmark; left out by default, since with it the tree passes
# the 64 MiB a device call carries.
# --dashboards: for .device/dashboards-gpu.sh, add Prometheus itself (14 MB
# gzipped) and leave out the two test binaries, which that run does not
# need: with everything the tree would pass the 64 MiB a device call
# carries.
#
# promtool goes in gzipped (48 MB -> 13 MB) to keep the tree under that
# limit; unpack it there with `gunzip -k .device/promtool.gz`. The build
# fails when the tree is over the limit anyway. GO and MAKE name the tools
# to use, DEVICE the directory (default .device).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
MAKE=${MAKE:-make}
DEVICE=${DEVICE:-.device}
limit=$((64 << 20))

dashboards=false
collector_test=false
slurm=false
case "${1:-}" in
"") ;;
--dashboards) dashboards=true ;;
--collector-test) collector_test=true ;;
--slurm) slurm=true ;;
*)
	echo "usage: $0 [--dashboards | --collector-test | --slurm]" >&2
	exit 2
	;;
esac

tools=$PWD/.tools/bin
scripts/fetch-prom-tools.sh "$tools"

export CGO_ENABLED=1
mkdir -p "$DEVICE"
# The Makefile's build, so the binary is version-stamped as `make build`
# stamps it; stripped, to carry less.
"$MAKE" --no-print-directory build GO="$GO" BINARY="$DEVICE/gpulink_exporter" HEALTHCHECK="$DEVICE/gpulink_healthcheck" EXTRA_LDFLAGS='-s -w'
rm -f "$DEVICE/gpu.test" "$DEVICE/collector.test" "$DEVICE/scrapebench" "$DEVICE/rssfloor"
if ! $slurm; then
	rm -f "$DEVICE/gpulink_healthcheck"
	CGO_ENABLED=0 "$GO" build -ldflags '-s -w' -o "$DEVICE/scrapebench" ./bench/scrapebench
	# The reference of rss.sh: the smallest NVML exporter the same libraries make.
	"$GO" build -ldflags '-s -w' -o "$DEVICE/rssfloor" ./bench/rssfloor
fi
if ! $dashboards && ! $slurm; then
	"$GO" test -c -tags gpu -ldflags '-s -w' -o "$DEVICE/gpu.test" ./internal/nvml
fi
if $collector_test; then
	"$GO" test -c -ldflags '-s -w' -o "$DEVICE/collector.test" ./collector
fi
for f in bench/*.sh bench/*.py; do
	[ "$f" = bench/device-build.sh ] || cp "$f" "$DEVICE/"
done
mkdir -p "$DEVICE/ref" "$DEVICE/dashboards" "$DEVICE/rules"
cp bench/ref/*.py bench/ref/*.cu "$DEVICE/ref/"
cp dashboards/*.json "$DEVICE/dashboards/"
cp deploy/prometheus/gpulink.rules.yml "$DEVICE/rules/"
gzip -9 -c "$tools/promtool" >"$DEVICE/promtool.gz"
if $dashboards && ! $slurm; then
	gzip -9 -c "$tools/prometheus" >"$DEVICE/prometheus.gz"
else
	rm -f "$DEVICE/prometheus.gz"
fi

du -sh "$DEVICE"
size=$(du -sb "$DEVICE" | cut -f1)
if [ "$size" -gt "$limit" ]; then
	echo "$DEVICE is over the 64 MiB a device call carries ($size bytes): remove what the run does not need (collector.test, scrapebench)" >&2
	exit 1
fi

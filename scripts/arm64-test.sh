#!/usr/bin/env bash
# make arm64-test: the linux/arm64 build (Grace: GH200, GB200) checked on
# this amd64 machine, under qemu-user (Debian's qemu-user-static), since
# no arm64 machine is at hand in CI:
#
#  1. the exporter cross-built with cgo (aarch64-linux-gnu-gcc), as
#     make release builds it;
#  2. the tests that need no GPU of the packages that parse the machine's
#     files (sysfs, procfs, cgroups, NCCL's log, PCI config space) and of
#     the simulated node (its exporter serving /metrics), compiled for
#     arm64 with go test -c and run under qemu-aarch64-static, each in its
#     package's folder as go test runs it;
#  3. the arm64 exporter itself started under qemu with --sim=dgx-h100,
#     its /metrics read over HTTP and its gpulink_* series counted.
#
# make test-packages installs the Debian packages (scripts/install-test-packages.sh).
# Environment: ARM64_PACKAGES (the packages of step 2), KEEP=1 (keep the
# binaries, in the folder printed).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
qemu=qemu-aarch64-static
sysroot=/usr/aarch64-linux-gnu
for cmd in aarch64-linux-gnu-gcc "$qemu"; do
	command -v "$cmd" >/dev/null || {
		echo "arm64-test: $cmd missing: make test-packages installs it (scripts/install-test-packages.sh)" >&2
		exit 1
	}
done
# The parsers of machine files, and the simulated node end to end:
# internal/sim's exporter tests serve /metrics from the real collectors
# over the machine models (TestFixtures: the models' trees as the readers
# see them). A package:regexp entry runs only the tests the regexp
# matches: under qemu every test costs several times its native time, and
# the rest of internal/sim is the model's own behaviour, not the arm64
# build's.
packages=${ARM64_PACKAGES:-./internal/sysfs ./internal/nic ./numa ./internal/process ./internal/slurm ./internal/nccllog ./internal/pciconfig ./internal/ncclcheck ./internal/sim:^(TestSimulatedExporter|TestSimulatedP5SlurmJobs|TestFixtures|TestHealthyNode)$}

export CGO_ENABLED=1 GOOS=linux GOARCH=arm64 CC=aarch64-linux-gnu-gcc
export CGO_CFLAGS=${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}
out=$(mktemp -d)
pid=
cleanup() {
	[[ -z $pid ]] || kill "$pid" 2>/dev/null || true
	[[ -n ${KEEP:-} ]] && echo "arm64-test: binaries kept in $out" || rm -rf "$out"
}
trap cleanup EXIT
SECONDS=0

echo ">> building the exporter for linux/arm64"
go build -o "$out/gpulink_exporter" .
file_type=$(head -c 20 "$out/gpulink_exporter" | od -An -tx1 | tr -d ' \n')
# ELF header: e_machine at byte 18 is 0xb7 (EM_AARCH64), little endian.
[[ ${file_type:36:2} == b7 ]] || {
	echo "arm64-test: $out/gpulink_exporter is not an aarch64 ELF binary (header $file_type)" >&2
	exit 1
}
echo "   built in ${SECONDS}s"

failed=()
for entry in $packages; do
	pkg=${entry%%:*} run=
	[[ $entry != *:* ]] || run=${entry#*:}
	name=$(echo "${pkg#./}" | tr / _)
	echo ">> $pkg${run:+ ($run)}: go test -c for arm64, run under $qemu"
	go test -c -o "$out/$name.test" "$pkg"
	start=$SECONDS
	if (cd "$pkg" && "$qemu" -L "$sysroot" "$out/$name.test" -test.v -test.short -test.count=1 ${run:+-test.run "$run"} >"$out/$name.log" 2>&1); then
		# A regexp that matches nothing passes: count what ran.
		passed=$(grep -c '^--- PASS' "$out/$name.log" || true)
		if ((passed == 0)); then
			echo "   FAILED: no test ran"
			failed+=("$pkg")
			continue
		fi
		echo "   ok: $passed tests ($((SECONDS - start))s)"
	else
		echo "   FAILED ($((SECONDS - start))s):"
		tail -n 40 "$out/$name.log"
		failed+=("$pkg")
	fi
done

# The arm64 exporter under qemu: a simulated node serving /metrics.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)))
echo ">> gpulink_exporter (arm64) --sim=dgx-h100 under $qemu on 127.0.0.1:$port"
unset GOOS GOARCH CC
# Every source each second: a process's CPU and memory ratios need two
# samples of the process source (15 s apart by default).
"$qemu" -L "$sysroot" "$out/gpulink_exporter" --sim=dgx-h100 --web.listen-address="127.0.0.1:$port" \
	--nvml.interval=1s --topology.interval=1s --nic.interval=1s --process.interval=1s >"$out/exporter.log" 2>&1 &
pid=$!
# get PATH: the body of an HTTP/1.0 GET on the exporter, by bash alone.
get() {
	exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
	printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$1" >&3
	sed '1,/^\r$/d' <&3
	exec 3<&-
}
series=0
for ((i = 0; i < 600; i++)); do
	kill -0 "$pid" 2>/dev/null || break
	# The first scrape can come before the samplers' first snapshot:
	# wait for the GPUs.
	if body=$(get /metrics 2>/dev/null) && grep -q '^gpulink_gpu_info{' <<<"$body"; then
		series=$(grep -c '^gpulink_' <<<"$body" || true)
		break
	fi
	sleep 0.5
done
# The sources publish one after another: count once three scrapes, 2 s
# apart, agree (an amd64 build serves 2419 on dgx-h100).
same=0
for ((i = 0; series > 0 && same < 2 && i < 30; i++)); do
	sleep 2
	body=$(get /metrics 2>/dev/null) || break
	n=$(grep -c '^gpulink_' <<<"$body" || true)
	if ((n == series)); then same=$((same + 1)); else same=0 series=$n; fi
done
if ((series == 0)); then
	echo "   FAILED: the arm64 exporter served no gpulink_gpu_info within 5 minutes; its log:"
	tail -n 40 "$out/exporter.log"
	failed+=("exporter --sim")
else
	echo "   ok: /metrics served $series gpulink_* series ($(grep -c '^gpulink_gpu_info{' <<<"$body") GPUs)"
fi

echo ">> arm64 checks took ${SECONDS}s"
if ((${#failed[@]})); then
	echo "arm64-test: failed: ${failed[*]}" >&2
	exit 1
fi

# syntax=docker/dockerfile:1
#
# gpulink_exporter image. The binary needs glibc (go-nvml is cgo) and loads
# libnvidia-ml.so.1 and libcuda.so.1 at run time; neither is in the image:
# the NVIDIA container runtime mounts the host driver's copies in
# (NVIDIA_DRIVER_CAPABILITIES=compute,utility, which the Helm chart sets).
#
#   docker build -t gpulink_exporter .
#   docker run --rm --runtime=nvidia --gpus=all --pid=host \
#     -v /sys:/host/sys:ro -v /proc:/host/proc:ro -p 9849:9849 \
#     --cap-drop=ALL --cap-add=SYS_PTRACE --cap-add=SYS_NICE --user=0 \
#     --read-only --tmpfs /tmp -e CUDA_CACHE_PATH=/tmp/cuda-cache \
#     gpulink_exporter --path.sysfs=/host/sys --path.procfs=/host/proc
#
# Both architectures, amd64 and arm64 (Grace: GH200, GB200), from one
# build (docker buildx; the binary is cross-compiled with cgo on the build
# machine, as make release builds it, so only the final stages' apt runs
# under emulation):
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/gpulink/gpulink_exporter:$(cat VERSION) --push .
#
# Two images, by target:
#
#   docker build -t gpulink_exporter .                      # default: with NCCL
#   docker build --target slim -t gpulink_exporter:slim .   # without
#
# The default image carries what the collective and node-to-node probes
# need to run NCCL (--collector probes with --collective.interval, and
# /probe between nodes): libnccl2 from NVIDIA's CUDA repository for Ubuntu
# 24.04 (pinned by NCCL_VERSION; the repository's keyring comes from
# NVIDIA's cuda-keyring package), and rdma-core's verbs library and user
# space drivers from Ubuntu 24.04 (noble ships rdma-core 50.0):
#   libnccl2=2.27.3-1+cuda12.9   NVIDIA, developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/<x86_64|sbsa>
#   libibverbs1, ibverbs-providers (mlx5, efa, ... providers), and their libnl-3-200, libnl-route-3-200: Ubuntu noble main
#   ca-certificates (Ubuntu noble main), for apt to reach NVIDIA's repository over https
# GPULINK_NCCL_LIBRARY (--nccl.library) points at the library through a
# fixed path, /opt/gpulink/lib/libnccl.so.2. Size: libnccl.so.2.27.3 alone
# is 411.6 MB (a fat binary for every GPU architecture CUDA 12.9 builds
# for; the size another project measured in an image with this package),
# the verbs libraries and their dependencies about 2 MB: the default image
# is about 415 MB larger than slim. Not measured here (no container
# engine where this was written): `docker image ls` after a build says.
# NCCL's network plugins are not in the image: EFA needs aws-ofi-nccl and
# libfabric from the host (/opt/amazon/ofi-nccl, /opt/amazon/efa), as the
# Helm chart's values show; `gpulink_exporter collectives --check` says
# what a container lacks.
#
# slim is the same image without NCCL and verbs, for sites that mount
# their own NCCL (the chart's nccl.hostPath) or run no collectives.
#
# Build and run stages share one Ubuntu release, so the binary is linked
# against the glibc it runs with (golang:1.26 itself is Debian trixie, whose
# glibc is newer than Ubuntu 24.04's): the Go toolchain is copied out of the
# official image rather than building in it. Ubuntu rather than distroless:
# the NVIDIA runtime runs ldconfig inside the container to register the
# driver libraries it mounts, and that needs /etc/ld.so.conf and a libc
# layout it knows (NVIDIA's own images, dcgm-exporter's, are Ubuntu).

ARG GO_IMAGE=golang:1.26
ARG BASE_IMAGE=ubuntu:24.04

# The toolchain and the build run on the build machine's platform and
# cross-compile for TARGETARCH: gcc-aarch64-linux-gnu with
# libc6-dev-arm64-cross (or their amd64 pair) are Ubuntu's, built against
# the same glibc as the run stage's.
FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS go

FROM --platform=$BUILDPLATFORM ${BASE_IMAGE} AS build
ARG TARGETARCH
ARG BUILDARCH
RUN set -eux; \
    cross=; \
    if [ "${TARGETARCH:-amd64}" != "${BUILDARCH:-amd64}" ]; then \
      case "${TARGETARCH}" in \
        arm64) cross="gcc-aarch64-linux-gnu libc6-dev-arm64-cross" ;; \
        amd64) cross="gcc-x86-64-linux-gnu libc6-dev-amd64-cross" ;; \
        *) echo "no cross compiler for ${TARGETARCH}" >&2; exit 1 ;; \
      esac; \
    fi; \
    apt-get update; \
    apt-get install -y --no-install-recommends gcc libc6-dev make ca-certificates $cross; \
    rm -rf /var/lib/apt/lists/*
COPY --from=go /usr/local/go /usr/local/go
ENV PATH=/usr/local/go/bin:$PATH \
    GOTOOLCHAIN=local \
    CGO_ENABLED=1 \
    CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
# The Makefile stamps the version (VERSION, and the git revision where .git
# is in the build context; .dockerignore leaves it out, so "unknown").
RUN --mount=type=cache,target=/root/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    set -eux; \
    case "${TARGETARCH:-amd64}" in \
      "${BUILDARCH:-amd64}") cc=gcc ;; \
      arm64) cc=aarch64-linux-gnu-gcc ;; \
      amd64) cc=x86_64-linux-gnu-gcc ;; \
    esac; \
    GOARCH="${TARGETARCH:-amd64}" CC="$cc" make build; \
    if [ "${TARGETARCH:-amd64}" = "${BUILDARCH:-amd64}" ]; then ./gpulink_exporter --version; fi

FROM ${BASE_IMAGE} AS slim
LABEL org.opencontainers.image.title="gpulink_exporter" \
      org.opencontainers.image.description="Prometheus exporter for GPU links: PCIe, NVLink, NICs and NUMA placement" \
      org.opencontainers.image.source="https://github.com/gpulink/gpulink_exporter" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /src/gpulink_exporter /bin/gpulink_exporter
# node-problem-detector's custom plugin (deploy/slurm/README.md).
COPY --from=build /src/gpulink_healthcheck /bin/gpulink_healthcheck
COPY LICENSE /usr/share/doc/gpulink_exporter/LICENSE
EXPOSE 9849
# Non-root by default (65532, no passwd entry needed): enough for NVML, the
# NICs, the topology and the probes where /dev/nvidia* are 0666 (the
# driver's default). Two things need more and the Helm chart runs as uid 0
# with only the capabilities SYS_PTRACE and SYS_NICE added: reading other
# processes' /proc/<pid>/numa_maps needs CAP_SYS_PTRACE, which Kubernetes
# cannot give a non-root process (no ambient capabilities), and the
# kubelet's pod-resources socket is root-only. Hosts whose driver makes
# /dev/nvidia* 0660 need the owning group added (--group-add) or uid 0.
USER 65532:65532
ENTRYPOINT ["/bin/gpulink_exporter"]

# The default image: slim plus NCCL and the verbs libraries.
FROM slim AS nccl
ARG NCCL_VERSION=2.27.3-1+cuda12.9
ARG TARGETARCH
USER 0:0
# Explicit versions: Ubuntu's multiverse has an older libnccl2 of its own,
# and libnccl2=<version> takes NVIDIA's whatever the priorities. The
# keyring package adds the repository's source list and key; both are
# removed again with the package lists.
ADD https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb /tmp/cuda-keyring.deb
RUN set -eux; \
    case "${TARGETARCH:-amd64}" in \
      amd64) repo=x86_64 ;; \
      arm64) repo=sbsa ;; \
      *) echo "no NCCL packages for ${TARGETARCH}" >&2; exit 1 ;; \
    esac; \
    apt-get update; \
    apt-get install -y --no-install-recommends ca-certificates; \
    dpkg -i /tmp/cuda-keyring.deb; \
    sed -i "s#/x86_64/#/${repo}/#" /etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list; \
    apt-get update; \
    apt-get install -y --no-install-recommends "libnccl2=${NCCL_VERSION}" libibverbs1 ibverbs-providers; \
    apt-mark hold libnccl2; \
    lib="$(dpkg -L libnccl2 | grep '/libnccl\.so\.2$')"; \
    mkdir -p /opt/gpulink/lib; \
    ln -s "$lib" /opt/gpulink/lib/libnccl.so.2; \
    dpkg --purge cuda-keyring; \
    rm -rf /var/lib/apt/lists/* /tmp/cuda-keyring.deb
ENV GPULINK_NCCL_LIBRARY=/opt/gpulink/lib/libnccl.so.2
USER 65532:65532

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
# Build and run stages share one Ubuntu release, so the binary is linked
# against the glibc it runs with (golang:1.26 itself is Debian trixie, whose
# glibc is newer than Ubuntu 24.04's): the Go toolchain is copied out of the
# official image rather than building in it. Ubuntu rather than distroless:
# the NVIDIA runtime runs ldconfig inside the container to register the
# driver libraries it mounts, and that needs /etc/ld.so.conf and a libc
# layout it knows (NVIDIA's own images, dcgm-exporter's, are Ubuntu).

ARG GO_IMAGE=golang:1.26
ARG BASE_IMAGE=ubuntu:24.04

FROM ${GO_IMAGE} AS go

FROM ${BASE_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev make ca-certificates \
 && rm -rf /var/lib/apt/lists/*
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
    make build && ./gpulink_exporter --version

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="gpulink_exporter" \
      org.opencontainers.image.description="Prometheus exporter for GPU links: PCIe, NVLink, NICs and NUMA placement" \
      org.opencontainers.image.source="https://github.com/gpulink/gpulink_exporter" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /src/gpulink_exporter /bin/gpulink_exporter
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

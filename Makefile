# Build, test and benchmark gpulink_exporter. GNU make.

GO        ?= go
GOFMT     ?= gofmt
BINARY    := gpulink_exporter
# The health check for Slurm, NHC and node-problem-detector, a binary of
# its own (cmd/gpulink_healthcheck says why).
HEALTHCHECK := gpulink_healthcheck
TOOLS_BIN := $(CURDIR)/.tools/bin
TOOLS_LIB := $(CURDIR)/.tools/lib
PROMTOOL  := $(TOOLS_BIN)/promtool
PROMETHEUS   := $(TOOLS_BIN)/prometheus
ALERTMANAGER := $(TOOLS_BIN)/alertmanager
ARGS      ?=

# Version stamping, as promu does for Prometheus projects. git may have no
# commits yet (or not be a repository at all): fall back to "unknown".
VERSION    := $(shell cat VERSION)
REVISION   := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
BRANCH     := $(shell git symbolic-ref --short -q HEAD 2>/dev/null || echo unknown)
BUILD_USER := $(shell id -un 2>/dev/null || echo unknown)@$(shell uname -n)
BUILD_DATE := $(shell date -u +%Y%m%d-%H:%M:%S)
VPKG       := github.com/prometheus/common/version
LDFLAGS    := -X $(VPKG).Version=$(VERSION) \
              -X $(VPKG).Revision=$(REVISION) \
              -X $(VPKG).Branch=$(BRANCH) \
              -X $(VPKG).BuildUser=$(BUILD_USER) \
              -X $(VPKG).BuildDate=$(BUILD_DATE)
# No -extldflags "-z now" / bindnow: go-nvml links with NVML's symbols left
# unresolved and dlopens libnvidia-ml at run time; with immediate binding the
# binary would not even start on a machine without the driver.

# cgo is on for go-nvml. The tests use -race, which needs cgo too.
export CGO_ENABLED := 1
# go-nvml's bindings call many functions nvml.h marks deprecated; without
# this every cgo compile of it prints screens of warnings.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: all build run tools slurm-tools test-packages cufile test e2e fuzz vet fmt-check lint bench scrapebench ptx-check helm-check chart-sync demo release arm64-test clean

all: build

# EXTRA_LDFLAGS: e.g. '-s -w' (bench/device-build.sh strips what it carries).
EXTRA_LDFLAGS ?=
build:
	$(GO) build -ldflags '$(LDFLAGS) $(EXTRA_LDFLAGS)' -o $(BINARY) .
	$(GO) build -ldflags '$(LDFLAGS) $(EXTRA_LDFLAGS)' -o $(HEALTHCHECK) ./cmd/gpulink_healthcheck

run: build
	./$(BINARY) $(ARGS)

# Real promtool/prometheus/alertmanager from Debian packages, with
# Prometheus's web UI (idempotent).
tools:
	scripts/fetch-prom-tools.sh $(TOOLS_BIN)

# Debian's slurm-wlm and munge where missing, for the real-Slurm test
# (e2e/slurm_test.go); their services are not started.
slurm-tools:
	scripts/install-slurm.sh

# Debian's chromium (e2e TestDemo), qemu-user-static and the arm64 cross
# compiler (make arm64-test, make release), installed where missing: root
# or sudo. make demo needs none of them.
test-packages:
	scripts/install-test-packages.sh

# Debian's real libcufile.so.0 (non-free) for the cuFile binding's test
# (idempotent; adds the non-free component to apt's sources where missing).
cufile:
	scripts/fetch-cufile.sh $(TOOLS_LIB)

vet:
	$(GO) vet ./...

# Fails listing the files gofmt would change. Checks tracked and untracked
# (not ignored) files, so it also works before the first commit.
fmt-check:
	@files=$$(git ls-files -co --exclude-standard -- '*.go' 2>/dev/null || \
		find . -name '*.go' -not -path './.*'); \
	[ -z "$$files" ] && exit 0; \
	bad=$$($(GOFMT) -l $$files); \
	if [ -n "$$bad" ]; then echo "gofmt needed on:"; echo "$$bad"; exit 1; fi

# golangci-lint, pinned, built from the Go module proxy into .tools/bin on
# first use (a few minutes) and again when the version changes. Its
# configuration, and why each linter or exclusion is there: .golangci.yml.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(TOOLS_BIN)/golangci-lint
GOLANGCI_LINT_STAMP := $(TOOLS_BIN)/.golangci-lint-$(GOLANGCI_LINT_VERSION)
$(GOLANGCI_LINT_STAMP):
	@mkdir -p $(TOOLS_BIN)
	GOBIN=$(TOOLS_BIN) CGO_ENABLED=0 $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@rm -f $(TOOLS_BIN)/.golangci-lint-*
	@touch $@

lint: fmt-check vet $(GOLANGCI_LINT_STAMP)
	$(GOLANGCI_LINT) run ./...

# Tests find promtool, prometheus and alertmanager through $PROMTOOL,
# $PROMETHEUS and $ALERTMANAGER: the e2e test (e2e/) runs the simulated node
# under a real Prometheus and Alertmanager. -race makes the tests slow: go
# test runs GOMAXPROCS packages at once, which on a small CI machine is
# about right.
# GPULINK_SLURM_E2E=require: the real-Slurm test fails rather than skips
# where it cannot run (slurm-tools installs what it needs; it needs root).
# e2e's TestDemo loads the demo's Prometheus UI in $CHROMIUM.
# GPULINK_REAL_LIBCUFILE: the cuFile binding's test loads Debian's real
# library (cufile fetches it) beside its fake.
CHROMIUM ?= chromium
TEST_ENV := PROMTOOL=$(PROMTOOL) PROMETHEUS=$(PROMETHEUS) ALERTMANAGER=$(ALERTMANAGER) GPULINK_SLURM_E2E=require CHROMIUM=$$(command -v $(CHROMIUM)) \
            GPULINK_REAL_LIBCUFILE=$(TOOLS_LIB)/libcufile.so.0
test: tools slurm-tools test-packages cufile lint helm-check
	$(TEST_ENV) $(GO) test -count=1 -race -timeout 20m ./...
	$(MAKE) fuzz

# Only the end-to-end test, verbose: alert latencies and dashboard queries.
e2e: tools slurm-tools test-packages
	$(TEST_ENV) $(GO) test -count=1 -v -timeout 10m ./e2e

# Helm chart: copies of rules and dashboards current, lint, renders checked
# against deploy/prometheus and dashboards/, deploy/kubernetes current.
# Installs helm v3.22.0 into .tools/bin on first use (go install, ~2 min).
helm-check:
	scripts/helm-check.sh

# Copy deploy/prometheus rules and dashboards/*.json into the chart, set its
# appVersion from VERSION and regenerate deploy/kubernetes; then check.
chart-sync:
	scripts/helm-check.sh --sync

# A simulated DGX H100 (FAULTS=file to inject faults: FAULTS=scripts/demo-
# faults.yml is the example) and AWS p5 (Slurm jobs; P5_FAULTS=file)
# probing each other node to node, scraped by Prometheus with the shipped
# rules, alerting to Alertmanager. Ports: EXPORTER, EXPORTER_P5,
# PROMETHEUS_PORT, ALERTMANAGER_PORT. See scripts/demo.sh.
demo: build tools
	scripts/demo.sh

# A short run of every fuzz target (go test allows one -fuzz target per
# run). The seed corpus always runs as part of go test; this explores
# beyond it. The budget is a count of executions, not a duration: with a
# duration Go before 1.27 can fail a target that found nothing, under load
# (go.dev/issue/75804; scripts/fuzz.sh says why). FUZZTIME=1000000x for a
# longer look.
FUZZTIME ?= 10000x
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

# Standalone, static (stdlib only) so it also runs where there is no Go.
scrapebench:
	@mkdir -p $(TOOLS_BIN)
	CGO_ENABLED=0 $(GO) build -ldflags '-s -w' -o $(TOOLS_BIN)/scrapebench ./bench/scrapebench

# Scrape cost of a local build. Exporter flags via ARGS; N, IDLE, ADDR,
# WAIT_METRIC and BENCH_OUT (output directory) are passed through.
bench: build scrapebench
	bench/scrape.sh -b ./$(BINARY) -s $(TOOLS_BIN)/scrapebench $(if $(BENCH_OUT),-o $(BENCH_OUT)) -- $(ARGS)

# Release tarballs for linux/amd64 and linux/arm64 (cgo; arm64 with
# Debian's aarch64-linux-gnu-gcc) and their sha256sums.txt in dist/, laid
# out as promu lays out the Prometheus projects': scripts/release.sh.
# PLATFORMS="linux/amd64" for one.
release: test-packages
	LDFLAGS='$(LDFLAGS)' scripts/release.sh

# The linux/arm64 build under qemu-user: the parsers' and the simulated
# node's tests compiled for arm64 and run under qemu-aarch64-static, and
# the arm64 exporter serving /metrics with --sim. .ci/run runs it after
# make test. See scripts/arm64-test.sh.
arm64-test: test-packages
	scripts/arm64-test.sh

# What is carried to a GPU machine (which has no Go) is built by
# bench/device-build.sh, outside this Makefile.

# The probe kernels are hand-written PTX (one text for every driver from
# CUDA 11.0 and every GPU from Volta); this checks them with ptxas on a
# machine with the CUDA toolkit. The driver JIT-compiles them at run time.
PTXAS ?= ptxas
ptx-check:
	$(PTXAS) -arch=sm_70 probes/cuda/kernels.ptx -o /dev/null
	$(PTXAS) -arch=sm_90 probes/cuda/kernels.ptx -o /dev/null

clean:
	rm -rf $(BINARY) $(HEALTHCHECK) .device dist
	rm -f $(TOOLS_BIN)/scrapebench

# Build, test and benchmark gpulink_exporter. GNU make.

GO        ?= go
GOFMT     ?= gofmt
BINARY    := gpulink_exporter
TOOLS_BIN := $(CURDIR)/.tools/bin
PROMTOOL  := $(TOOLS_BIN)/promtool
PROMETHEUS   := $(TOOLS_BIN)/prometheus
ALERTMANAGER := $(TOOLS_BIN)/alertmanager
DEVICE    := .device
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

.PHONY: all build run tools test e2e fuzz vet fmt-check lint bench scrapebench device-build device-dashboards ptx-check helm-check chart-sync demo clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BINARY) .

run: build
	./$(BINARY) $(ARGS)

# Real promtool/prometheus/alertmanager from Debian packages (idempotent).
tools:
	scripts/fetch-prom-tools.sh $(TOOLS_BIN)

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

lint: fmt-check vet

# Tests find promtool, prometheus and alertmanager through $PROMTOOL,
# $PROMETHEUS and $ALERTMANAGER: the e2e test (e2e/) runs the simulated node
# under a real Prometheus and Alertmanager. -race makes the tests slow: go
# test runs GOMAXPROCS packages at once, which on a small CI machine is
# about right.
TEST_ENV := PROMTOOL=$(PROMTOOL) PROMETHEUS=$(PROMETHEUS) ALERTMANAGER=$(ALERTMANAGER)
test: tools vet fmt-check helm-check
	$(TEST_ENV) $(GO) test -count=1 -race -timeout 20m ./...
	$(MAKE) fuzz

# Only the end-to-end test, verbose: alert latencies and dashboard queries.
e2e: tools
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

# A simulated DGX H100 (FAULTS=file to inject faults) scraped by Prometheus
# with the shipped rules, alerting to Alertmanager: see scripts/demo.sh.
demo: build tools
	scripts/demo.sh

# A short run of every fuzz target (go test allows one -fuzz target per
# run). The seed corpus always runs as part of go test; this explores
# beyond it. FUZZTIME=1m for a longer look.
FUZZTIME ?= 3s
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

# Everything to carry to a GPU machine (which has no Go): there, run
# .device/scrape.sh [-o DIR] [-- EXPORTER_ARGS]. promtool goes in gzipped
# (48 MB -> 13 MB) to keep the carried tree under its 64 MiB limit; unpack
# it there with `gunzip -k .device/promtool.gz`.
device-build: tools
	@mkdir -p $(DEVICE)
	$(GO) build -ldflags '$(LDFLAGS) -s -w' -o $(DEVICE)/$(BINARY) .
	CGO_ENABLED=0 $(GO) build -ldflags '-s -w' -o $(DEVICE)/scrapebench ./bench/scrapebench
	$(GO) test -c -tags gpu -ldflags '-s -w' -o $(DEVICE)/gpu.test ./internal/nvml
	$(GO) test -c -ldflags '-s -w' -o $(DEVICE)/collector.test ./collector
	cp bench/*.sh bench/*.py $(DEVICE)/
	@mkdir -p $(DEVICE)/ref $(DEVICE)/dashboards $(DEVICE)/rules
	cp bench/ref/*.py bench/ref/*.cu $(DEVICE)/ref/
	cp dashboards/*.json $(DEVICE)/dashboards/
	cp deploy/prometheus/gpulink.rules.yml $(DEVICE)/rules/
	gzip -9 -c $(PROMTOOL) >$(DEVICE)/promtool.gz
	@du -sh $(DEVICE)
	@[ $$(du -sb $(DEVICE) | cut -f1) -le 67108864 ] || { echo "$(DEVICE) is over the 64 MiB a device call carries: remove what the run does not need (collector.test, scrapebench)"; exit 1; }

# For .device/dashboards-gpu.sh, Prometheus itself (14 MB gzipped). With
# everything device-build puts there the tree passes the 64 MiB a device
# call carries, so this drops the two test binaries.
device-dashboards: device-build
	rm -f $(DEVICE)/gpu.test $(DEVICE)/collector.test
	gzip -9 -c $(PROMETHEUS) >$(DEVICE)/prometheus.gz
	@du -sh $(DEVICE)

# The probe kernels are hand-written PTX (one text for every driver from
# CUDA 11.0 and every GPU from Volta); this checks them with ptxas on a
# machine with the CUDA toolkit. The driver JIT-compiles them at run time.
PTXAS ?= ptxas
ptx-check:
	$(PTXAS) -arch=sm_70 probes/cuda/kernels.ptx -o /dev/null
	$(PTXAS) -arch=sm_90 probes/cuda/kernels.ptx -o /dev/null

clean:
	rm -rf $(BINARY) $(DEVICE) dist
	rm -f $(TOOLS_BIN)/scrapebench

package main

import (
	"cmp"
	"os/exec"
	"strings"
	"testing"
)

// TestNoTestDoublesLinked: test-only doubles are named as the standard
// library names them (dcgmtest, kubelettest, cudatest, like httptest), so
// a package of this module whose path ends in "test" must never be linked
// into the binary. What --sim needs lives under internal/sim instead.
//
// Only this module's packages are checked: go-dcgm imports testify, which
// links net/http/httptest, and that is not ours to change.
func TestNoTestDoublesLinked(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the binary's packages: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps .: %v", err)
	}
	var checked int
	for _, p := range strings.Fields(string(out)) {
		// The kubelet's one gRPC call is made with net/http (internal/kubelet):
		// grpc-go in the binary cost 2.8 MB of it, all resident.
		if p == "google.golang.org/grpc" || strings.HasPrefix(p, "k8s.io/") {
			t.Errorf("the binary links %s; tests may, the exporter need not", p)
		}
		if p != module && !strings.HasPrefix(p, module+"/") {
			continue
		}
		checked++
		if strings.HasSuffix(p, "test") {
			t.Errorf("the binary links %s, a test-only double", p)
		}
	}
	if checked < 5 {
		t.Fatalf("go list -deps . listed %d packages of %s; the check saw nothing", checked, module)
	}
}

// layers are the floors of the module, from the bottom up, as DESIGN.md's
// Layers draw them: a package may import its own floor and the ones
// below, never one above. A package is on the floor of the longest path
// here that is it or holds it ("" is the module root, main). A new
// package on no floor fails TestLayers until it is given one.
//
// One floor differs from DESIGN.md's order: the serving package
// (internal/scrape: the text encoder, the cache and the handler) is the
// library the collectors render into, as client_golang is under
// node_exporter's collectors, so it sits below collector, not above; main
// wires it to HTTP. Nothing under internal/ imports collector either way.
var layers = []struct {
	name     string
	packages []string
}{
	{"roots", []string{"internal/hostfs", "internal/pciaddr"}},
	{"sources", []string{"internal/sampler", "internal/sysfs", "internal/pciconfig", "internal/nccllog", "internal/testwait",
		"internal/nvml", "internal/nic", "internal/process", "internal/dcgm", "internal/kubelet", "internal/slurm", "numa",
		"internal/sim/machine", "internal/sim/nvmlmodel"}},
	{"probe contract", []string{"probes"}},
	{"bindings, children and scheduling", []string{"probes/cuda", "probes/nccl", "probes/cufile", "probes/schedule",
		"internal/ncclcheck", "internal/nodeprobe", "internal/sim"}},
	{"serving", []string{"internal/scrape"}},
	{"collector", []string{"collector"}},
	{"main", []string{"", "bench", "cmd", "dashboards", "deploy", "e2e", "internal/healthcheck"}},
}

const module = "github.com/gpulink/gpulink_exporter"

// floorOf is the index in layers of the module package at rel (its path
// below the module), -1 when it is on none.
func floorOf(rel string) int {
	best, bestLen := -1, -1
	for i, l := range layers {
		for _, p := range l.packages {
			if (p == rel || p == "" || strings.HasPrefix(rel, p+"/")) && len(p) > bestLen {
				best, bestLen = i, len(p)
			}
		}
	}
	return best
}

// modulePackage is one package of `go list ./...`: its path below the
// module and the module packages it imports (not its tests').
type modulePackage struct {
	rel     string
	imports []string
	cgo     bool
}

func listModule(t *testing.T, args ...string) []modulePackage {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the packages: %v", err)
	}
	out, err := exec.Command(goBin, append([]string{"list", "-f", "{{.ImportPath}} cgo={{len .CgoFiles}} {{join .Imports \" \"}}"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	var pkgs []modulePackage
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		rel, ok := relPath(f[0])
		if !ok {
			continue
		}
		p := modulePackage{rel: rel, cgo: f[1] != "cgo=0"}
		for _, imp := range f[2:] {
			if r, ok := relPath(imp); ok {
				p.imports = append(p.imports, r)
			}
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 5 {
		t.Fatalf("go list %v listed %d packages of %s; the check saw nothing", args, len(pkgs), module)
	}
	return pkgs
}

func relPath(importPath string) (string, bool) {
	if importPath == module {
		return "", true
	}
	rel, ok := strings.CutPrefix(importPath, module+"/")
	return rel, ok
}

func show(rel string) string { return cmp.Or(rel, "main (the module root)") }

// TestLayers keeps every import pointing down (DESIGN.md, Layers): the
// roots import nothing of the module, nothing under internal/ imports
// collector, and no package imports one on a floor above its own.
func TestLayers(t *testing.T) {
	for _, p := range listModule(t, "./...") {
		floor := floorOf(p.rel)
		if floor < 0 {
			t.Errorf("%s is on no floor of deps_test.go's layers: add it where its imports put it", show(p.rel))
			continue
		}
		for _, imp := range p.imports {
			switch impFloor := floorOf(imp); {
			case floor == 0:
				t.Errorf("%s is a root and imports %s: the roots import nothing of the module", show(p.rel), show(imp))
			case imp == "collector" && strings.HasPrefix(p.rel, "internal/"):
				t.Errorf("%s imports collector: nothing under internal/ may, collector only renders", show(p.rel))
			case impFloor > floor:
				t.Errorf("%s (%s) imports %s (%s), a floor above it: imports point down", show(p.rel), layers[floor].name, show(imp), layers[impFloor].name)
			}
		}
	}
}

// TestProbeContractHasNoCgo: the contract between the daemon and its
// children (probes) must build without cgo of this module, so that a
// child can stand beside its binding and the daemon's side need not link
// a binding to check an option. go-nvml (through internal/nvml's types)
// is not this module's.
func TestProbeContractHasNoCgo(t *testing.T) {
	for _, p := range listModule(t, "-deps", "./probes") {
		if p.cgo {
			t.Errorf("probes pulls in %s, a cgo package of this module", show(p.rel))
		}
	}
}

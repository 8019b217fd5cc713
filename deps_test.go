package main

import (
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
	const module = "github.com/gpulink/gpulink_exporter"
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

package nccl

import (
	"testing"

	"github.com/gpulink/gpulink_exporter/probes"
)

// The bytes NCCL makes survive the contract's text form (probes.UniqueID),
// which is how they travel to the other ranks.
func TestUniqueIDRoundTrip(t *testing.T) {
	r := newRig(t, 1)
	a, err := r.lib.NewUniqueID()
	if err != nil {
		t.Fatalf("NewUniqueID: %v", err)
	}
	b, err := r.lib.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Error("two unique ids are the same")
	}
	got, err := probes.ParseUniqueID(probes.UniqueID(a).String())
	if err != nil || UniqueID(got) != a {
		t.Errorf("the id through its text form: %v; want the id back", err)
	}
}

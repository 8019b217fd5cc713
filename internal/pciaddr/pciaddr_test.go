package pciaddr_test

import (
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
)

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:18:00.0": "0000:18:00.0",
		"00000000:9A:00.0": "0000:9a:00.0",
		"0000:9a:00.0":     "0000:9a:00.0",
		"00000001:05:00.1": "0001:05:00.1",
		"":                 "",
	} {
		if got := pciaddr.Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

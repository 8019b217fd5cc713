package pciconfig_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/pciconfig"
)

func TestReadACSFixtures(t *testing.T) {
	redirect := uint16(pciconfig.P2PRequestRedirect | pciconfig.P2PCompletionRedirect)
	for _, c := range []struct {
		file                  string
		known, present, redir bool
		ctrl                  uint16
	}{
		{"acs-redirect-on.bin", true, true, true, 0x001d},
		{"acs-redirect-off.bin", true, true, false, 0},
		{"no-acs.bin", true, false, false, 0},
		{"truncated.bin", false, false, false, 0},
	} {
		a, err := pciconfig.ReadACS(filepath.Join("testdata", c.file))
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if a.Known != c.known || a.Present != c.present || a.Enabled(redirect) != c.redir || a.Control != c.ctrl {
			t.Errorf("%s: %+v, want known %v present %v redirect %v control %#x", c.file, a, c.known, c.present, c.redir, c.ctrl)
		}
	}
	on, _ := pciconfig.ReadACS(filepath.Join("testdata", "acs-redirect-on.bin"))
	for bit, want := range map[uint16]bool{pciconfig.SourceValidation: true, pciconfig.TranslationBlocking: false,
		pciconfig.UpstreamForwarding: true, pciconfig.P2PEgressControl: false, pciconfig.DirectTranslatedP2P: false} {
		if on.Enabled(bit) != want {
			t.Errorf("bit %#x enabled %v, want %v", bit, on.Enabled(bit), want)
		}
	}
	if on.Capability != 0x7f {
		t.Errorf("capability %#x, want 0x7f", on.Capability)
	}
	if _, err := pciconfig.ReadACS(filepath.Join("testdata", "missing")); err == nil {
		t.Error("no error for a missing file")
	}
}

func TestParseACSLoopEnds(t *testing.T) {
	b := make([]byte, pciconfig.ExtendedSize)
	binary.LittleEndian.PutUint32(b[0x100:], 0x0001|0x100<<20) // points at itself
	if a := pciconfig.ParseACS(b); !a.Known || a.Present {
		t.Errorf("%+v", a)
	}
}

func FuzzParseACS(f *testing.F) {
	for _, name := range []string{"acs-redirect-on.bin", "acs-redirect-off.bin", "no-acs.bin", "truncated.bin"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a := pciconfig.ParseACS(b)
		if !a.Known && a.Present {
			t.Errorf("present without known: %+v", a)
		}
		// The same bytes as the extended capability list of a full image.
		p := make([]byte, pciconfig.ExtendedSize)
		copy(p[0x100:], b)
		if a := pciconfig.ParseACS(p); !a.Known {
			t.Errorf("full image unknown: %+v", a)
		}
	})
}

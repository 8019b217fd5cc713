package machine

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/pciconfig"
)

// TestConfigSpace: the images the model writes are laid out as
// internal/pciconfig's fixtures, byte for byte for the fixtures' PEX 8796
// port, and read back as the model says: ACS with its control on root and
// downstream ports, none on upstream ports.
func TestConfigSpace(t *testing.T) {
	fixture := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "pciconfig", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const plx, pex8796, bridge = 0x10b5, 0x8796, 0x060400
	for name, control := range map[string]uint16{"acs-redirect-on.bin": ACSRedirect, "acs-redirect-off.bin": 0} {
		if got := ConfigSpace(plx, pex8796, bridge, 0, true, control); !bytes.Equal(got, fixture(name)) {
			t.Errorf("ConfigSpace with control %#x differs from %s", control, name)
		}
	}

	m := DGXH100()
	m.Device("0000:17:01.0").ACSControl = ACSRedirect
	fs := files(t, m)
	for addr, want := range map[string]struct {
		present  bool
		redirect bool
	}{
		"0000:15:01.0": {true, false},  // root port
		"0000:16:00.0": {false, false}, // upstream port
		"0000:17:00.0": {true, false},  // downstream port above GPU 0
		"0000:17:01.0": {true, true},   // downstream port above mlx5_0, redirect on
	} {
		data, ok := fs[m.DevicePath(addr)+"/config"]
		a := pciconfig.ParseACS([]byte(data))
		if !ok || !a.Known || a.Present != want.present || a.Enabled(pciconfig.P2PRequestRedirect|pciconfig.P2PCompletionRedirect) != want.redirect {
			t.Errorf("%s: config present %v, ACS %+v; want ACS %v, redirect %v", addr, ok, a, want.present, want.redirect)
		}
		if vendor := data[:2]; vendor != "\x00\x10" && vendor != "\x86\x80" {
			t.Errorf("%s: vendor bytes %x", addr, vendor)
		}
	}
	for _, endpoint := range []string{"0000:18:00.0", "0000:19:00.0"} {
		if _, ok := fs[m.DevicePath(endpoint)+"/config"]; ok {
			t.Errorf("%s: an endpoint has a config image", endpoint)
		}
	}
}

// TestTxtarBinary: a config image goes into the archive as a hex dump of
// its rows that are not zero, and comes back byte for byte.
func TestTxtarBinary(t *testing.T) {
	img := ConfigSpace(0x1000, 0xc030, 0x060400, 0xb0, true, ACSRedirect)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"d/config": img, "d/short": {0, 1, 2}, "d/text": []byte("x\n")} {
		if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	if err := WriteTxtar(&b, root); err != nil {
		t.Fatal(err)
	}
	want := "-- d/config [hex 4096] --\n" +
		"0000: 00 10 30 c0 00 00 00 00 b0 00 04 06 00 00 00 00\n" +
		"0100: 01 00 81 14 00 00 00 00 00 00 00 00 00 00 00 00\n" +
		"0140: 00 00 00 00 00 00 00 00 0d 00 01 16 7f 00 1d 00\n" +
		"0160: 1d 00 01 00 00 00 00 00 00 00 00 00 00 00 00 00\n" +
		"-- d/short [hex 3] --\n" +
		"0000: 00 01 02\n" +
		"-- d/text --\nx\n"
	if b.String() != want {
		t.Fatalf("archive:\n%s\nwant:\n%s", b.String(), want)
	}
	out := t.TempDir()
	if err := ExtractTxtar(strings.NewReader(want), out); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"d/config": img, "d/short": {0, 1, 2}} {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: extracted %d bytes, %v; want %d bytes as written", name, len(got), err, len(data))
		}
	}
	for name, archive := range map[string]string{
		"no size":          "-- a [hex ] --\n",
		"size too big":     "-- a [hex 2000000] --\n",
		"row past the end": "-- a [hex 16] --\n0010: 00\n",
		"rows out of order": "-- a [hex 64] --\n0020: 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00\n" +
			"0010: 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00\n",
		"short row":      "-- a [hex 64] --\n0000: 01 02\n",
		"unaligned":      "-- a [hex 64] --\n0008: 01 00 00 00 00 00 00 00\n",
		"not hex":        "-- a [hex 16] --\n0000: zz 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00\n",
		"no offset":      "-- a [hex 16] --\n01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00\n",
		"three digits":   "-- a [hex 16] --\n0000: 100 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00\n",
		"unclosed count": "-- a [hex 16 --\n",
	} {
		if err := ExtractTxtar(strings.NewReader(archive), t.TempDir()); err == nil {
			t.Errorf("%s: extracted", name)
		}
	}
}

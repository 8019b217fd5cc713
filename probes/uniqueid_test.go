package probes_test

import (
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/probes"
)

func TestUniqueIDRoundTrip(t *testing.T) {
	var id probes.UniqueID
	for i := range id {
		id[i] = byte(i * 7)
	}
	s := id.String()
	if len(s) != 256 || strings.ToLower(s) != s {
		t.Errorf("String() = %q: want 256 lower-case hex digits", s)
	}
	for _, in := range []string{s, strings.ToUpper(s), s + "\n", "  " + s} {
		got, err := probes.ParseUniqueID(in)
		if err != nil || got != id {
			t.Errorf("ParseUniqueID(%.20q...) = %v; want the id back", in, err)
		}
	}
}

func TestParseUniqueIDErrors(t *testing.T) {
	good := strings.Repeat("0a", 128)
	for _, tc := range []struct{ in, want string }{
		{"", "0 characters, want 256 hex digits"},
		{good[:254], "254 characters, want 256 hex digits"},
		{good + "00", "258 characters, want 256 hex digits"},
		{good[:100] + "zz" + good[102:], `'z' at offset 100 is not a hex digit`},
		{good[:10] + " " + good[11:], `' ' at offset 10 is not a hex digit`},
	} {
		_, err := probes.ParseUniqueID(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "NCCL unique id") {
			t.Errorf("ParseUniqueID(%.30q...) = %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
}

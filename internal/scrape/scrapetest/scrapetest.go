// Package scrapetest checks what a scrape.TextCollector encodes against
// what client_golang's own encoder makes of the same collector.
package scrapetest

import (
	"bytes"
	"compress/flate"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/gpulink/gpulink_exporter/internal/scrape"
)

// CheckText fails t unless what c encodes in each text format is what
// expfmt writes of what Gather makes of c's Collect, up to the order of
// families and of series within a family, and its deflated text inflates
// to its text.
func CheckText(t testing.TB, c scrape.TextCollector) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, om := range []bool{false, true} {
		f := expfmt.NewFormat(expfmt.TypeTextPlain)
		if om {
			f = expfmt.NewFormat(expfmt.TypeOpenMetrics)
		}
		var want bytes.Buffer
		enc := expfmt.NewEncoder(&want, f)
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
		e := c.EncodeText(om, true)
		inflated, err := io.ReadAll(flate.NewReader(bytes.NewReader(e.Deflated)))
		if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(inflated, e.Text) {
			// A sync flush and no final block: the reader wants more.
			t.Errorf("openmetrics %v: deflated text inflates to %d bytes (%v), text has %d", om, len(inflated), err, len(e.Text))
		}
		if plain := c.EncodeText(om, false); !bytes.Equal(plain.Text, e.Text) {
			t.Errorf("openmetrics %v: text differs with and without deflate", om)
		}
		w, g := textBlocks(want.String()), textBlocks(string(e.Text))
		if !slices.Equal(w, g) {
			for i := 0; i < max(len(w), len(g)); i++ {
				if i >= len(w) || i >= len(g) || w[i] != g[i] {
					var wi, gi string
					if i < len(w) {
						wi = w[i]
					}
					if i < len(g) {
						gi = g[i]
					}
					t.Fatalf("openmetrics %v: family %d of %d/%d differs:\nexpfmt:\n%s\nWriteText:\n%s", om, i, len(w), len(g), wi, gi)
				}
			}
		}
	}
}

// textBlocks splits an exposition into families, each with its series
// lines sorted, and sorts the families.
func textBlocks(s string) []string {
	var blocks []string
	var cur []string
	flush := func() {
		if len(cur) > 2 {
			slices.Sort(cur[2:])
		}
		if len(cur) > 0 {
			blocks = append(blocks, strings.Join(cur, "\n"))
		}
		cur = nil
	}
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "# HELP ") {
			flush()
		}
		if l != "" && l != "# EOF" {
			cur = append(cur, l)
		}
	}
	flush()
	slices.Sort(blocks)
	return blocks
}

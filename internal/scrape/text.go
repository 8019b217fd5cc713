package scrape

import (
	"bytes"
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// The snapshot collectors render a snapshot once into Samples (a
// Rendered does), and write those in the text formats themselves. Going through client_golang instead
// (a const metric per series, then Gather, then expfmt) costs about 20
// allocations per series and, at GOMAXPROCS 1, yields the scrape to the
// samplers at every collector Gather starts: on the simulated DGX H100 that
// was most of a scrape's time whenever it met a new snapshot, which is every
// scrape of a Prometheus that scrapes no faster than the sources sample.
// The same samples still make const metrics for Collect, so Gather (tests,
// the protobuf format) sees exactly what the text shows.

// family is what the text formats say of a metric family besides its
// samples, kept for every Desc NewDesc makes.
type family struct {
	name string
	// omName is the name in OpenMetrics' HELP and TYPE lines: a counter's
	// without _total.
	omName string
	// Escaped help: the text format escapes \ and newline, OpenMetrics
	// the double quote too.
	textHelp, omHelp string
	// keys[i] opens the i-th label in name order: `{gpu="`, `,uuid="`.
	keys []string
	// order[i] is the Desc's index of the i-th label in name order;
	// client_golang writes labels sorted by name, and so do we.
	order []int
}

var families sync.Map // *prometheus.Desc -> *family

// NewDesc makes a Desc without constant labels, and keeps what the text
// formats need of it: every Desc a Samples is given must come from here.
func NewDesc(fqName, help string, labels []string) *prometheus.Desc {
	d := prometheus.NewDesc(fqName, help, labels, nil)
	families.Store(d, newFamily(fqName, help, labels))
	return d
}

func newFamily(name, help string, labels []string) *family {
	f := &family{name: name, omName: strings.TrimSuffix(name, "_total"),
		textHelp: helpEscaper.Replace(help), omHelp: omHelpEscaper.Replace(help)}
	f.order = make([]int, len(labels))
	for i := range f.order {
		f.order[i] = i
	}
	slices.SortStableFunc(f.order, func(a, b int) int { return cmp.Compare(labels[a], labels[b]) })
	for i, j := range f.order {
		sep := ","
		if i == 0 {
			sep = "{"
		}
		f.keys = append(f.keys, sep+labels[j]+`="`)
	}
	return f
}

var (
	helpEscaper   = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	omHelpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// sample is one rendered series: its label values are Samples.vals[lo:hi],
// in the Desc's order.
type sample struct {
	desc   *prometheus.Desc
	typ    prometheus.ValueType
	value  float64
	lo, hi int32
}

// Samples collects the samples of one render. Its slices are reused from
// one render to the next.
type Samples struct {
	// Labels are the values every series added gets first (a GPU's).
	Labels  []string
	samples []sample
	vals    []string

	// Scratch for encoding: the families present and each sample's place.
	groups []group
	byDesc map[*prometheus.Desc]int
	place  []int32
	next   []int
	// textSize is about the size of the last encoding in each format.
	textSize [2]int
}

type group struct {
	f          *family
	typ        prometheus.ValueType
	id, n, off int // id: the order the family was first met in
}

func (o *Samples) reset() {
	clear(o.vals) // the strings belong to the old snapshot
	o.Labels, o.samples, o.vals = nil, o.samples[:0], o.vals[:0]
}

// Add adds a series of d: its label values are Labels and then extra.
func (o *Samples) Add(d *prometheus.Desc, t prometheus.ValueType, v float64, extra ...string) {
	lo := len(o.vals)
	o.vals = append(o.vals, o.Labels...)
	o.vals = append(o.vals, extra...)
	for i := lo; i < len(o.vals); i++ {
		// Label values must be UTF-8; NVML and sysfs strings are not
		// checked anywhere before here.
		if !utf8.ValidString(o.vals[i]) {
			o.vals[i] = strings.ToValidUTF8(o.vals[i], "\uFFFD")
		}
	}
	o.samples = append(o.samples, sample{desc: d, typ: t, value: v, lo: int32(lo), hi: int32(len(o.vals))})
}

// metrics makes a const metric of every sample.
func (o *Samples) metrics() []prometheus.Metric {
	ms := make([]prometheus.Metric, len(o.samples))
	for i, s := range o.samples {
		ms[i] = prometheus.MustNewConstMetric(s.desc, s.typ, s.value, o.vals[s.lo:s.hi]...)
	}
	return ms
}

// appendText appends the samples in the text format 0.0.4, or OpenMetrics
// 1.0.0 without its "# EOF" line, as expfmt writes them: families in name
// order, each with its HELP and TYPE lines, labels in name order. Series
// keep the order they were rendered in. A sample whose label count does
// not match its Desc is dropped (Collect would panic on it, and the tests
// collect every collector).
func (o *Samples) appendText(b []byte, openMetrics bool) []byte {
	if len(o.samples) == 0 {
		return b
	}
	if o.byDesc == nil {
		o.byDesc = map[*prometheus.Desc]int{}
	}
	clear(o.byDesc)
	o.groups = o.groups[:0]
	// place[i] is first the group of sample i, then the sample at slot i.
	o.place = slices.Grow(o.place[:0], 2*len(o.samples))[:2*len(o.samples)]
	groupOf, order := o.place[:len(o.samples)], o.place[len(o.samples):]
	for i, s := range o.samples {
		g, ok := o.byDesc[s.desc]
		if !ok {
			f, _ := families.Load(s.desc)
			g = len(o.groups)
			o.byDesc[s.desc] = g
			o.groups = append(o.groups, group{f: f.(*family), typ: s.typ, id: g})
		}
		groupOf[i] = int32(g)
		o.groups[g].n++
	}
	slices.SortFunc(o.groups, func(a, b group) int { return strings.Compare(a.f.name, b.f.name) })
	o.next = slices.Grow(o.next[:0], len(o.groups))[:len(o.groups)]
	off := 0
	for i := range o.groups {
		o.groups[i].off = off
		o.next[o.groups[i].id] = off
		off += o.groups[i].n
	}
	for i, g := range groupOf {
		order[o.next[g]] = int32(i)
		o.next[g]++
	}
	for _, g := range o.groups {
		b = appendHeader(b, g.f, g.typ, openMetrics)
		for _, i := range order[g.off : g.off+g.n] {
			s := &o.samples[i]
			vals := o.vals[s.lo:s.hi]
			if len(vals) != len(g.f.keys) {
				continue
			}
			b = append(b, g.f.name...)
			for k, j := range g.f.order {
				b = append(b, g.f.keys[k]...)
				b = appendLabelValue(b, vals[j])
				b = append(b, '"')
			}
			if len(vals) > 0 {
				b = append(b, '}')
			}
			b = append(b, ' ')
			b = appendFloat(b, s.value, openMetrics)
			b = append(b, '\n')
		}
	}
	return b
}

// appendHeader writes a family's HELP and TYPE lines. OpenMetrics names a
// counter's family without its _total, and calls a counter without one
// unknown.
func appendHeader(b []byte, f *family, t prometheus.ValueType, openMetrics bool) []byte {
	name, help, typ := f.name, f.textHelp, "untyped"
	switch t {
	case prometheus.CounterValue:
		typ = "counter"
	case prometheus.GaugeValue:
		typ = "gauge"
	}
	if openMetrics {
		help = f.omHelp
		switch {
		case t == prometheus.CounterValue && f.omName != f.name:
			name = f.omName
		case t != prometheus.GaugeValue:
			typ = "unknown"
		}
	}
	b = append(b, "# HELP "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, help...)
	b = append(b, "\n# TYPE "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, typ...)
	return append(b, '\n')
}

// appendLabelValue escapes \, " and newline as both formats do.
func appendLabelValue(b []byte, v string) []byte {
	if !strings.ContainsAny(v, "\\\"\n") {
		return append(b, v...)
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '"':
			b = append(b, `\"`...)
		case '\n':
			b = append(b, `\n`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendFloat writes a value as expfmt does: OpenMetrics always with a
// decimal point or an exponent.
func appendFloat(b []byte, f float64, openMetrics bool) []byte {
	switch {
	case f == 1, f == 0, f == -1:
		b = strconv.AppendInt(b, int64(f), 10)
		if openMetrics {
			b = append(b, ".0"...)
		}
		return b
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, +1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	}
	n := len(b)
	b = strconv.AppendFloat(b, f, 'g', -1, 64)
	if openMetrics && !bytes.ContainsAny(b[n:], "e.") {
		b = append(b, ".0"...)
	}
	return b
}

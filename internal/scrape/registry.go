package scrape

import (
	"bytes"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Encoded is a collector's metric families in one of the text formats:
// Text, and Deflated, the same text deflated by Deflate (nil when it was
// not asked for). Neither changes once returned.
type Encoded struct {
	Text, Deflated []byte
}

// TextCollector is a collector that encodes its own metric families in
// the text formats, far cheaper than gathering them: the snapshot
// collectors, which render each snapshot once. What it encodes must be
// what its Collect sends, as expfmt would write it.
type TextCollector interface {
	prometheus.Collector
	// EncodeText returns the collector's metric families in the text
	// format 0.0.4, or in OpenMetrics 1.0.0 without the "# EOF" line;
	// deflated too when deflate is set.
	EncodeText(openMetrics, deflate bool) Encoded
}

// Registry holds the exporter's collectors. For the text formats (what
// Prometheus asks for) TextCollectors encode themselves and only the
// others are gathered, in one goroutine: Gather hands each collector to a
// goroutine of its own and yields after starting each, and at GOMAXPROCS 1
// every yield can wait behind a sampler for a whole time slice. Gather
// still gathers everything, with every check a prometheus.Registry makes.
type Registry struct {
	all  *prometheus.Registry
	rest *prometheus.Registry // one unchecked collector: seq

	mu    sync.RWMutex
	texts []TextCollector
	seq   []prometheus.Collector
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return newRegistry(prometheus.NewRegistry()) }

// NewPedanticRegistry is NewRegistry whose Gather makes prometheus'
// pedantic checks, for tests.
func NewPedanticRegistry() *Registry { return newRegistry(prometheus.NewPedanticRegistry()) }

func newRegistry(all *prometheus.Registry) *Registry {
	r := &Registry{all: all, rest: prometheus.NewRegistry()}
	r.rest.MustRegister(sequence{r})
	return r
}

// Register adds c, checked as prometheus.Registry checks it.
func (r *Registry) Register(c prometheus.Collector) error {
	if err := r.all.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := c.(TextCollector); ok {
		r.texts = append(r.texts, t)
	} else {
		r.seq = append(r.seq, c)
	}
	return nil
}

// MustRegister registers cs and panics on the first error.
func (r *Registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Gather gathers every collector.
func (r *Registry) Gather() ([]*dto.MetricFamily, error) { return r.all.Gather() }

var eof = []byte("# EOF\n")

// appendText appends every collector's metrics in f, which must be the
// text format or OpenMetrics, gzipped if gz: the gathered ones first, then
// each TextCollector's. gatherErr says what could not be gathered; the
// rest is there anyway, as promhttp's ContinueOnError serves what it
// could. err is an error encoding.
func (r *Registry) appendText(dst []byte, f expfmt.Format, gz bool) (body []byte, gatherErr, err error) {
	openMetrics := f.FormatType() == expfmt.TypeOpenMetrics
	mfs, gatherErr := r.rest.Gather()
	var rest bytes.Buffer
	enc := expfmt.NewEncoder(&rest, f)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, gatherErr, err
		}
	}
	r.mu.RLock()
	texts := r.texts
	r.mu.RUnlock()
	parts := make([]part, 0, 1+len(texts))
	parts = append(parts, part{text: rest.Bytes()})
	for _, t := range texts {
		e := t.EncodeText(openMetrics, gz)
		parts = append(parts, part{text: e.Text, deflated: e.Deflated})
	}
	var tail []byte
	if openMetrics {
		tail = eof
	}
	if gz {
		return appendGzip(dst, parts, tail), gatherErr, nil
	}
	return appendPlain(dst, parts, tail), gatherErr, nil
}

// sequence collects the registry's other collectors one after another.
// It describes nothing: each was checked when it was registered.
type sequence struct{ r *Registry }

func (s sequence) Describe(chan<- *prometheus.Desc) {}

func (s sequence) Collect(ch chan<- prometheus.Metric) {
	s.r.mu.RLock()
	cs := s.r.seq
	s.r.mu.RUnlock()
	for _, c := range cs {
		c.Collect(ch)
	}
}

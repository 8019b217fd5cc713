package healthcheck

import (
	"context"
	"slices"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// Querier implements storage.Queryable over the history, for the PromQL
// engine.
func (h *History) Querier(mint, maxt int64) (storage.Querier, error) {
	return &querier{h: h, mint: mint, maxt: maxt}, nil
}

type querier struct {
	h          *History
	mint, maxt int64
}

func (q *querier) Select(_ context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	mint, maxt := q.mint, q.maxt
	if hints != nil {
		mint, maxt = hints.Start, hints.End
	}
	var out []storage.Series
	for _, s := range q.h.series {
		if !matches(s.labels, ms) {
			continue
		}
		var samples []chunks.Sample
		for i, t := range s.t {
			if t >= mint && t <= maxt {
				samples = append(samples, fSample{t, s.f[i]})
			}
		}
		if len(samples) > 0 {
			out = append(out, storage.NewListSeries(s.labels, samples))
		}
	}
	if sortSeries {
		slices.SortFunc(out, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	}
	return &seriesSet{list: out, i: -1}
}

func matches(ls labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

func (q *querier) LabelValues(_ context.Context, name string, _ *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	var out []string
	for _, s := range q.h.series {
		if v := s.labels.Get(name); v != "" && matches(s.labels, ms) && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out, nil, nil
}

func (q *querier) LabelNames(_ context.Context, _ *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	var out []string
	for _, s := range q.h.series {
		if matches(s.labels, ms) {
			s.labels.Range(func(l labels.Label) {
				if !slices.Contains(out, l.Name) {
					out = append(out, l.Name)
				}
			})
		}
	}
	slices.Sort(out)
	return out, nil, nil
}

func (*querier) Close() error { return nil }

type seriesSet struct {
	list []storage.Series
	i    int
}

func (s *seriesSet) Next() bool                      { s.i++; return s.i < len(s.list) }
func (s *seriesSet) At() storage.Series              { return s.list[s.i] }
func (*seriesSet) Err() error                        { return nil }
func (*seriesSet) Warnings() annotations.Annotations { return nil }

// fSample is a float sample, as chunks.Sample has it.
type fSample struct {
	t int64
	f float64
}

func (s fSample) T() int64                    { return s.t }
func (fSample) ST() int64                     { return 0 }
func (s fSample) F() float64                  { return s.f }
func (fSample) H() *histogram.Histogram       { return nil }
func (fSample) FH() *histogram.FloatHistogram { return nil }
func (fSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s fSample) Copy() chunks.Sample         { return s }

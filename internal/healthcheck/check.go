package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/template"
)

// Status is a check's verdict, numbered as the exit status that says it
// to Slurm's HealthCheckProgram and prolog, LBNL NHC and Kubernetes
// node-problem-detector's custom plugins.
type Status int

// The verdicts.
const (
	OK      Status = 0
	NotOK   Status = 1
	Unknown Status = 2
)

func (s Status) String() string {
	switch s {
	case OK:
		return "OK"
	case NotOK:
		return "NOT OK"
	}
	return "UNKNOWN"
}

// Finding is one series of an alert whose condition holds.
type Finding struct {
	Alert string
	// Labels are the series' labels (gpu, link, property...), without
	// alertname and the rule's own labels.
	Labels labels.Labels
	// Value is the alert's value: the reading that is wrong.
	Value float64
	// Expected is what the reading is compared against, where the
	// condition compares it with another series (a link's maximum width,
	// the node's best NVLink count); NaN where it compares with a number.
	Expected float64
	// Where are the parts of the GPU (link=5) that meet a condition of
	// the alert on a reading of their own, where the alert's series is of
	// the whole GPU (fewer NVLinks up than the node's best).
	Where []string
	// Description is the alert's description annotation, expanded as
	// Prometheus expands it.
	Description string
}

// Short is the finding in a few words, for a drain reason: the alert and
// the labels that say which GPU and link, the value against what it
// should be.
func (f Finding) Short() string {
	var b strings.Builder
	b.WriteString(f.Alert)
	for _, k := range []string{"gpu", "link", "property", "device", "port", "pci_bus_id"} {
		if v := f.Labels.Get(k); v != "" && (k != "pci_bus_id" || f.Labels.Get("gpu") == "") {
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
	}
	for _, w := range f.Where {
		b.WriteString(" " + w)
	}
	fmt.Fprintf(&b, " value=%s", num(f.Value))
	if !math.IsNaN(f.Expected) {
		fmt.Fprintf(&b, " expected=%s", num(f.Expected))
	}
	return b.String()
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// Result is a check's verdict and why.
type Result struct {
	Status   Status
	Findings []Finding
	// Why says what could not be judged (Unknown).
	Why string
}

// Line is the result in one line: what NHC, Slurm and node-problem-
// detector show.
func (r Result) Line() string {
	switch r.Status {
	case OK:
		return "OK: links fit for jobs"
	case Unknown:
		return "UNKNOWN: " + r.Why
	}
	parts := make([]string, len(r.Findings))
	for i, f := range r.Findings {
		parts[i] = f.Short()
	}
	return "NOT OK: " + strings.Join(parts, "; ")
}

// Checker judges scrapes by Rules.
type Checker struct {
	Rules *Rules
	// Sources must be up (gpulink_source_up 1) for a verdict: the values
	// the alerts read come from them. One down or missing is Unknown.
	Sources []string
	// Instance and Job are the target labels Prometheus would add to the
	// scrape; the rules keep them, and descriptions name the instance.
	Instance, Job string
	Logger        *slog.Logger
}

// Check judges one scrape of the exporter at now, with the history of
// earlier checks (which it extends: save it afterwards).
func (c *Checker) Check(ctx context.Context, h *History, families map[string]*dto.MetricFamily, now time.Time) Result {
	ms := now.UnixMilli()
	needed := map[string]bool{}
	for _, a := range c.Rules.alerts {
		for _, n := range metricNames(a.expr) {
			needed[n] = true
		}
	}
	for _, r := range c.Rules.records {
		for _, n := range metricNames(r.expr) {
			needed[n] = true
		}
	}
	recorded := map[string]bool{}
	for _, r := range c.Rules.records {
		recorded[r.name] = true
	}

	// The scrape, with the target labels Prometheus would add.
	seen := map[string]bool{}
	up := map[string]float64{}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			v, ok := sampleValue(mf.GetType(), m)
			if !ok {
				continue
			}
			b := labels.NewBuilder(labels.EmptyLabels())
			b.Set(model.MetricNameLabel, name)
			for _, lp := range m.GetLabel() {
				b.Set(lp.GetName(), lp.GetValue())
			}
			b.Set("instance", c.Instance)
			b.Set("job", c.Job)
			ls := b.Labels()
			if name == "gpulink_source_up" {
				up[ls.Get("source")] = v
			}
			h.add(ls, ms, v)
			seen[ls.String()] = true
		}
	}
	var down []string
	for _, s := range c.Sources {
		if v, ok := up[s]; !ok {
			down = append(down, s+" (no gpulink_source_up)")
		} else if v != 1 {
			down = append(down, s+" (gpulink_source_up "+num(v)+")")
		}
	}
	if len(down) > 0 {
		c.forget(h, needed, recorded, ms)
		return Result{Status: Unknown, Why: "source " + strings.Join(down, ", ") + " at " + c.Instance + ": its readings cannot be judged"}
	}
	// Raw series this scrape lacks end, as a scrape marks them stale.
	h.markStale(ms, func(k, name string) bool { return !seen[k] && !recorded[name] })

	engine := promql.NewEngine(promql.EngineOpts{
		Logger: c.Logger, MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: lookback,
	})
	query := func(ctx context.Context, q string, t time.Time) (promql.Vector, error) {
		qr, err := engine.NewInstantQuery(ctx, h, nil, q, t)
		if err != nil {
			return nil, err
		}
		defer qr.Close()
		res := qr.Exec(ctx)
		if res.Err != nil {
			return nil, res.Err
		}
		switch v := res.Value.(type) {
		case promql.Vector:
			return v, nil
		case promql.Scalar:
			return promql.Vector{{T: v.T, F: v.V, Metric: labels.EmptyLabels()}}, nil
		}
		return nil, fmt.Errorf("result of %s is a %s", q, res.Value.Type())
	}

	// Recording rules first, in the file's order, as Prometheus runs a
	// group: each result is a series of the history from now on.
	for _, r := range c.Rules.records {
		vec, err := query(ctx, r.expr.String(), now)
		if err != nil {
			return Result{Status: Unknown, Why: fmt.Sprintf("recording rule %s: %v", r.name, err)}
		}
		for _, s := range vec {
			b := labels.NewBuilder(s.Metric)
			b.Set(model.MetricNameLabel, r.name)
			r.labels.Range(func(l labels.Label) { b.Set(l.Name, l.Value) })
			ls := b.Labels()
			h.add(ls, ms, s.F)
			seen[ls.String()] = true
		}
		h.markStale(ms, func(k, name string) bool { return !seen[k] && name == r.name })
	}

	var res Result
	for _, a := range c.Rules.alerts {
		vec, err := query(ctx, a.expr.String(), now)
		if err != nil {
			return Result{Status: Unknown, Why: fmt.Sprintf("alert %s: %v", a.name, err)}
		}
		for _, s := range vec {
			f := Finding{Alert: a.name, Labels: withoutName(s.Metric), Value: s.F,
				Expected: expected(ctx, query, append([]parser.Expr{a.expr}, a.reads...), s, now), Where: where(ctx, query, a.expr, s, now)}
			f.Description = c.expand(ctx, a, s, query, now)
			res.Findings = append(res.Findings, f)
		}
	}
	if len(res.Findings) > 0 {
		res.Status = NotOK
	}
	c.forget(h, needed, recorded, ms)
	return res
}

// forget drops from the history what the rules never read, and what is
// older than they look back.
func (c *Checker) forget(h *History, needed, recorded map[string]bool, ms int64) {
	for k, s := range h.series {
		n := s.labels.Get(model.MetricNameLabel)
		if !needed[n] && !recorded[n] {
			delete(h.series, k)
		}
	}
	h.thin(ms - c.Rules.window.Milliseconds())
}

// sampleValue is a metric's value where it is one number.
func sampleValue(t dto.MetricType, m *dto.Metric) (float64, bool) {
	switch t {
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue(), true
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue(), true
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

// expand is the alert's description for series s, as Prometheus expands
// it (its queries answered from the history); the summary where it has
// no description.
func (c *Checker) expand(ctx context.Context, a alertRule, s promql.Sample, query template.QueryFunc, now time.Time) string {
	text := a.annotations["description"]
	if text == "" {
		text = a.annotations["summary"]
	}
	if text == "" {
		return ""
	}
	defs := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	data := template.AlertTemplateData(s.Metric.Map(), nil, "", s)
	out, err := template.NewTemplateExpander(ctx, defs+text, "__alert_"+a.name, data, model.Time(now.UnixMilli()), query, nil, nil).Expand()
	if err != nil {
		return fmt.Sprintf("(description of %s: %v)", a.name, err)
	}
	return out
}

// expected is what s's value is compared against, found in the alert's
// expression, then in those of the recording rules it reads: the other
// side of a comparison between two series that holds and whose left side
// gives s's value, matched as the comparison matches. NaN where no
// comparison between series gives s.
func expected(ctx context.Context, query template.QueryFunc, exprs []parser.Expr, s promql.Sample, now time.Time) float64 {
	out := math.NaN()
	for _, e := range exprs {
		if out = expectedIn(ctx, query, e, s, now); !math.IsNaN(out) {
			break
		}
	}
	return out
}

func expectedIn(ctx context.Context, query template.QueryFunc, e parser.Expr, s promql.Sample, now time.Time) float64 {
	out := math.NaN()
	errFound := errors.New("found")
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		be, ok := n.(*parser.BinaryExpr)
		if !ok || !be.Op.IsComparisonOperator() || be.ReturnBool || be.VectorMatching == nil ||
			be.LHS.Type() != parser.ValueTypeVector || be.RHS.Type() != parser.ValueTypeVector {
			return nil
		}
		// The comparison's own result: the left side where it holds (a
		// reading that is not below its maximum explains nothing).
		lhs := answer(ctx, query, be.String(), now)
		i := slices.IndexFunc(lhs, func(l promql.Sample) bool { return l.F == s.F && within(withoutName(l.Metric), s.Metric) })
		if i < 0 {
			return nil
		}
		rhs := answer(ctx, query, be.RHS.String(), now)
		key := func(ls labels.Labels) string {
			if be.VectorMatching.On {
				return ls.WithoutEmpty().MatchLabels(true, be.VectorMatching.MatchingLabels...).String()
			}
			return ls.MatchLabels(false, append([]string{model.MetricNameLabel}, be.VectorMatching.MatchingLabels...)...).String()
		}
		want := key(lhs[i].Metric)
		for _, r := range rhs {
			if key(r.Metric) == want {
				out = r.F
				return errFound
			}
		}
		return nil
	})
	return out
}

// within says whether every label of a is in b with the same value.
func within(a, b labels.Labels) bool {
	ok := true
	a.Range(func(l labels.Label) {
		if b.Get(l.Name) != l.Value {
			ok = false
		}
	})
	return ok
}

// where finds the parts of what s is about that meet a condition of the
// alert on their own reading: every comparison in the expression whose
// left side is a plain selector (a reading now, gpulink_gpu_nvlink_up ==
// 0) is evaluated, and the series it keeps that carry s's labels and more
// give those more (link=5). Comparisons of history or aggregates are not
// asked: they hold for parts that are fine now.
func where(ctx context.Context, query template.QueryFunc, e parser.Expr, s promql.Sample, now time.Time) []string {
	var out []string
	own := withoutName(s.Metric)
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		be, ok := n.(*parser.BinaryExpr)
		if !ok || !be.Op.IsComparisonOperator() || be.ReturnBool {
			return nil
		}
		if _, ok := be.LHS.(*parser.VectorSelector); !ok {
			return nil
		}
		for _, v := range answer(ctx, query, be.String(), now) {
			ls := withoutName(v.Metric)
			if !within(ls.MatchLabels(true, labelNames(own)...), own) || !within(own.MatchLabels(true, labelNames(ls)...), ls) {
				continue
			}
			ls.Range(func(l labels.Label) {
				if own.Get(l.Name) == "" {
					if w := l.Name + "=" + l.Value; !slices.Contains(out, w) {
						out = append(out, w)
					}
				}
			})
		}
		return nil
	})
	return out
}

func labelNames(ls labels.Labels) []string {
	var out []string
	ls.Range(func(l labels.Label) { out = append(out, l.Name) })
	return out
}

// answer is the result of q, none where it cannot be evaluated: the parts
// of an expression asked for the words of a finding (expected, where)
// only add to a verdict the whole expression already gave.
func answer(ctx context.Context, query template.QueryFunc, q string, now time.Time) promql.Vector {
	v, err := query(ctx, q, now)
	if err != nil {
		return nil
	}
	return v
}

// withoutName is ls without its metric name.
func withoutName(ls labels.Labels) labels.Labels {
	return labels.NewBuilder(ls).Del(model.MetricNameLabel).Labels()
}

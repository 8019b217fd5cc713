// Package healthcheck judges whether a node's links are fit for jobs by
// the shipped alert rules themselves: the conditions of chosen alerts
// (GPUPCIeLinkDowntrained, GPUNVLinkDown by default) are evaluated with
// Prometheus' own PromQL engine over what the running exporter serves on
// /metrics, with the recording rules they read, and with the history of
// earlier checks kept in a small state file (history.go) in place of
// Prometheus' TSDB. There is no second copy of a threshold: what makes the
// check fail is what makes the alert fire, whatever the rule file says.
//
// What the check cannot judge, it says so: an exporter that does not
// answer, or a source it reads that is down, is Unknown, never OK.
package healthcheck

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/gpulink/gpulink_exporter/deploy"
)

// DefaultAlerts are the alerts the check judges unless told otherwise:
// the links that make a node unfit for jobs that span its GPUs.
var DefaultAlerts = []string{"GPUPCIeLinkDowntrained", "GPUNVLinkDown"}

// lookback is how far back an instant selector sees a sample, as in
// Prometheus (--query.lookback-delta's default).
const lookback = 5 * time.Minute

// Rules are the alerts a check judges and the recording rules they read.
type Rules struct {
	alerts  []alertRule
	records []recordRule
	// window is how far back the expressions look: the history to keep.
	window time.Duration
}

type alertRule struct {
	name        string
	expr        parser.Expr
	labels      labels.Labels
	annotations map[string]string
	// reads are the expressions of the recording rules the alert reads,
	// directly or through another, in the file's order: where the
	// comparisons that make it fire are (GPUPCIeLinkDowntrained compares
	// in gpu_property:gpulink_gpu_pcie_link:below_max).
	reads []parser.Expr
}

type recordRule struct {
	name   string
	expr   parser.Expr
	labels labels.Labels
}

// LoadRules reads a Prometheus rule file (name is for errors) and keeps the
// alerts named, with every recording rule they read directly or through
// another, in the file's order. An alert named that the file lacks is an
// error listing those it has.
func LoadRules(name string, data []byte, alerts []string) (*Rules, error) {
	var f deploy.RuleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("rule file %s: %w", name, err)
	}
	p := parser.NewParser(parser.Options{})
	r := &Rules{}
	var all []string
	var recs []recordRule
	want := map[string]bool{}
	for _, a := range alerts {
		want[a] = true
	}
	found := map[string]bool{}
	for _, g := range f.Groups {
		for i, rl := range g.Rules {
			what := fmt.Sprintf("rule file %s: group %s, rule %d", name, g.Name, i+1)
			if rl.Alert != "" {
				what += " (alert " + rl.Alert + ")"
				all = append(all, rl.Alert)
			} else {
				what += " (record " + rl.Record + ")"
			}
			if rl.Alert != "" && !want[rl.Alert] {
				continue
			}
			expr, err := p.ParseExpr(rl.Expr)
			if err != nil {
				return nil, fmt.Errorf("%s: expr: %w", what, err)
			}
			if rl.Alert != "" {
				found[rl.Alert] = true
				r.alerts = append(r.alerts, alertRule{name: rl.Alert, expr: expr, labels: labels.FromMap(rl.Labels), annotations: rl.Annotations})
			} else {
				recs = append(recs, recordRule{name: rl.Record, expr: expr, labels: labels.FromMap(rl.Labels)})
			}
		}
	}
	for _, a := range alerts {
		if !found[a] {
			return nil, fmt.Errorf("rule file %s has no alert %s (it has %s)", name, a, strings.Join(all, ", "))
		}
	}
	// The recording rules the alerts read, and those they read in turn.
	need := map[string]bool{}
	for i, a := range r.alerts {
		reads := recordsRead(a.expr, recs)
		for _, rc := range recs {
			if reads[rc.name] {
				need[rc.name] = true
				r.alerts[i].reads = append(r.alerts[i].reads, rc.expr)
			}
		}
	}
	for _, rc := range recs {
		if need[rc.name] {
			r.records = append(r.records, rc)
		}
	}
	for _, a := range r.alerts {
		r.window = max(r.window, reach(a.expr))
	}
	for _, rc := range r.records {
		r.window = max(r.window, reach(rc.expr))
	}
	r.window += lookback
	return r, nil
}

// Alerts are the names of the alerts judged, in the file's order.
func (r *Rules) Alerts() []string {
	out := make([]string, len(r.alerts))
	for i, a := range r.alerts {
		out[i] = a.name
	}
	return out
}

// recordsRead are the names of the recording rules of recs that e reads,
// directly or through another.
func recordsRead(e parser.Expr, recs []recordRule) map[string]bool {
	read := map[string]bool{}
	exprs := []parser.Expr{e}
	for len(exprs) > 0 {
		e := exprs[0]
		exprs = exprs[1:]
		for _, n := range metricNames(e) {
			if read[n] {
				continue
			}
			for _, rc := range recs {
				if rc.name == n {
					read[n] = true
					exprs = append(exprs, rc.expr)
				}
			}
		}
	}
	return read
}

// metricNames are the metric names an expression selects.
func metricNames(e parser.Expr) []string {
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual && !slices.Contains(out, m.Value) {
					out = append(out, m.Value)
				}
			}
		}
		return nil
	})
	return out
}

// reach is how far back an expression can look: its ranges, subquery
// ranges and offsets added up, an upper bound wherever they nest.
func reach(e parser.Expr) time.Duration {
	var d time.Duration
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.MatrixSelector:
			d += n.Range
		case *parser.SubqueryExpr:
			d += n.Range + max(n.OriginalOffset, 0)
		case *parser.VectorSelector:
			d += max(n.OriginalOffset, 0)
		}
		return nil
	})
	return d
}

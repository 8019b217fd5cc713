package deploy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/gpulink/gpulink_exporter/dashboards"
)

// metricNamesPath is written by collector's TestMetricNamesFile from the
// collectors themselves.
const metricNamesPath = "metric-names.txt"

const dashboardsDir = "../dashboards"

// Series Prometheus itself writes: up and the scrape_* series of every
// target, and the state of alerts.
var prometheusOwn = []string{
	"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling",
	"scrape_series_added", "ALERTS", "ALERTS_FOR_STATE",
	// kube-state-metrics' node capacity: which nodes have GPUs
	// (GPULinkExporterMissing).
	"kube_node_status_capacity",
}

func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(metricNamesPath)
	if err != nil {
		t.Fatalf("%v (written by go test ./collector -run TestMetricNamesFile -update)", err)
	}
	names := map[string]bool{}
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if !model.LegacyValidation.IsValidMetricName(l) {
			t.Fatalf("%s:%d: %q is not a metric name", metricNamesPath, i+1, l)
		}
		names[l] = true
	}
	if len(names) < 100 {
		t.Fatalf("%s lists only %d names", metricNamesPath, len(names))
	}
	return names
}

// selectorNames are the metric names an expression selects.
func selectorNames(expr parser.Expr) []string {
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && vs.Name != "" {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// checker parses PromQL and reports every metric name it selects that is
// not known: exported by the exporter, recorded by a rule, or Prometheus's
// own.
type checker struct {
	parser parser.Parser
	known  map[string]bool
}

func newChecker(exported map[string]bool, rules []located) *checker {
	c := &checker{parser: parser.NewParser(parser.Options{}), known: map[string]bool{}}
	for n := range exported {
		c.known[n] = true
	}
	for _, n := range prometheusOwn {
		c.known[n] = true
	}
	for _, r := range rules {
		if r.Record != "" {
			c.known[r.Record] = true
		}
	}
	return c
}

// check returns what is wrong with expr: a parse error, or each unknown
// name. A name given by a __name__ matcher counts; a regular expression on
// __name__ must match some known name.
func (c *checker) check(expr string) []string {
	e, err := c.parser.ParseExpr(expr)
	if err != nil {
		return []string{"does not parse: " + err.Error()}
	}
	var problems []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name != "" {
			if !c.known[vs.Name] {
				problems = append(problems, fmt.Sprintf("%s is not a metric the exporter exports nor a recorded one", vs.Name))
			}
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name != model.MetricNameLabel {
				continue
			}
			switch m.Type {
			case labels.MatchEqual:
				if !c.known[m.Value] {
					problems = append(problems, fmt.Sprintf("__name__=%q is not a metric the exporter exports nor a recorded one", m.Value))
				}
			case labels.MatchRegexp:
				matched := false
				for k := range c.known {
					if m.Matches(k) {
						matched = true
						break
					}
				}
				if !matched {
					problems = append(problems, fmt.Sprintf("__name__=~%q matches no metric the exporter exports", m.Value))
				}
			}
		}
		return nil
	})
	slices.Sort(problems)
	return slices.Compact(problems)
}

// expression is one PromQL text and where it was found.
type expression struct {
	where, expr string
}

// ruleExpressions: every rule's expression.
func ruleExpressions(rules []located) []expression {
	var out []expression
	for _, r := range rules {
		out = append(out, expression{r.String(), r.Expr})
	}
	return out
}

// unitTestExpressions: the unit tests' queries, and their input series as
// selectors (a test feeding a metric the exporter does not export tests
// nothing real).
func unitTestExpressions(t *testing.T) []expression {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	var out []expression
	for f, u := range unitTestFiles(t) {
		for _, tc := range u.Tests {
			where := fmt.Sprintf("%s: test %q", f, tc.Name)
			for _, e := range tc.PromQLExprTests {
				out = append(out, expression{where + " promql_expr_test", e.Expr})
			}
			for _, s := range tc.InputSeries {
				lbls, err := p.ParseMetric(s.Series)
				if err != nil {
					out = append(out, expression{where + " input series", s.Series})
					continue
				}
				out = append(out, expression{where + " input series", lbls.Get(model.MetricNameLabel)})
			}
		}
	}
	return out
}

// grafanaVar is a dashboard variable: $name, ${name}, ${name:format} or
// [[name]].
var grafanaVar = regexp.MustCompile(`^(?:\$\{(\w+)(?::[\w-]+)?\}|\$(\w+)|\[\[(\w+)\]\])`)

// expandGrafana replaces dashboard variables with what Grafana would put
// there, so that the result is PromQL: inside a string a value, in a range
// or subquery a duration, elsewhere a number. $1 in label_replace is not a
// variable (and sits in a string anyway).
func expandGrafana(expr string) string {
	var b strings.Builder
	var quote byte
	brackets := 0
	for i := 0; i < len(expr); {
		ch := expr[i]
		if quote != 0 {
			if ch == '\\' && i+1 < len(expr) {
				b.WriteString(expr[i : i+2])
				i += 2
				continue
			}
			if ch == quote {
				quote = 0
				b.WriteByte(ch)
				i++
				continue
			}
		}
		if ch == '$' || (ch == '[' && strings.HasPrefix(expr[i:], "[[")) {
			if m := grafanaVar.FindStringSubmatch(expr[i:]); m != nil && !isDigits(m[1]+m[2]+m[3]) {
				name := m[1] + m[2] + m[3]
				switch {
				case quote != 0:
					b.WriteString("x")
				case name == "__interval_ms" || name == "__range_s" || name == "__range_ms":
					b.WriteString("300")
				case brackets > 0 || name == "__interval" || name == "__rate_interval" || name == "__range":
					b.WriteString("5m")
				default:
					b.WriteString("1")
				}
				i += len(m[0])
				continue
			}
		}
		if quote == 0 {
			switch ch {
			case '"', '\'', '`':
				quote = ch
			case '[':
				brackets++
			case ']':
				brackets--
			}
		}
		b.WriteByte(ch)
		i++
	}
	return b.String()
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// dashboardExpressions is every PromQL text of one dashboard file, from
// the walk the e2e test runs the dashboards' queries with.
func dashboardExpressions(path string, data []byte) ([]expression, error) {
	qs, err := dashboards.Expressions(path, data)
	out := make([]expression, len(qs))
	for i, q := range qs {
		out[i] = expression{q.Where, q.Expr}
	}
	return out, err
}

func dashboardFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dashboardsDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dashboardsDir); errors.Is(err, fs.ErrNotExist) || len(files) == 0 {
		t.Logf("no dashboards in %s: checking the rules only", dashboardsDir)
	}
	slices.Sort(files)
	return files
}

// TestPromQLMetricNames parses every PromQL expression of the rules, their
// unit tests and the dashboards with Prometheus's parser and fails on a
// parse error or a metric the exporter does not export.
func TestPromQLMetricNames(t *testing.T) {
	rules := loadRules(t)
	c := newChecker(metricNames(t), rules)
	exprs := append(ruleExpressions(rules), unitTestExpressions(t)...)
	for _, f := range dashboardFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dashboardExpressions(f, data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if len(got) == 0 {
			t.Errorf("%s: no PromQL found", f)
		}
		for _, e := range got {
			exprs = append(exprs, expression{e.where, expandGrafana(e.expr)})
		}
	}
	for _, e := range exprs {
		for _, p := range c.check(e.expr) {
			t.Errorf("%s: %s\n\t%s", e.where, p, e.expr)
		}
	}
	t.Logf("%d expressions checked", len(exprs))
}

// The checker must be able to fail: each of these is wrong.
func TestPromQLCheckerCatches(t *testing.T) {
	c := newChecker(map[string]bool{"gpulink_gpu_info": true, "gpulink_nic_port_up": true},
		[]located{{Rule: Rule{Record: "instance:gpulink_gpu_info:count"}}})
	for _, expr := range []string{
		`gpulink_gpu_infoo`,
		`rate(gpulink_gpu_info[5m]`,
		`sum by (instance) (gpulink_gpu_info) / count(gpulink_no_such_metric)`,
		`{__name__="gpulink_gone"}`,
		`{__name__=~"gpulink_none_.*"}`,
		`instance:gpulink_gpu_info:sum`,
	} {
		if len(c.check(expr)) == 0 {
			t.Errorf("%s: passed", expr)
		}
	}
	for _, expr := range []string{
		`gpulink_gpu_info * on (instance) group_left instance:gpulink_gpu_info:count`,
		`{__name__=~"gpulink_nic_.*"}`,
		`ALERTS{alertname="GPULost"} or up == 0`,
	} {
		if p := c.check(expr); len(p) != 0 {
			t.Errorf("%s: %v", expr, p)
		}
	}
}

func TestExpandGrafana(t *testing.T) {
	for in, want := range map[string]string{
		`rate(gpulink_gpu_energy_joules_total{instance=~"$instance",gpu=~"${gpu:regex}"}[$__rate_interval])`: `rate(gpulink_gpu_energy_joules_total{instance=~"x",gpu=~"x"}[5m])`,
		`max_over_time(gpulink_nic_port_up[$window:$__interval])`:                                            `max_over_time(gpulink_nic_port_up[5m:5m])`,
		`topk($n, gpulink_gpu_power_watts) * $__range_s`:                                                     `topk(1, gpulink_gpu_power_watts) * 300`,
		`label_replace(up, "x", "$1", "instance", "(.*):.*")`:                                                `label_replace(up, "x", "$1", "instance", "(.*):.*")`,
		`gpulink_gpu_info{gpu="[[gpu]]"}`:                                                                    `gpulink_gpu_info{gpu="x"}`,
		`gpulink_gpu_info{name="a\"$b"}`:                                                                     `gpulink_gpu_info{name="a\"x"}`,
	} {
		if got := expandGrafana(in); got != want {
			t.Errorf("expandGrafana(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestDashboardWalk(t *testing.T) {
	const dash = `{"dashboard": {
		"panels": [
			{"title": "a", "targets": [{"refId": "A", "expr": "gpulink_gpu_info"}]},
			{"title": "row", "type": "row", "panels": [
				{"title": "b", "datasource": {"type": "prometheus", "uid": "${datasource}"},
				 "targets": [{"refId": "B", "expr": "up"}]},
				{"title": "logs", "datasource": {"type": "loki"}, "targets": [{"refId": "C", "expr": "{job=\"x\"} |= \"err\""}]}
			]}
		],
		"templating": {"list": [
			{"name": "instance", "type": "query", "query": {"query": "label_values(gpulink_gpu_info, instance)", "refId": "V"}, "definition": "label_values(gpulink_gpu_info, instance)"},
			{"name": "gpu", "type": "query", "query": "label_values(gpu)"},
			{"name": "ds", "type": "datasource", "query": "prometheus"}
		]},
		"annotations": {"list": [{"name": "xids", "expr": "changes(gpulink_gpu_xid_events_total[5m]) > 0"}]}
	}}`
	got, err := dashboardExpressions("d.json", []byte(dash))
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, e := range got {
		exprs = append(exprs, e.expr)
	}
	want := []string{"gpulink_gpu_info", "up", "gpulink_gpu_info", "gpulink_gpu_info", "changes(gpulink_gpu_xid_events_total[5m]) > 0"}
	if !slices.Equal(exprs, want) {
		t.Errorf("got %q, want %q", exprs, want)
	}
	// An expr the walk does not know about fails rather than being skipped.
	if _, err := dashboardExpressions("d.json", []byte(`{"panels": [], "links": [{"expr": "up"}]}`)); err == nil {
		t.Error("an expr outside panels, variables and annotations went unnoticed")
	}
}

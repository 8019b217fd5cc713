package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// The alert names users' routes, silences and inhibitions key on, and
// that the e2e test (e2e/alerts_test.go) and the runbook sections of
// prometheus/README.md use: each must stay defined under its name.
var contractAlerts = []string{
	"GPUPCIeLinkDowntrained", "GPUProbeHostBandwidthLow", "GPUProbePeerBandwidthLow", "GPUNVLinkDown",
	"GPUNVLinkErrors", "NICPortRateDegraded", "NICPortDown", "NICPortFlapping", "NICPortErrors",
	"GPUProcessCrossNUMA", "GPUThrottled", "GPUXIDResetRequired", "GPUProbeLatencyHigh",
	"GPULost", "GPUECCUncorrectableErrors", "GPURowRemapFailed", "GPURowRemapPending", "GPUNICAcrossSockets",
	"GPUProbeFailing", "GPULinkExporterDown", "GPULinkSourceDown", "GPULinkSourceStale", "NetInterfaceDown",
	// The collective and node-to-node alerts agreed for issue 13.
	"NCCLBusBandwidthLow", "NCCLSendRecvPairSlow", "NCCLWrongTransport",
	"NodeProbeFailing", "NodeProbeBandwidthLow",
}

// alertName is the naming rule written at the top of the rules file and in
// prometheus/README.md: a subject from its table, then UpperCamelCase words.
var alertName = regexp.MustCompile(`^(GPU|GPUDirect|PCIe|NIC|NetInterface|NCCL|NodeProbe|GPULink|Storage)[A-Z][A-Za-z0-9]*$`)

const runbookBase = "https://github.com/gpulink/gpulink_exporter/blob/main/deploy/prometheus/README.md#alert-"

// Alerts may compare time() with literal seconds only where the contract
// allows it: everything else must scale with the e2e test's factor.
var timeCallAllowed = map[string]bool{"GPULinkSourceStale": true}

// The e2e test divides every duration by about 30 and scrapes every
// second: shorter windows would hold too few samples there.
const (
	minRange = 5 * time.Minute
	minFor   = 2 * time.Minute
)

// located is a rule with where it came from, for messages.
type located struct {
	Rule
	file, group string
	// interval is the group's own evaluation interval, "" for the global one.
	interval string
}

func (r located) String() string {
	name := r.Alert
	if name == "" {
		name = r.Record
	}
	return fmt.Sprintf("%s: group %s, %s", r.file, r.group, name)
}

// ruleFiles are the rule files Prometheus loads: the YAML files directly in
// prometheus/ with rule groups at the top. The unit tests sit in
// prometheus/tests/; an example Prometheus configuration beside the rules
// is not a rule file.
func ruleFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"prometheus/*.yml", "prometheus/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var top map[string]any
			if err := yaml.Unmarshal(b, &top); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if _, ok := top["groups"]; ok {
				files = append(files, f)
			}
		}
	}
	if len(files) == 0 {
		t.Fatal("no rule files (YAML with groups:) in prometheus/")
	}
	slices.Sort(files)
	return files
}

func loadRules(t *testing.T) []located {
	t.Helper()
	var out []located
	for _, f := range ruleFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rf RuleFile
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&rf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				out = append(out, located{Rule: r, file: f, group: g.Name, interval: g.Interval})
			}
		}
	}
	return out
}

type unitTestFile struct {
	RuleFiles          []string `yaml:"rule_files"`
	EvaluationInterval string   `yaml:"evaluation_interval"`
	Tests              []struct {
		Name        string `yaml:"name"`
		Interval    string `yaml:"interval"`
		InputSeries []struct {
			Series string `yaml:"series"`
			Values string `yaml:"values"`
		} `yaml:"input_series"`
		AlertRuleTests []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
		PromQLExprTests []struct {
			Expr       string `yaml:"expr"`
			EvalTime   string `yaml:"eval_time"`
			ExpSamples []any  `yaml:"exp_samples"`
		} `yaml:"promql_expr_test"`
	} `yaml:"tests"`
}

func unitTestFiles(t *testing.T) map[string]unitTestFile {
	t.Helper()
	files, err := filepath.Glob("prometheus/tests/*.yml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no promtool unit tests in prometheus/tests/")
	}
	out := map[string]unitTestFile{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var u unitTestFile
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&u); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[f] = u
	}
	return out
}

// TestPromtoolRules runs the real promtool: check rules on every rule file,
// test rules on every unit test. make test sets PROMTOOL.
func TestPromtoolRules(t *testing.T) {
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		t.Skip("PROMTOOL not set (make test sets it to .tools/bin/promtool): promtool check/test rules skipped")
	}
	tests, err := filepath.Glob("prometheus/tests/*.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		append([]string{"check", "rules"}, ruleFiles(t)...),
		append([]string{"test", "rules"}, tests...),
	} {
		cmd := exec.Command(promtool, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
}

// TestAlertConventions: every alert the contract names exists, every alert
// is named by the naming rule and has a severity, a summary and a description naming its node, and a
// runbook link to its section of prometheus/README.md, which exists.
func TestAlertConventions(t *testing.T) {
	readme, err := os.ReadFile("prometheus/README.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			continue
		}
		if seen[r.Alert] {
			t.Errorf("%s: alert defined twice", r)
		}
		seen[r.Alert] = true
		if !alertName.MatchString(r.Alert) {
			t.Errorf("%s: name does not start with a subject of the naming rule (prometheus/README.md, \"Alerts\")", r)
		}
		switch r.Labels["severity"] {
		case "critical", "warning", "info":
		default:
			t.Errorf("%s: severity %q, want critical, warning or info", r, r.Labels["severity"])
		}
		for _, a := range []string{"summary", "description"} {
			if !strings.Contains(r.Annotations[a], "$labels.instance") {
				t.Errorf("%s: %s annotation %q does not name the node ($labels.instance)", r, a, r.Annotations[a])
			}
		}
		if want := runbookBase + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook %q, want %q", r, r.Annotations["runbook_url"], want)
		}
		if !strings.Contains(string(readme), "\n### Alert: "+r.Alert+"\n") {
			t.Errorf("%s: prometheus/README.md has no runbook section \"### Alert: %s\"", r, r.Alert)
		}
		for a := range r.Annotations {
			if a != "summary" && a != "description" && a != "runbook_url" {
				t.Errorf("%s: unexpected annotation %q", r, a)
			}
		}
	}
	for _, name := range contractAlerts {
		if !seen[name] {
			t.Errorf("alert %s is not defined: users' routes, the e2e test and the runbooks name it", name)
		}
	}
}

// level:metric:operations, with metric the start of an exported name
// (a rate drops _total, a ratio of reasons drops _seconds_total).
var recordName = regexp.MustCompile(`^[a-z][a-z0-9_]*:([a-z][a-z0-9_]*):[a-z][a-z0-9_]*$`)

func TestRecordingRuleNames(t *testing.T) {
	known := metricNames(t)
	for _, r := range loadRules(t) {
		if r.Record == "" {
			continue
		}
		m := recordName.FindStringSubmatch(r.Record)
		if m == nil {
			t.Errorf("%s: name is not level:metric:operations", r)
			continue
		}
		prefix := false
		for n := range known {
			if strings.HasPrefix(n, m[1]) {
				prefix = true
				break
			}
		}
		if !prefix {
			t.Errorf("%s: %s is not (the start of) a metric the exporter exports", r, m[1])
		}
	}
}

// TestEveryRuleTested: every alert has a unit test where it fires and one
// where it stays silent; every recording rule is queried by a unit test.
func TestEveryRuleTested(t *testing.T) {
	firing, silent, queried := map[string]bool{}, map[string]bool{}, map[string]bool{}
	p := parser.NewParser(parser.Options{})
	for f, u := range unitTestFiles(t) {
		for _, tc := range u.Tests {
			for _, a := range tc.AlertRuleTests {
				if len(a.ExpAlerts) > 0 {
					firing[a.Alertname] = true
				} else {
					silent[a.Alertname] = true
				}
			}
			for _, e := range tc.PromQLExprTests {
				expr, err := p.ParseExpr(e.Expr)
				if err != nil {
					t.Errorf("%s: test %q: %v", f, tc.Name, err)
					continue
				}
				for _, n := range selectorNames(expr) {
					queried[n] = true
				}
			}
		}
	}
	for _, r := range loadRules(t) {
		switch {
		case r.Alert != "" && !firing[r.Alert]:
			t.Errorf("%s: no unit test where it fires", r)
		case r.Alert != "" && !silent[r.Alert]:
			t.Errorf("%s: no unit test where it stays silent", r)
		case r.Record != "" && !queried[r.Record]:
			t.Errorf("%s: no promql_expr_test queries it", r)
		}
	}
}

// upAlerts read only what Prometheus writes itself (up), which an exporter
// restart leaves no gap in.
var upAlerts = map[string]bool{"GPULinkExporterDown": true, "GPULinkExporterMissing": true}

// TestAlertsKeepFiring: an exporter restart leaves a gap in its series
// (missed scrapes, a staleness marker) in which an alert's expression finds
// nothing; keep_firing_for carries a firing alert through it instead of
// resolving it and waiting its for: again (tests/restart_test.yml).
func TestAlertsKeepFiring(t *testing.T) {
	for _, r := range loadRules(t) {
		if r.Alert == "" || upAlerts[r.Alert] {
			continue
		}
		d, err := time.ParseDuration(r.KeepFiringFor)
		if err != nil || d < 5*time.Minute {
			t.Errorf("%s: keep_firing_for %q, want 5m or more: an exporter restart would resolve it and restart its for:", r, r.KeepFiringFor)
		}
	}
}

// TestDurationsScale holds the rules to what the e2e test's time scaling
// needs: durations only in for:, range selectors, subqueries and offsets
// (no time() against literal seconds outside the one stale alert), none so
// short that divided by 30 they hold too few one-second samples.
func TestDurationsScale(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	for _, r := range loadRules(t) {
		expr, err := p.ParseExpr(r.Expr)
		if err != nil {
			t.Errorf("%s: %v", r, err)
			continue
		}
		if r.For != "" {
			d, err := time.ParseDuration(r.For)
			if err != nil {
				t.Errorf("%s: for %q: %v", r, r.For, err)
			} else if d < minFor {
				t.Errorf("%s: for %s is under %s", r, r.For, minFor)
			}
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			switch n := n.(type) {
			case *parser.Call:
				if n.Func.Name == "time" && !timeCallAllowed[r.Alert] {
					t.Errorf("%s: time() compares with literal seconds the e2e test cannot scale", r)
				}
			case *parser.MatrixSelector:
				if n.Range < minRange {
					t.Errorf("%s: range [%s] is under %s", r, n.Range, minRange)
				}
			case *parser.SubqueryExpr:
				if n.Range < minRange || (n.Step != 0 && n.Step < minRange) {
					t.Errorf("%s: subquery [%s:%s] under %s", r, n.Range, n.Step, minRange)
				}
			}
			return nil
		})
	}
}

// TestSlowGroupsReadBack holds the readers of a group evaluated less often
// than the rest (gpulink.daily, every 5 minutes) to reading its series
// through last_over_time over at least twice its interval: an instant
// selector looks back only 5 minutes, so a sample of a 5-minute group
// would drop out between evaluations, and the alert reading it would
// lose its result and start its for: again. promtool's unit tests
// evaluate every group at every step, so they cannot show it.
func TestSlowGroupsReadBack(t *testing.T) {
	rules := loadRules(t)
	slow := map[string]time.Duration{}
	for _, r := range rules {
		if r.Record == "" || r.interval == "" {
			continue
		}
		d, err := time.ParseDuration(r.interval)
		if err != nil {
			t.Fatalf("%s: interval %q: %v", r, r.interval, err)
		}
		slow[r.Record] = d
	}
	p := parser.NewParser(parser.Options{})
	for _, r := range rules {
		expr, err := p.ParseExpr(r.Expr)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		parser.Inspect(expr, func(n parser.Node, path []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			interval, ok := slow[vs.Name]
			if !ok || r.Record == vs.Name {
				return nil
			}
			// path ends ... Call(last_over_time), [Expressions,] MatrixSelector.
			var ms *parser.MatrixSelector
			var call *parser.Call
			for i := len(path) - 1; i >= 0 && (ms == nil || call == nil); i-- {
				switch x := path[i].(type) {
				case *parser.MatrixSelector:
					ms = x
				case *parser.Call:
					call = x
				case parser.Expressions:
				default:
					i = -1
				}
			}
			if ms == nil || call == nil || call.Func.Name != "last_over_time" || ms.Range < 2*interval {
				t.Errorf("%s reads %s (group interval %s) without last_over_time(...[%s]) or longer", r, vs.Name, interval, 2*interval)
			}
			return nil
		})
	}
}

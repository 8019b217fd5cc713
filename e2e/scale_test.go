package e2e

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	yaml "go.yaml.in/yaml/v2"

	"github.com/gpulink/gpulink_exporter/deploy"
)

// The rules are written with production durations (for: 15m, [10m],
// [1d:10m]). The test runs them faster: every duration in for:,
// keep_firing_for:, a group's interval: and PromQL range selectors,
// subqueries and offsets is divided by timeScale, with scrapes and evaluations every second. The rule
// logic is the shipped one; only time is compressed. A range keeps at least
// minRange so rate() has samples to work with.
const (
	timeScale = 30
	minRange  = 4 * time.Second
)

// alertTiming is what the scaled rules give an alert: its for: and the
// time its expression (or a recording rule it reads) needs to fill its
// shortest-term windows: the longest range under fillLimit, since a rate
// over 10m sees a new fault only as the window fills. Longer ranges are
// history (a baseline over a day, "was up in the last day"), which the
// healthy phase has already provided.
type alertTiming struct {
	For, Fill time.Duration
}

// Ranges from an hour (production time) up are history, not fill.
const fillLimit = time.Hour

var (
	// [5m], [1d:10m], [1h:] : a range or subquery; group 1 the range,
	// group 2 the step (may be empty).
	rangeRE  = regexp.MustCompile(`\[\s*([0-9][0-9a-z]*)\s*(?::\s*([0-9][0-9a-z]*)?\s*)?\]`)
	offsetRE = regexp.MustCompile(`\boffset\s+(-?)([0-9][0-9a-z]*)`)
)

func scaled(d time.Duration, floor time.Duration) time.Duration {
	s := d / timeScale
	if s < floor {
		s = floor
	}
	return s.Round(time.Second)
}

func parseDur(s string) (time.Duration, error) {
	d, err := model.ParseDuration(s)
	return time.Duration(d), err
}

func fmtDur(d time.Duration) string { return model.Duration(d).String() }

// scaleExpr rewrites expr's durations, outside string literals, and
// returns the longest range under fillLimit it now reads.
func scaleExpr(expr string) (string, time.Duration, error) {
	var b strings.Builder
	var longest time.Duration
	for i := 0; i < len(expr); {
		// A string literal is copied as it is: a label value may hold
		// anything, "[5m]" included.
		if q := expr[i]; q == '"' || q == '\'' || q == '`' {
			j := i + 1
			for j < len(expr) && expr[j] != q {
				if expr[j] == '\\' && q != '`' {
					j++
				}
				j++
			}
			j = min(j+1, len(expr))
			b.WriteString(expr[i:j])
			i = j
			continue
		}
		j := i
		for j < len(expr) && expr[j] != '"' && expr[j] != '\'' && expr[j] != '`' {
			j++
		}
		code, l, err := scaleCode(expr[i:j])
		if err != nil {
			return "", 0, err
		}
		longest = max(longest, l)
		b.WriteString(code)
		i = j
	}
	return b.String(), longest, nil
}

// scaleCode rewrites the durations of PromQL text that holds no string.
func scaleCode(expr string) (string, time.Duration, error) {
	var longest time.Duration
	var err error
	out := rangeRE.ReplaceAllStringFunc(expr, func(m string) string {
		sub := rangeRE.FindStringSubmatch(m)
		orig, e := parseDur(sub[1])
		if e != nil {
			err = fmt.Errorf("range %q: %w", m, e)
			return m
		}
		r := scaled(orig, minRange)
		if orig < fillLimit {
			longest = max(longest, r)
		}
		if !strings.Contains(m, ":") {
			return "[" + fmtDur(r) + "]"
		}
		step := ""
		if sub[2] != "" {
			s, e := parseDur(sub[2])
			if e != nil {
				err = fmt.Errorf("step %q: %w", m, e)
				return m
			}
			step = fmtDur(scaled(s, time.Second))
		}
		return "[" + fmtDur(r) + ":" + step + "]"
	})
	out = offsetRE.ReplaceAllStringFunc(out, func(m string) string {
		sub := offsetRE.FindStringSubmatch(m)
		o, e := parseDur(sub[2])
		if e != nil {
			err = fmt.Errorf("offset %q: %w", m, e)
			return m
		}
		o = scaled(o, time.Second)
		return "offset " + sub[1] + fmtDur(o)
	})
	return out, longest, err
}

// scaleRules reads a rules file, writes its time-compressed copy to dst and
// returns each alert's timing. A recording rule's look-back counts toward
// the alerts that read it (by name, one level deep: a recording rule that
// reads another, as p90_1d reads :uncontended, counts its own ranges only,
// which holds while the rule it reads has none).
func scaleRules(t *testing.T, src, dst string) map[string]alertTiming {
	f := readRules(t, src)
	recorded := map[string]time.Duration{}
	timings := map[string]alertTiming{}
	for gi := range f.Groups {
		// A group with its own interval (gpulink.daily, 5m) keeps its
		// ratio to the others' one second.
		if iv := f.Groups[gi].Interval; iv != "" {
			d, err := parseDur(iv)
			if err != nil {
				t.Fatalf("%s: group %s: interval %q: %v", src, f.Groups[gi].Name, iv, err)
			}
			f.Groups[gi].Interval = fmtDur(scaled(d, time.Second))
		}
		for ri := range f.Groups[gi].Rules {
			r := &f.Groups[gi].Rules[ri]
			expr, longest, err := scaleExpr(r.Expr)
			if err != nil {
				t.Fatalf("%s: rule %s%s: %v", src, r.Record, r.Alert, err)
			}
			r.Expr = expr
			if r.Record != "" {
				recorded[r.Record] = max(recorded[r.Record], longest)
				continue
			}
			for name, d := range recorded {
				if strings.Contains(r.Expr, name) {
					longest = max(longest, d)
				}
			}
			var forDur time.Duration
			for _, field := range []*string{&r.For, &r.KeepFiringFor} {
				if *field == "" {
					continue
				}
				d, err := parseDur(*field)
				if err != nil {
					t.Fatalf("%s: alert %s: %v", src, r.Alert, err)
				}
				d = scaled(d, 0)
				if field == &r.For {
					forDur = d
				}
				*field = fmtDur(d)
			}
			old := timings[r.Alert]
			timings[r.Alert] = alertTiming{For: max(old.For, forDur), Fill: max(old.Fill, longest)}
		}
	}
	out, err := yaml.Marshal(&f)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dst, string(out))
	return timings
}

func TestScaleExpr(t *testing.T) {
	for _, c := range []struct {
		in, want string
		longest  time.Duration
	}{
		{`rate(x[10m]) > 0`, `rate(x[20s]) > 0`, 20 * time.Second},
		{`quantile_over_time(0.9, x[1d:10m])`, `quantile_over_time(0.9, x[48m:20s])`, 0},
		{`max_over_time(x[1h:]) and rate(x[30m]) and x offset 1h`, `max_over_time(x[2m:]) and rate(x[1m]) and x offset 2m`, time.Minute},
		{`increase(x{a="[5m]", b='offset 1h'}[1m])`, `increase(x{a="[5m]", b='offset 1h'}[4s])`, 4 * time.Second},
		{`x{a="\"[5m]"}[2h]`, `x{a="\"[5m]"}[4m]`, 0},
		{`changes(up[15m]) > 2`, `changes(up[30s]) > 2`, 30 * time.Second},
	} {
		got, longest, err := scaleExpr(c.in)
		if err != nil || got != c.want || longest != c.longest {
			t.Errorf("scaleExpr(%q) = %q, %v, %v; want %q, %v", c.in, got, longest, err, c.want, c.longest)
		}
	}
}

// readRules reads a rules file, strictly: a field the shipped rules do
// not use is an error.
func readRules(t *testing.T, path string) deploy.RuleFile {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f deploy.RuleFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

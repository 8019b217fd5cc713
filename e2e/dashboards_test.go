package e2e

import (
	"context"
	"encoding/json"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/dashboards"
)

// grafanaPanel is the part of a Grafana panel that holds queries.
type grafanaPanel struct {
	Title   string         `json:"title"`
	Targets []grafanaQuery `json:"targets"`
	Panels  []grafanaPanel `json:"panels"`
}

type grafanaQuery struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

type grafanaDashboard struct {
	UID        string         `json:"uid"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

var labelValuesRE = regexp.MustCompile(`^\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// expandVariables stands in for Grafana: the node variable is the node
// under test, every GPU is selected, and the interval variables are what
// Grafana would pick for the last few minutes at a 1 s scrape.
func expandVariables(expr, instance string) string {
	return strings.NewReplacer(
		"$__rate_interval", "1m",
		"$__range", "5m",
		// Quoted as Grafana quotes a regex variable, each backslash
		// doubled: the value lands inside a PromQL double-quoted string.
		"$instance", strings.ReplaceAll(regexp.QuoteMeta(instance), `\`, `\\`),
		"$gpu", ".*",
	).Replace(expr)
}

// checkDashboards runs every panel query and every variable's query of
// every shipped dashboard against the e2e Prometheus, with the node
// variable set to node, and fails on an error or an empty answer.
func checkDashboards(t *testing.T, s *stack, node string) {
	ctx := context.Background()
	n := 0
	err := fs.WalkDir(dashboards.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
			return err
		}
		b, err := fs.ReadFile(dashboards.FS, path)
		if err != nil {
			return err
		}
		var db grafanaDashboard
		if err := json.Unmarshal(b, &db); err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		run := func(where, expr string) {
			n++
			v, err := s.query(ctx, expandVariables(expr, node))
			switch {
			case err != nil:
				t.Errorf("%s %s: %v", db.UID, where, err)
			case len(v) == 0:
				t.Errorf("%s %s: no data for %s", db.UID, where, expr)
			}
		}
		for _, v := range db.Templating.List {
			// Grafana 10 writes a query variable's query as an object.
			q, _ := v.Query.(string)
			if obj, ok := v.Query.(map[string]any); ok {
				q, _ = obj["query"].(string)
			}
			if m := labelValuesRE.FindStringSubmatch(q); m != nil {
				run("variable "+v.Name, "group by ("+m[2]+") ("+m[1]+")")
			}
		}
		var walk func([]grafanaPanel)
		walk = func(ps []grafanaPanel) {
			for _, p := range ps {
				for _, q := range p.Targets {
					run("panel "+p.Title+" "+q.RefID, q.Expr)
				}
				walk(p.Panels)
			}
		}
		walk(db.Panels)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no dashboard queries found")
	}
	t.Logf("%d dashboard queries returned data", n)
}

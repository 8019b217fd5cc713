package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/dashboards"
)

// expandVariables stands in for Grafana: the node variable is the node
// under test, every Slurm job and GPU is selected, and the interval variables are what
// Grafana would pick for the last few minutes at a 1 s scrape.
func expandVariables(expr, instance string) string {
	return strings.NewReplacer(
		"$__rate_interval", "1m",
		"$__range", "5m",
		// Quoted as Grafana quotes a regex variable, each backslash
		// doubled: the value lands inside a PromQL double-quoted string.
		"$instance", strings.ReplaceAll(regexp.QuoteMeta(instance), `\`, `\\`),
		"$gpu", ".*",
		"$slurm_job", ".*",
	).Replace(expr)
}

// checkDashboards runs every query of every shipped dashboard (panel
// targets, template variables' selectors, annotations: the walk the PromQL
// check in deploy/ uses) against the e2e Prometheus, with the node
// variable set to node, and fails on an error or an empty answer.
func checkDashboards(t *testing.T, s *stack, node string) {
	gaps, n, err := dashboardGaps(context.Background(), s, node)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gaps {
		t.Error(g)
	}
	t.Logf("%d dashboard queries returned data", n-len(gaps))
}

// dashboardGaps runs checkDashboards' queries and returns, one line each,
// those that failed or came back empty, and how many ran. It fails when
// the dashboards cannot be read or hold no query.
func dashboardGaps(ctx context.Context, s *stack, node string) (gaps []string, n int, err error) {
	err = fs.WalkDir(dashboards.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
			return err
		}
		b, err := fs.ReadFile(dashboards.FS, path)
		if err != nil {
			return err
		}
		exprs, err := dashboards.Expressions(path, b)
		if err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		for _, e := range exprs {
			n++
			v, err := s.query(ctx, expandVariables(e.Expr, node))
			switch {
			case err != nil:
				gaps = append(gaps, fmt.Sprintf("%s: %v", e.Where, err))
			case len(v) == 0:
				gaps = append(gaps, fmt.Sprintf("%s: no data for %s", e.Where, e.Expr))
			}
		}
		return nil
	})
	if err == nil && n == 0 {
		err = fmt.Errorf("no dashboard queries found")
	}
	return gaps, n, err
}

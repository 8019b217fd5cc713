package dashboards

import (
	"encoding/json"
	"fmt"
	"regexp"
)

// Expression is one PromQL text of a dashboard and where it stands. A
// template variable's label_values(selector, label) or query_result(expr)
// gives its selector or expression.
type Expression struct {
	Where, Expr string
}

// labelValuesQuery reads the metric selector of a Grafana template
// variable's query: label_values(selector, label) or query_result(expr).
// label_values(label) and metrics(regex) select nothing.
var (
	labelValuesQuery = regexp.MustCompile(`^\s*label_values\((.*),\s*\w+\s*\)\s*$`)
	queryResultQuery = regexp.MustCompile(`^\s*query_result\((.*)\)\s*$`)
)

func variableExpression(q string) (string, bool) {
	if m := labelValuesQuery.FindStringSubmatch(q); m != nil {
		return m[1], true
	}
	if m := queryResultQuery.FindStringSubmatch(q); m != nil {
		return m[1], true
	}
	return "", false
}

// Expressions walks one Grafana dashboard (or an API export
// wrapping it in "dashboard"): the targets of every panel, rows' nested
// panels included, the template variables' queries and the annotation
// queries. It also counts every "expr" field anywhere in the file, so a
// query in a place the walk does not know fails instead of going unchecked.
func Expressions(path string, data []byte) ([]Expression, error) {
	var root map[string]any
	if err := json.Unmarshal(data, &root); err != nil {
		return nil, err
	}
	if inner, ok := root["dashboard"].(map[string]any); ok {
		root = inner
	}
	var out []Expression
	visited := 0
	target := func(where string, t map[string]any) {
		expr, ok := t["expr"].(string)
		if !ok {
			return
		}
		visited++
		if !isPrometheus(t["datasource"]) {
			return
		}
		out = append(out, Expression{where, expr})
	}
	var panels func(where string, list []any, inherited any)
	panels = func(where string, list []any, inherited any) {
		for _, p := range list {
			pm, ok := p.(map[string]any)
			if !ok {
				continue
			}
			title, _ := pm["title"].(string)
			here := fmt.Sprintf("%s: panel %q", where, title)
			ds := pm["datasource"]
			if ds == nil {
				ds = inherited
			}
			for _, t := range asList(pm["targets"]) {
				tm, ok := t.(map[string]any)
				if !ok {
					continue
				}
				if tm["datasource"] == nil {
					tm["datasource"] = ds
				}
				ref, _ := tm["refId"].(string)
				target(here+" target "+ref, tm)
			}
			panels(here, asList(pm["panels"]), ds)
		}
	}
	panels(path, asList(root["panels"]), nil)
	if tmpl, ok := root["templating"].(map[string]any); ok {
		for _, v := range asList(tmpl["list"]) {
			vm, ok := v.(map[string]any)
			if !ok || vm["type"] != "query" || !isPrometheus(vm["datasource"]) {
				continue
			}
			name, _ := vm["name"].(string)
			where := fmt.Sprintf("%s: variable %q", path, name)
			var queries []string
			switch q := vm["query"].(type) {
			case string:
				queries = append(queries, q)
			case map[string]any:
				if s, ok := q["query"].(string); ok {
					queries = append(queries, s)
				}
				if _, ok := q["expr"].(string); ok {
					target(where, q)
				}
			}
			if d, ok := vm["definition"].(string); ok {
				queries = append(queries, d)
			}
			for _, q := range queries {
				if e, ok := variableExpression(q); ok {
					out = append(out, Expression{where, e})
				}
			}
		}
	}
	if ann, ok := root["annotations"].(map[string]any); ok {
		for _, a := range asList(ann["list"]) {
			am, ok := a.(map[string]any)
			if !ok {
				continue
			}
			name, _ := am["name"].(string)
			where := fmt.Sprintf("%s: annotation %q", path, name)
			target(where, am)
			if t, ok := am["target"].(map[string]any); ok {
				if t["datasource"] == nil {
					t["datasource"] = am["datasource"]
				}
				target(where, t)
			}
		}
	}
	if all := countExprFields(root); all != visited {
		return out, fmt.Errorf("%d \"expr\" fields, %d in panels, variables or annotations: the walk misses some", all, visited)
	}
	return out, nil
}

// isPrometheus: a datasource given as a Prometheus type, as a variable
// (the dashboards pick the Prometheus datasource by variable), or not
// given (the dashboard default).
func isPrometheus(ds any) bool {
	switch d := ds.(type) {
	case nil:
		return true
	case string:
		return true // a name or a ${variable}: Grafana 7 form
	case map[string]any:
		typ, _ := d["type"].(string)
		return typ == "" || typ == "prometheus"
	}
	return true
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func countExprFields(v any) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if _, ok := e.(string); ok && k == "expr" {
				n++
			}
			n += countExprFields(e)
		}
	case []any:
		for _, e := range v {
			n += countExprFields(e)
		}
	}
	return n
}

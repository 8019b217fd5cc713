package dashboards

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The dashboards the project ships, by uid (= file name without .json).
var wantUIDs = []string{"gpulink-fleet", "gpulink-links", "gpulink-node", "gpulink-numa"}

// dsRef is the only datasource a dashboard may name: its own variable, so
// that an import never carries a uid from the machine it was exported on.
const dsRef = "${datasource}"

// Grafana's own variables that a query may use without defining them.
var builtinVars = map[string]bool{
	"__rate_interval": true, "__interval": true, "__interval_ms": true, "__range": true, "__range_s": true,
	"__range_ms": true, "__dashboard": true, "__from": true, "__to": true,
}

// variableRef finds $name and ${name} / ${name:format} references. Names
// of digits are label_replace back-references ($1), not variables.
var variableRef = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)`)

type panel struct {
	ID         int              `json:"id"`
	Type       string           `json:"type"`
	Title      string           `json:"title"`
	Datasource json.RawMessage  `json:"datasource"`
	GridPos    *gridPos         `json:"gridPos"`
	Targets    []target         `json:"targets"`
	Panels     []panel          `json:"panels"`
	FieldCfg   *fieldConfig     `json:"fieldConfig"`
	Transforms []transformation `json:"transformations"`
}

type gridPos struct {
	X, Y, W, H *int
}

type target struct {
	RefID      string          `json:"refId"`
	Expr       string          `json:"expr"`
	Datasource json.RawMessage `json:"datasource"`
	Format     string          `json:"format"`
	Instant    bool            `json:"instant"`
}

type fieldConfig struct {
	Defaults struct {
		Unit *string `json:"unit"`
	} `json:"defaults"`
}

type transformation struct {
	ID string `json:"id"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource json.RawMessage `json:"datasource"`
}

type dashboard struct {
	UID           string   `json:"uid"`
	Title         string   `json:"title"`
	SchemaVersion int      `json:"schemaVersion"`
	Tags          []string `json:"tags"`
	Refresh       string   `json:"refresh"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

// checkDashboard returns every structural problem of one dashboard file:
// what Grafana 10 needs to load it as intended and what the project's
// dashboards promise (datasource as a variable, node and GPU variables,
// stable uid, units, queries with a refId and an expression).
func checkDashboard(file string, raw []byte) []string {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }

	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return []string{fmt.Sprintf("invalid JSON: %v", err)}
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return []string{fmt.Sprintf("unexpected structure: %v", err)}
	}
	checkDatasourceRefs(generic, "$", bad)
	if strings.Contains(string(raw), "${DS_") || strings.Contains(string(raw), `"__inputs"`) {
		bad("export placeholders (${DS_...} or __inputs): use the datasource variable")
	}

	if want := strings.TrimSuffix(file, ".json"); d.UID != want {
		bad("uid %q differs from the file name %q", d.UID, want)
	}
	if d.Title == "" {
		bad("no title")
	}
	if d.SchemaVersion < 38 {
		bad("schemaVersion %d, want 38 (Grafana 10) or later", d.SchemaVersion)
	}
	if !slices.Contains(d.Tags, "gpulink") {
		bad("tags %q lack \"gpulink\"", d.Tags)
	}
	if d.Refresh != "30s" {
		bad("refresh %q, want 30s", d.Refresh)
	}

	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		if _, dup := vars[v.Name]; dup {
			bad("variable %q defined twice", v.Name)
		}
		vars[v.Name] = v
		if v.Type == "query" && !isDatasourceVar(v.Datasource) {
			bad("variable %q: datasource %s, want %s", v.Name, v.Datasource, dsRef)
		}
	}
	checkVariables(vars, bad)

	all := flatten(d.Panels)
	if len(all) == 0 {
		bad("no panels")
	}
	ids := map[int]string{}
	for _, p := range all {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if prev, dup := ids[p.ID]; dup {
			bad("%s: id also used by %q", where, prev)
		}
		ids[p.ID] = p.Title
		if p.Title == "" {
			bad("%s: no title", where)
		}
		checkGridPos(p, where, bad)
		if p.Type == "row" {
			continue
		}
		checkPanel(p, where, vars, bad)
	}
	checkOverlap(all, bad)
	return probs
}

func checkVariables(vars map[string]variable, bad func(string, ...any)) {
	ds, ok := vars["datasource"]
	switch {
	case !ok:
		bad("no datasource variable")
	case ds.Type != "datasource" || string(ds.Query) != `"prometheus"`:
		bad("datasource variable: type %q query %s, want type datasource, query prometheus", ds.Type, ds.Query)
	}
	inst, ok := vars["instance"]
	if !ok {
		bad("no instance variable")
	} else if q := variableQuery(inst); q != "label_values(gpulink_gpu_info, instance)" {
		bad("instance variable query %q, want label_values(gpulink_gpu_info, instance)", q)
	}
	gpu, ok := vars["gpu"]
	if !ok {
		bad("no gpu variable")
	} else if q := variableQuery(gpu); q != gpuVariableQuery {
		bad("gpu variable query %q, want the GPUs of the selected instances and Slurm jobs: %s", q, gpuVariableQuery)
	}
	job, ok := vars["slurm_job"]
	if !ok {
		bad("no slurm_job variable")
	} else if q := variableQuery(job); q != "label_values(gpulink_gpu_job_info, job_id)" {
		bad("slurm_job variable query %q, want label_values(gpulink_gpu_job_info, job_id)", q)
	}
}

// gpuVariableQuery lists the GPUs of the selected instances that hold a
// selected Slurm job, and, while every job is selected ($slurm_job is
// .*, which matches the job_id gpulink_exporter_build_info lacks), the
// GPUs that hold none too.
const gpuVariableQuery = `query_result(gpulink_gpu_info{instance=~"$instance"} and on(instance, gpu) gpulink_gpu_job_info{job_id=~"$slurm_job"}` +
	` or (gpulink_gpu_info{instance=~"$instance"} unless on(instance, gpu) gpulink_gpu_job_info and on(instance) gpulink_exporter_build_info{job_id=~"$slurm_job"}))`

// variableQuery reads a query variable's query in either form Grafana
// stores: a plain string or {"query": ...}.
func variableQuery(v variable) string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	if json.Unmarshal(v.Query, &o) == nil {
		return o.Query
	}
	return ""
}

func checkPanel(p panel, where string, vars map[string]variable, bad func(string, ...any)) {
	if !isDatasourceVar(p.Datasource) {
		bad("%s: datasource %s, want {\"type\": \"prometheus\", \"uid\": %q}", where, orNone(p.Datasource), dsRef)
	}
	if p.FieldCfg == nil || p.FieldCfg.Defaults.Unit == nil || *p.FieldCfg.Defaults.Unit == "" {
		bad("%s: no unit in fieldConfig.defaults", where)
	}
	if len(p.Targets) == 0 {
		bad("%s: no queries", where)
	}
	refs := map[string]bool{}
	for i, t := range p.Targets {
		tw := fmt.Sprintf("%s target %d", where, i)
		if t.RefID == "" {
			bad("%s: no refId", tw)
		} else if refs[t.RefID] {
			bad("%s: refId %q used twice", tw, t.RefID)
		}
		refs[t.RefID] = true
		if strings.TrimSpace(t.Expr) == "" {
			bad("%s: no expr", tw)
		}
		if len(t.Datasource) > 0 && !isDatasourceVar(t.Datasource) {
			bad("%s: datasource %s, want %s", tw, t.Datasource, dsRef)
		}
		for _, m := range variableRef.FindAllStringSubmatch(t.Expr, -1) {
			name := m[1] + m[2]
			if strings.Trim(name, "0123456789") == "" || builtinVars[name] {
				continue
			}
			if _, ok := vars[name]; !ok {
				bad("%s: expr uses $%s, which the dashboard does not define", tw, name)
			}
		}
		if p.Type == "table" && (t.Format != "table" || !t.Instant) {
			bad("%s: table query with format %q instant %v, want an instant query in table format", tw, t.Format, t.Instant)
		}
	}
	for _, tr := range p.Transforms {
		switch tr.ID {
		case "groupingToMatrix":
			// Grafana applies it only to a single frame, i.e. one query.
			if len(p.Targets) != 1 {
				bad("%s: groupingToMatrix needs exactly one query, has %d", where, len(p.Targets))
			}
		case "merge":
			if len(p.Targets) < 2 {
				bad("%s: merge with %d query", where, len(p.Targets))
			}
		}
	}
}

func checkGridPos(p panel, where string, bad func(string, ...any)) {
	g := p.GridPos
	if g == nil || g.X == nil || g.Y == nil || g.W == nil || g.H == nil {
		bad("%s: gridPos missing or incomplete", where)
		return
	}
	if *g.W <= 0 || *g.H <= 0 || *g.X < 0 || *g.Y < 0 || *g.X+*g.W > 24 {
		bad("%s: gridPos %d,%d %dx%d outside the 24-column grid", where, *g.X, *g.Y, *g.W, *g.H)
	}
}

// checkOverlap reports panels that cover the same grid cells: Grafana
// pushes one of them down, so the layout is not what the file says.
func checkOverlap(all []panel, bad func(string, ...any)) {
	for i, a := range all {
		for _, b := range all[i+1:] {
			ga, gb := a.GridPos, b.GridPos
			if ga == nil || gb == nil || ga.X == nil || gb.X == nil || ga.Y == nil || gb.Y == nil ||
				ga.W == nil || gb.W == nil || ga.H == nil || gb.H == nil {
				continue
			}
			if *ga.X < *gb.X+*gb.W && *gb.X < *ga.X+*ga.W && *ga.Y < *gb.Y+*gb.H && *gb.Y < *ga.Y+*ga.H {
				bad("panels %d %q and %d %q overlap", a.ID, a.Title, b.ID, b.Title)
			}
		}
	}
}

// checkDatasourceRefs walks the whole document: every "datasource" must
// be the variable, as a string or as an object whose uid is the variable.
func checkDatasourceRefs(v any, path string, bad func(string, ...any)) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			child := x[k]
			if k == "datasource" && !isDatasourceValue(child) {
				raw, _ := json.Marshal(child)
				bad("%s.datasource is %s: hard-coded, want %s", path, raw, dsRef)
			}
			checkDatasourceRefs(child, path+"."+k, bad)
		}
	case []any:
		for i, c := range x {
			checkDatasourceRefs(c, fmt.Sprintf("%s[%d]", path, i), bad)
		}
	}
}

func isDatasourceValue(v any) bool {
	switch x := v.(type) {
	case string:
		return x == dsRef
	case map[string]any:
		uid, _ := x["uid"].(string)
		typ, _ := x["type"].(string)
		return uid == dsRef && (typ == "" || typ == "prometheus")
	}
	return false
}

func isDatasourceVar(raw json.RawMessage) bool {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return false
	}
	return isDatasourceValue(v)
}

func orNone(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "none"
	}
	return string(raw)
}

// flatten lists every panel, those nested in collapsed rows included.
func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

func shipped(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	entries, err := fs.Glob(FS, "*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range entries {
		b, err := fs.ReadFile(FS, name)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	return files
}

func TestShippedDashboards(t *testing.T) {
	files := shipped(t)
	var names []string
	for name := range files {
		names = append(names, strings.TrimSuffix(name, ".json"))
	}
	sort.Strings(names)
	if !slices.Equal(names, wantUIDs) {
		t.Errorf("dashboards %q, want %q", names, wantUIDs)
	}
	uids := map[string]string{}
	for name, b := range files {
		for _, p := range checkDashboard(name, b) {
			t.Errorf("%s: %s", name, p)
		}
		var d dashboard
		if json.Unmarshal(b, &d) == nil {
			if other, dup := uids[d.UID]; dup {
				t.Errorf("%s: uid %q also used by %s", name, d.UID, other)
			}
			uids[d.UID] = name
		}
	}
}

// TestShippedDashboardsPanelCount guards against a generator or an edit
// that drops a dashboard's content while leaving a valid shell.
func TestShippedDashboardsPanelCount(t *testing.T) {
	for name, b := range shipped(t) {
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var queries int
		for _, p := range flatten(d.Panels) {
			queries += len(p.Targets)
		}
		if queries < 10 {
			t.Errorf("%s: only %d queries", name, queries)
		}
	}
}

// TestCheckCatchesBrokenDashboards breaks a shipped dashboard one way at a
// time and expects the checker to name the problem: a checker that
// accepts everything would pass TestShippedDashboards too.
func TestCheckCatchesBrokenDashboards(t *testing.T) {
	const file = "gpulink-node.json"
	orig := shipped(t)[file]
	if probs := checkDashboard(file, orig); len(probs) > 0 {
		t.Fatalf("the dashboard to break is already broken: %q", probs)
	}
	firstQueryPanel := func(d map[string]any) map[string]any {
		for _, p := range d["panels"].([]any) {
			pm := p.(map[string]any)
			if pm["type"] != "row" {
				return pm
			}
		}
		t.Fatal("no panel with queries")
		return nil
	}
	firstTarget := func(d map[string]any) map[string]any {
		return firstQueryPanel(d)["targets"].([]any)[0].(map[string]any)
	}
	variableNamed := func(d map[string]any, name string) map[string]any {
		for _, v := range d["templating"].(map[string]any)["list"].([]any) {
			if vm := v.(map[string]any); vm["name"] == name {
				return vm
			}
		}
		t.Fatalf("no variable %q", name)
		return nil
	}
	removeVariable := func(d map[string]any, name string) {
		tm := d["templating"].(map[string]any)
		var kept []any
		for _, v := range tm["list"].([]any) {
			if v.(map[string]any)["name"] != name {
				kept = append(kept, v)
			}
		}
		tm["list"] = kept
	}
	panelOfType := func(d map[string]any, pred func(map[string]any) bool) map[string]any {
		for _, p := range d["panels"].([]any) {
			if pm := p.(map[string]any); pred(pm) {
				return pm
			}
		}
		t.Fatal("no such panel")
		return nil
	}
	hasTransform := func(id string) func(map[string]any) bool {
		return func(p map[string]any) bool {
			trs, _ := p["transformations"].([]any)
			for _, tr := range trs {
				if tr.(map[string]any)["id"] == id {
					return true
				}
			}
			return false
		}
	}

	cases := []struct {
		name   string
		file   string
		raw    string
		mutate func(d map[string]any)
		want   string
	}{
		{name: "not JSON", raw: `{"uid": `, want: "invalid JSON"},
		{name: "old schema", mutate: func(d map[string]any) { d["schemaVersion"] = 36 }, want: "schemaVersion 36"},
		{name: "uid not the file name", mutate: func(d map[string]any) { d["uid"] = "abc123" }, want: `uid "abc123"`},
		{name: "no gpulink tag", mutate: func(d map[string]any) { d["tags"] = []any{"gpu"} }, want: "lack \"gpulink\""},
		{name: "refresh", mutate: func(d map[string]any) { d["refresh"] = "5s" }, want: "refresh \"5s\""},
		{name: "hard-coded panel datasource", mutate: func(d map[string]any) {
			firstQueryPanel(d)["datasource"] = map[string]any{"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
		}, want: "hard-coded"},
		{name: "panel without datasource", mutate: func(d map[string]any) { delete(firstQueryPanel(d), "datasource") },
			want: "datasource none"},
		{name: "hard-coded target datasource", mutate: func(d map[string]any) { firstTarget(d)["datasource"] = "Prometheus" },
			want: "hard-coded"},
		{name: "export placeholder", mutate: func(d map[string]any) {
			firstQueryPanel(d)["datasource"] = map[string]any{"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
		}, want: "export placeholders"},
		{name: "no refId", mutate: func(d map[string]any) { delete(firstTarget(d), "refId") }, want: "no refId"},
		{name: "duplicate refId", mutate: func(d map[string]any) {
			ts := firstQueryPanel(d)["targets"].([]any)
			ts[1].(map[string]any)["refId"] = ts[0].(map[string]any)["refId"]
		}, want: "used twice"},
		{name: "empty expr", mutate: func(d map[string]any) { firstTarget(d)["expr"] = " " }, want: "no expr"},
		{name: "undefined variable", mutate: func(d map[string]any) {
			firstTarget(d)["expr"] = `gpulink_gpu_info{instance=~"$node"}`
		}, want: "$node"},
		{name: "no gridPos", mutate: func(d map[string]any) { delete(firstQueryPanel(d), "gridPos") }, want: "gridPos missing"},
		{name: "gridPos past the grid", mutate: func(d map[string]any) {
			firstQueryPanel(d)["gridPos"].(map[string]any)["x"] = 20
		}, want: "outside the 24-column grid"},
		{name: "overlapping panels", mutate: func(d map[string]any) {
			ps := d["panels"].([]any)
			ps[len(ps)-1].(map[string]any)["gridPos"] = map[string]any{"x": 0, "y": 0, "w": 24, "h": 3}
		}, want: "overlap"},
		{name: "duplicate panel id", mutate: func(d map[string]any) {
			ps := d["panels"].([]any)
			ps[2].(map[string]any)["id"] = ps[1].(map[string]any)["id"]
		}, want: "id also used"},
		{name: "no unit", mutate: func(d map[string]any) {
			firstQueryPanel(d)["fieldConfig"].(map[string]any)["defaults"].(map[string]any)["unit"] = ""
		}, want: "no unit"},
		{name: "no datasource variable", mutate: func(d map[string]any) { removeVariable(d, "datasource") },
			want: "no datasource variable"},
		{name: "datasource variable of another type", mutate: func(d map[string]any) {
			variableNamed(d, "datasource")["query"] = "loki"
		}, want: "query \"loki\""},
		{name: "no gpu variable", mutate: func(d map[string]any) { removeVariable(d, "gpu") }, want: "no gpu variable"},
		{name: "instance variable from another metric", mutate: func(d map[string]any) {
			variableNamed(d, "instance")["query"] = map[string]any{"query": "label_values(up, instance)"}
		}, want: "instance variable query"},
		{name: "variable with a fixed datasource", mutate: func(d map[string]any) {
			variableNamed(d, "gpu")["datasource"] = map[string]any{"type": "prometheus", "uid": "abc"}
		}, want: "variable \"gpu\": datasource"},
		{name: "matrix over two queries", mutate: func(d map[string]any) {
			p := panelOfType(d, hasTransform("groupingToMatrix"))
			ts := p["targets"].([]any)
			second := map[string]any{}
			for k, v := range ts[0].(map[string]any) {
				second[k] = v
			}
			second["refId"] = "B"
			p["targets"] = append(ts, second)
		}, want: "groupingToMatrix needs exactly one query"},
		{name: "table query over a range", mutate: func(d map[string]any) {
			p := panelOfType(d, hasTransform("merge"))
			p["targets"].([]any)[0].(map[string]any)["instant"] = false
		}, want: "want an instant query in table format"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw := []byte(c.raw)
			if c.mutate != nil {
				var d map[string]any
				if err := json.Unmarshal(orig, &d); err != nil {
					t.Fatal(err)
				}
				c.mutate(d)
				var err error
				if raw, err = json.Marshal(d); err != nil {
					t.Fatal(err)
				}
			}
			probs := checkDashboard(file, raw)
			for _, p := range probs {
				if strings.Contains(p, c.want) {
					return
				}
			}
			t.Errorf("no problem mentioning %q; got %q", c.want, probs)
		})
	}
}

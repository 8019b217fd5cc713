package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// valueKeys lists the dotted path of every key in values, down to scalars,
// lists and empty mappings.
func valueKeys(prefix string, v any) []string {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return []string{prefix}
	}
	var out []string
	for k, e := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		out = append(out, valueKeys(p, e)...)
	}
	slices.Sort(out)
	return out
}

// readmeKey matches the first cell of a values table row: | `a.b.c` | ...
var readmeKey = regexp.MustCompile("(?m)^\\|\\s*`([^`]+)`\\s*\\|")

// valuesSection is the text under the "## Values" heading, up to the
// next heading of that level: other tables (Privileges) also start rows
// with code.
func valuesSection(readme string) (string, bool) {
	_, rest, ok := strings.Cut(readme, "\n## Values\n")
	if !ok {
		return "", false
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest, true
}

// documented reports whether key, or a mapping above it, has a row.
func documented(key string, rows map[string]bool) bool {
	for k := key; ; {
		if rows[k] {
			return true
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			return false
		}
		k = k[:i]
	}
}

// checkReadme fails for every value the chart README's table leaves out
// (itself or through a parent row) and every row naming no value.
func (l layout) checkReadme() []error {
	valuesFile := filepath.Join(l.chart, "values.yaml")
	readmeFile := filepath.Join(l.chart, "README.md")
	vb, err := os.ReadFile(valuesFile)
	if err != nil {
		return []error{err}
	}
	rb, err := os.ReadFile(readmeFile)
	if err != nil {
		return []error{err}
	}
	var values map[string]any
	if err := yaml.Unmarshal(vb, &values); err != nil {
		return []error{fmt.Errorf("%s: %w", valuesFile, err)}
	}
	keys := valueKeys("", values)
	section, ok := valuesSection(string(rb))
	if !ok {
		return []error{fmt.Errorf("%s: no \"## Values\" section", readmeFile)}
	}
	rows := map[string]bool{}
	for _, m := range readmeKey.FindAllStringSubmatch(section, -1) {
		rows[m[1]] = true
	}
	var errs []error
	for _, k := range keys {
		if !documented(k, rows) {
			errs = append(errs, fmt.Errorf("%s: value %s is not in the values table", readmeFile, k))
		}
	}
	for r := range rows {
		if !slices.ContainsFunc(keys, func(k string) bool { return k == r || strings.HasPrefix(k, r+".") }) {
			errs = append(errs, fmt.Errorf("%s: the values table documents %s, which values.yaml does not have", readmeFile, r))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

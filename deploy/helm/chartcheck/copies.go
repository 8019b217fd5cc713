package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// layout is where the sources and the chart's copies live.
type layout struct {
	root          string
	rulesSrc      string // deploy/prometheus
	dashboardsSrc string // dashboards
	chart         string // deploy/helm/gpulink-exporter
	rulesCopy     string // <chart>/files/rules
	dashCopy      string // <chart>/files/dashboards
	versionFile   string // VERSION
}

func layoutAt(root string) layout {
	chart := filepath.Join(root, "deploy", "helm", "gpulink-exporter")
	return layout{
		root:          root,
		rulesSrc:      filepath.Join(root, "deploy", "prometheus"),
		dashboardsSrc: filepath.Join(root, "dashboards"),
		chart:         chart,
		rulesCopy:     filepath.Join(chart, "files", "rules"),
		dashCopy:      filepath.Join(chart, "files", "dashboards"),
		versionFile:   filepath.Join(root, "VERSION"),
	}
}

// ruleFileNames lists the rules files in dir: *.yml and *.yaml directly in
// it whose top level is a mapping with a "groups" key. Other YAML there (the
// scrape config example, promtool test files with rule_files/tests) is not
// rules. A file that is not YAML at all is an error: it would otherwise be
// silently left out of the chart.
func ruleFileNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !(strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".yaml")) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		var top map[string]any
		if err := yaml.Unmarshal(b, &top); err != nil {
			return nil, fmt.Errorf("%s: not a YAML mapping: %w", filepath.Join(dir, name), err)
		}
		if _, ok := top["groups"]; ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// dashboardFileNames lists dir/*.json.
func dashboardFileNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// configMapKey is what Kubernetes accepts as a ConfigMap data key; the
// dashboards' file names become keys.
var configMapKey = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// maxConfigMapBytes is the API server's limit on a ConfigMap (1 MiB),
// less room for its metadata.
const maxConfigMapBytes = 1<<20 - 16<<10

// checkSources checks what the copies will be made from, beyond what the
// copy itself would notice.
func (l layout) checkSources() []error {
	var errs []error
	dashboards, err := dashboardFileNames(l.dashboardsSrc)
	if err != nil {
		return []error{err}
	}
	for _, name := range dashboards {
		path := filepath.Join(l.dashboardsSrc, name)
		if !configMapKey.MatchString(name) {
			errs = append(errs, fmt.Errorf("%s: the file name is the ConfigMap key and may hold only letters, digits, '-', '_' and '.'", path))
		}
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !json.Valid(b) {
			errs = append(errs, fmt.Errorf("%s: not valid JSON", path))
		}
		if len(b) > maxConfigMapBytes {
			errs = append(errs, fmt.Errorf("%s: %d bytes, more than a ConfigMap can hold (%d)", path, len(b), maxConfigMapBytes))
		}
	}
	return errs
}

// pair is one source file and its copy in the chart.
type pair struct{ src, dst string }

// wanted lists every copy the chart should hold and the directories that
// hold them.
func (l layout) wanted() ([]pair, error) {
	rules, err := ruleFileNames(l.rulesSrc)
	if err != nil {
		return nil, err
	}
	dashboards, err := dashboardFileNames(l.dashboardsSrc)
	if err != nil {
		return nil, err
	}
	var pairs []pair
	for _, n := range rules {
		pairs = append(pairs, pair{filepath.Join(l.rulesSrc, n), filepath.Join(l.rulesCopy, n)})
	}
	for _, n := range dashboards {
		pairs = append(pairs, pair{filepath.Join(l.dashboardsSrc, n), filepath.Join(l.dashCopy, n)})
	}
	return pairs, nil
}

// extraCopies lists files in the chart's copy directories with no source.
func (l layout) extraCopies(pairs []pair) ([]string, error) {
	var extra []string
	for _, dir := range []string{l.rulesCopy, l.dashCopy} {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if !slices.ContainsFunc(pairs, func(x pair) bool { return x.dst == p }) {
				extra = append(extra, p)
			}
		}
	}
	return extra, nil
}

// chartAppVersion matches Chart.yaml's appVersion line.
var chartAppVersion = regexp.MustCompile(`(?m)^appVersion:.*$`)

func (l layout) version() (string, error) {
	b, err := os.ReadFile(l.versionFile)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s is empty", l.versionFile)
	}
	return v, nil
}

// checkCopies fails for every copy that is missing, differs from its
// source or has no source, and for an appVersion that is not VERSION.
func (l layout) checkCopies() []error {
	errs := l.checkSources()
	pairs, err := l.wanted()
	if err != nil {
		return append(errs, err)
	}
	const fix = " (run scripts/helm-check.sh --sync)"
	for _, p := range pairs {
		src, err := os.ReadFile(p.src)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		dst, err := os.ReadFile(p.dst)
		switch {
		case errors.Is(err, os.ErrNotExist):
			errs = append(errs, fmt.Errorf("%s has no copy in the chart: %s is missing%s", p.src, p.dst, fix))
		case err != nil:
			errs = append(errs, err)
		case !bytes.Equal(src, dst):
			errs = append(errs, fmt.Errorf("%s differs from %s%s", p.dst, p.src, fix))
		}
	}
	extra, err := l.extraCopies(pairs)
	if err != nil {
		errs = append(errs, err)
	}
	for _, e := range extra {
		errs = append(errs, fmt.Errorf("%s is in the chart but its source is gone or holds no rule groups%s", e, fix))
	}
	v, err := l.version()
	if err != nil {
		return append(errs, err)
	}
	chartFile := filepath.Join(l.chart, "Chart.yaml")
	b, err := os.ReadFile(chartFile)
	if err != nil {
		return append(errs, err)
	}
	var chart struct {
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		return append(errs, fmt.Errorf("%s: %w", chartFile, err))
	}
	if chart.AppVersion != v {
		errs = append(errs, fmt.Errorf("%s: appVersion %q is not VERSION %q%s", chartFile, chart.AppVersion, v, fix))
	}
	return errs
}

// sync makes the copies equal their sources and appVersion equal VERSION,
// returning the files it changed.
func (l layout) sync() ([]string, error) {
	if errs := l.checkSources(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	pairs, err := l.wanted()
	if err != nil {
		return nil, err
	}
	var changed []string
	for _, dir := range []string{l.rulesCopy, l.dashCopy} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return changed, err
		}
	}
	for _, p := range pairs {
		src, err := os.ReadFile(p.src)
		if err != nil {
			return changed, err
		}
		if dst, err := os.ReadFile(p.dst); err == nil && bytes.Equal(src, dst) {
			continue
		}
		if err := os.WriteFile(p.dst, src, 0o644); err != nil {
			return changed, err
		}
		changed = append(changed, p.dst)
	}
	extra, err := l.extraCopies(pairs)
	if err != nil {
		return changed, err
	}
	for _, e := range extra {
		if err := os.Remove(e); err != nil {
			return changed, err
		}
		changed = append(changed, e+" (removed)")
	}
	v, err := l.version()
	if err != nil {
		return changed, err
	}
	chartFile := filepath.Join(l.chart, "Chart.yaml")
	b, err := os.ReadFile(chartFile)
	if err != nil {
		return changed, err
	}
	if !chartAppVersion.Match(b) {
		return changed, fmt.Errorf("%s has no appVersion line", chartFile)
	}
	nb := chartAppVersion.ReplaceAll(b, []byte(fmt.Sprintf("appVersion: %q", v)))
	if !bytes.Equal(nb, b) {
		if err := os.WriteFile(chartFile, nb, 0o644); err != nil {
			return changed, err
		}
		changed = append(changed, chartFile)
	}
	return changed, nil
}

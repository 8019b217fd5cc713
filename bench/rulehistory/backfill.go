package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/gpulink/gpulink_exporter/deploy"
)

// backfillLevels is the recording rules of a rule file whose output some
// rule reads over a range (a range selector or a subquery: a day's level,
// a "seen up" that reads its own last hour), with the recording rules
// those read in turn, in levels: a rule's level is one more than the
// highest level of the recording rules it reads, so that `promtool tsdb
// create-blocks-from rules` can write them level by level, each over the
// blocks of the levels before (it evaluates through a running Prometheus,
// which sees only blocks written before it started). A rule reading its
// own output is not its own dependency: backfilled, it reads nothing of
// itself, which only makes it forget less.
//
// The rest are left to the live evaluation: an instant selector needs only
// the latest sample, which the first evaluation writes.
//
// Each level keeps its rules' groups, with their intervals.
func backfillLevels(data []byte) ([]deploy.RuleFile, error) {
	var f deploy.RuleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	type rule struct {
		group deploy.RuleGroup
		rule  deploy.Rule
		reads map[string]bool // recorded names read, itself excluded
	}
	recorded := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	p := parser.NewParser(parser.Options{})
	var rules []rule
	byName := map[string][]int{}
	overRange := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				return nil, fmt.Errorf("group %s, %s%s: %w", g.Name, r.Record, r.Alert, err)
			}
			reads := map[string]bool{}
			parser.Inspect(expr, func(n parser.Node, path []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok || !recorded[vs.Name] {
					return nil
				}
				for _, p := range path {
					switch p.(type) {
					case *parser.MatrixSelector, *parser.SubqueryExpr:
						overRange[vs.Name] = true
					}
				}
				if vs.Name != r.Record {
					reads[vs.Name] = true
				}
				return nil
			})
			if r.Record != "" {
				byName[r.Record] = append(byName[r.Record], len(rules))
				rules = append(rules, rule{group: g, rule: r, reads: reads})
			}
		}
	}
	// The rules to backfill: those read over a range and what they read.
	need := map[string]bool{}
	var add func(string)
	add = func(name string) {
		if need[name] {
			return
		}
		need[name] = true
		for _, i := range byName[name] {
			for d := range rules[i].reads {
				add(d)
			}
		}
	}
	for name := range overRange {
		add(name)
	}
	level := map[string]int{}
	var levelOf func(string, map[string]bool) (int, error)
	levelOf = func(name string, visiting map[string]bool) (int, error) {
		if l, ok := level[name]; ok {
			return l, nil
		}
		if visiting[name] {
			return 0, fmt.Errorf("recording rule %s reads itself through another rule", name)
		}
		visiting[name] = true
		l := 0
		for _, i := range byName[name] {
			for d := range rules[i].reads {
				dl, err := levelOf(d, visiting)
				if err != nil {
					return 0, err
				}
				l = max(l, dl+1)
			}
		}
		delete(visiting, name)
		level[name] = l
		return l, nil
	}
	var out []deploy.RuleFile
	for _, r := range rules {
		if !need[r.rule.Record] {
			continue
		}
		l, err := levelOf(r.rule.Record, map[string]bool{})
		if err != nil {
			return nil, err
		}
		for len(out) <= l {
			out = append(out, deploy.RuleFile{})
		}
		gs := out[l].Groups
		if len(gs) == 0 || gs[len(gs)-1].Name != r.group.Name {
			gs = append(gs, deploy.RuleGroup{Name: r.group.Name, Interval: r.group.Interval})
		}
		gs[len(gs)-1].Rules = append(gs[len(gs)-1].Rules, r.rule)
		out[l].Groups = gs
	}
	return out, nil
}

// writeBackfillLevels writes backfillLevels of the rule file at path as
// dir/level-0.yml, level-1.yml... and prints their names.
func writeBackfillLevels(path, dir string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	levels, err := backfillLevels(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var names []string
	for i, l := range levels {
		b, err := yaml.Marshal(l)
		if err != nil {
			return nil, err
		}
		name := filepath.Join(dir, fmt.Sprintf("level-%d.yml", i))
		if err := os.WriteFile(name, b, 0o644); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

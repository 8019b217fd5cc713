package main

import (
	"reflect"
	"testing"
)

func TestBackfillLevels(t *testing.T) {
	rules := `groups:
  - name: g1
    rules:
      - record: a:raw
        expr: gpulink_x
      - record: b:day
        expr: max_over_time(a:raw[1d])
      - record: c:seen
        expr: gpulink_y == 1 or last_over_time(c:seen[1h])
      - record: d:inst
        expr: gpulink_z
      - alert: X
        expr: b:day > 1 and d:inst > 0 and max_over_time(e:twice[1h:5m]) > 0
  - name: g2
    interval: 5m
    rules:
      - record: e:twice
        expr: a:raw * 2
`
	levels, err := backfillLevels([]byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		group, interval string
		records         []string
	}
	var have [][]got
	for _, l := range levels {
		var gs []got
		for _, g := range l.Groups {
			x := got{group: g.Name, interval: g.Interval}
			for _, r := range g.Rules {
				x.records = append(x.records, r.Record)
			}
			gs = append(gs, x)
		}
		have = append(have, gs)
	}
	// a:raw is read over a range (b:day) and by e:twice, itself read over
	// a range (the alert's subquery): both, e:twice a level later, in its
	// group with its interval. c:seen reads its own hour: level 0. b:day
	// and d:inst are read only at an instant: left to the live evaluation.
	want := [][]got{
		{{group: "g1", records: []string{"a:raw", "c:seen"}}},
		{{group: "g2", interval: "5m", records: []string{"e:twice"}}},
	}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("levels:\n%+v\nwant:\n%+v", have, want)
	}

	if _, err := backfillLevels([]byte("groups:\n  - name: g\n    rules:\n      - record: a\n        expr: rate(x[5m]\n")); err == nil {
		t.Error("a rule that does not parse: no error")
	}
	loop := `groups:
  - name: g
    rules:
      - record: a:x
        expr: b:x
      - record: b:x
        expr: max_over_time(a:x[1h])
`
	if _, err := backfillLevels([]byte(loop)); err == nil {
		t.Error("two rules reading each other: no error")
	}
}

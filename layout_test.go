package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestLayoutNamesEveryPackage: the README's Layout section is the map of
// the code, so it names every package `go list ./...` lists, as
// `path` or as a link to it; the module root is "the module root". A new
// package fails here until the Layout's package table says where it sits
// and what it is (deps_test.go's floors say what it may import).
func TestLayoutNamesEveryPackage(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	layout, ok := section(string(readme), "## Layout")
	if !ok {
		t.Fatal(`README.md has no "## Layout" section`)
	}
	named := map[string]bool{}
	for _, m := range namedPath.FindAllStringSubmatch(layout, -1) {
		named[strings.TrimSuffix(m[1]+m[2], "/")] = true
	}
	named[""] = strings.Contains(layout, "the module root")
	for _, p := range listModule(t, "./...") {
		if !named[p.rel] {
			t.Errorf("README.md's Layout names no package %s: add it to the table of packages", show(p.rel))
		}
	}
}

// namedPath is a path in backquotes or a relative link's target.
var namedPath = regexp.MustCompile("`([a-z0-9_./-]+)`|\\]\\(([a-z0-9_./-]+)\\)")

// section is the text of the markdown section that starts with heading
// (a whole line), up to the next heading of the same level.
func section(doc, heading string) (string, bool) {
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return "", false
	}
	level := heading[:strings.IndexByte(heading, ' ')+1]
	if end := strings.Index(rest, "\n"+level); end >= 0 {
		rest = rest[:end]
	}
	return rest, true
}

// Command chartcheck keeps the Helm chart in deploy/helm/gpulink-exporter
// honest: its copies of the alert rules and dashboards equal the files they
// come from, what it renders carries those rules and dashboards unchanged,
// the DaemonSet it renders has the settings the exporter depends on, and its
// README documents every value. scripts/helm-check.sh runs it.
//
// Helm can only read files inside a chart, so the chart holds copies:
// deploy/prometheus/*.yml (those with rule groups) under files/rules/ and
// dashboards/*.json under files/dashboards/. "chartcheck sync" writes them;
// every other subcommand only reads and fails with a message naming what
// differs.
//
//	chartcheck sync     -root DIR
//	chartcheck copies   -root DIR
//	chartcheck rendered -root DIR -manifests FILE -expect default|all|VARIANT
//	chartcheck readme   -root DIR
//	chartcheck thresholds -root DIR
//
// A VARIANT is a render of ci/VARIANT-values.yaml; variants (fit.go) says
// what each must contain.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	root := fs.String("root", ".", "repository root")
	manifests := fs.String("manifests", "", "rendered chart (helm template output) to check")
	expect := fs.String("expect", "default", "what the render was made with: default (default values), all (every optional feature on) or a variant (ci/VARIANT-values.yaml)")
	if err := fs.Parse(args); err != nil {
		usage()
	}
	l := layoutAt(*root)

	var errs []error
	switch cmd {
	case "sync":
		changed, err := l.sync()
		if err != nil {
			errs = append(errs, err)
		}
		for _, c := range changed {
			fmt.Println("chartcheck: updated", c)
		}
	case "copies":
		errs = l.checkCopies()
	case "rendered":
		if *manifests == "" {
			fmt.Fprintln(os.Stderr, "chartcheck rendered: -manifests is required")
			os.Exit(2)
		}
		mode := renderVariant
		switch *expect {
		case "default":
			mode = renderDefault
		case "all":
			mode = renderAll
		}
		check, ok := variants[*expect]
		if !ok && mode == renderVariant {
			fmt.Fprintf(os.Stderr, "chartcheck rendered: -expect must be default, all or one of %v, not %q\n", variantNames(), *expect)
			os.Exit(2)
		}
		b, err := os.ReadFile(*manifests)
		if err != nil {
			errs = append(errs, err)
			break
		}
		errs = l.checkRendered(b, mode, check)
	case "readme":
		errs = l.checkReadme()
	case "thresholds":
		errs = l.checkThresholds()
	default:
		usage()
	}
	for _, err := range errs {
		fmt.Fprintf(os.Stderr, "chartcheck %s: %v\n", cmd, err)
	}
	if len(errs) > 0 {
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: chartcheck sync|copies|rendered|readme|thresholds -root DIR [-manifests FILE -expect default|all|VARIANT]")
	os.Exit(2)
}

// variantNames lists the variants, sorted, for messages.
func variantNames() []string {
	names := make([]string, 0, len(variants))
	for n := range variants {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Command rulehistory writes a fleet's history in OpenMetrics text, for
// `promtool tsdb create-blocks-from openmetrics`: one scrape of a node (the
// simulated DGX's /metrics), copied to each of -nodes nodes as instance and
// node "node-NNNN", job "gpulink", every -step over -duration up to -end.
// bench/rule-cost.sh measures the alert rules' evaluation time on it.
//
// With -serve it serves the same series instead, as a live scrape of each
// node (/metrics?node=N, the text format without timestamps), for the
// minutes after the history in which Prometheus evaluates the rules: rule
// outputs are appended to the head only after the last block, and a rule
// that reads its own output over a range needs it written as users'
// Prometheus writes it.
//
// Only the metrics the rule files name are written (-rules): the rest cost
// disk and backfill time but no rule evaluation. Every series keeps its
// scraped value, counters too (a healthy node whose errors do not grow):
// what a rule costs depends on how many samples it reads, not on their
// values.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// series is one sample of the scrape with its label set in OpenMetrics.
type series struct {
	name, labels string // labels without braces, the node's added later
	value        float64
	counter      bool
}

func main() {
	scrape := flag.String("scrape", "", "a node's /metrics in the Prometheus text format")
	rules := flag.String("rules", "", "comma-separated rule files: only the metrics they name are written")
	nodes := flag.Int("nodes", 1, "nodes to write")
	first := flag.Int("first", 0, "number of the first node")
	step := flag.Duration("step", 30*time.Second, "scrape interval of the history")
	duration := flag.Duration("duration", 24*time.Hour, "how much history")
	end := flag.Int64("end", 0, "Unix seconds of the last sample (0: now)")
	from := flag.Int64("from", 0, "write only samples at or after this Unix second")
	to := flag.Int64("to", 0, "write only samples before this Unix second (0: no bound)")
	backfill := flag.String("backfill", "", "write the recording rules of -rules (one file) that rules read over a range, by level, into this folder, and print the files' names")
	serve := flag.String("serve", "", "serve each node's scrape at this address (/metrics?node=N) instead of writing history")
	flag.Parse()
	if *backfill != "" {
		names, err := writeBackfillLevels(*rules, *backfill)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rulehistory:", err)
			os.Exit(1)
		}
		fmt.Println(strings.Join(names, "\n"))
		return
	}
	if *serve != "" {
		h, err := newScrapeHandler(*scrape, *rules)
		if err == nil {
			err = http.ListenAndServe(*serve, h)
		}
		fmt.Fprintln(os.Stderr, "rulehistory:", err)
		os.Exit(1)
	}
	if err := run(os.Stdout, *scrape, *rules, *first, *nodes, *step, *duration, *end, *from, *to); err != nil {
		fmt.Fprintln(os.Stderr, "rulehistory:", err)
		os.Exit(1)
	}
}

// run writes the history; from and to bound the samples written, so that
// each file holds one of promtool's 2-hour blocks (promtool reads its
// whole input again for every block it writes).
func run(out io.Writer, scrapePath, rulePaths string, first, nodes int, step, duration time.Duration, end, from, to int64) error {
	if nodes < 1 || step <= 0 || duration < step {
		return fmt.Errorf("-nodes %d, -step %v, -duration %v: want at least one node and one step", nodes, step, duration)
	}
	ss, err := wantedSeries(scrapePath, rulePaths)
	if err != nil {
		return err
	}
	if end == 0 {
		end = time.Now().Unix()
	}
	w := bufio.NewWriterSize(out, 1<<20)
	// OpenMetrics wants each metric family's samples together, and
	// promtool wants each series' samples in time order: series by
	// series, node by node.
	steps := int(duration / step)
	for _, fam := range families(ss) {
		kind := "gauge"
		if fam[0].counter {
			kind = "counter"
		}
		fmt.Fprintf(w, "# TYPE %s %s\n", strings.TrimSuffix(fam[0].name, "_total"), kind)
		for n := first; n < first+nodes; n++ {
			for _, s := range fam {
				lbl := s.withNode(n)
				value := strconv.FormatFloat(s.value, 'g', -1, 64)
				for i := 0; i <= steps; i++ {
					t := end - int64(steps-i)*int64(step/time.Second)
					if t < from || (to != 0 && t >= to) {
						continue
					}
					fmt.Fprintf(w, "%s{%s} %s %d\n", s.name, lbl, value, t)
				}
			}
		}
	}
	fmt.Fprintln(w, "# EOF")
	return w.Flush()
}

// withNode is the series' labels with node n's: instance and node
// "node-NNNN", job "gpulink".
func (s series) withNode(n int) string {
	node := fmt.Sprintf(`instance="node-%04d",job="gpulink",node="node-%04d"`, n, n)
	if s.labels == "" {
		return node
	}
	return s.labels + "," + node
}

// wantedSeries is the scrape's series that the rule files name.
func wantedSeries(scrapePath, rulePaths string) ([]series, error) {
	if scrapePath == "" || rulePaths == "" {
		return nil, fmt.Errorf("-scrape and -rules are required")
	}
	wanted, err := ruleMetrics(strings.Split(rulePaths, ","))
	if err != nil {
		return nil, err
	}
	return readScrape(scrapePath, wanted)
}

// newScrapeHandler serves /metrics?node=N: the series of the history at
// their values, labelled as node N's, for a scrape config with
// honor_labels (the history's instance, job and node stay).
func newScrapeHandler(scrapePath, rulePaths string) (http.Handler, error) {
	ss, err := wantedSeries(scrapePath, rulePaths)
	if err != nil {
		return nil, err
	}
	fams := families(ss)
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("node"))
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("node %q: want the node's number", r.URL.Query().Get("node")), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
		b := bufio.NewWriterSize(w, 1<<16)
		for _, fam := range fams {
			kind := "gauge"
			if fam[0].counter {
				kind = "counter"
			}
			fmt.Fprintf(b, "# TYPE %s %s\n", fam[0].name, kind)
			for _, s := range fam {
				fmt.Fprintf(b, "%s{%s} %s\n", s.name, s.withNode(n), strconv.FormatFloat(s.value, 'g', -1, 64))
			}
		}
		b.Flush()
	})
	return mux, nil
}

var metricName = regexp.MustCompile(`\bgpulink_[a-z0-9_]+|\bprobe_[a-z_]+`)

// ruleMetrics is the metric names the rule files mention.
func ruleMetrics(paths []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		for _, m := range metricName.FindAllString(string(b), -1) {
			out[m] = true
		}
	}
	return out, nil
}

func readScrape(path string, wanted map[string]bool) ([]series, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []series
	for name, mf := range fams {
		if !wanted[name] {
			continue
		}
		for _, m := range mf.GetMetric() {
			var names []string
			lbls := map[string]string{}
			for _, l := range m.GetLabel() {
				// The node's own labels replace what a scrape config
				// would have put there.
				if l.GetName() == "instance" || l.GetName() == "job" || l.GetName() == "node" {
					continue
				}
				names = append(names, l.GetName())
				lbls[l.GetName()] = l.GetValue()
			}
			sort.Strings(names)
			var b strings.Builder
			for i, n := range names {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "%s=%q", n, lbls[n])
			}
			s := series{name: name, labels: b.String()}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				s.value, s.counter = m.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				s.value = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				s.value = m.GetUntyped().GetValue()
			default: // the rules read no summary or histogram
				continue
			}
			if !model.LegacyValidation.IsValidMetricName(name) {
				return nil, fmt.Errorf("%s: metric name %q", path, name)
			}
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: none of the rules' metrics", path)
	}
	return out, nil
}

// families groups the series by metric name, in name order.
func families(ss []series) [][]series {
	by := map[string][]series{}
	for _, s := range ss {
		by[s.name] = append(by[s.name], s)
	}
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([][]series, len(names))
	for i, n := range names {
		out[i] = by[n]
	}
	return out
}

// Command gpulink_healthcheck says whether this node's links are fit for
// jobs, judged by the shipped alert rules over what the running
// gpulink_exporter serves, with exit statuses Slurm's HealthCheckProgram
// and prolog, LBNL NHC and node-problem-detector read (0 OK, 1 not OK,
// 2 unknown); with --slurm.drain it drains and resumes the Slurm node.
//
// It is a binary of its own, as promtool is Prometheus': it links
// Prometheus' PromQL engine, which brings Kubernetes' client packages with
// it (prometheus/util/logging imports k8s.io/client-go/rest) and would
// cost the exporter 6.5 MB of binary and 10 MB of resident memory for a
// command it runs once a minute at most.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"

	"github.com/gpulink/gpulink_exporter/deploy"
	"github.com/gpulink/gpulink_exporter/internal/healthcheck"
)

// defaultURL is the exporter's metrics on its default port.
const defaultURL = "http://127.0.0.1:9849/metrics"

// healthCheck is the command's flags.
type healthCheck struct {
	url, rulesFile, stateFile string
	alerts, sources           []string
	timeout                   time.Duration
	drain                     bool
	slurm                     healthcheck.Slurm
	log                       promslog.Config
}

func newApp(h *healthCheck) *kingpin.Application {
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	app := kingpin.New("gpulink_healthcheck", "Say whether this node's links are fit for jobs, by the shipped alert rules' conditions over what the running gpulink_exporter measured (its /metrics; no GPU work). One line; exit 0 OK, 1 not OK, 2 unknown (exporter or a source down), for Slurm's HealthCheckProgram and prolog, LBNL NHC and node-problem-detector's custom plugins.")
	app.Flag("exporter.url", "The running exporter's metrics URL.").Default(defaultURL).StringVar(&h.url)
	app.Flag("alert", "An alert whose condition makes the node unfit (repeat the flag for more). Its expression, and the recording rules it reads, come from the rule file.").Default(healthcheck.DefaultAlerts...).StringsVar(&h.alerts)
	app.Flag("rules.file", "Prometheus rule file to judge by; empty: the rules shipped in this binary (deploy/prometheus/gpulink.rules.yml).").PlaceHolder("FILE").StringVar(&h.rulesFile)
	app.Flag("source", "A source that must be up (gpulink_source_up 1) for a verdict (repeat for more); one down is unknown.").Default("nvml").StringsVar(&h.sources)
	app.Flag("state.file", "Where the check keeps what earlier checks saw, the history the rules look back on (a link up in the last day); empty: none, each check sees only the present.").Default("/var/lib/gpulink_exporter/healthcheck.state").StringVar(&h.stateFile)
	app.Flag("timeout", "How long the scrape and the judgement may take.").Default("10s").DurationVar(&h.timeout)
	app.Flag("slurm.drain", "Drain this Slurm node when not OK (the reason names GPU and link) and resume it when OK, only if this check drained it (its reason prefix). Unknown changes nothing.").BoolVar(&h.drain)
	app.Flag("slurm.node", "This node's name in Slurm.").Default(host).StringVar(&h.slurm.Node)
	app.Flag("slurm.scontrol", "The scontrol command.").Default("scontrol").StringVar(&h.slurm.Scontrol)
	app.Flag("slurm.reason-prefix", "What starts every drain reason this check gives; only a node drained with it is resumed.").Default("gpulink:").StringVar(&h.slurm.Prefix)
	flag.AddFlags(app, &h.log)
	app.Version(version.Print("gpulink_healthcheck"))
	app.HelpFlag.Short('h')
	return app
}

func main() {
	h := &healthCheck{}
	app := newApp(h)
	// A command line that cannot be used is unknown too (2), never a
	// verdict on the node: kingpin's own exit would be 1, not OK.
	app.Terminate(func(code int) {
		if code != 0 {
			code = int(healthcheck.Unknown)
		}
		os.Exit(code)
	})
	if _, err := app.Parse(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stdout, "UNKNOWN: %v\n", err)
		os.Exit(int(healthcheck.Unknown))
	}
	os.Exit(run(h, promslog.New(&h.log), os.Stdout, os.Stderr))
}

// run prints the verdict in one line on stdout (the findings'
// descriptions, and what it did to the Slurm node, on stderr) and returns
// its exit status.
func run(h *healthCheck, logger *slog.Logger, stdout, stderr io.Writer) int {
	unknown := func(format string, a ...any) int {
		fmt.Fprintf(stdout, "UNKNOWN: "+format+"\n", a...)
		return int(healthcheck.Unknown)
	}
	u, err := url.Parse(h.url)
	if err != nil || u.Host == "" {
		return unknown("--exporter.url %q is not a URL with a host", h.url)
	}
	name, data := "deploy/prometheus/gpulink.rules.yml (built in)", deploy.Rules
	if h.rulesFile != "" {
		name = h.rulesFile
		if data, err = os.ReadFile(h.rulesFile); err != nil {
			return unknown("--rules.file: %v", err)
		}
	}
	rules, err := healthcheck.LoadRules(name, data, h.alerts)
	if err != nil {
		return unknown("%v", err)
	}
	history := healthcheck.NewHistory()
	if h.stateFile != "" {
		if history, err = healthcheck.LoadHistory(h.stateFile); err != nil {
			return unknown("--state.file: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	var res healthcheck.Result
	families, err := healthcheck.Scrape(ctx, &http.Client{}, h.url)
	if err != nil {
		res = healthcheck.Result{Status: healthcheck.Unknown, Why: "exporter: " + err.Error()}
	} else {
		c := &healthcheck.Checker{Rules: rules, Sources: h.sources, Instance: u.Host, Job: "gpulink", Logger: logger}
		res = c.Check(ctx, history, families, time.Now())
		if h.stateFile != "" {
			if err := history.Save(h.stateFile); err != nil {
				logger.Error("history not kept", "err", err)
			}
		}
	}
	fmt.Fprintln(stdout, res.Line())
	for _, f := range res.Findings {
		fmt.Fprintf(stderr, "%s: %s\n", f.Alert, f.Description)
	}
	if h.drain {
		did, err := h.slurm.Act(ctx, res)
		if err != nil {
			fmt.Fprintf(stderr, "slurm: %v\n", err)
		} else {
			fmt.Fprintf(stderr, "slurm: %s\n", did)
		}
	}
	return int(res.Status)
}

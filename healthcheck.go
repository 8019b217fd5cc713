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

	"github.com/gpulink/gpulink_exporter/deploy"
	"github.com/gpulink/gpulink_exporter/internal/healthcheck"
)

// healthCheck is the healthcheck command's flags: whether this node's
// links are fit for jobs, judged by the shipped alert rules over what the
// running exporter serves, with exit statuses Slurm's HealthCheckProgram,
// LBNL NHC and node-problem-detector read (0 OK, 1 not OK, 2 unknown).
type healthCheck struct {
	url, rulesFile, stateFile string
	alerts, sources           []string
	timeout                   time.Duration
	drain                     bool
	slurm                     healthcheck.Slurm
}

func addHealthCheckCommand(app *kingpin.Application, h *healthCheck) *kingpin.CmdClause {
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	cmd := app.Command("healthcheck", "Say whether this node's links are fit for jobs, by the shipped alert rules' conditions over what the running exporter measured (its /metrics; no GPU work). One line; exit 0 OK, 1 not OK, 2 unknown (exporter or a source down), for Slurm's HealthCheckProgram and prolog, LBNL NHC and node-problem-detector's custom plugins.")
	cmd.Flag("exporter.url", "The running exporter's metrics URL.").Default("http://127.0.0.1" + defaultAddress + "/metrics").StringVar(&h.url)
	cmd.Flag("alert", "An alert whose condition makes the node unfit (repeat the flag for more). Its expression, and the recording rules it reads, come from the rule file.").Default(healthcheck.DefaultAlerts...).StringsVar(&h.alerts)
	cmd.Flag("rules.file", "Prometheus rule file to judge by; empty: the rules shipped in this binary (deploy/prometheus/gpulink.rules.yml).").PlaceHolder("FILE").StringVar(&h.rulesFile)
	cmd.Flag("source", "A source that must be up (gpulink_source_up 1) for a verdict (repeat for more); one down is unknown.").Default("nvml").StringsVar(&h.sources)
	cmd.Flag("state.file", "Where the check keeps what earlier checks saw, the history the rules look back on (a link up in the last day); empty: none, each check sees only the present.").Default("/var/lib/gpulink_exporter/healthcheck.state").StringVar(&h.stateFile)
	cmd.Flag("timeout", "How long the scrape and the judgement may take.").Default("10s").DurationVar(&h.timeout)
	cmd.Flag("slurm.drain", "Drain this Slurm node when not OK (the reason names GPU and link) and resume it when OK, only if this check drained it (its reason prefix). Unknown changes nothing.").BoolVar(&h.drain)
	cmd.Flag("slurm.node", "This node's name in Slurm.").Default(host).StringVar(&h.slurm.Node)
	cmd.Flag("slurm.scontrol", "The scontrol command.").Default("scontrol").StringVar(&h.slurm.Scontrol)
	cmd.Flag("slurm.reason-prefix", "What starts every drain reason this check gives; only a node drained with it is resumed.").Default("gpulink:").StringVar(&h.slurm.Prefix)
	return cmd
}

// runHealthCheck prints the verdict in one line on stdout (the findings'
// descriptions, and what it did to the Slurm node, on stderr) and returns
// its exit status.
func runHealthCheck(h *healthCheck, logger *slog.Logger, stdout, stderr io.Writer) int {
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

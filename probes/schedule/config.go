package schedule

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpulink/gpulink_exporter/probes"
)

// The scheduler's defaults, written once: the daemon's flags take theirs
// from here, and NewScheduler gives them to a config that leaves the
// value zero.
const (
	DefaultInterval = 10 * time.Minute
	DefaultTimeout  = time.Minute
)

// withDefaults fills in what cfg leaves zero and has a default for. The
// zero jitter, threshold and first delay are settings, kept as given; a
// zero MaxDuty has no default (Validate refuses it).
func (cfg *SchedulerConfig) withDefaults() {
	if cfg.Policy == "" {
		cfg.Policy = PolicyIdle
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&cfg.Interval, DefaultInterval}, {&cfg.Timeout, DefaultTimeout},
		{&cfg.CollectiveInterval, DefaultCollectiveInterval}, {&cfg.CollectiveTimeout, DefaultCollectiveTimeout},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
}

// Validate checks every value of cfg, whatever the policy: a value that is
// wrong is wrong before the policy turns the probes on. It is the one
// check of these values: start-up calls it on the flags (validate.go) and
// NewScheduler on its config after the defaults. The error names the
// daemon's flag (probes.OptionError), as probes.Options.Validate does; the
// round's options are those checks, and the collective options are
// checked where collective rounds run (CollectiveRunner set). What needs
// the wiring (a runner, the NVML sample) is NewScheduler's to check.
func (cfg SchedulerConfig) Validate() error {
	if !slices.Contains(Policies, cfg.Policy) {
		return &probes.OptionError{Flag: "--probe.policy", Value: cfg.Policy, Want: "want one of " + strings.Join(Policies, ", ")}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--probe.interval", cfg.Interval}, {"--probe.timeout", cfg.Timeout},
		{"--collective.interval", cfg.CollectiveInterval}, {"--collective.timeout", cfg.CollectiveTimeout},
	} {
		if d.v <= 0 {
			return &probes.OptionError{Flag: d.flag, Value: d.v.String(), Want: "want a duration above 0"}
		}
	}
	float := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	// Written so that NaN, which the flags parse, is out of every range.
	switch {
	case cfg.FirstDelay < 0:
		return &probes.OptionError{Flag: "--probe.first-delay", Value: cfg.FirstDelay.String(), Want: "want 0 (no wait) or more"}
	case !(cfg.Jitter >= 0 && cfg.Jitter <= 0.5):
		return &probes.OptionError{Flag: "--probe.jitter", Value: float(cfg.Jitter), Want: "want 0 (none) to 0.5"}
	case !(cfg.MaxDuty > 0 && cfg.MaxDuty <= 1):
		// No default: a zero duty would put the next round off for ever.
		return &probes.OptionError{Flag: "--probe.max-duty", Value: float(cfg.MaxDuty), Want: "want more than 0 and at most 1 (no bound)"}
	case !(cfg.UtilizationThreshold >= 0 && cfg.UtilizationThreshold <= 1):
		return &probes.OptionError{Flag: "--probe.utilization-threshold", Value: float(cfg.UtilizationThreshold), Want: "want 0 (any utilisation is busy) to 1"}
	}
	if err := cfg.Options.Validate(); err != nil {
		return err
	}
	if cfg.CollectiveRunner != nil {
		return cfg.CollectiveOptions.Validate()
	}
	return nil
}

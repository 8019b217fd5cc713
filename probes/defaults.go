package probes

// The scheduler's defaults, which the daemon's flags take. SchedulerConfig
// has no zero-value defaults for these: 0 is a setting of its own for two
// of them, so every caller passes its values.
const (
	// DefaultJitter spreads rounds by a tenth of the interval either way:
	// enough that the nodes of a fleet restarted at once drift apart
	// within a few rounds, little enough that the interval stays what
	// was asked for.
	DefaultJitter = 0.1
	// DefaultMaxDuty lets the probes take at most 0.1% of a GPU's time,
	// its own probes and its peers' against it together.
	DefaultMaxDuty = 0.001
	// DefaultUtilizationThreshold is the NVML utilisation above which the
	// idle policy leaves a GPU alone: a GPU with no process reads 0, and
	// a monitoring agent's occasional kernel stays under 5%.
	DefaultUtilizationThreshold = 0.05
)

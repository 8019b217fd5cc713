package main

import "github.com/gpulink/gpulink_exporter/probes"

// checkProbeOptions checks what a round measures with (size, samples,
// kinds) through the scheduler's own checks, under policy off so that
// nothing else is needed.
func checkProbeOptions(c *config) error {
	cfg := c.probe
	cfg.Policy = probes.PolicyOff
	cfg.Options.Probes = probeKinds(c.probeKinds)
	_, err := probes.NewScheduler(cfg)
	return err
}

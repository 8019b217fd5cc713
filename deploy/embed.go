package deploy

import _ "embed" // for the rule file

// Rules is deploy/prometheus/gpulink.rules.yml as shipped, built into the
// binary so that the healthcheck command judges a node by the very rules
// Prometheus alerts on, with no copy of the file to install beside it.
//
//go:embed prometheus/gpulink.rules.yml
var Rules []byte

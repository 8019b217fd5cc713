// Package deploy holds what runs beside the exporter: the Prometheus rules
// and their unit tests (prometheus/), the list of metric names the exporter
// exports (metric-names.txt), the Helm chart and manifests. Its only code
// is the rule file's types; its tests run promtool over the rules and
// check that every PromQL expression in the rules and in ../dashboards
// parses and names only metrics the exporter exports.
package deploy

// Package dashboards holds the Grafana dashboards shipped with
// gpulink_exporter. They are embedded so that tests and tools read exactly
// the files that are installed.
package dashboards

import "embed"

// FS holds every dashboard, one JSON file per dashboard, named by its uid.
//
//go:embed *.json
var FS embed.FS

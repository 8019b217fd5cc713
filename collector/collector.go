// Package collector renders the sources' latest snapshots as Prometheus
// metrics. Nothing here touches hardware: a scrape only reads snapshots.
package collector

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric the exporter exports.
const Namespace = "gpulink"

// Switches are the --collector.<name> flags, node_exporter style.
type Switches struct {
	enabled map[string]*bool
}

// switchDefs lists every collector the daemon knows, with its default.
var switchDefs = []struct {
	name, help string
	on         bool
}{
	{"nvml", "GPU identity, clocks and throttling, power, memory, ECC, PCIe and NVLink counters from NVML.", true},
	{"xid", "XID error events from NVML.", true},
	{"nic", "InfiniBand, RoCE and EFA port state, rate and counters, and physical Ethernet interfaces, from sysfs.", true},
	{"process", "CPU and memory placement of every process holding a GPU against the GPU's NUMA node, from NVML and procfs.", true},
	{"topology", "NUMA nodes and distances, the PCIe tree's link states, and each GPU's NUMA affinity, path to every NIC and slowest hop to the CPU, from sysfs.", true},
	{"dcgm", "Profiling fields (engine, SM, tensor and DRAM activity, PCIe and NVLink traffic) and health watches from an NVIDIA DCGM host engine (nv-hostengine); needs libdcgm.so.4.", false},
	{"kubernetes", "Which pod and container the kubelet assigned each GPU to, from its pod-resources socket (gpulink_gpu_pod_info).", false},
}

// RegisterSwitches adds --collector.<name> and --no-collector.<name> flags.
func RegisterSwitches(app *kingpin.Application) *Switches {
	s := &Switches{enabled: map[string]*bool{}}
	for _, d := range switchDefs {
		def := "false"
		if d.on {
			def = "true"
		}
		s.enabled[d.name] = app.Flag("collector."+d.name,
			fmt.Sprintf("Enable the %s collector: %s (default: %s)", d.name, d.help, def)).Default(def).Bool()
	}
	return s
}

// Enabled reports whether the named collector is switched on.
func (s *Switches) Enabled(name string) bool {
	b, ok := s.enabled[name]
	return ok && *b
}

// Names returns the enabled collectors, sorted.
func (s *Switches) Names() []string {
	var out []string
	for n, b := range s.enabled {
		if *b {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func newDesc(subsystem, name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, subsystem, name), help, labels, nil)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func itoa(i int) string { return strconv.Itoa(i) }

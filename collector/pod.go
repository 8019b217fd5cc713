package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulink/gpulink_exporter/internal/kubelet"
	"github.com/gpulink/gpulink_exporter/internal/scrape"
)

// PodCollector renders the kubelet's device assignments as one info series
// per container holding a GPU. Pod names are not put on every series: they
// change with every pod, and an info metric joins them onto any per-GPU
// series in a query instead.
type PodCollector struct {
	scrape.Rendered[*kubelet.Snapshot]
	info *prometheus.Desc
}

// NewPodCollector renders the snapshots of src.
func NewPodCollector(src scrape.Source[*kubelet.Snapshot]) *PodCollector {
	c := &PodCollector{
		info: gpuDesc("gpu", "pod_info",
			"The kubelet has assigned the GPU to this container; value 1. gpu and pci_bus_id are empty where NVML does not know the device (a MIG instance: uuid is then the instance's).",
			"namespace", "pod", "container"),
	}
	c.Init(src, rendering(c.render))
	return c
}

// Describe implements prometheus.Collector.
func (c *PodCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.info }

func (c *PodCollector) render(o *out, s *kubelet.Snapshot) {
	for _, a := range s.Assignments {
		index := ""
		if a.GPU >= 0 {
			index = itoa(a.GPU)
		}
		o.gauge(c.info, 1, index, a.UUID, a.PCIBusID, a.Namespace, a.Pod, a.Container)
	}
}

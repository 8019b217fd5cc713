package collector_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/kubelet"
	"github.com/gpulink/gpulink_exporter/internal/kubelet/kubelettest"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape/scrapetest"
)

func TestPodInfoExposition(t *testing.T) {
	c := collector.NewPodCollector(fixed(&kubelet.Snapshot{Assignments: []kubelet.Assignment{
		{GPU: -1, UUID: "MIG-abcd", Namespace: "ml", Pod: "small", Container: "app"},
		{GPU: 0, UUID: "GPU-a", PCIBusID: "0000:18:00.0", Namespace: "default", Pod: "train-0", Container: "trainer"},
		{GPU: 0, UUID: "GPU-a", PCIBusID: "0000:18:00.0", Namespace: "default", Pod: "train-1", Container: "trainer"},
	}}))
	scrapetest.CheckText(t, c)
	want := `# HELP gpulink_gpu_pod_info The kubelet has assigned the GPU to this container; value 1. gpu and pci_bus_id are empty where NVML does not know the device (a MIG instance: uuid is then the instance's).
# TYPE gpulink_gpu_pod_info gauge
gpulink_gpu_pod_info{container="app",gpu="",namespace="ml",pci_bus_id="",pod="small",uuid="MIG-abcd"} 1
gpulink_gpu_pod_info{container="trainer",gpu="0",namespace="default",pci_bus_id="0000:18:00.0",pod="train-0",uuid="GPU-a"} 1
gpulink_gpu_pod_info{container="trainer",gpu="0",namespace="default",pci_bus_id="0000:18:00.0",pod="train-1",uuid="GPU-a"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	promtoolCheck(t, "pod", exposition(t, c))
}

// TestPodScrapeNeverWaitsOnTheKubelet wires the source as the daemon does,
// against a real gRPC server on a unix socket: while the kubelet hangs, a
// scrape answers at once with the last assignments.
func TestPodScrapeNeverWaitsOnTheKubelet(t *testing.T) {
	k := kubelettest.New(filepath.Join(t.TempDir(), "kubelet.sock"))
	k.SetPods(kubelettest.Pod{Namespace: "default", Name: "train-0", Containers: []kubelettest.Container{
		{Name: "trainer", Devices: map[string][]string{"nvidia.com/gpu": {"GPU-a"}}}}})
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	ids := func() []nvml.Identity { return []nvml.Identity{{Index: 0, UUID: "GPU-a", PCIBusID: "0000:18:00.0"}} }
	s := sampler.New[*kubelet.Snapshot]("kubernetes", &kubelet.Reader{Socket: k.Socket, GPUs: ids},
		sampler.Options{Interval: time.Hour, Timeout: 1500 * time.Millisecond})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector.NewPodCollector(s), collector.NewExporterCollector(s))
	n := &node{reg: reg}
	s.SampleOnce(context.Background())
	info := `gpulink_gpu_pod_info{container="trainer",gpu="0",namespace="default",pci_bus_id="0000:18:00.0",pod="train-0",uuid="GPU-a"} 1` + "\n"
	if body := n.scrape(t); !strings.Contains(body, info) || !strings.Contains(body, `gpulink_source_up{source="kubernetes"} 1`) {
		t.Fatalf("kubelet answering: scrape\n%s", body)
	}

	k.Block()
	done := make(chan struct{})
	go func() { s.SampleOnce(context.Background()); close(done) }()
	for k.Lists() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	body := n.scrape(t)
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("scrape took %v while the kubelet hung", took)
	}
	select {
	case <-done:
		t.Errorf("the sample ended before the scrape did: the scrape proved nothing")
	default:
	}
	if !strings.Contains(body, info) {
		t.Errorf("hung kubelet: scrape lost the last assignments:\n%s", body)
	}
	<-done // the sample gives up at its deadline
	if body := n.scrape(t); !strings.Contains(body, `gpulink_source_up{source="kubernetes"} 0`) || !strings.Contains(body, info) {
		t.Errorf("after the deadline: want the source down with the last assignments:\n%s", body)
	}
	k.Unblock()
}

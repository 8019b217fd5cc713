package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpulink/gpulink_exporter/internal/kubelet/kubelettest"
)

// The exporter's node and the workload pod the fake kubelet assigns GPU 2
// to; exporterPod is the exporter's pod before the restart, restartedPod
// after (a DaemonSet's rollout names a new pod).
const (
	restartNode  = "gpu-node-1"
	exporterPod  = "gpulink-exporter-7xk2p"
	restartedPod = "gpulink-exporter-q9d4s"
	monitorNS    = "monitoring"
	workloadNS   = "ml"
	workloadPod  = "train-llm-0"
)

// TestExporterRestartEndToEnd: the scrape config is the Helm chart's
// ServiceMonitor as prometheus-operator turns it into one (operatorScrape),
// so every series first gets the target labels the operator adds for the
// exporter's pod; the simulated DGX runs with a fake kubelet that assigns
// GPU 2 to a workload pod. GPU 2's NVLink 5 goes down and GPUNVLinkDown
// fires; then the exporter is replaced by a new pod (new name, new
// address), as a rollout does. The alert must stay firing through the
// restart, with the time it became active unchanged (no new for: wait),
// and the dashboards' join of a GPU to its pod must name the workload's
// pod and namespace, not the exporter's.
func TestExporterRestartEndToEnd(t *testing.T) {
	prometheus, alertmanager := os.Getenv("PROMETHEUS"), os.Getenv("ALERTMANAGER")
	if prometheus == "" || alertmanager == "" {
		t.Skip("PROMETHEUS and ALERTMANAGER name the binaries to run (make test sets them from .tools/bin)")
	}
	if testing.Short() {
		t.Skip("about a minute of real time")
	}
	root := repoRoot(t)
	helm := os.Getenv("HELM")
	if helm == "" {
		helm = filepath.Join(root, ".tools/bin/helm")
	}
	if _, err := os.Stat(helm); err != nil {
		t.Skipf("no helm at %s (HELM, or scripts/helm-check.sh installs it): the chart's monitor cannot be rendered", helm)
	}
	dir := t.TempDir()
	bin := buildExporter(t, dir)
	scaleRules(t, filepath.Join(root, "deploy/prometheus/gpulink.rules.yml"), filepath.Join(dir, "rules.yml"))
	endpoint := renderedMonitorEndpoint(t, helm, root)

	// The fake kubelet: GPU 2 belongs to the workload once the exporter
	// has told us its UUID.
	kubelet := kubelettest.New(filepath.Join(dir, "kubelet.sock"))
	if err := kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	faults := filepath.Join(dir, "faults.yml")
	writeFile(t, faults, "faults: []\n")
	exporter := func(name, addr string) (stop func()) {
		stop = start(t, dir, name, bin, "--sim=dgx-h100", "--sim.faults="+faults, "--web.listen-address="+addr,
			"--nvml.interval=1s", "--nvml.slow-interval=1s", "--nic.interval=1s", "--topology.interval=1s",
			"--collector.kubernetes", "--kubernetes.interval=1s", "--kubernetes.pod-resources-socket="+kubelet.Socket)
		waitHTTP(t, "http://"+addr+"/metrics", 30*time.Second)
		return stop
	}
	addr := freeAddr(t)
	stopFirst := exporter("exporter-"+exporterPod, addr)
	uuid := gpuUUID(t, addr, "2")
	kubelet.SetPods(kubelettest.Pod{Namespace: workloadNS, Name: workloadPod, Containers: []kubelettest.Container{
		{Name: "trainer", Devices: map[string][]string{"nvidia.com/gpu": {uuid}}},
	}})

	job := operatorScrape(t, endpoint, addr, exporterPod)
	s := startStackWith(t, dir, prometheus, alertmanager, filepath.Join(dir, "rules.yml"), job)
	ctx := context.Background()
	waitFor(t, 30*time.Second, "the exporter scraped with its pod assignment", func() (bool, error) {
		v, err := s.query(ctx, `gpulink_gpu_pod_info{gpu="2"}`)
		return len(v) == 1, err
	})

	// What Prometheus stores: the node, never the exporter's pod.
	v, err := s.query(ctx, `gpulink_gpu_pod_info{gpu="2"}`)
	if err != nil {
		t.Fatal(err)
	}
	l := v[0].Metric
	if l["instance"] != restartNode || l["job"] != "gpulink" || l["pod"] != workloadPod || l["namespace"] != workloadNS || l["container"] != "trainer" {
		t.Errorf("gpulink_gpu_pod_info: %v, want instance %s, job gpulink and the workload's pod %s/%s, container trainer", l, restartNode, workloadNS, workloadPod)
	}
	for _, k := range []string{"exported_pod", "exported_namespace", "exported_container", "endpoint", "service"} {
		if _, ok := l[k]; ok {
			t.Errorf("gpulink_gpu_pod_info has %s: %v", k, l)
		}
	}

	// The link is seen up, then goes down: GPUNVLinkDown fires.
	waitFor(t, 30*time.Second, "NVLink 5 of GPU 2 recorded as seen up", func() (bool, error) {
		v, err := s.query(ctx, `gpu_link:gpulink_gpu_nvlink_up:seen_up{gpu="2",link="5"}`)
		return len(v) == 1, err
	})
	writeFile(t, faults, "faults:\n- {kind: nvlink_down, gpu: 2, link: 5}\n")
	firing := `ALERTS{alertname="GPUNVLinkDown", gpu="2", link="5", alertstate="firing"}`
	waitFor(t, 60*time.Second, "GPUNVLinkDown for GPU 2 firing", func() (bool, error) {
		v, err := s.query(ctx, firing)
		return len(v) == 1, err
	})
	activeAt := alertActiveAt(t, s, "GPUNVLinkDown", "2")

	// The rollout: the old pod ends, a new one with a new name and
	// address starts, and the (reloaded) scrape config has only the new
	// target, as Kubernetes service discovery would. Meanwhile the alert
	// is watched twice a second.
	watchDone := make(chan []string)
	stop := make(chan struct{})
	go func() {
		var gaps []string
		for {
			select {
			case <-stop:
				watchDone <- gaps
				return
			case <-time.After(500 * time.Millisecond):
			}
			v, err := s.query(ctx, `ALERTS{alertname="GPUNVLinkDown", gpu="2", link="5"}`)
			switch {
			case err != nil:
				gaps = append(gaps, err.Error())
			case len(v) != 1 || v[0].Metric["alertstate"] != "firing":
				gaps = append(gaps, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), v))
			}
		}
	}()
	stopFirst()
	addr2 := freeAddr(t)
	exporter("exporter-"+restartedPod, addr2)
	reloadScrape(t, s, dir, job, operatorScrape(t, endpoint, addr2, restartedPod))
	waitFor(t, 30*time.Second, "the new exporter scraped", func() (bool, error) {
		v, err := s.query(ctx, fmt.Sprintf(`up{instance=%q} == 1 and on (instance) gpulink_exporter_build_info`, restartNode))
		if err != nil || len(v) == 0 {
			return false, err
		}
		// Long enough past the restart for a new for: to show.
		time.Sleep(15 * time.Second)
		return true, nil
	})
	close(stop)
	if gaps := <-watchDone; len(gaps) > 0 {
		t.Errorf("GPUNVLinkDown was not firing at every look during the restart:\n  %s", strings.Join(gaps, "\n  "))
	}
	if now := alertActiveAt(t, s, "GPUNVLinkDown", "2"); !now.Equal(activeAt) {
		t.Errorf("GPUNVLinkDown became active again at %v (first at %v): it waited its for: again", now, activeAt)
	}

	// The dashboards' join of a GPU's value to its pod (the fleet's
	// "lowest ..." tables: group_left(namespace, pod) from
	// gpulink_gpu_pod_info) names the workload's pod.
	v, err = s.query(ctx, `max by (instance, gpu) (gpulink_gpu_nvlinks_active{gpu="2"}) * on (instance, gpu) group_left (namespace, pod) topk by (instance, gpu) (1, gpulink_gpu_pod_info)`)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 1 || v[0].Metric["pod"] != workloadPod || v[0].Metric["namespace"] != workloadNS {
		t.Errorf("the dashboards' pod join after the restart gives %v, want the workload's pod %s/%s", v, workloadNS, workloadPod)
	}
	if v, err := s.query(ctx, `count(count by (pod) ({__name__=~"gpulink_.+", pod=~"gpulink-exporter-.+"}))`); err != nil || len(v) != 0 {
		t.Errorf("series with the exporter's pod as pod: %v (err %v)", v, err)
	}
}

// renderedMonitorEndpoint is the metrics endpoint of the chart's
// ServiceMonitor as `helm template` renders it with the monitor on.
func renderedMonitorEndpoint(t *testing.T, helm, root string) map[string]any {
	cmd := exec.Command(helm, "template", "gpulink", filepath.Join(root, "deploy/helm/gpulink-exporter"),
		"--namespace", monitorNS, "--set", "serviceMonitor.enabled=true")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	dec := yaml.NewDecoder(&out)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if doc["kind"] != "ServiceMonitor" {
			continue
		}
		spec, _ := doc["spec"].(map[string]any)
		eps, _ := spec["endpoints"].([]any)
		if len(eps) != 1 {
			t.Fatalf("the ServiceMonitor has %d endpoints, want 1", len(eps))
		}
		ep, _ := eps[0].(map[string]any)
		return ep
	}
	t.Fatal("helm template rendered no ServiceMonitor")
	return nil
}

// operatorScrape is the scrape config prometheus-operator generates for a
// ServiceMonitor endpoint (pkg/prometheus/promcfg.go,
// generateServiceMonitorConfig), for one pod behind the Service: static
// instead of Kubernetes discovery, with the discovery's meta labels the
// operator's relabelings read, then those relabelings in its order (the
// job kept as __tmp_prometheus_job_name; node or pod from the endpoint's
// target; namespace, service, pod, container; job from the Service's
// name; endpoint from the port's name), then the monitor's own
// relabelings and metricRelabelings. What it leaves out changes no label
// here: the keep rules that select the Service and port (the static
// target is the one), and the sharding hashmod (one shard).
func operatorScrape(t *testing.T, ep map[string]any, addr, pod string) string {
	meta := map[string]string{
		"__meta_kubernetes_namespace":                    monitorNS,
		"__meta_kubernetes_service_name":                 "gpulink-gpulink-exporter",
		"__meta_kubernetes_pod_name":                     pod,
		"__meta_kubernetes_pod_container_name":           "gpulink-exporter",
		"__meta_kubernetes_pod_node_name":                restartNode,
		"__meta_kubernetes_endpoint_address_target_kind": "Pod",
		"__meta_kubernetes_endpoint_address_target_name": pod,
	}
	port, _ := ep["port"].(string)
	operator := []map[string]any{
		{"source_labels": []string{"job"}, "target_label": "__tmp_prometheus_job_name"},
		{"source_labels": []string{"__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"}, "separator": ";", "regex": "Node;(.*)", "replacement": "${1}", "target_label": "node"},
		{"source_labels": []string{"__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"}, "separator": ";", "regex": "Pod;(.*)", "replacement": "${1}", "target_label": "pod"},
		{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
		{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "service"},
		{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
		{"source_labels": []string{"__meta_kubernetes_pod_container_name"}, "target_label": "container"},
		{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "job", "replacement": "${1}"},
		{"target_label": "endpoint", "replacement": port},
	}
	operator = append(operator, monitorRelabelings(t, ep["relabelings"])...)
	honor, _ := ep["honorLabels"].(bool)
	path, _ := ep["path"].(string)
	job := map[string]any{
		"job_name":        fmt.Sprintf("serviceMonitor/%s/gpulink-gpulink-exporter/0", monitorNS),
		"honor_labels":    honor,
		"metrics_path":    path,
		"static_configs":  []map[string]any{{"targets": []string{addr}, "labels": meta}},
		"relabel_configs": operator,
	}
	if m := monitorRelabelings(t, ep["metricRelabelings"]); len(m) > 0 {
		job["metric_relabel_configs"] = m
	}
	b, err := yaml.Marshal([]any{job})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		out.WriteString("  " + line + "\n")
	}
	return out.String()
}

// monitorRelabelings turns a monitor's relabelings (the CRD's camelCase
// fields) into Prometheus relabel_configs, as the operator's
// generateRelabelConfig does.
func monitorRelabelings(t *testing.T, v any) []map[string]any {
	fields := map[string]string{
		"sourceLabels": "source_labels", "separator": "separator", "targetLabel": "target_label",
		"regex": "regex", "modulus": "modulus", "replacement": "replacement", "action": "action",
	}
	list, _ := v.([]any)
	var out []map[string]any
	for _, r := range list {
		in, _ := r.(map[string]any)
		c := map[string]any{}
		for k, v := range in {
			name, ok := fields[k]
			if !ok {
				t.Fatalf("relabeling field %q the translation does not know: %v", k, in)
			}
			if name == "action" {
				v = strings.ToLower(fmt.Sprint(v))
			}
			c[name] = v
		}
		out = append(out, c)
	}
	return out
}

// reloadScrape puts the new scrape config in place of the old in
// Prometheus's configuration file and has it read it again.
func reloadScrape(t *testing.T, s *stack, dir, old, new string) {
	path := filepath.Join(dir, "prometheus.yml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatal("the scrape config to replace is not in prometheus.yml")
	}
	writeFile(t, path, strings.Replace(string(b), old, new, 1))
	resp, err := http.Post(s.prom+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reload: %s", resp.Status)
	}
}

// gpuUUID reads the UUID of GPU gpu from an exporter's metrics.
func gpuUUID(t *testing.T, addr, gpu string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "gpulink_gpu_info{") || !strings.Contains(line, `gpu="`+gpu+`"`) {
			continue
		}
		if i := strings.Index(line, `uuid="`); i >= 0 {
			rest := line[i+len(`uuid="`):]
			return rest[:strings.IndexByte(rest, '"')]
		}
	}
	t.Fatalf("no gpulink_gpu_info with a uuid for GPU %s", gpu)
	return ""
}

// alertActiveAt is when Prometheus's alert name for GPU gpu became active
// (went pending), from /api/v1/alerts.
func alertActiveAt(t *testing.T, s *stack, name, gpu string) time.Time {
	resp, err := http.Get(s.prom + "/api/v1/alerts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Alerts []struct {
				Labels   map[string]string `json:"labels"`
				State    string            `json:"state"`
				ActiveAt time.Time         `json:"activeAt"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Data.Alerts {
		if a.Labels["alertname"] == name && a.Labels["gpu"] == gpu {
			return a.ActiveAt
		}
	}
	t.Fatalf("no %s alert for GPU %s", name, gpu)
	return time.Time{}
}

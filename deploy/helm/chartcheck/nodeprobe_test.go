package main

import (
	"strings"
	"testing"
)

// ringRender is what the chart renders with nodeProbe on: the DaemonSet's
// part, the modules ConfigMap and the ring ServiceMonitor.
const ringRender = `kind: DaemonSet
metadata: {name: x}
spec:
  template:
    spec:
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      containers:
      - name: gpulink-exporter
        args:
        - --node-probe.enabled
        - --node-probe.min-interval=1m
        - --node-probe.config.file=/etc/gpulink-exporter/node-probe/modules.yml
        - --node-probe.token-file=/etc/gpulink-exporter/node-probe-token/token
        volumeMounts:
        - {name: node-probe-modules, mountPath: /etc/gpulink-exporter/node-probe, readOnly: true}
        - {name: node-probe-token, mountPath: /etc/gpulink-exporter/node-probe-token, readOnly: true}
      volumes:
      - {name: node-probe-modules, configMap: {name: x-node-probe}}
      - {name: node-probe-token, secret: {secretName: x-node-probe-token}}
---
kind: Secret
metadata: {name: x-node-probe-token}
data:
  token: MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=
---
kind: ConfigMap
metadata: {name: x-node-probe}
data:
  modules.yml: |
    modules:
      nccl_ring:
        size: 128MiB
---
kind: ServiceMonitor
metadata: {name: x-node-probe}
spec:
  attachMetadata: {node: true}
  endpoints:
  - port: metrics
    path: /probe
    params: {module: [nccl_ring]}
    authorization: {type: Bearer, credentials: {name: x-node-probe-token, key: token}}
    relabelings:
    - {sourceLabels: [__meta_kubernetes_node_label_gpulink_io_node_probe_prober], regex: .+, action: keep}
    - {sourceLabels: [__address__], targetLabel: __param_target}
    - {sourceLabels: [__meta_kubernetes_node_label_gpulink_io_node_probe_prober], targetLabel: __address__, replacement: "$1:9849"}
`

func TestCheckNodeProbe(t *testing.T) {
	check := func(manifest string, mode renderMode) string {
		t.Helper()
		objs, err := parseObjects([]byte(manifest))
		if err != nil {
			t.Fatal(err)
		}
		return joinErrs(checkNodeProbe(objs, mode))
	}
	if got := check(ringRender, renderAll); got != "" {
		t.Fatalf("good render: %s", got)
	}
	if got := check(ringRender, renderDefault); !strings.Contains(got, "--node-probe.enabled with default values") ||
		!strings.Contains(got, "hostNetwork with default values") || !strings.Contains(got, "default values render a ring ServiceMonitor") {
		t.Errorf("the ring with default values: %q", got)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"join off", "        - --node-probe.enabled\n", "", "--node-probe.enabled missing"},
		{"pod network", "      hostNetwork: true\n", "", "want hostNetwork"},
		{"no host DNS", "dnsPolicy: ClusterFirstWithHostNet", "dnsPolicy: ClusterFirst", "want hostNetwork"},
		{"bad module", "size: 128MiB", "size: 8GiB", `the exporter would refuse modules.yml: module "nccl_ring": size: 8GiB`},
		{"unknown field", "size: 128MiB", "sise: 128MiB", "field sise not found"},
		{"key", "  modules.yml: |", "  modules.yaml: |", "has no key modules.yml"},
		{"not mounted", "mountPath: /etc/gpulink-exporter/node-probe,", "mountPath: /etc/node-probe,", "no ConfigMap mounted at /etc/gpulink-exporter/node-probe"},
		{"no ConfigMap", "metadata: {name: x-node-probe}\ndata:", "metadata: {name: other}\ndata:", "ConfigMap x-node-probe is not rendered"},
		{"no node labels", "attachMetadata: {node: true}", "attachMetadata: {node: false}", "attachMetadata.node must be true"},
		{"no target", "targetLabel: __param_target", "targetLabel: target", "no relabeling of __address__ to __param_target"},
		{"prober from the pod", "targetLabel: __address__, replacement", "targetLabel: __tmp, replacement", "no relabeling of __address__ from a node label"},
		{"no module", "params: {module: [nccl_ring]}", "params: {}", "want one module parameter"},
		{"no ring", "kind: ServiceMonitor", "kind: PodMonitor", "want 1 ring ServiceMonitor, got 0"},
		{"no token", "        - --node-probe.token-file=/etc/gpulink-exporter/node-probe-token/token\n", "", "--node-probe.token-file missing"},
		{"token not mounted", "mountPath: /etc/gpulink-exporter/node-probe-token,", "mountPath: /etc/token,", "no Secret mounted at /etc/gpulink-exporter/node-probe-token"},
		{"short token", "token: MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "token: c2VjcmV0", "the exporter would refuse its token token: the token is 6 characters"},
		{"/probe without it", "    authorization: {type: Bearer, credentials: {name: x-node-probe-token, key: token}}\n", "", "calls /probe with neither the token"},
	} {
		if !strings.Contains(ringRender, tc.old) {
			t.Fatalf("%s: %q not in the render", tc.name, tc.old)
		}
		got := check(strings.Replace(ringRender, tc.old, tc.new, 1), renderAll)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: errors %q lack %q", tc.name, got, tc.want)
		}
	}
	// The metrics ServiceMonitor check leaves the ring's to this one.
	objs, err := parseObjects([]byte(ringRender))
	if err != nil {
		t.Fatal(err)
	}
	if got := joinErrs(checkServiceMonitor(objs, renderDefault)); got != "" {
		t.Errorf("the metrics check counted the ring ServiceMonitor: %s", got)
	}
}

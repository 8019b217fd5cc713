package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// fitDaemonSet is what checkFit and the variants look at in a render.
const fitDaemonSet = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: gpulink-exporter
spec:
  revisionHistoryLimit: 10
  template:
    spec:
      priorityClassName: system-node-critical
      runtimeClassName: nvidia
      tolerations:
      - {operator: Exists, effect: NoSchedule}
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: nvidia.com/gpu.present, operator: In, values: ["true"]}
      containers:
      - name: gpulink-exporter
        args: [--web.config.file=/etc/gpulink-exporter/web/web-config.yml]
        livenessProbe: {tcpSocket: {port: metrics}}
        readinessProbe: {tcpSocket: {port: metrics}}
        volumeMounts:
        - {name: web-config, mountPath: /etc/gpulink-exporter/web, readOnly: true}
      volumes:
      - {name: pod-resources, hostPath: {path: /var/lib/kubelet/pod-resources, type: DirectoryOrCreate}}
      - {name: web-config, secret: {secretName: gpulink-web}}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: gpulink-exporter
  labels: {release: kube-prometheus-stack}
spec:
  endpoints:
  - port: metrics
    scheme: https
    tlsConfig: {ca: {secret: {name: gpulink-web, key: ca.crt}}, serverName: gpulink-exporter}
    basicAuth:
      username: {name: gpulink-web, key: username}
      password: {name: gpulink-web, key: password}
    relabelings:
    - {sourceLabels: [__meta_kubernetes_pod_node_name], targetLabel: instance}
    - {action: labeldrop, regex: pod|container|endpoint|namespace|service}
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: gpulink-exporter
spec:
  groups:
  - name: g
    rules:
    - alert: GPULost
      expr: gpulink_gpu_lost == 1
      annotations:
        runbook_url: https://example.com/README.md#alert-gpulost
---
apiVersion: v1
kind: Pod
metadata:
  name: gpulink-exporter-test-metrics
  annotations: {helm.sh/hook: test}
spec:
  containers:
  - name: scrape
    env:
    - {name: SCRAPE_USERNAME, valueFrom: {secretKeyRef: {name: gpulink-web, key: username}}}
    command: [sh, -ec, 'curl --user "$SCRAPE_USERNAME:$SCRAPE_PASSWORD" https://svc:9849/metrics | grep gpulink_exporter_build_info']
`

func TestCheckFit(t *testing.T) {
	check := func(manifest string, extra func([]object) []error) string {
		t.Helper()
		objs, err := parseObjects([]byte(manifest))
		if err != nil {
			t.Fatal(err)
		}
		errs := checkFit(objs)
		if extra != nil {
			errs = append(errs, extra(objs)...)
		}
		return joinErrs(errs)
	}
	auth := func(objs []object) []error { return checkAuth(layout{}, objs) }
	operator := func(objs []object) []error { return variants["gpu-operator"](layout{}, objs) }
	if got := check(fitDaemonSet, auth); got != "" {
		t.Fatalf("good render: %s", got)
	}
	if got := check(fitDaemonSet, operator); got != "" {
		t.Fatalf("good render, gpu-operator: %s", got)
	}
	for _, tc := range []struct {
		name, old, new, want string
		extra                func([]object) []error
	}{
		{"no priority", "priorityClassName: system-node-critical", "priorityClassName: \"\"", "priorityClassName", nil},
		{"one taint", "{operator: Exists, effect: NoSchedule}", "{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}", "every NoSchedule taint", nil},
		{"no history limit", "revisionHistoryLimit: 10", "minReadySeconds: 0", "revisionHistoryLimit", nil},
		{"pod-resources blocks", "type: DirectoryOrCreate", "type: Directory", "want DirectoryOrCreate", nil},
		{"no health check", "livenessProbe: {tcpSocket: {port: metrics}}", "livenessProbe: {periodSeconds: 10}", "livenessProbe has no handler", nil},
		{"pod IP instance", "targetLabel: instance", "targetLabel: node", "instance is not relabelled", nil},
		{"exporter pod labels kept", "regex: pod|container|endpoint|namespace|service", "regex: pod|container|endpoint", "keeps the target labels namespace, service", nil},
		{"runbook", "runbook_url:", "runbook:", "has a runbook annotation", nil},
		{"GET with auth", "readinessProbe: {tcpSocket: {port: metrics}}", "readinessProbe: {httpGet: {path: /, port: metrics}}", "readinessProbe is httpGet", auth},
		{"http scrape", "scheme: https", "scheme: http", "scheme http, want https", auth},
		{"no credentials", "key: password}", "key: pass}", "basicAuth.password is not key password", auth},
		{"no web config", "args: [--web.config.file=/etc/gpulink-exporter/web/web-config.yml]", "args: []", "no --web.config.file", auth},
		{"test without credentials", "--user", "-v", "no credentials", auth},
		{"GFD label", "key: nvidia.com/gpu.present, operator: In", "key: nvidia.com/gpu.count, operator: Exists", "required node affinity terms", operator},
		{"no RuntimeClass", "runtimeClassName: nvidia", "runtimeClassName: \"\"", "runtimeClassName \"\", want \"nvidia\"", operator},
	} {
		if !strings.Contains(fitDaemonSet, tc.old) {
			t.Fatalf("%s: %q not in the manifest", tc.name, tc.old)
		}
		got := check(strings.Replace(fitDaemonSet, tc.old, tc.new, 1), tc.extra)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: errors %q lack %q", tc.name, got, tc.want)
		}
	}
}

func TestCheckThresholds(t *testing.T) {
	l := newRepo(t) // rules: GPUPCIeLinkDowntrained (a.yml), NICPortDown (b.yml)
	schema := `{"properties": {"prometheusRule": {"properties": {"alerts": {"properties": {
  "GPUPCIeLinkDowntrained": {"$ref": "#/$defs/alert"},
  "NICPortDown": {"$ref": "#/$defs/alertWithThreshold"}}}}}}}`
	write(t, filepath.Join(l.chart, "values.schema.json"), schema)
	write(t, filepath.Join(l.chart, "files/rule-thresholds.yaml"), "NICPortDown:\n  format: \"== %v\"\n  default: 0\n")
	if got := joinErrs(l.checkThresholds()); got != "" {
		t.Fatalf("consistent: %s", got)
	}
	write(t, filepath.Join(l.chart, "files/rule-thresholds.yaml"), "NICPortDown:\n  format: \"== %v\"\n  default: 1\n")
	if got := joinErrs(l.checkThresholds()); !strings.Contains(got, `format "== %v" with default 1 gives "== 1", which is not in the alert's expression`) {
		t.Errorf("default not the rule's: %q", got)
	}
	write(t, filepath.Join(l.chart, "files/rule-thresholds.yaml"), "NICPortDown:\n  format: \"!= %v\"\n  default: 0\n")
	if got := joinErrs(l.checkThresholds()); !strings.Contains(got, `gives "!= 0", which is not in the alert's expression`) {
		t.Errorf("format not the rule's: %q", got)
	}
	write(t, filepath.Join(l.chart, "files/rule-thresholds.yaml"), "{}\n")
	if got := joinErrs(l.checkThresholds()); !strings.Contains(got, "prometheusRule.alerts.NICPortDown refers to #/$defs/alertWithThreshold") {
		t.Errorf("schema allows a threshold the file lacks: %q", got)
	}
	write(t, filepath.Join(l.chart, "values.schema.json"), strings.Replace(schema, `"NICPortDown"`, `"NICPortDwn"`, 1))
	got := joinErrs(l.checkThresholds())
	if !strings.Contains(got, "no entry for alert NICPortDown") || !strings.Contains(got, "prometheusRule.alerts.NICPortDwn: no such alert") {
		t.Errorf("schema's alerts differ from the rules: %q", got)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func joinErrs(errs []error) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error())
		b.WriteString("\n")
	}
	return b.String()
}

const rulesA = `groups:
- name: gpulink-pcie
  rules:
  - alert: GPUPCIeLinkDowntrained
    expr: gpulink_pcie_link_width < gpulink_pcie_link_max_width
    for: 10m
    labels:
      severity: warning
    annotations:
      summary: 'GPU {{ $labels.gpu }} trained at x{{ $value }}'
`

const rulesB = `groups:
- name: gpulink-nic
  limit: 1000000
  rules:
  - alert: NICPortDown
    expr: gpulink_nic_port_up == 0
`

// newRepo lays out a repository with two rules files, a promtool test file,
// the scrape config example and one dashboard.
func newRepo(t *testing.T) layout {
	t.Helper()
	root := t.TempDir()
	write(t, filepath.Join(root, "VERSION"), "1.2.3\n")
	write(t, filepath.Join(root, "deploy/prometheus/a.yml"), rulesA)
	write(t, filepath.Join(root, "deploy/prometheus/b.yml"), rulesB)
	write(t, filepath.Join(root, "deploy/prometheus/a_test.yml"), "rule_files: [a.yml]\ntests: []\n")
	write(t, filepath.Join(root, "deploy/prometheus/scrape-config.example.yml"), "scrape_configs: []\n")
	write(t, filepath.Join(root, "dashboards/gpu-links.json"), `{"title": "GPU links", "panels": [1, 2]}`+"\n")
	write(t, filepath.Join(root, "deploy/helm/gpulink-exporter/Chart.yaml"), "apiVersion: v2\nname: gpulink-exporter\nversion: 0.1.0\nappVersion: \"0.0.1\"\n")
	return layoutAt(root)
}

func TestRuleFileNames(t *testing.T) {
	l := newRepo(t)
	names, err := ruleFileNames(l.rulesSrc)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "a.yml,b.yml" {
		t.Errorf("rule files = %v, want [a.yml b.yml] (not the test file or the scrape config)", names)
	}
	write(t, filepath.Join(l.rulesSrc, "broken.yml"), "groups: [\n")
	if _, err := ruleFileNames(l.rulesSrc); err == nil || !strings.Contains(err.Error(), "broken.yml") {
		t.Errorf("broken YAML: err = %v, want one naming broken.yml", err)
	}
}

func TestSyncAndCheckCopies(t *testing.T) {
	l := newRepo(t)
	errs := l.checkCopies()
	got := joinErrs(errs)
	for _, want := range []string{"files/rules/a.yml is missing", "files/rules/b.yml is missing", "files/dashboards/gpu-links.json is missing", `appVersion "0.0.1" is not VERSION "1.2.3"`} {
		if !strings.Contains(got, want) {
			t.Errorf("before sync: errors %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "a_test.yml") || strings.Contains(got, "scrape-config") {
		t.Errorf("before sync: non-rule files wanted in the chart: %s", got)
	}

	if _, err := l.sync(); err != nil {
		t.Fatal(err)
	}
	if errs := l.checkCopies(); len(errs) != 0 {
		t.Fatalf("after sync: %s", joinErrs(errs))
	}

	// A source edited after the sync, a stale copy, and a new dashboard.
	write(t, filepath.Join(l.rulesSrc, "b.yml"), strings.Replace(rulesB, "== 0", "< 1", 1))
	write(t, filepath.Join(l.rulesCopy, "gone.yml"), rulesA)
	write(t, filepath.Join(l.dashboardsSrc, "nic.json"), `{"title": "NICs"}`)
	got = joinErrs(l.checkCopies())
	for _, want := range []string{"files/rules/b.yml differs from", "files/rules/gone.yml is in the chart but its source is gone", "files/dashboards/nic.json is missing"} {
		if !strings.Contains(got, want) {
			t.Errorf("after edits: errors %q lack %q", got, want)
		}
	}
	changed, err := l.sync()
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 3 {
		t.Errorf("second sync changed %v, want b.yml, nic.json and the removal of gone.yml", changed)
	}
	if errs := l.checkCopies(); len(errs) != 0 {
		t.Fatalf("after second sync: %s", joinErrs(errs))
	}
}

func TestCheckSourcesDashboards(t *testing.T) {
	l := newRepo(t)
	write(t, filepath.Join(l.dashboardsSrc, "bad name.json"), `{}`)
	write(t, filepath.Join(l.dashboardsSrc, "broken.json"), `{"title": `)
	got := joinErrs(l.checkSources())
	if !strings.Contains(got, "bad name.json: the file name is the ConfigMap key") {
		t.Errorf("errors %q do not reject a file name with a space", got)
	}
	if !strings.Contains(got, "broken.json: not valid JSON") {
		t.Errorf("errors %q do not reject broken JSON", got)
	}
	if _, err := l.sync(); err == nil {
		t.Error("sync copied invalid dashboards")
	}
}

func TestCompareRuleGroups(t *testing.T) {
	l := newRepo(t)
	source, err := sourceRuleGroups(l.rulesSrc)
	if err != nil {
		t.Fatal(err)
	}
	// What Helm's fromYaml/toYaml makes of the same groups: numbers come
	// back as floats, large ones in exponent form.
	rendered, err := parseObjects([]byte(`kind: PrometheusRule
spec:
  groups:
  - name: gpulink-pcie
    rules:
    - alert: GPUPCIeLinkDowntrained
      annotations:
        summary: 'GPU {{ $labels.gpu }} trained at x{{ $value }}'
      expr: gpulink_pcie_link_width < gpulink_pcie_link_max_width
      for: 10m
      labels:
        severity: warning
  - limit: 1e+06
    name: gpulink-nic
    rules:
    - alert: NICPortDown
      expr: gpulink_nic_port_up == 0
`))
	if err != nil {
		t.Fatal(err)
	}
	groups, _ := dig(rendered[0], "spec", "groups").([]any)
	if err := compareRuleGroups(groups, source); err != nil {
		t.Errorf("equal groups: %v", err)
	}

	changed := normalize(groups).([]any)
	rule := dig(changed[1], "rules").([]any)[0].(map[string]any)
	rule["expr"] = "gpulink_nic_port_up < 1"
	err = compareRuleGroups(changed, source)
	if err == nil || !strings.Contains(err.Error(), `"gpulink-nic"`) {
		t.Errorf("changed expr: err = %v, want one naming group gpulink-nic", err)
	}
	if err := compareRuleGroups(groups[:1], source); err == nil || !strings.Contains(err.Error(), "has 1 rule groups") {
		t.Errorf("missing group: err = %v", err)
	}
	if err := compareRuleGroups(nil, nil); err != nil {
		t.Errorf("no rules at all: %v", err)
	}
}

// goodDaemonSet is a render of the chart's DaemonSet with default values,
// reduced to what checkDaemonSet looks at.
const goodDaemonSet = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: gpulink-exporter
spec:
  template:
    spec:
      hostPID: true
      securityContext:
        seccompProfile:
          type: RuntimeDefault
      containers:
      - name: gpulink-exporter
        args:
        - --path.sysfs=/host/sys
        - --path.procfs=/host/proc
        - --collector.kubernetes
        - --kubernetes.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock
        env:
        - name: NVIDIA_VISIBLE_DEVICES
          value: all
        - name: NVIDIA_DRIVER_CAPABILITIES
          value: compute,utility
        resources:
          limits:
            memory: 1Gi
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities:
            drop: [ALL]
            add: [SYS_PTRACE, SYS_NICE]
        volumeMounts:
        - {name: sys, mountPath: /host/sys, readOnly: true}
        - {name: proc, mountPath: /host/proc, readOnly: true}
        - {name: tmp, mountPath: /tmp}
        - {name: pr, mountPath: /var/lib/kubelet/pod-resources, readOnly: true}
      volumes:
      - {name: sys, hostPath: {path: /sys}}
      - {name: proc, hostPath: {path: /proc}}
      - {name: tmp, emptyDir: {}}
      - {name: pr, hostPath: {path: /var/lib/kubelet/pod-resources}}
`

// daemonSetErrors is what checkDaemonSet says of manifest.
func daemonSetErrors(t *testing.T, manifest string, mode renderMode) string {
	t.Helper()
	objs, err := parseObjects([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	return joinErrs(checkDaemonSet(objs, mode))
}

func TestCheckDaemonSet(t *testing.T) {
	check := func(manifest string, mode renderMode) string { t.Helper(); return daemonSetErrors(t, manifest, mode) }
	if got := check(goodDaemonSet, renderDefault); got != "" {
		t.Fatalf("good DaemonSet: %s", got)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"no hostPID", "hostPID: true", "hostPID: false", "hostPID must be true"},
		{"GPU resource", "memory: 1Gi", "nvidia.com/gpu: 1", "must not take any from the scheduler"},
		{"writable /proc", "mountPath: /host/proc, readOnly: true", "mountPath: /host/proc", "--path.procfs=/host/proc: want the host's /proc mounted read-only"},
		{"wrong sysfs", "--path.sysfs=/host/sys", "--path.sysfs=/sys", "--path.sysfs=/sys: want the host's /sys"},
		{"some GPUs", "value: all", "value: \"0\"", "NVIDIA_VISIBLE_DEVICES"},
		{"no compute", "compute,utility", "utility", "lacks compute"},
		{"escalation", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", "allowPrivilegeEscalation must be false"},
		{"writable root", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem must be true"},
		{"more caps", "[SYS_PTRACE, SYS_NICE]", "[SYS_PTRACE, SYS_NICE, SYS_ADMIN]", "capabilities.add"},
		{"caps kept", "drop: [ALL]", "drop: [NET_RAW]", "drop must be [ALL]"},
		{"no seccomp", "type: RuntimeDefault", "type: Unconfined", "seccompProfile must be RuntimeDefault"},
		{"dcgm on by default", "- --path.procfs=/host/proc", "- --path.procfs=/host/proc\n        - --collector.dcgm", "--collector.dcgm is on with default values"},
		{"no pod attribution", "        - --collector.kubernetes\n", "", "--collector.kubernetes is missing"},
		{"socket not from the host", "      - {name: pr, hostPath: {path: /var/lib/kubelet/pod-resources}}\n", "", "want the host's /var/lib/kubelet/pod-resources mounted"},
	} {
		if !strings.Contains(goodDaemonSet, tc.old) {
			t.Fatalf("%s: %q not in the manifest", tc.name, tc.old)
		}
		got := check(strings.Replace(goodDaemonSet, tc.old, tc.new, 1), renderDefault)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: errors %q lack %q", tc.name, got, tc.want)
		}
	}
	if got := check(goodDaemonSet, renderAll); !strings.Contains(got, "--collector.dcgm is missing") {
		t.Errorf("all features: errors %q lack the missing DCGM flag", got)
	}
	all := strings.NewReplacer("- --path.procfs=/host/proc", `- --path.procfs=/host/proc
        - --collector.dcgm
        - --dcgm.address=$(NODE_IP):5555
        - --slurm.job-mapping-dir=/run/dcgm-job-map`,
		"        - {name: pr, mountPath: /var/lib/kubelet/pod-resources, readOnly: true}\n", `        - {name: pr, mountPath: /var/lib/kubelet/pod-resources, readOnly: true}
        - {name: jobs, mountPath: /run/dcgm-job-map, readOnly: true}
`,
		"      - {name: pr, hostPath: {path: /var/lib/kubelet/pod-resources}}\n", `      - {name: pr, hostPath: {path: /var/lib/kubelet/pod-resources}}
      - {name: jobs, hostPath: {path: /run/dcgm-job-map, type: DirectoryOrCreate}}
`).Replace(goodDaemonSet)
	if got := check(all, renderAll); got != "" {
		t.Errorf("all features: %s", got)
	}
	// The mapping directory must be the host's, read-only.
	for _, tc := range []struct{ old, new string }{
		{"{name: jobs, mountPath: /run/dcgm-job-map, readOnly: true}", "{name: jobs, mountPath: /run/dcgm-job-map}"},
		{"      - {name: jobs, hostPath: {path: /run/dcgm-job-map, type: DirectoryOrCreate}}\n", ""},
	} {
		if got := check(strings.Replace(all, tc.old, tc.new, 1), renderAll); !strings.Contains(got, "--slurm.job-mapping-dir=/run/dcgm-job-map: want the host's") {
			t.Errorf("mapping directory %q: errors %q", tc.new, got)
		}
	}
}

func TestCheckDashboards(t *testing.T) {
	l := newRepo(t)
	cm := `kind: ConfigMap
metadata:
  name: x-dashboard-gpu-links
  labels:
    grafana_dashboard: "1"
data:
  gpu-links.json: |-
    {
      "title": "GPU links",
      "panels": [1, 2]
    }
`
	objs, err := parseObjects([]byte(cm))
	if err != nil {
		t.Fatal(err)
	}
	if errs := l.checkDashboards(objs, renderAll); len(errs) != 0 {
		t.Errorf("same dashboard, other layout: %s", joinErrs(errs))
	}
	if errs := l.checkDashboards(objs, renderDefault); len(errs) != 1 {
		t.Errorf("dashboards with default values: got %d errors, want 1", len(errs))
	}
	objs, _ = parseObjects([]byte(strings.Replace(cm, "[1, 2]", "[1]", 1)))
	if got := joinErrs(l.checkDashboards(objs, renderAll)); !strings.Contains(got, "differs from its source") {
		t.Errorf("changed dashboard: errors %q", got)
	}
	write(t, filepath.Join(l.dashboardsSrc, "nic.json"), `{}`)
	objs, _ = parseObjects([]byte(cm))
	if got := joinErrs(l.checkDashboards(objs, renderAll)); !strings.Contains(got, "nic.json has no ConfigMap") {
		t.Errorf("dashboard left out: errors %q", got)
	}
}

func TestCheckReadme(t *testing.T) {
	l := newRepo(t)
	write(t, filepath.Join(l.chart, "values.yaml"), `image:
  repository: r
  tag: ""
resources:
  limits:
    memory: 1Gi
extraArgs: []
nodeSelector: {}
`)
	readme := "# chart\n\n## Privileges\n\n| setting | why |\n|---|---|\n| `hostPID: true` | |\n\n## Values\n\n| key | default | meaning |\n|---|---|---|\n| `image.repository` | | |\n| `image.tag` | | |\n| `resources` | | |\n| `extraArgs` | | |\n| `nodeSelector` | | |\n\n## Other\n\n| `notavalue` | |\n"
	write(t, filepath.Join(l.chart, "README.md"), readme)
	if errs := l.checkReadme(); len(errs) != 0 {
		t.Errorf("complete table: %s", joinErrs(errs))
	}
	write(t, filepath.Join(l.chart, "README.md"), strings.Replace(readme, "| `image.tag` | | |\n", "| `image.tags` | | |\n", 1))
	got := joinErrs(l.checkReadme())
	if !strings.Contains(got, "value image.tag is not in the values table") || !strings.Contains(got, "documents image.tags, which values.yaml does not have") {
		t.Errorf("table with a typo: errors %q", got)
	}
}

func TestCheckNames(t *testing.T) {
	objs, err := parseObjects([]byte(`kind: ConfigMap
metadata: {name: x-dashboard, namespace: gpulink}
---
kind: ConfigMap
metadata: {name: x-dashboard, namespace: gpulink}
---
kind: Service
metadata: {name: x-dashboard, namespace: gpulink}
---
kind: ConfigMap
metadata: {name: X_Dashboard, namespace: gpulink}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := joinErrs(checkNames(objs))
	if !strings.Contains(got, "two objects are ConfigMap gpulink/x-dashboard") {
		t.Errorf("duplicate ConfigMap not found: %q", got)
	}
	if strings.Contains(got, "Service") {
		t.Errorf("a Service and a ConfigMap may share a name: %q", got)
	}
	if !strings.Contains(got, `"X_Dashboard": not a valid object name`) {
		t.Errorf("invalid name not found: %q", got)
	}
}

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// What every render must hold where users install the chart (issue 27):
// scheduled on a full, tainted GPU node, not stuck on a kubelet path,
// series that survive restarts, rules with runbook_url. And per variant
// (scripts/helm-check.sh renders ci/<variant>-values.yaml), what that
// variant's values must produce.

// podOf is the DaemonSet's pod spec and its one container; nil when the
// render has no single DaemonSet with one container (checkDaemonSet says
// so).
func podOf(objs []object) (pod, c any) {
	dss := byKind(objs, "DaemonSet")
	if len(dss) != 1 {
		return nil, nil
	}
	pod = dig(dss[0], "spec", "template", "spec")
	cs := asSlice(dig(pod, "containers"))
	if len(cs) != 1 {
		return nil, nil
	}
	return pod, cs[0]
}

func argsOf(c any) []string {
	var args []string
	for _, a := range asSlice(dig(c, "args")) {
		s, _ := a.(string)
		args = append(args, s)
	}
	return args
}

// mountedVolume is the pod's volume that c mounts at path, and whether
// read-only; nil where nothing is mounted there.
func mountedVolume(pod, c any, path string) (vol any, readOnly bool) {
	var name any
	for _, m := range asSlice(dig(c, "volumeMounts")) {
		if dig(m, "mountPath") == path {
			name, readOnly = dig(m, "name"), dig(m, "readOnly") == true
		}
	}
	if name == nil {
		return nil, false
	}
	for _, v := range asSlice(dig(pod, "volumes")) {
		if dig(v, "name") == name {
			return v, readOnly
		}
	}
	return nil, false
}

// checkFit checks what every render must hold, whatever the values.
func checkFit(objs []object) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	dss := byKind(objs, "DaemonSet")
	pod, c := podOf(objs)
	if pod == nil {
		return nil
	}
	if p := dig(pod, "priorityClassName"); p != "system-node-critical" {
		fail("DaemonSet: priorityClassName is %v, want system-node-critical (as dcgm-exporter and the GPU Operator): on a full GPU node the pod would stay Pending or be evicted first", p)
	}
	if !tolerates(pod, "", "NoSchedule") {
		fail("DaemonSet: does not tolerate every NoSchedule taint (operator Exists, no key)")
	}
	if _, ok := dig(dss[0], "spec", "revisionHistoryLimit").(int); !ok {
		fail("DaemonSet: no spec.revisionHistoryLimit")
	}
	for _, v := range asSlice(dig(pod, "volumes")) {
		if dig(v, "name") == "pod-resources" {
			if t, _ := dig(v, "hostPath", "type").(string); t != "" && t != "DirectoryOrCreate" {
				fail("DaemonSet: pod-resources hostPath type %q blocks the pod where the kubelet keeps its socket elsewhere; want DirectoryOrCreate", t)
			}
		}
	}
	for _, p := range []string{"livenessProbe", "readinessProbe"} {
		if handler(dig(c, p)) == "" {
			fail("DaemonSet: %s has no handler", p)
		}
	}
	for _, o := range objs {
		switch o.kind() {
		case "ServiceMonitor", "PodMonitor":
			for _, ep := range monitorEndpoints(o) {
				if !instanceFromNodeName(ep) {
					fail("%s %s: instance is not relabelled from __meta_kubernetes_pod_node_name: every restart would start new series", o.kind(), o.name())
				}
				if kept := keptPodLabels(ep); len(kept) > 0 {
					fail("%s %s: keeps the target labels %s that prometheus-operator adds for the exporter's pod: every restart would start new series, and the workload's pod and namespace would read exported_*", o.kind(), o.name(), strings.Join(kept, ", "))
				}
			}
		case "PrometheusRule":
			for _, g := range asSlice(dig(o, "spec", "groups")) {
				for _, r := range asSlice(dig(g, "rules")) {
					name, _ := dig(r, "alert").(string)
					if name == "" {
						continue
					}
					if u, _ := dig(r, "annotations", "runbook_url").(string); !strings.Contains(u, "#alert-"+strings.ToLower(name)) {
						fail("PrometheusRule: alert %s has runbook_url %q, want its runbook section", name, u)
					}
					if dig(r, "annotations", "runbook") != nil {
						fail("PrometheusRule: alert %s has a runbook annotation; Prometheus and kube-prometheus use runbook_url", name)
					}
				}
			}
		}
	}
	return errs
}

// tolerates reports whether the pod tolerates every taint of key (every
// key when "") with effect.
func tolerates(pod any, key, effect string) bool {
	for _, t := range asSlice(dig(pod, "tolerations")) {
		k, _ := dig(t, "key").(string)
		e, _ := dig(t, "effect").(string)
		if dig(t, "operator") == "Exists" && (k == "" || k == key) && (e == "" || e == effect) {
			return true
		}
	}
	return false
}

// handler names a health check's handler, "" for none.
func handler(probe any) string {
	for _, h := range []string{"httpGet", "tcpSocket", "exec", "grpc"} {
		if dig(probe, h) != nil {
			return h
		}
	}
	return ""
}

func instanceFromNodeName(ep any) bool {
	for _, r := range asSlice(dig(ep, "relabelings")) {
		if dig(r, "targetLabel") == "instance" && slices.Equal(asSlice(dig(r, "sourceLabels")), []any{"__meta_kubernetes_pod_node_name"}) {
			return true
		}
	}
	return false
}

// operatorPodLabels are the target labels prometheus-operator adds to every
// ServiceMonitor and PodMonitor target, ahead of the monitor's relabelings,
// that name the exporter's pod rather than the node
// (pkg/prometheus/promcfg.go, generateServiceMonitorConfig and
// generatePodMonitorConfig).
var operatorPodLabels = []string{"pod", "container", "endpoint", "namespace", "service"}

// keptPodLabels is those of operatorPodLabels no labeldrop of ep drops.
func keptPodLabels(ep any) []string {
	var kept []string
	for _, l := range operatorPodLabels {
		dropped := false
		for _, r := range asSlice(dig(ep, "relabelings")) {
			if a, _ := dig(r, "action").(string); strings.ToLower(a) != "labeldrop" {
				continue
			}
			re, err := regexp.Compile("^(?:" + fmt.Sprint(dig(r, "regex")) + ")$")
			if err == nil && re.MatchString(l) {
				dropped = true
			}
		}
		if !dropped {
			kept = append(kept, l)
		}
	}
	return kept
}

// gpuNodeKeys is the label keys of each required node affinity term.
func gpuNodeKeys(pod any) [][]string {
	var out [][]string
	for _, term := range asSlice(dig(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")) {
		var keys []string
		for _, e := range asSlice(dig(term, "matchExpressions")) {
			k, _ := dig(e, "key").(string)
			keys = append(keys, k+" "+fmt.Sprint(dig(e, "operator")))
		}
		out = append(out, keys)
	}
	return out
}

// variant is what one ci/<name>-values.yaml render must contain.
type variant func(l layout, objs []object) []error

var variants = map[string]variant{
	"default":        checkDefaultFit,
	"gpu-operator":   checkNodeSelection("gpuOperator", [][]string{{"nvidia.com/gpu.present In"}}, "nvidia"),
	"gfd":            checkNodeSelection("gfd", [][]string{{"nvidia.com/gpu.count Exists"}}, ""),
	"nfd":            checkNodeSelection("nfd", [][]string{{"feature.node.kubernetes.io/pci-10de.present In"}, {"feature.node.kubernetes.io/pci-0302_10de.present In"}, {"feature.node.kubernetes.io/pci-0300_10de.present In"}}, ""),
	"auth":           checkAuth,
	"dcgm-operator":  checkDCGMOperator,
	"nodeprobe-auth": checkNodeProbeAuth,
	"rules":          checkRuleOverrides,
	"rdma":           checkRDMADevicePlugin,
	"efa":            checkEFA,
}

// checkDefaultFit: every GPU label (any of them selects a node), the
// Operator's RuntimeClass.
func checkDefaultFit(_ layout, objs []object) []error {
	return checkNodeSelection("any", [][]string{
		{"nvidia.com/gpu.present In"}, {"nvidia.com/gpu.count Exists"},
		{"feature.node.kubernetes.io/pci-10de.present In"}, {"feature.node.kubernetes.io/pci-0302_10de.present In"}, {"feature.node.kubernetes.io/pci-0300_10de.present In"},
	}, "nvidia")(layout{}, objs)
}

func checkNodeSelection(name string, terms [][]string, runtimeClass string) variant {
	return func(_ layout, objs []object) []error {
		pod, _ := podOf(objs)
		if pod == nil {
			return nil
		}
		var errs []error
		if got := gpuNodeKeys(pod); !slices.EqualFunc(got, terms, slices.Equal) {
			errs = append(errs, fmt.Errorf("gpuNodes=%s: required node affinity terms %q, want %q", name, got, terms))
		}
		if got, _ := dig(pod, "runtimeClassName").(string); got != runtimeClass {
			errs = append(errs, fmt.Errorf("gpuNodes=%s: runtimeClassName %q, want %q", name, got, runtimeClass))
		}
		return errs
	}
}

// webSecret is the web config's Secret in the auth variants.
const webSecret = "gpulink-web"

// checkWebMounted: --web.config.file names a key of the web Secret,
// mounted read-only; the health checks pass without credentials.
func checkWebMounted(objs []object, basicAuth bool) []error {
	pod, c := podOf(objs)
	if pod == nil {
		return nil
	}
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("web: "+format, a...)) }
	file, ok := flagValue(argsOf(c), "--web.config.file")
	if !ok {
		return []error{errors.New("web: no --web.config.file")}
	}
	dir := filepath.Dir(file)
	if vol, readOnly := mountedVolume(pod, c, dir); !readOnly || dig(vol, "secret", "secretName") != webSecret {
		fail("--web.config.file=%s: Secret %s not mounted read-only at %s", file, webSecret, dir)
	}
	for _, p := range []string{"livenessProbe", "readinessProbe"} {
		h := handler(dig(c, p))
		switch {
		case basicAuth && h != "tcpSocket":
			fail("%s is %s: with basic auth on an unauthenticated check must not need credentials (tcpSocket)", p, h)
		case !basicAuth && h == "httpGet" && dig(c, p, "httpGet", "scheme") != "HTTPS":
			fail("%s: GET without HTTPS against a TLS server", p)
		}
	}
	return errs
}

// checkMonitorAuth: https, the CA or no verification, and the Secret's
// username and password.
func checkMonitorAuth(o object, ep any) []error {
	var errs []error
	fail := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s %s: "+format, append([]any{o.kind(), o.name()}, a...)...))
	}
	if dig(ep, "scheme") != "https" {
		fail("scheme %v, want https with web.tls", dig(ep, "scheme"))
	}
	if dig(ep, "tlsConfig", "ca", "secret", "name") != webSecret && dig(ep, "tlsConfig", "insecureSkipVerify") != true {
		fail("tlsConfig has neither the CA from %s nor insecureSkipVerify", webSecret)
	}
	for _, f := range []string{"username", "password"} {
		if dig(ep, "basicAuth", f, "name") != webSecret || dig(ep, "basicAuth", f, "key") != f {
			fail("basicAuth.%s is not key %s of Secret %s", f, f, webSecret)
		}
	}
	return errs
}

func monitorEndpoints(o object) []any {
	if o.kind() == "PodMonitor" {
		return asSlice(dig(o, "spec", "podMetricsEndpoints"))
	}
	return asSlice(dig(o, "spec", "endpoints"))
}

// checkTestPod: helm test scrapes /metrics with the credentials and looks
// for gpulink_exporter_build_info.
func checkTestPod(objs []object, scheme string, basicAuth bool) []error {
	var tests []object
	for _, p := range byKind(objs, "Pod") {
		if dig(p, "metadata", "annotations", "helm.sh/hook") == "test" {
			tests = append(tests, p)
		}
	}
	if len(tests) != 1 {
		return []error{fmt.Errorf("helm test: want 1 test pod, got %d", len(tests))}
	}
	c := asSlice(dig(tests[0], "spec", "containers"))
	if len(c) != 1 {
		return []error{fmt.Errorf("helm test: want 1 container, got %d", len(c))}
	}
	script := fmt.Sprint(dig(c[0], "command"))
	var errs []error
	for _, want := range []string{scheme + "://", "/metrics", "gpulink_exporter_build_info"} {
		if !strings.Contains(script, want) {
			errs = append(errs, fmt.Errorf("helm test: the command does not contain %q", want))
		}
	}
	if basicAuth && (!strings.Contains(fmt.Sprint(dig(c[0], "env")), webSecret) || !strings.Contains(script, "--user")) {
		errs = append(errs, errors.New("helm test: no credentials from the web Secret"))
	}
	return errs
}

func checkAuth(_ layout, objs []object) []error {
	errs := checkWebMounted(objs, true)
	sms := byKind(objs, "ServiceMonitor")
	if len(sms) != 1 {
		return append(errs, fmt.Errorf("auth: want 1 ServiceMonitor, got %d", len(sms)))
	}
	if dig(sms[0], "metadata", "labels", "release") != "kube-prometheus-stack" {
		errs = append(errs, errors.New("auth: serviceMonitor.additionalLabels did not reach the ServiceMonitor"))
	}
	for _, ep := range monitorEndpoints(sms[0]) {
		errs = append(errs, checkMonitorAuth(sms[0], ep)...)
		if dig(ep, "tlsConfig", "serverName") != "gpulink-exporter" {
			errs = append(errs, errors.New("auth: serviceMonitor.tlsConfig is not merged into the endpoint's tlsConfig"))
		}
	}
	return append(errs, checkTestPod(objs, "https", true)...)
}

func checkDCGMOperator(_ layout, objs []object) []error {
	v, ok := variantView(objs)
	if !ok {
		return nil
	}
	var errs []error
	args := v.args
	if _, ok := flagValue(args, "--collector.dcgm"); !ok {
		errs = append(errs, errors.New("dcgm: no --collector.dcgm"))
	}
	if a, _ := flagValue(args, "--dcgm.address"); a != "nvidia-dcgm.gpu-operator.svc:5555" {
		errs = append(errs, fmt.Errorf("dcgm: --dcgm.address=%s, want the GPU Operator's Service nvidia-dcgm.gpu-operator.svc:5555", a))
	}
	lib, ok := flagValue(args, "--dcgm.library")
	if !ok {
		return append(errs, errors.New("dcgm: no --dcgm.library with dcgm.hostLibrary.path"))
	}
	if host := v.mounts[filepath.Dir(lib)]; host != "/usr/lib/x86_64-linux-gnu" {
		errs = append(errs, fmt.Errorf("dcgm: --dcgm.library=%s: want the host's /usr/lib/x86_64-linux-gnu mounted read-only at %s, got %q", lib, filepath.Dir(lib), host))
	}
	return errs
}

func checkNodeProbeAuth(_ layout, objs []object) []error {
	errs := checkWebMounted(objs, true)
	_, c := podOf(objs)
	if c == nil {
		return errs
	}
	args := argsOf(c)
	if _, ok := flagValue(args, "--node-probe.enabled"); !ok {
		errs = append(errs, errors.New("node-probe auth: no --node-probe.enabled"))
	}
	// The modules file: every module calls its targets with the
	// credentials and over TLS.
	path, ok := flagValue(args, "--node-probe.config.file")
	if !ok {
		return append(errs, errors.New("node-probe auth: no modules file, so probers would call targets without credentials"))
	}
	for _, cm := range byKind(objs, "ConfigMap") {
		text, ok := dig(cm, "data", filepath.Base(path)).(string)
		if !ok {
			continue
		}
		var f struct {
			Modules map[string]struct {
				HTTPClient struct {
					BasicAuth map[string]string `yaml:"basic_auth"`
					TLSConfig map[string]any    `yaml:"tls_config"`
				} `yaml:"http_client"`
			} `yaml:"modules"`
		}
		if err := yaml.Unmarshal([]byte(text), &f); err != nil {
			return append(errs, fmt.Errorf("node-probe auth: %s: %w", cm.name(), err))
		}
		if len(f.Modules) == 0 {
			errs = append(errs, fmt.Errorf("node-probe auth: ConfigMap %s has no module", cm.name()))
		}
		webDir := "/etc/gpulink-exporter/web/"
		for name, m := range f.Modules {
			if m.HTTPClient.BasicAuth["username_file"] != webDir+"username" || m.HTTPClient.BasicAuth["password_file"] != webDir+"password" {
				errs = append(errs, fmt.Errorf("node-probe auth: module %s: basic_auth %v does not read the web Secret's username and password", name, m.HTTPClient.BasicAuth))
			}
			if m.HTTPClient.TLSConfig == nil {
				errs = append(errs, fmt.Errorf("node-probe auth: module %s: no tls_config: the prober would call its target over http", name))
			}
		}
	}
	var ring, metrics int
	for _, o := range objs {
		if o.kind() != "ServiceMonitor" && o.kind() != "PodMonitor" {
			continue
		}
		if o.kind() == "ServiceMonitor" && probesNodes(o) {
			ring++
		} else {
			metrics++
		}
		for _, ep := range monitorEndpoints(o) {
			errs = append(errs, checkMonitorAuth(o, ep)...)
		}
	}
	if ring != 1 || metrics != 1 || len(byKind(objs, "PodMonitor")) != 1 {
		errs = append(errs, fmt.Errorf("node-probe auth: want the ring ServiceMonitor and a PodMonitor, got %d and %d monitors", ring, metrics))
	}
	return errs
}

// checkRuleOverrides: ci/rules-values.yaml's overrides, and nothing else,
// changed the PrometheusRule.
func checkRuleOverrides(l layout, objs []object) []error {
	rules := byKind(objs, "PrometheusRule")
	if len(rules) != 1 {
		return []error{fmt.Errorf("rules: want 1 PrometheusRule, got %d", len(rules))}
	}
	source, err := sourceRuleGroups(l.rulesSrc)
	if err != nil {
		return []error{err}
	}
	want := normalize(source).([]any)
	// What ci/rules-values.yaml asks for, applied to the source.
	var kept []any
	for _, g := range want {
		var rs []any
		for _, r := range asSlice(dig(g, "rules")) {
			rm := r.(map[string]any)
			switch dig(rm, "alert") {
			case "GPUPowerCapped":
				continue
			case "GPUThrottled":
				rm["expr"] = strings.ReplaceAll(rm["expr"].(string), "> 0.1", "> 0.2")
				rm["for"] = "15m"
			case "GPUProbeHostBandwidthLow":
				const ratio = `gpu_probe:gpulink_probe_bandwidth:ratio{direction=~"host_to_device|device_to_host"} < `
				rm["expr"] = strings.ReplaceAll(rm["expr"].(string), ratio+"0.5", ratio+"0.4")
			case "NICPortCongestion":
				rm["labels"].(map[string]any)["severity"] = "warning"
			case "NodeProbeFailing":
				rm["expr"] = strings.ReplaceAll(rm["expr"].(string), ">= 3", ">= 5")
				rm["for"] = "5m"
			}
			rs = append(rs, rm)
		}
		g.(map[string]any)["rules"] = rs
		kept = append(kept, g)
	}
	got, _ := dig(rules[0], "spec", "groups").([]any)
	if err := compareRuleGroups(got, kept); err != nil {
		return []error{fmt.Errorf("rules: the PrometheusRule is not the shipped rules with ci/rules-values.yaml's overrides: %w", err)}
	}
	return nil
}

// checkThresholds checks files/rule-thresholds.yaml against the shipped
// rules: each format(default) is in its alert's expression;
// and values.schema.json allows a threshold on exactly those alerts, and
// per-alert settings on exactly the shipped alerts.
func (l layout) checkThresholds() []error {
	source, err := sourceRuleGroups(l.rulesSrc)
	if err != nil {
		return []error{err}
	}
	exprs := map[string]string{}
	for _, g := range source {
		for _, r := range asSlice(dig(g, "rules")) {
			if a, _ := dig(r, "alert").(string); a != "" {
				exprs[a], _ = dig(r, "expr").(string)
			}
		}
	}
	path := filepath.Join(l.chart, "files", "rule-thresholds.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return []error{err}
	}
	var th map[string]struct {
		Format  string
		Default any
	}
	if err := yaml.Unmarshal(b, &th); err != nil {
		return []error{fmt.Errorf("%s: %w", path, err)}
	}
	var errs []error
	for name, t := range th {
		expr, ok := exprs[name]
		// What the chart replaces: the format with the shipped value.
		text := fmt.Sprintf(t.Format, t.Default)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: %s is not a shipped alert", path, name))
		case !strings.Contains(expr, text):
			errs = append(errs, fmt.Errorf("%s: %s: format %q with default %v gives %q, which is not in the alert's expression", path, name, t.Format, t.Default, text))
		}
	}
	schemaPath := filepath.Join(l.chart, "values.schema.json")
	sb, err := os.ReadFile(schemaPath)
	if err != nil {
		return append(errs, err)
	}
	var schema any
	if err := yaml.Unmarshal(sb, &schema); err != nil {
		return append(errs, fmt.Errorf("%s: %w", schemaPath, err))
	}
	props, _ := dig(schema, "properties", "prometheusRule", "properties", "alerts", "properties").(map[string]any)
	for name := range exprs {
		ref, ok := dig(props[name], "$ref").(string)
		_, hasThreshold := th[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: prometheusRule.alerts has no entry for alert %s", schemaPath, name))
		case hasThreshold != strings.HasSuffix(ref, "alertWithThreshold"):
			errs = append(errs, fmt.Errorf("%s: prometheusRule.alerts.%s refers to %s; files/rule-thresholds.yaml says threshold is %v", schemaPath, name, ref, hasThreshold))
		}
	}
	for name := range props {
		if _, ok := exprs[name]; !ok {
			errs = append(errs, fmt.Errorf("%s: prometheusRule.alerts.%s: no such alert in the rules", schemaPath, name))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

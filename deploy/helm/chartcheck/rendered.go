package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// renderMode says which values a render was made with, and so what it must
// and must not contain.
type renderMode int

const (
	// renderDefault: the chart's default values. No ServiceMonitor,
	// PrometheusRule or dashboards, no DCGM; pod attribution on.
	renderDefault renderMode = iota
	// renderAll: every optional feature on (scripts/helm-check.sh's
	// all-features values): ServiceMonitor, PrometheusRule, dashboards,
	// podResources, dcgm.
	renderAll
	// renderVariant: one of ci/<variant>-values.yaml, whose own check
	// (variants) says what it must contain; the checks here look only at
	// what it renders.
	renderVariant
)

// object is one rendered Kubernetes object, as generic YAML.
type object map[string]any

func (o object) kind() string { s, _ := o["kind"].(string); return s }

func (o object) name() string {
	s, _ := dig(o, "metadata", "name").(string)
	return s
}

// dig walks nested mappings; nil where any step is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		var m map[string]any
		switch x := v.(type) {
		case object:
			m = x
		case map[string]any:
			m = x
		default:
			return nil
		}
		v = m[k]
	}
	return v
}

// parseObjects splits helm template output into its objects, skipping empty
// documents.
func parseObjects(b []byte) ([]object, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var objs []object
	for i := 1; ; i++ {
		// Decoded as a plain map: yaml.v3 would give nested mappings the
		// named type too.
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if m != nil {
			objs = append(objs, object(m))
		}
	}
}

func byKind(objs []object, kind string) []object {
	var out []object
	for _, o := range objs {
		if o.kind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// normalize makes values that mean the same compare equal with
// reflect.DeepEqual: Helm's fromYaml/toYaml goes through JSON, so 2 comes
// back as the float 2 and 1000000 may come back as 1e+06.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = normalize(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = normalize(e)
		}
		return s
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	default:
		return v
	}
}

// sourceRuleGroups is every rule group of the rules files in dir, in file
// name order: what the PrometheusRule must hold.
func sourceRuleGroups(dir string) ([]any, error) {
	names, err := ruleFileNames(dir)
	if err != nil {
		return nil, err
	}
	var groups []any
	for _, n := range names {
		path := filepath.Join(dir, n)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var doc struct {
			Groups []any `yaml:"groups"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		groups = append(groups, doc.Groups...)
	}
	return groups, nil
}

// groupName is a rule group's name, for messages.
func groupName(g any) string {
	s, _ := dig(g, "name").(string)
	return s
}

// compareRuleGroups explains how the rendered groups differ from the source
// ones; nil when they are equal.
func compareRuleGroups(rendered, source []any) error {
	r, _ := normalize(rendered).([]any)
	s, _ := normalize(source).([]any)
	if reflect.DeepEqual(r, s) || (len(r) == 0 && len(s) == 0) {
		return nil
	}
	names := func(gs []any) []string {
		var out []string
		for _, g := range gs {
			out = append(out, groupName(g))
		}
		return out
	}
	if len(r) != len(s) {
		return fmt.Errorf("PrometheusRule has %d rule groups %q, deploy/prometheus has %d %q", len(r), names(r), len(s), names(s))
	}
	for i := range r {
		if !reflect.DeepEqual(r[i], s[i]) {
			rj, _ := json.Marshal(r[i])
			sj, _ := json.Marshal(s[i])
			return fmt.Errorf("rule group %d (%q) differs:\n  PrometheusRule:     %s\n  deploy/prometheus:  %s", i, groupName(s[i]), rj, sj)
		}
	}
	return errors.New("rule groups differ")
}

// checkRendered checks a helm template output against the sources and
// against what the exporter needs from its pod, then with check (the
// variant's, or nil) what its values must produce.
func (l layout) checkRendered(b []byte, mode renderMode, check variant) []error {
	objs, err := parseObjects(b)
	if err != nil {
		return []error{err}
	}
	var errs []error
	errs = append(errs, checkNames(objs)...)
	errs = append(errs, checkDaemonSet(objs, mode)...)
	errs = append(errs, l.checkRules(objs, mode)...)
	errs = append(errs, l.checkDashboards(objs, mode)...)
	errs = append(errs, checkServiceMonitor(objs, mode)...)
	errs = append(errs, checkNodeProbe(objs, mode)...)
	errs = append(errs, checkFit(objs)...)
	if check != nil {
		errs = append(errs, check(l, objs)...)
	}
	return errs
}

// dnsSubdomain is what Kubernetes accepts as most objects' names.
var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// checkNames fails for objects without a valid name and for two objects of
// one kind with the same namespace and name: the second would overwrite the
// first (or the install would fail).
func checkNames(objs []object) []error {
	var errs []error
	seen := map[string]bool{}
	for _, o := range objs {
		ns, _ := dig(o, "metadata", "namespace").(string)
		name := o.name()
		if len(name) > 253 || !dnsSubdomain.MatchString(name) {
			errs = append(errs, fmt.Errorf("%s %q: not a valid object name", o.kind(), name))
		}
		id := o.kind() + " " + ns + "/" + name
		if seen[id] {
			errs = append(errs, fmt.Errorf("two objects are %s", id))
		}
		seen[id] = true
	}
	return errs
}

func (l layout) checkRules(objs []object, mode renderMode) []error {
	rules := byKind(objs, "PrometheusRule")
	if mode == renderVariant {
		return nil // overrides may change it; the variant checks
	}
	if mode == renderDefault {
		if len(rules) != 0 {
			return []error{errors.New("default values render a PrometheusRule; it needs the prometheus-operator CRDs and must be opt-in")}
		}
		return nil
	}
	if len(rules) != 1 {
		return []error{fmt.Errorf("want 1 PrometheusRule, got %d", len(rules))}
	}
	rendered, _ := dig(rules[0], "spec", "groups").([]any)
	source, err := sourceRuleGroups(l.rulesSrc)
	if err != nil {
		return []error{err}
	}
	if err := compareRuleGroups(rendered, source); err != nil {
		return []error{err}
	}
	return nil
}

func (l layout) checkDashboards(objs []object, mode renderMode) []error {
	var cms []object
	for _, o := range byKind(objs, "ConfigMap") {
		if dig(o, "metadata", "labels", "grafana_dashboard") != nil {
			cms = append(cms, o)
		}
	}
	if mode == renderVariant && len(cms) == 0 {
		return nil
	}
	if mode == renderDefault {
		if len(cms) != 0 {
			return []error{fmt.Errorf("default values render %d dashboard ConfigMaps; dashboards must be opt-in", len(cms))}
		}
		return nil
	}
	names, err := dashboardFileNames(l.dashboardsSrc)
	if err != nil {
		return []error{err}
	}
	var errs []error
	found := map[string]bool{}
	for _, cm := range cms {
		if v := dig(cm, "metadata", "labels", "grafana_dashboard"); v != "1" {
			errs = append(errs, fmt.Errorf("ConfigMap %s: label grafana_dashboard is %v, the Grafana sidecar's default is \"1\"", cm.name(), v))
		}
		data, _ := dig(cm, "data").(map[string]any)
		if len(data) != 1 {
			errs = append(errs, fmt.Errorf("ConfigMap %s: want one dashboard, got %d keys", cm.name(), len(data)))
		}
		for key, v := range data {
			found[key] = true
			if !slices.Contains(names, key) {
				errs = append(errs, fmt.Errorf("ConfigMap %s: dashboard %s is not in %s", cm.name(), key, l.dashboardsSrc))
				continue
			}
			src, err := os.ReadFile(filepath.Join(l.dashboardsSrc, key))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			s, _ := v.(string)
			if err := sameJSON([]byte(s), src); err != nil {
				errs = append(errs, fmt.Errorf("ConfigMap %s: %s: %w", cm.name(), key, err))
			}
		}
	}
	for _, n := range names {
		if !found[n] {
			errs = append(errs, fmt.Errorf("dashboard %s has no ConfigMap (run scripts/helm-check.sh --sync)", filepath.Join(l.dashboardsSrc, n)))
		}
	}
	return errs
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(rendered, source []byte) error {
	var r, s any
	if err := json.Unmarshal(rendered, &r); err != nil {
		return fmt.Errorf("rendered dashboard is not JSON: %w", err)
	}
	if err := json.Unmarshal(source, &s); err != nil {
		return fmt.Errorf("source dashboard is not JSON: %w", err)
	}
	if !reflect.DeepEqual(r, s) {
		return errors.New("rendered dashboard differs from its source")
	}
	return nil
}

func checkServiceMonitor(objs []object, mode renderMode) []error {
	var sms []object
	for _, sm := range byKind(objs, "ServiceMonitor") {
		if !probesNodes(sm) {
			sms = append(sms, sm)
		}
	}
	if mode == renderDefault {
		if len(sms) != 0 {
			return []error{errors.New("default values render a ServiceMonitor; it needs the prometheus-operator CRDs and must be opt-in")}
		}
		return nil
	}
	if mode == renderVariant && len(sms) == 0 {
		return nil
	}
	if len(sms) != 1 {
		return []error{fmt.Errorf("want 1 ServiceMonitor, got %d", len(sms))}
	}
	var errs []error
	eps, _ := dig(sms[0], "spec", "endpoints").([]any)
	if len(eps) != 1 || dig(eps[0], "port") != "metrics" {
		errs = append(errs, errors.New("ServiceMonitor: want one endpoint on port metrics"))
	}
	svcs := byKind(objs, "Service")
	if len(svcs) != 1 {
		return append(errs, fmt.Errorf("want 1 Service, got %d", len(svcs)))
	}
	sel, _ := dig(sms[0], "spec", "selector", "matchLabels").(map[string]any)
	labels, _ := dig(svcs[0], "metadata", "labels").(map[string]any)
	if len(sel) == 0 {
		errs = append(errs, errors.New("ServiceMonitor selects no labels"))
	}
	for k, v := range sel {
		if labels[k] != v {
			errs = append(errs, fmt.Errorf("ServiceMonitor selects %s=%v, the Service has %v", k, v, labels[k]))
		}
	}
	return errs
}

// checkDaemonSet checks what the exporter depends on in its pod, so a
// change to the templates that breaks it fails here rather than on a node.
func checkDaemonSet(objs []object, mode renderMode) []error {
	dss := byKind(objs, "DaemonSet")
	if len(dss) != 1 {
		return []error{fmt.Errorf("want 1 DaemonSet, got %d", len(dss))}
	}
	ds := dss[0]
	pod := dig(ds, "spec", "template", "spec")
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("DaemonSet: "+format, a...)) }

	if dig(pod, "hostPID") != true {
		fail("hostPID must be true: NVML reports GPU processes by host PID")
	}
	containers, _ := dig(pod, "containers").([]any)
	if len(containers) != 1 {
		fail("want 1 container, got %d", len(containers))
		return errs
	}
	c := containers[0]
	v := viewOf(pod, c)
	args, env := v.args, v.env

	for flag, host := range map[string]string{"--path.sysfs": "/sys", "--path.procfs": "/proc"} {
		path, ok := flagValue(args, flag)
		if !ok {
			fail("no %s flag", flag)
			continue
		}
		if got := v.mounts[path]; got != host {
			fail("%s=%s: want the host's %s mounted read-only there, got %q", flag, path, host, got)
		}
	}

	if env["NVIDIA_VISIBLE_DEVICES"] != "all" {
		fail("NVIDIA_VISIBLE_DEVICES is %q, want all: the exporter watches every GPU of the node", env["NVIDIA_VISIBLE_DEVICES"])
	}
	caps := strings.Split(env["NVIDIA_DRIVER_CAPABILITIES"], ",")
	for _, want := range []string{"compute", "utility"} {
		if !slices.Contains(caps, want) && !slices.Contains(caps, "all") {
			fail("NVIDIA_DRIVER_CAPABILITIES %q lacks %s", env["NVIDIA_DRIVER_CAPABILITIES"], want)
		}
	}
	for kind, r := range map[string]map[string]any{"requests": v.requests, "limits": v.limits} {
		for name := range r {
			if strings.HasPrefix(name, "nvidia.com/") {
				fail("resources.%s has %s: the exporter watches all GPUs and must not take any from the scheduler", kind, name)
			}
		}
	}

	sc := dig(c, "securityContext")
	// The host's RDMA devices need a privileged container, which
	// Kubernetes admits only with privilege escalation (checkRDMA).
	if dig(sc, "allowPrivilegeEscalation") != false && !v.hostDevices() {
		fail("securityContext.allowPrivilegeEscalation must be false")
	}
	if dig(sc, "readOnlyRootFilesystem") != true {
		fail("securityContext.readOnlyRootFilesystem must be true")
	}
	if dig(sc, "seccompProfile", "type") != "RuntimeDefault" && dig(pod, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
		fail("seccompProfile must be RuntimeDefault")
	}
	drop := asSlice(dig(sc, "capabilities", "drop"))
	if !slices.Contains(drop, any("ALL")) {
		fail("securityContext.capabilities.drop must be [ALL]")
	}
	added := slices.Sorted(slices.Values(v.caps))
	want := []string{"SYS_NICE", "SYS_PTRACE"}
	if v.rdma() {
		want = []string{"IPC_LOCK", "SYS_NICE", "SYS_PTRACE"}
	}
	if !slices.Equal(added, want) {
		fail("securityContext.capabilities.add is %v, want exactly %v: IPC_LOCK exactly where the pod does RDMA (resources %v, host %s %v; see the chart README, Privileges)", added, want, v.rdmaResources(), rdmaDevices, v.hostDevices())
	}
	errs = append(errs, checkRDMA(v, mode)...)
	if _, ok := v.mounts["/tmp"]; !ok {
		fail("no writable /tmp: the CUDA driver's JIT cache (CUDA_CACHE_PATH) lives there under a read-only root")
	}

	// Pod attribution is on by default (the chart exists for Kubernetes);
	// DCGM only when asked for.
	optional := map[string]string{"--collector.dcgm": "dcgm.enabled", "--dcgm.address": "dcgm.enabled", "--slurm.job-mapping-dir": "slurm.jobMappingDir"}
	for flag, feature := range optional {
		_, ok := flagValue(args, flag)
		switch {
		case mode == renderDefault && ok:
			fail("%s is on with default values; it belongs to %s", flag, feature)
		case mode == renderAll && !ok && flag != "--dcgm.address":
			// The address may be left to the embedded engine.
			fail("%s is missing with %s set", flag, feature)
		}
	}
	for _, flag := range []string{"--collector.kubernetes", "--kubernetes.pod-resources-socket"} {
		if _, ok := flagValue(args, flag); !ok {
			fail("%s is missing: podResources.enabled is on by default", flag)
		}
	}
	if sock, ok := flagValue(args, "--kubernetes.pod-resources-socket"); ok {
		dir := filepath.Dir(sock)
		if v.mounts[dir] != dir {
			fail("--kubernetes.pod-resources-socket=%s: want the host's %s mounted read-only at %s", sock, dir, dir)
		}
	}
	if dir, ok := flagValue(args, "--slurm.job-mapping-dir"); ok && v.mounts[dir] != dir {
		fail("--slurm.job-mapping-dir=%s: want the host's %s mounted read-only at %s", dir, dir, dir)
	}
	if addr, _ := flagValue(args, "--dcgm.address"); mode == renderAll && addr == "" {
		fail("--dcgm.address is empty")
	}
	return errs
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// flagValue finds --name or --name=value in args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if a == name {
			return "", true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

package main

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/gpulink/gpulink_exporter/internal/nodeprobe"
)

// probesNodes reports whether a ServiceMonitor scrapes the node-to-node
// /probe rather than the metrics.
func probesNodes(sm object) bool {
	for _, ep := range asSlice(dig(sm, "spec", "endpoints")) {
		if dig(ep, "path") == nodeprobe.ProbePath {
			return true
		}
	}
	return false
}

// checkNodeProbe checks the node-to-node probes' part of a render: off
// with default values (being joined is opt-in); with every feature on,
// the join endpoint, host networking, a modules file the exporter accepts
// and a ring ServiceMonitor in blackbox_exporter's style.
func checkNodeProbe(objs []object, mode renderMode) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("node-probe: "+format, a...)) }
	pod, c := podOf(objs)
	if pod == nil {
		return nil // checkDaemonSet says so
	}
	args := argsOf(c)
	_, enabled := flagValue(args, "--node-probe.enabled")
	hostNetwork := dig(pod, "hostNetwork") == true
	var sms []object
	for _, sm := range byKind(objs, "ServiceMonitor") {
		if probesNodes(sm) {
			sms = append(sms, sm)
		}
	}
	if mode == renderVariant && !enabled {
		return nil
	}
	if mode == renderDefault {
		if enabled {
			fail("--node-probe.enabled with default values: being joined must be opt-in")
		}
		if hostNetwork {
			fail("hostNetwork with default values")
		}
		if len(sms) != 0 {
			fail("default values render a ring ServiceMonitor")
		}
	} else {
		if !enabled {
			fail("--node-probe.enabled missing with nodeProbe.enabled")
		}
		if !hostNetwork || dig(pod, "dnsPolicy") != "ClusterFirstWithHostNet" {
			fail("want hostNetwork with dnsPolicy ClusterFirstWithHostNet with nodeProbe.hostNetwork")
		}
		if len(sms) != 1 {
			fail("want 1 ring ServiceMonitor, got %d", len(sms))
		} else {
			errs = append(errs, checkRing(sms[0])...)
		}
		errs = append(errs, checkToken(objs, pod, c, sms)...)
	}
	if path, ok := flagValue(args, "--node-probe.config.file"); ok {
		errs = append(errs, checkModulesFile(objs, pod, c, path)...)
	} else if mode == renderAll || (mode == renderVariant && enabled) {
		fail("--node-probe.config.file missing with nodeProbe.modules")
	}
	return errs
}

// checkModulesFile checks that the modules file the flag names is a
// ConfigMap key mounted there, and that the exporter would accept it.
func checkModulesFile(objs []object, pod, c any, path string) []error {
	dir, key := filepath.Dir(path), filepath.Base(path)
	vol, _ := mountedVolume(pod, c, dir)
	cmName, _ := dig(vol, "configMap", "name").(string)
	if cmName == "" {
		return []error{fmt.Errorf("node-probe: --node-probe.config.file=%s: no ConfigMap mounted at %s", path, dir)}
	}
	for _, cm := range byKind(objs, "ConfigMap") {
		if cm.name() != cmName {
			continue
		}
		text, ok := dig(cm, "data", key).(string)
		if !ok {
			return []error{fmt.Errorf("node-probe: ConfigMap %s has no key %s", cmName, key)}
		}
		if _, err := nodeprobe.Parse([]byte(text)); err != nil {
			return []error{fmt.Errorf("node-probe: ConfigMap %s: the exporter would refuse %s: %w", cmName, key, err)}
		}
		return nil
	}
	return []error{fmt.Errorf("node-probe: ConfigMap %s is not rendered", cmName)}
}

// checkToken checks the ring's authentication, on by default with node
// probes: --node-probe.token-file names a key of a Secret mounted there
// (a token the exporter takes, where the chart makes the Secret), and
// the ring ServiceMonitor calls /probe with that token or with the web
// config's basic auth.
func checkToken(objs []object, pod, c any, sms []object) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("node-probe: "+format, a...)) }
	path, ok := flagValue(argsOf(c), "--node-probe.token-file")
	if !ok {
		fail("--node-probe.token-file missing: the ring's endpoints would be open to every host that reaches the node")
		return errs
	}
	dir, key := filepath.Dir(path), filepath.Base(path)
	vol, _ := mountedVolume(pod, c, dir)
	secret, _ := dig(vol, "secret", "secretName").(string)
	if secret == "" {
		fail("--node-probe.token-file=%s: no Secret mounted at %s", path, dir)
		return errs
	}
	for _, s := range byKind(objs, "Secret") {
		if s.name() != secret {
			continue
		}
		enc, _ := dig(s, "data", key).(string)
		tok, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			fail("Secret %s: key %s is not base64: %v", secret, key, err)
		} else if _, err := nodeprobe.ParseToken(string(tok)); err != nil {
			fail("Secret %s: the exporter would refuse its token %s: %v", secret, key, err)
		}
	}
	for _, sm := range sms {
		for _, ep := range asSlice(dig(sm, "spec", "endpoints")) {
			bearer := dig(ep, "authorization", "credentials", "name") == secret && dig(ep, "authorization", "credentials", "key") == key
			if !bearer && dig(ep, "basicAuth") == nil {
				fail("ServiceMonitor %s calls /probe with neither the token of Secret %s (authorization) nor basic auth", sm.name(), secret)
			}
		}
	}
	return errs
}

// nodeLabelMeta is a node label as Kubernetes discovery gives it.
var nodeLabelMeta = regexp.MustCompile(`^__meta_kubernetes_node_label_[a-zA-Z0-9_]+$`)

// checkRing checks the ring ServiceMonitor: /probe with a module, the
// nodes' labels attached, the target taken from the discovered address
// and the prober from a node label.
func checkRing(sm object) []error {
	var errs []error
	fail := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("node-probe ServiceMonitor %s: "+format, append([]any{sm.name()}, a...)...))
	}
	eps := asSlice(dig(sm, "spec", "endpoints"))
	if len(eps) != 1 || dig(eps[0], "port") != "metrics" {
		fail("want one endpoint on port metrics")
		return errs
	}
	ep := eps[0]
	if len(asSlice(dig(ep, "params", "module"))) != 1 {
		fail("want one module parameter")
	}
	if dig(sm, "spec", "attachMetadata", "node") != true {
		fail("attachMetadata.node must be true: the ring is in the nodes' labels")
	}
	var target, prober bool
	for _, r := range asSlice(dig(ep, "relabelings")) {
		src := asSlice(dig(r, "sourceLabels"))
		switch dig(r, "targetLabel") {
		case "__param_target":
			target = slices.Equal(src, []any{"__address__"})
		case "__address__":
			if len(src) == 1 {
				s, _ := src[0].(string)
				prober = nodeLabelMeta.MatchString(s)
			}
		}
	}
	if !target {
		fail("no relabeling of __address__ to __param_target")
	}
	if !prober {
		fail("no relabeling of __address__ from a node label (the prober)")
	}
	return errs
}

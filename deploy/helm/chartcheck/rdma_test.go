package main

import (
	"strings"
	"testing"
)

// rdmaDaemonSet is goodDaemonSet with the RDMA shared device plugin's
// resource and IPC_LOCK, as ci/rdma-values.yaml renders it.
var rdmaDaemonSet = strings.NewReplacer(
	"        - --kubernetes.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock\n",
	"        - --kubernetes.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock\n        - --node-probe.enabled\n",
	"          limits:\n            memory: 1Gi\n",
	"          limits:\n            memory: 1Gi\n            rdma/rdma_shared_device_a: 1\n          requests:\n            rdma/rdma_shared_device_a: 1\n",
	"add: [SYS_PTRACE, SYS_NICE]", "add: [SYS_PTRACE, SYS_NICE, IPC_LOCK]",
).Replace(goodDaemonSet)

// efaDaemonSet is goodDaemonSet as ci/efa-values.yaml renders it: the
// host's /dev/infiniband in a privileged container, the host's NCCL and
// aws-ofi-nccl.
var efaDaemonSet = strings.NewReplacer(
	"        - --kubernetes.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock\n",
	"        - --kubernetes.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock\n        - --node-probe.enabled\n",
	"          value: compute,utility\n",
	"          value: compute,utility\n        - name: GPULINK_NCCL_LIBRARY\n          value: /host/nccl/libnccl.so.2\n        - name: NCCL_NET_PLUGIN\n          value: ofi\n        - name: LD_LIBRARY_PATH\n          value: /opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib\n",
	"allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true\n          privileged: true",
	"add: [SYS_PTRACE, SYS_NICE]", "add: [SYS_PTRACE, SYS_NICE, IPC_LOCK]",
	"        - {name: pr, mountPath: /var/lib/kubelet/pod-resources, readOnly: true}\n",
	`        - {name: pr, mountPath: /var/lib/kubelet/pod-resources, readOnly: true}
        - {name: nccl-library, mountPath: /host/nccl, readOnly: true}
        - {name: nccl-host-0, mountPath: /opt/amazon/efa, readOnly: true}
        - {name: nccl-host-1, mountPath: /opt/amazon/ofi-nccl, readOnly: true}
        - {name: rdma-devices, mountPath: /dev/infiniband, readOnly: true}
`,
	"      - {name: pr, hostPath: {path: /var/lib/kubelet/pod-resources}}\n",
	`      - {name: pr, hostPath: {path: /var/lib/kubelet/pod-resources}}
      - {name: nccl-library, hostPath: {path: /usr/lib/x86_64-linux-gnu, type: Directory}}
      - {name: nccl-host-0, hostPath: {path: /opt/amazon/efa, type: Directory}}
      - {name: nccl-host-1, hostPath: {path: /opt/amazon/ofi-nccl, type: Directory}}
      - {name: rdma-devices, hostPath: {path: /dev/infiniband, type: Directory}}
`,
).Replace(goodDaemonSet)

func TestCheckDaemonSetRDMA(t *testing.T) {
	check := func(manifest string, mode renderMode) string { t.Helper(); return daemonSetErrors(t, manifest, mode) }
	for name, m := range map[string]string{"rdma": rdmaDaemonSet, "efa": efaDaemonSet} {
		if !strings.Contains(m, "IPC_LOCK") || m == goodDaemonSet {
			t.Fatalf("%s: the manifest was not made", name)
		}
		if got := check(m, renderVariant); got != "" {
			t.Errorf("%s: %s", name, got)
		}
		// None of it belongs to the default values.
		if got := check(m, renderDefault); !strings.Contains(got, "RDMA devices with default values") {
			t.Errorf("%s with default values: errors %q", name, got)
		}
	}
	got := check(efaDaemonSet, renderDefault)
	for _, want := range []string{"GPULINK_NCCL_LIBRARY is set with default values", "NCCL_NET_PLUGIN is set with default values", "LD_LIBRARY_PATH is set with default values"} {
		if !strings.Contains(got, want) {
			t.Errorf("EFA with default values: errors %q lack %q", got, want)
		}
	}
	for _, tc := range []struct{ name, manifest, old, new, want string }{
		{"IPC_LOCK without RDMA", goodDaemonSet, "[SYS_PTRACE, SYS_NICE]", "[SYS_PTRACE, SYS_NICE, IPC_LOCK]", "want exactly [SYS_NICE SYS_PTRACE]"},
		{"device plugin without IPC_LOCK", rdmaDaemonSet, "[SYS_PTRACE, SYS_NICE, IPC_LOCK]", "[SYS_PTRACE, SYS_NICE]", "want exactly [IPC_LOCK SYS_NICE SYS_PTRACE]"},
		{"host devices without IPC_LOCK", efaDaemonSet, "[SYS_PTRACE, SYS_NICE, IPC_LOCK]", "[SYS_PTRACE, SYS_NICE]", "want exactly [IPC_LOCK SYS_NICE SYS_PTRACE]"},
		{"limit without request", rdmaDaemonSet, "          requests:\n            rdma/rdma_shared_device_a: 1\n", "", "requested as much as limited"},
		{"host devices unprivileged", efaDaemonSet, "allowPrivilegeEscalation: true\n          privileged: true", "allowPrivilegeEscalation: false", "the device cgroup refuses to open them"},
		{"host devices writable", efaDaemonSet, "mountPath: /dev/infiniband, readOnly: true", "mountPath: /dev/infiniband", "want the host's /dev/infiniband mounted read-only"},
		{"privileged without host devices", rdmaDaemonSet, "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: false\n          privileged: true", "privileged must not be true"},
		{"escalation without host devices", rdmaDaemonSet, "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", "allowPrivilegeEscalation must be false"},
		{"library not mounted", efaDaemonSet, "value: /host/nccl/libnccl.so.2", "value: /opt/nccl/libnccl.so.2", "GPULINK_NCCL_LIBRARY=/opt/nccl/libnccl.so.2: want a host directory mounted read-only at /opt/nccl"},
		{"library by the flag", efaDaemonSet, "        - --node-probe.enabled\n", "        - --node-probe.enabled\n        - --nccl.library=/host/nccl/libnccl.so.2\n", "--nccl.library=/host/nccl/libnccl.so.2: set GPULINK_NCCL_LIBRARY, which `collectives --check` run in the pod reads too"},
		{"library mounted writable", efaDaemonSet, "mountPath: /host/nccl, readOnly: true", "mountPath: /host/nccl", "want a host directory mounted read-only at /host/nccl"},
	} {
		if !strings.Contains(tc.manifest, tc.old) {
			t.Fatalf("%s: %q not in the manifest", tc.name, tc.old)
		}
		if got := check(strings.Replace(tc.manifest, tc.old, tc.new, 1), renderVariant); !strings.Contains(got, tc.want) {
			t.Errorf("%s: errors %q lack %q", tc.name, got, tc.want)
		}
	}
}

func TestRDMAVariants(t *testing.T) {
	// As chartcheck rendered does: the checks of every render, then the
	// variant's own.
	check := func(v variant, manifest string) string {
		t.Helper()
		objs, err := parseObjects([]byte(manifest))
		if err != nil {
			t.Fatal(err)
		}
		return joinErrs(append(checkDaemonSet(objs, renderVariant), v(layout{}, objs)...))
	}
	rdma, efa := variants["rdma"], variants["efa"]
	if got := check(rdma, rdmaDaemonSet); got != "" {
		t.Errorf("rdma: %s", got)
	}
	if got := check(efa, efaDaemonSet); got != "" {
		t.Errorf("efa: %s", got)
	}
	// Each variant fails the other's render and the default one.
	if got := check(rdma, goodDaemonSet); !strings.Contains(got, "rdma/rdma_shared_device_a: request <nil>, limit <nil>, want 1 and 1") {
		t.Errorf("rdma on the default render: %q", got)
	}
	if got := check(rdma, efaDaemonSet); !strings.Contains(got, "a device plugin needs neither") {
		t.Errorf("rdma on the EFA render: %q", got)
	}
	got := check(efa, goodDaemonSet)
	for _, want := range []string{"the host's /dev/infiniband is not mounted", "no GPULINK_NCCL_LIBRARY with nccl.hostPath", "want the host's /opt/amazon/efa", "want the host's /opt/amazon/ofi-nccl", `NCCL_NET_PLUGIN is ""`, "lacks /opt/amazon/ofi-nccl/lib"} {
		if !strings.Contains(got, want) {
			t.Errorf("efa on the default render: errors %q lack %q", got, want)
		}
	}
	for _, tc := range []struct{ name, variant, old, new, want string }{
		{"two devices", "rdma", "rdma/rdma_shared_device_a: 1\n          requests", "rdma/rdma_shared_device_a: 2\n          requests", "limit 2, want 1 and 1"},
		{"no node probes", "rdma", "        - --node-probe.enabled\n", "", "no --node-probe.enabled"},
		{"other plugin", "efa", "value: ofi", "value: aws-ofi", `NCCL_NET_PLUGIN is "aws-ofi"`},
		{"path outside the mounts", "efa", "/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib", "/opt/amazon/ofi-nccl/lib:/usr/lib", `LD_LIBRARY_PATH entry "/usr/lib" is not in a read-only host mount`},
		{"plugin mount writable", "efa", "mountPath: /opt/amazon/ofi-nccl, readOnly: true", "mountPath: /opt/amazon/ofi-nccl", "want the host's /opt/amazon/ofi-nccl mounted read-only"},
		{"libfabric elsewhere", "efa", "{path: /opt/amazon/efa, type: Directory}", "{path: /opt/efa, type: Directory}", `got "/opt/efa"`},
		{"image's library", "efa", "{path: /usr/lib/x86_64-linux-gnu, type: Directory}", "{path: /opt/nccl, type: Directory}", "want libnccl.so.2 in the host's /usr/lib/x86_64-linux-gnu"},
		{"no IPC_LOCK", "rdma", "[SYS_PTRACE, SYS_NICE, IPC_LOCK]", "[SYS_PTRACE, SYS_NICE]", "want exactly [IPC_LOCK SYS_NICE SYS_PTRACE]"},
		{"privileged", "rdma", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: false\n          privileged: true", "privileged must not be true"},
		{"no IPC_LOCK", "efa", "[SYS_PTRACE, SYS_NICE, IPC_LOCK]", "[SYS_PTRACE, SYS_NICE]", "want exactly [IPC_LOCK SYS_NICE SYS_PTRACE]"},
		{"devices unprivileged", "efa", "allowPrivilegeEscalation: true\n          privileged: true", "allowPrivilegeEscalation: false", "the device cgroup refuses to open them"},
		{"devices from elsewhere", "efa", "{path: /dev/infiniband, type: Directory}", "{path: /dev/foo, type: Directory}", `want the host's /dev/infiniband mounted read-only, got "/dev/foo"`},
	} {
		manifest := map[string]string{"rdma": rdmaDaemonSet, "efa": efaDaemonSet}[tc.variant]
		if !strings.Contains(manifest, tc.old) {
			t.Fatalf("%s: %q not in the manifest", tc.name, tc.old)
		}
		if got := check(variants[tc.variant], strings.Replace(manifest, tc.old, tc.new, 1)); !strings.Contains(got, tc.want) {
			t.Errorf("%s: errors %q lack %q", tc.name, got, tc.want)
		}
	}
}

package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// What a render gives NCCL between nodes (issue 26): the RDMA devices (an
// RDMA device plugin's resource, or the host's /dev/infiniband), IPC_LOCK
// with them, and the host's NCCL and network plugin where the values ask
// for them. The default render has none of it.

// rdmaDevices is where the RDMA devices are in the container.
const rdmaDevices = "/dev/infiniband"

// containerView is what these checks read of the DaemonSet's container.
type containerView struct {
	args []string
	env  map[string]string
	// mounts: mount path -> host path of a read-only hostPath mount ("" for
	// any other mount).
	mounts map[string]string
	// limits and requests of the container's resources.
	limits, requests map[string]any
	caps             []string
	privileged       bool
}

func viewOf(pod, c any) containerView {
	v := containerView{args: argsOf(c), env: map[string]string{}, mounts: map[string]string{}}
	for _, e := range asSlice(dig(c, "env")) {
		n, _ := dig(e, "name").(string)
		s, _ := dig(e, "value").(string)
		v.env[n] = s
	}
	for _, m := range asSlice(dig(c, "volumeMounts")) {
		p, _ := dig(m, "mountPath").(string)
		var host string
		if vol, readOnly := mountedVolume(pod, c, p); readOnly {
			host, _ = dig(vol, "hostPath", "path").(string)
		}
		v.mounts[p] = host
	}
	v.limits, _ = dig(c, "resources", "limits").(map[string]any)
	v.requests, _ = dig(c, "resources", "requests").(map[string]any)
	for _, a := range asSlice(dig(c, "securityContext", "capabilities", "add")) {
		s, _ := a.(string)
		v.caps = append(v.caps, s)
	}
	v.privileged = dig(c, "securityContext", "privileged") == true
	return v
}

// variantView is the render's container; false where there is no single
// DaemonSet with one container (checkDaemonSet says so).
func variantView(objs []object) (containerView, bool) {
	pod, c := podOf(objs)
	if pod == nil {
		return containerView{}, false
	}
	return viewOf(pod, c), true
}

// rdmaResources are the extended resources the container asks for other
// than GPUs: an RDMA device plugin's (rdma/..., vpc.amazonaws.com/efa).
func (v containerView) rdmaResources() []string {
	var out []string
	for _, r := range []map[string]any{v.limits, v.requests} {
		for name := range r {
			if strings.Contains(name, "/") && !strings.HasPrefix(name, "nvidia.com/") && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// hostDevices: the host's /dev/infiniband is mounted.
func (v containerView) hostDevices() bool {
	_, ok := v.mounts[rdmaDevices]
	return ok
}

// rdma: the container can reach RDMA devices one way or the other.
func (v containerView) rdma() bool { return len(v.rdmaResources()) > 0 || v.hostDevices() }

// checkRDMA checks the RDMA and NCCL parts of any render: a device
// plugin's resource requested as much as limited, the host's devices
// from the host, read-only, and only in a privileged container (the
// device cgroup admits them only then), GPULINK_NCCL_LIBRARY inside a
// read-only host mount and no --nccl.library (a command run in the pod
// reads the variable, not the daemon's flags); and none of it with default values. IPC_LOCK,
// exactly where there is RDMA, is in checkDaemonSet's list of
// capabilities.
func checkRDMA(v containerView, mode renderMode) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("DaemonSet: "+format, a...)) }
	res := v.rdmaResources()
	for _, name := range res {
		if fmt.Sprint(v.limits[name]) != fmt.Sprint(v.requests[name]) {
			fail("resource %s: request %v, limit %v: an extended resource is requested as much as limited", name, v.requests[name], v.limits[name])
		}
	}
	if v.hostDevices() {
		if host := v.mounts[rdmaDevices]; host != rdmaDevices {
			fail("%s: want the host's %s mounted read-only, got %q", rdmaDevices, rdmaDevices, host)
		}
		if !v.privileged {
			fail("%s from the host without privileged: the device cgroup refuses to open them (use an RDMA device plugin's resource, or privileged)", rdmaDevices)
		}
	} else if v.privileged {
		fail("securityContext.privileged must not be true")
	}
	if lib, ok := v.env[ncclLibraryEnv]; ok {
		if dir := filepath.Dir(lib); v.mounts[dir] == "" {
			fail("%s=%s: want a host directory mounted read-only at %s", ncclLibraryEnv, lib, dir)
		}
	}
	if lib, ok := flagValue(v.args, "--nccl.library"); ok {
		fail("--nccl.library=%s: set %s, which `collectives --check` run in the pod reads too", lib, ncclLibraryEnv)
	}
	if mode != renderDefault {
		return errs
	}
	if v.rdma() {
		fail("RDMA devices with default values (resources %v, host devices %v): they need a device plugin or privileges, and are opt-in", res, v.hostDevices())
	}
	for _, name := range []string{ncclLibraryEnv, "NCCL_NET_PLUGIN", "LD_LIBRARY_PATH"} {
		if _, ok := v.env[name]; ok {
			fail("%s is set with default values", name)
		}
	}
	return errs
}

// checkRDMADevicePlugin: ci/rdma-values.yaml asks for the Network
// Operator's shared RDMA device: its resource in requests and limits, not
// the host's devices, and the node probes. checkDaemonSet, run on every
// render, adds IPC_LOCK and privileges to that (checkRDMA).
func checkRDMADevicePlugin(_ layout, objs []object) []error {
	v, ok := variantView(objs)
	if !ok {
		return nil
	}
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("rdma: "+format, a...)) }
	const name = "rdma/rdma_shared_device_a"
	if fmt.Sprint(v.limits[name]) != "1" || fmt.Sprint(v.requests[name]) != "1" {
		fail("resource %s: request %v, limit %v, want 1 and 1", name, v.requests[name], v.limits[name])
	}
	if v.hostDevices() {
		fail("the host's %s mounted: a device plugin needs neither it nor privileged", rdmaDevices)
	}
	if _, ok := flagValue(v.args, "--node-probe.enabled"); !ok {
		fail("no --node-probe.enabled")
	}
	return errs
}

// ncclLibraryEnv names the NCCL library the daemon and its commands load
// (the image sets it; nccl.hostPath sets it to the host's).
const ncclLibraryEnv = "GPULINK_NCCL_LIBRARY"

// efaHostMounts are the EFA installer's directories ci/efa-values.yaml
// mounts: libfabric and aws-ofi-nccl.
var efaHostMounts = []string{"/opt/amazon/efa", "/opt/amazon/ofi-nccl"}

// checkEFA: ci/efa-values.yaml runs the host's NCCL with aws-ofi-nccl over
// the host's /dev/infiniband: the library and the plugin's directories
// mounted read-only, GPULINK_NCCL_LIBRARY in the library's mount,
// NCCL_NET_PLUGIN naming the plugin, LD_LIBRARY_PATH only through the
// mounts and reaching the plugin's, and the host's devices (checkRDMA,
// run on every render, wants them read-only from the host in a privileged
// container, and checkDaemonSet IPC_LOCK with them).
func checkEFA(_ layout, objs []object) []error {
	v, ok := variantView(objs)
	if !ok {
		return nil
	}
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("efa: "+format, a...)) }
	if !v.hostDevices() {
		fail("the host's %s is not mounted", rdmaDevices)
	}
	lib, ok := v.env[ncclLibraryEnv]
	if !ok {
		fail("no %s with nccl.hostPath", ncclLibraryEnv)
	} else if host := v.mounts[filepath.Dir(lib)]; host != "/usr/lib/x86_64-linux-gnu" || filepath.Base(lib) != "libnccl.so.2" {
		fail("%s=%s: want libnccl.so.2 in the host's /usr/lib/x86_64-linux-gnu mounted read-only at %s, got %q", ncclLibraryEnv, lib, filepath.Dir(lib), host)
	}
	for _, dir := range efaHostMounts {
		if v.mounts[dir] != dir {
			fail("want the host's %s mounted read-only at %s, got %q", dir, dir, v.mounts[dir])
		}
	}
	if p := v.env["NCCL_NET_PLUGIN"]; p != "ofi" {
		fail("NCCL_NET_PLUGIN is %q, want ofi (libnccl-net-ofi.so, aws-ofi-nccl)", p)
	}
	path := strings.Split(v.env["LD_LIBRARY_PATH"], ":")
	if !slices.Contains(path, "/opt/amazon/ofi-nccl/lib") {
		fail("LD_LIBRARY_PATH %q lacks /opt/amazon/ofi-nccl/lib, where NCCL finds the plugin", v.env["LD_LIBRARY_PATH"])
	}
	for _, dir := range path {
		if !v.underHostMount(dir) {
			fail("LD_LIBRARY_PATH entry %q is not in a read-only host mount", dir)
		}
	}
	return errs
}

// underHostMount: path is inside a read-only hostPath mount.
func (v containerView) underHostMount(path string) bool {
	for m, host := range v.mounts {
		if host != "" && (path == m || strings.HasPrefix(path, m+"/")) {
			return true
		}
	}
	return false
}

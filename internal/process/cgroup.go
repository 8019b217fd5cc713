package process

import (
	"strings"

	"github.com/prometheus/procfs"
)

// cgroupPod takes the pod and container from a process's cgroups
// (/proc/<pid>/cgroup): the unified hierarchy's path on cgroup v2, the
// first path naming a pod or container on v1, where every controller has
// its own line.
func cgroupPod(cgroups []procfs.Cgroup) (podUID, containerID string) {
	for _, c := range cgroups {
		if pod, ctr := parseCgroupPod(c.Path); pod != "" || ctr != "" {
			return pod, ctr
		}
	}
	return "", ""
}

// parseCgroupPod reads the Kubernetes pod UID (with dashes) and the
// container ID from a cgroup path, as the kubelet lays it out:
//
//	systemd driver:  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, _ for ->.slice/cri-containerd-<id>.scope
//	                 (docker-<id>.scope, crio-<id>.scope; guaranteed pods sit in kubepods-pod<uid>.slice)
//	cgroupfs driver: /kubepods/burstable/pod<uid>/<id>, guaranteed pods /kubepods/pod<uid>/<id>
//
// Kubelets nested under a service ("/kubelet.slice/kubelet-kubepods..."),
// containerd's "<pod slice>:cri-containerd:<id>" form and cgroups below
// the container's (a container running systemd) are read too. A container
// outside Kubernetes (docker-<id>.scope, /docker/<id>) yields its ID with
// no pod. Anything else yields "", "".
func parseCgroupPod(path string) (podUID, containerID string) {
	comps := strings.Split(strings.Trim(path, "/"), "/")
	kube := false
	for i, c := range comps {
		if strings.Contains(c, "kubepods") {
			kube = true
		}
		if !kube {
			continue
		}
		if pod, ctr, ok := strings.Cut(c, ":"); ok {
			// containerd: kubepods-<qos>-pod<uid>.slice:cri-containerd:<id>
			_, id, _ := strings.Cut(ctr, ":")
			if uid := systemdPodUID(pod); uid != "" {
				if !isContainerID(id) {
					id = ""
				}
				return uid, id
			}
			continue
		}
		uid := systemdPodUID(c)
		if uid == "" {
			if rest, ok := strings.CutPrefix(c, "pod"); ok && podUIDValid(rest) {
				uid = rest
			}
		}
		if uid == "" {
			continue
		}
		if i+1 < len(comps) {
			containerID = containerComponent(comps[i+1])
		}
		return uid, containerID
	}
	if kube {
		return "", ""
	}
	for i, c := range comps {
		if strings.HasSuffix(c, ".scope") {
			if id := containerComponent(c); id != "" {
				return "", id
			}
		}
		if c == "docker" && i+1 < len(comps) && isContainerID(comps[i+1]) {
			return "", comps[i+1]
		}
	}
	return "", ""
}

// systemdPodUID reads "<...>kubepods<...>-pod<uid with _>.slice".
func systemdPodUID(c string) string {
	name, ok := strings.CutSuffix(c, ".slice")
	if !ok {
		return ""
	}
	i := strings.LastIndex(name, "-pod")
	if i < 0 || !strings.Contains(name[:i], "kubepods") {
		return ""
	}
	uid := strings.ReplaceAll(name[i+len("-pod"):], "_", "-")
	if !podUIDValid(uid) {
		return ""
	}
	return uid
}

// containerRuntimePrefixes name the scopes (systemd driver) and cgroups
// (CRI-O under cgroupfs) that hold a container, by runtime.
var containerRuntimePrefixes = []string{"cri-containerd-", "docker-", "crio-"}

// containerComponent reads a container ID from the cgroup component below
// a pod: "<runtime>-<id>.scope", "crio-<id>" or the bare ID. CRI-O's
// crio-conmon-<id> holds the monitor, not the container.
func containerComponent(c string) string {
	c = strings.TrimSuffix(c, ".scope")
	if isContainerID(c) {
		return c
	}
	for _, p := range containerRuntimePrefixes {
		if id, ok := strings.CutPrefix(c, p); ok && isContainerID(id) {
			return id
		}
	}
	return ""
}

// isContainerID reports whether s is a 64-digit hex ID, as containerd,
// Docker and CRI-O give.
func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isHexDigit(s[i]) {
			return false
		}
	}
	return true
}

// podUIDValid accepts a UUID (an API pod's UID) or 32 hex digits (a
// static pod's, the hash of its manifest).
func podUIDValid(s string) bool {
	switch len(s) {
	case 36:
		for i := 0; i < len(s); i++ {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if s[i] != '-' {
					return false
				}
			} else if !isHexDigit(s[i]) {
				return false
			}
		}
		return true
	case 32:
		for i := 0; i < len(s); i++ {
			if !isHexDigit(s[i]) {
				return false
			}
		}
		return true
	}
	return false
}

func isHexDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

package process

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

const (
	ctrID = "4f8a1d2c9b7e6f5a3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b"
	podU  = "1f0e8a2c-5b7d-4c3e-9a41-6f2d8e7b9c10"
)

func TestParseCgroupPod(t *testing.T) {
	podS := strings.ReplaceAll(podU, "-", "_")
	for _, tc := range []struct {
		path, pod, ctr string
	}{
		// systemd driver, containerd, each QoS class.
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podS + ".slice/cri-containerd-" + ctrID + ".scope", podU, ctrID},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + podS + ".slice/cri-containerd-" + ctrID + ".scope", podU, ctrID},
		{"/kubepods.slice/kubepods-pod" + podS + ".slice/cri-containerd-" + ctrID + ".scope", podU, ctrID},
		// Docker (dockershim, cri-dockerd) and CRI-O scopes.
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podS + ".slice/docker-" + ctrID + ".scope", podU, ctrID},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podS + ".slice/crio-" + ctrID + ".scope", podU, ctrID},
		// CRI-O's monitor is no container.
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podS + ".slice/crio-conmon-" + ctrID + ".scope", podU, ""},
		// A container running systemd keeps its processes below its scope.
		{"/kubepods.slice/kubepods-pod" + podS + ".slice/cri-containerd-" + ctrID + ".scope/init.scope", podU, ctrID},
		// The pod's own cgroup (the pause process under some set-ups).
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podS + ".slice", podU, ""},
		// cgroupfs driver.
		{"/kubepods/besteffort/pod" + podU + "/" + ctrID, podU, ctrID},
		{"/kubepods/burstable/pod" + podU + "/" + ctrID, podU, ctrID},
		{"/kubepods/pod" + podU + "/" + ctrID, podU, ctrID},
		{"/kubepods/burstable/pod" + podU + "/crio-" + ctrID, podU, ctrID},
		// Nested kubelets (kind) and containerd's colon form.
		{"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + podS + ".slice/cri-containerd-" + ctrID + ".scope", podU, ctrID},
		{"/system.slice/containerd.service/kubepods-besteffort-pod" + podS + ".slice:cri-containerd:" + ctrID, podU, ctrID},
		// Static pods' UIDs are a 32-digit hash.
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0123456789abcdef0123456789abcdef.slice/cri-containerd-" + ctrID + ".scope", "0123456789abcdef0123456789abcdef", ctrID},
		// Containers outside Kubernetes.
		{"/system.slice/docker-" + ctrID + ".scope", "", ctrID},
		{"/docker/" + ctrID, "", ctrID},
		// Nothing to read.
		{"/", "", ""},
		{"", "", ""},
		{"/process_api/98e0b3c2a7f14e6d8c5b4a3f2e1d0c9b", "", ""},
		{"/user.slice/user-1000.slice/session-4.scope", "", ""},
		{"/system.slice/nvidia-persistenced.service", "", ""},
		{"/kubepods.slice/kubepods-burstable.slice", "", ""},
		{"/kubepods/burstable/podnot-a-uid/" + ctrID, "", ""},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podS + ".slice/cri-containerd-abc.scope", podU, ""},
		{"/system.slice/docker-abc.scope", "", ""},
		{"/user.slice/pod" + podU + "/" + ctrID, "", ""},
	} {
		pod, ctr := parseCgroupPod(tc.path)
		if pod != tc.pod || ctr != tc.ctr {
			t.Errorf("parseCgroupPod(%q) = %q, %q; want %q, %q", tc.path, pod, ctr, tc.pod, tc.ctr)
		}
	}
}

// The cgroup file, read through procfs: the v2 line, the first v1 line
// naming a pod, paths holding ':'; a malformed file drops the pod and is
// counted.
func TestReadCgroup(t *testing.T) {
	podS := strings.ReplaceAll(podU, "-", "_")
	v1 := "12:devices:/kubepods/burstable/pod" + podU + "/" + ctrID + "\n" +
		"11:cpuset:/kubepods/burstable/pod" + podU + "/" + ctrID + "\n" +
		"1:name=systemd:/kubepods/burstable/pod" + podU + "/" + ctrID + "\n0::/\n"
	for i, tc := range []struct {
		in, pod, ctr string
		bad          bool
	}{
		{in: "0::/kubepods/besteffort/pod" + podU + "/" + ctrID + "\n", pod: podU, ctr: ctrID},
		{in: v1, pod: podU, ctr: ctrID},
		{in: "0::/system.slice/containerd.service/kubepods-besteffort-pod" + podS + ".slice:cri-containerd:" + ctrID + "\n", pod: podU, ctr: ctrID},
		{in: "0::/process_api/98e0b3c2\n"}, // the borrowed VM
		{in: "9:name=systemd:/\n4:memory:/process_api/b4b0e2e3\n0::/\n"},
		{in: ""},
		{in: "garbage\n", bad: true},
		{in: "0::/\n\n4:memory:/\n", bad: true},
		{in: "x::/kubepods/pod" + podU + "/" + ctrID + "\n", bad: true},
	} {
		root := t.TempDir()
		pid := strconv.Itoa(100 + i)
		writeProc(t, root, pid, map[string]string{"comm": "x\n", "cgroup": tc.in})
		p, err := Read(root, 100+i)
		var partial *sampler.PartialError
		switch {
		case tc.bad && (!errors.As(err, &partial) || partial.Count != 1 || !strings.Contains(err.Error(), "/cgroup")):
			t.Errorf("%q: err %v, want a PartialError counting the cgroup file", tc.in, err)
		case !tc.bad && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		}
		if p.PodUID != tc.pod || p.ContainerID != tc.ctr {
			t.Errorf("%q: pod %q container %q; want %q, %q", tc.in, p.PodUID, p.ContainerID, tc.pod, tc.ctr)
		}
	}
}

package kubelet_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpulink/gpulink_exporter/internal/kubelet"
	"github.com/gpulink/gpulink_exporter/internal/kubelet/kubelettest"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

func uuid(i int) string { return "GPU-0000000" + string(rune('0'+i)) + "-1111-2222-3333-444444444444" }

func fourGPUs() []nvml.Identity {
	var ids []nvml.Identity
	for i := range 4 {
		ids = append(ids, nvml.Identity{Index: i, UUID: uuid(i), PCIBusID: "0000:" + []string{"18", "2a", "3a", "5d"}[i] + ":00.0"})
	}
	return ids
}

// startKubelet serves the fake kubelet on a socket in a fresh directory.
func startKubelet(t *testing.T, pods ...kubelettest.Pod) *kubelettest.Kubelet {
	t.Helper()
	k := kubelettest.New(filepath.Join(t.TempDir(), "kubelet.sock"))
	k.SetPods(pods...)
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}

func gpus(ids ...string) map[string][]string { return map[string][]string{"nvidia.com/gpu": ids} }

func pod(ns, name, container string, devices map[string][]string) kubelettest.Pod {
	return kubelettest.Pod{Namespace: ns, Name: name, Containers: []kubelettest.Container{{Name: container, Devices: devices}}}
}

func sample(t *testing.T, r *kubelet.Reader) (*kubelet.Snapshot, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.Sample(ctx)
}

func TestAssignmentsOverGRPC(t *testing.T) {
	k := startKubelet(t,
		pod("default", "train-0", "trainer", gpus(uuid(1), uuid(0))),
		// Time-slicing: two shares of GPU 2 in one container are one
		// assignment; a share in another pod is another.
		pod("ml", "infer-1", "server", map[string][]string{"nvidia.com/gpu.shared": {uuid(2) + "::0", uuid(2) + "::1"}}),
		pod("ml", "infer-2", "server", map[string][]string{"nvidia.com/gpu.shared": {uuid(2) + "::2"}}),
		// The device plugin's index strategy names GPUs by NVML index.
		pod("batch", "job-7", "main", gpus("3")),
		// A MIG instance: no NVML GPU of that UUID.
		pod("ml", "small", "app", map[string][]string{"nvidia.com/mig-1g.10gb": {"MIG-abcd"}}),
		// Not NVIDIA devices, and a pod with none.
		pod("kube-system", "rdma", "agent", map[string][]string{"rdma/hca_shared_devices_a": {"1"}}),
		kubelettest.Pod{Namespace: "default", Name: "web", Containers: []kubelettest.Container{{Name: "nginx"}}},
	)
	r := &kubelet.Reader{Socket: k.Socket, GPUs: fourGPUs}
	snap, err := sample(t, r)
	if err != nil {
		t.Fatal(err)
	}
	want := []kubelet.Assignment{
		{GPU: -1, UUID: "MIG-abcd", Namespace: "ml", Pod: "small", Container: "app", ResourceName: "nvidia.com/mig-1g.10gb"},
		{GPU: 0, UUID: uuid(0), PCIBusID: "0000:18:00.0", Namespace: "default", Pod: "train-0", Container: "trainer", ResourceName: "nvidia.com/gpu"},
		{GPU: 1, UUID: uuid(1), PCIBusID: "0000:2a:00.0", Namespace: "default", Pod: "train-0", Container: "trainer", ResourceName: "nvidia.com/gpu"},
		{GPU: 2, UUID: uuid(2), PCIBusID: "0000:3a:00.0", Namespace: "ml", Pod: "infer-1", Container: "server", ResourceName: "nvidia.com/gpu.shared"},
		{GPU: 2, UUID: uuid(2), PCIBusID: "0000:3a:00.0", Namespace: "ml", Pod: "infer-2", Container: "server", ResourceName: "nvidia.com/gpu.shared"},
		{GPU: 3, UUID: uuid(3), PCIBusID: "0000:5d:00.0", Namespace: "batch", Pod: "job-7", Container: "main", ResourceName: "nvidia.com/gpu"},
	}
	if !reflect.DeepEqual(snap.Assignments, want) {
		t.Errorf("assignments:\n got %+v\nwant %+v", snap.Assignments, want)
	}

	// Without NVML: UUIDs as the kubelet gives them, indices unknown.
	r.GPUs = nil
	snap, err = sample(t, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range snap.Assignments {
		if a.PCIBusID != "" || (a.UUID != "" && a.GPU != -1) || (a.UUID == "" && a.GPU != 3) {
			t.Errorf("without NVML: %+v", a)
		}
	}
}

func TestPodsComeAndGo(t *testing.T) {
	k := startKubelet(t, pod("a", "one", "c", gpus(uuid(0))))
	r := &kubelet.Reader{Socket: k.Socket, GPUs: fourGPUs}
	podsOf := func() []string {
		t.Helper()
		snap, err := sample(t, r)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range snap.Assignments {
			out = append(out, a.Namespace+"/"+a.Pod)
		}
		return out
	}
	if got := podsOf(); !reflect.DeepEqual(got, []string{"a/one"}) {
		t.Errorf("first: %v", got)
	}
	k.SetPods(pod("a", "one", "c", gpus(uuid(0))), pod("b", "two", "c", gpus(uuid(1))))
	if got := podsOf(); !reflect.DeepEqual(got, []string{"a/one", "b/two"}) {
		t.Errorf("second pod came: %v", got)
	}
	k.SetPods(pod("b", "two", "c", gpus(uuid(1))))
	if got := podsOf(); !reflect.DeepEqual(got, []string{"b/two"}) {
		t.Errorf("first pod went: %v", got)
	}
	k.SetPods()
	if got := podsOf(); got != nil {
		t.Errorf("no pods: %v", got)
	}
}

func TestKubeletDownAndBack(t *testing.T) {
	k := startKubelet(t, pod("a", "one", "c", gpus(uuid(0))))
	var log bytes.Buffer
	r := &kubelet.Reader{Socket: k.Socket, GPUs: fourGPUs, Logger: slog.New(slog.NewTextHandler(&log, nil))}
	s := sampler.New[*kubelet.Snapshot]("kubernetes", r, sampler.Options{Interval: time.Hour, Timeout: 5 * time.Second})
	s.SampleOnce(context.Background())
	if !s.Status().Up {
		t.Fatalf("kubelet up: %+v", s.Status())
	}
	first := s.Latest()

	k.Stop()
	_, err := sample(t, r)
	if err == nil || !strings.Contains(err.Error(), k.Socket) {
		t.Errorf("kubelet down: err = %v, want it to name the socket", err)
	}
	s.SampleOnce(context.Background())
	if st := s.Status(); st.Up || s.Latest() != first {
		t.Errorf("kubelet down: status %+v, snapshot kept %v", st, s.Latest() == first)
	}

	k.SetPods(pod("a", "two", "c", gpus(uuid(0))))
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	s.SampleOnce(context.Background())
	if st := s.Status(); !st.Up || s.Latest().Data.Assignments[0].Pod != "two" {
		t.Errorf("kubelet back: status %+v, snapshot %+v", st, s.Latest().Data)
	}
	// Two failed samples, one warning; one line for the return.
	if got := log.String(); strings.Count(got, "level=WARN") != 1 || strings.Count(got, "answering again") != 1 {
		t.Errorf("log:\n%s\nwant one warning and one recovery", got)
	}
}

func TestKubeletThatNeverAnswersIsCutAtTheDeadline(t *testing.T) {
	k := startKubelet(t, pod("a", "one", "c", gpus(uuid(0))))
	r := &kubelet.Reader{Socket: k.Socket}
	s := sampler.New[*kubelet.Snapshot]("kubernetes", r, sampler.Options{Interval: time.Hour, Timeout: 100 * time.Millisecond})
	s.SampleOnce(context.Background())
	k.Block()
	start := time.Now()
	s.SampleOnce(context.Background())
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a hung kubelet held the sample %v", took)
	}
	if s.Status().Up {
		t.Errorf("hung kubelet: source up")
	}
	k.Unblock()
	// The abandoned call ended at its deadline: the next sample runs.
	deadline := time.Now().Add(5 * time.Second)
	for s.Status().Stalled && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	s.SampleOnce(context.Background())
	if !s.Status().Up {
		t.Errorf("kubelet answering again: %+v", s.Status())
	}
}

func TestNoSocket(t *testing.T) {
	r := &kubelet.Reader{Socket: filepath.Join(t.TempDir(), "missing.sock")}
	if _, err := sample(t, r); err == nil || !strings.Contains(err.Error(), "missing.sock") {
		t.Errorf("err = %v, want it to name the socket", err)
	}
}

// A kubelet (grpc-go's server) that refuses the call: its status and
// message, decoded, name why.
func TestKubeletRefuses(t *testing.T) {
	k := startKubelet(t, pod("a", "one", "c", gpus(uuid(0))))
	k.Fail(status.Error(codes.PermissionDenied, "pod-resources: no access for uid 65534 — ask the node's admin"))
	r := &kubelet.Reader{Socket: k.Socket}
	_, err := sample(t, r)
	var se *kubelet.StatusError
	if !errors.As(err, &se) || se.Code != int(codes.PermissionDenied) {
		t.Fatalf("err = %v, want a PermissionDenied status", err)
	}
	for _, want := range []string{k.Socket, "PermissionDenied", "no access for uid 65534 — ask the node's admin"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q does not say %q", err, want)
		}
	}
	k.Fail(nil)
	if snap, err := sample(t, r); err != nil || len(snap.Assignments) != 1 {
		t.Errorf("answering again: %+v, %v", snap, err)
	}
}

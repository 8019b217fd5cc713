// Package kubelettest serves the kubelet's pod-resources API (podresources
// v1, the generated gRPC server interface) on a unix socket, for tests:
// pods come and go with SetPods, the kubelet goes down with Stop and comes
// back with Start, and Block makes List hang until Unblock.
package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Container is one container's NVIDIA devices.
type Container struct {
	Name string
	// Devices maps a resource name (nvidia.com/gpu) to device IDs.
	Devices map[string][]string
}

// Pod is one pod as the kubelet lists it.
type Pod struct {
	Namespace, Name string
	Containers      []Container
}

// Kubelet is a fake kubelet's pod-resources endpoint.
type Kubelet struct {
	Socket string

	mu      sync.Mutex
	pods    []Pod
	srv     *grpc.Server
	blocked chan struct{} // non-nil while List blocks
	lists   int
	failure error // what List answers instead of the pods, when set
}

// New returns a kubelet that will serve at socket; call Start.
func New(socket string) *Kubelet { return &Kubelet{Socket: socket} }

// Start serves the API at the socket, replacing a stale socket file as the
// kubelet does.
func (k *Kubelet) Start() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.srv != nil {
		return errors.New("kubelettest: already serving")
	}
	if err := os.Remove(k.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", k.Socket)
	if err != nil {
		return fmt.Errorf("kubelettest: %w", err)
	}
	k.srv = grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(k.srv, &server{k: k})
	go func(s *grpc.Server) { _ = s.Serve(l) }(k.srv)
	return nil
}

// Stop takes the kubelet down: connections close, the socket goes away.
// A List blocked in it is released first.
func (k *Kubelet) Stop() {
	k.Unblock()
	k.mu.Lock()
	srv := k.srv
	k.srv = nil
	k.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
	_ = os.Remove(k.Socket)
}

// SetPods replaces what the kubelet lists.
func (k *Kubelet) SetPods(pods ...Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = pods
}

// Block makes every List wait until Unblock (or its caller gives up).
func (k *Kubelet) Block() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.blocked == nil {
		k.blocked = make(chan struct{})
	}
}

// Unblock releases blocked Lists.
func (k *Kubelet) Unblock() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.blocked != nil {
		close(k.blocked)
		k.blocked = nil
	}
}

// Fail makes List answer err (a status.Error for a gRPC status) instead
// of the pods; nil lists them again.
func (k *Kubelet) Fail(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.failure = err
}

// Lists counts the List calls answered or begun.
func (k *Kubelet) Lists() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lists
}

type server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	k *Kubelet
}

func (s *server) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.k.mu.Lock()
	s.k.lists++
	blocked, pods, failure := s.k.blocked, s.k.pods, s.k.failure
	s.k.mu.Unlock()
	if failure != nil {
		return nil, failure
	}
	if blocked != nil {
		select {
		case <-blocked:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, p := range pods {
		pr := &podresourcesv1.PodResources{Name: p.Name, Namespace: p.Namespace}
		for _, c := range p.Containers {
			cr := &podresourcesv1.ContainerResources{Name: c.Name, CpuIds: []int64{0, 1}}
			for res, ids := range c.Devices {
				cr.Devices = append(cr.Devices, &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: ids})
			}
			pr.Containers = append(pr.Containers, cr)
		}
		resp.PodResources = append(resp.PodResources, pr)
	}
	return resp, nil
}

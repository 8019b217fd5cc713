// Package kubelet reads which pod holds each GPU from the kubelet's
// pod-resources API (k8s.io/kubelet podresources v1, a gRPC service on a
// unix socket) into typed snapshots. It makes its one gRPC call with
// net/http and decodes the answer with protowire (grpc.go,
// podresources.go). It knows nothing of Prometheus.
//
// The API names the pods and containers devices are assigned to by the
// device plugins (nvidia.com/gpu and friends); it does not give pod UIDs,
// container IDs or the processes that use a device.
package kubelet

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
)

// DefaultSocket is where the kubelet serves the pod-resources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// maxResponseBytes bounds one List answer; the kubelet's own client allows
// 16 MiB (a node of many pods), gRPC's default 4 MiB.
const maxResponseBytes = 16 << 20

// ResourcePrefix marks the extended resources that are NVIDIA devices:
// nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-1g.10gb.
const ResourcePrefix = "nvidia.com/"

// Reader samples the pod-resources API; it implements sampler.Source.
type Reader struct {
	// Socket is the kubelet's pod-resources socket.
	Socket string
	// GPUs, when set, lists NVML's GPUs (nvml.Reader's Identities): it
	// gives assignments their index and PCI address, and resolves device
	// IDs given as indices (the device plugin's index strategy).
	GPUs func() []nvml.Identity
	// Logger, when set, hears when the kubelet stops and starts
	// answering (once each, not every sample).
	Logger *slog.Logger

	mu   sync.Mutex
	down bool
}

// Snapshot is every NVIDIA device assigned to a container.
type Snapshot struct {
	// Assignments are sorted by GPU index, then UUID, namespace, pod and
	// container; each appears once.
	Assignments []Assignment
}

// Assignment is one device assigned to one container.
type Assignment struct {
	// GPU is the NVML index; -1 when NVML does not know the device (a MIG
	// instance, or no NVML).
	GPU int
	// UUID is the device's: a GPU's "GPU-..." or a MIG instance's
	// "MIG-...", as the device plugin names it; empty when the plugin
	// names devices by index and NVML does not know that index.
	UUID string
	// PCIBusID is NVML's, in sysfs form; empty when unknown.
	PCIBusID                  string
	Namespace, Pod, Container string
	// ResourceName is the extended resource: nvidia.com/gpu.
	ResourceName string
}

// Sample lists the pods' resources. Each sample dials the socket afresh: at
// one call every half minute a connection costs nothing worth keeping, and
// a kubelet that restarted (a new socket) is simply there on the next one,
// with no reconnection backoff to wait out.
func (r *Reader) Sample(ctx context.Context) (*Snapshot, error) {
	snap, err := r.list(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Logger != nil && (err != nil) != r.down {
		if err != nil {
			r.Logger.Warn("kubelet pod-resources API unavailable; the kubernetes source reports down until it answers", "err", err)
		} else {
			r.Logger.Info("kubelet pod-resources API answering again", "socket", r.Socket)
		}
	}
	r.down = err != nil
	return snap, err
}

func (r *Reader) list(ctx context.Context) (*Snapshot, error) {
	path, err := filepath.Abs(r.Socket)
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %q: %w", r.Socket, err)
	}
	resp, err := unary(ctx, path, listMethod, nil, maxResponseBytes)
	if err != nil {
		return nil, fmt.Errorf("kubelet pod-resources List at %s: %w", path, err)
	}
	pods, err := decodeList(resp)
	if err != nil {
		return nil, fmt.Errorf("kubelet pod-resources List at %s: %w", path, err)
	}
	var ids []nvml.Identity
	if r.GPUs != nil {
		ids = r.GPUs()
	}
	return assignments(pods, ids), nil
}

// replica is the suffix the NVIDIA device plugin gives each share of a
// GPU under time-slicing or MPS: GPU-<uuid>::<n>.
var replica = regexp.MustCompile(`::[0-9]+$`)

// assignments maps the kubelet's answer onto GPUs. Dynamic resources
// (DRA claims) are left out: their CDI device names do not name a GPU in
// a form NVML knows.
func assignments(pods []podResources, ids []nvml.Identity) *Snapshot {
	byUUID := make(map[string]nvml.Identity, len(ids))
	byIndex := make(map[int]nvml.Identity, len(ids))
	for _, id := range ids {
		byUUID[id.UUID] = id
		byIndex[id.Index] = id
	}
	type key struct{ uuid, ns, pod, container, index string }
	seen := map[key]bool{}
	snap := &Snapshot{}
	for _, p := range pods {
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				if !strings.HasPrefix(d.ResourceName, ResourcePrefix) {
					continue
				}
				for _, dev := range d.DeviceIDs {
					a := Assignment{GPU: -1, Namespace: p.Namespace, Pod: p.Name, Container: c.Name,
						ResourceName: d.ResourceName}
					dev = replica.ReplaceAllString(strings.TrimSpace(dev), "")
					if n, err := strconv.Atoi(dev); err == nil && n >= 0 {
						// The index strategy: the device plugin's index is NVML's.
						a.GPU = n
						if id, ok := byIndex[n]; ok {
							a.UUID, a.PCIBusID = id.UUID, id.PCIBusID
						}
					} else {
						a.UUID = dev
						if id, ok := byUUID[dev]; ok {
							a.GPU, a.PCIBusID = id.Index, id.PCIBusID
						}
					}
					// Two shares of one GPU in one container are one
					// assignment.
					k := key{a.UUID, a.Namespace, a.Pod, a.Container, strconv.Itoa(a.GPU)}
					if seen[k] {
						continue
					}
					seen[k] = true
					snap.Assignments = append(snap.Assignments, a)
				}
			}
		}
	}
	slices.SortFunc(snap.Assignments, func(a, b Assignment) int {
		return cmp.Or(cmp.Compare(a.GPU, b.GPU), cmp.Compare(a.UUID, b.UUID), cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Container, b.Container))
	})
	return snap
}

package kubelet

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// A response as the kubelet encodes it (the generated types), with every
// field the exporter does not read set, decodes to what it does read.
func TestDecodeListSkipsWhatItDoesNotRead(t *testing.T) {
	topology := &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: 1}}}
	resp := &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Name: "train-0", Namespace: "default", Containers: []*podresourcesv1.ContainerResources{{
			Name:   "trainer",
			CpuIds: []int64{0, 1, 64, 65},
			Memory: []*podresourcesv1.ContainerMemory{{MemoryType: "memory", Size: 1 << 30, Topology: topology}},
			Devices: []*podresourcesv1.ContainerDevices{
				{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-a", "GPU-b"}, Topology: topology},
				{ResourceName: "rdma/hca", DeviceIds: []string{"1"}},
			},
			DynamicResources: []*podresourcesv1.DynamicResource{{ClaimName: "c", ClaimNamespace: "default",
				ClaimResources: []*podresourcesv1.ClaimResource{{DriverName: "gpu.nvidia.com", CdiDevices: []*podresourcesv1.CDIDevice{{Name: "nvidia.com/gpu=0"}}}}}},
		}, {Name: "sidecar"}}},
		{Name: "empty", Namespace: "kube-system"},
	}}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeList(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []podResources{
		{Name: "train-0", Namespace: "default", Containers: []containerResources{
			{Name: "trainer", Devices: []containerDevices{
				{ResourceName: "nvidia.com/gpu", DeviceIDs: []string{"GPU-a", "GPU-b"}},
				{ResourceName: "rdma/hca", DeviceIDs: []string{"1"}},
			}},
			{Name: "sidecar"},
		}},
		{Name: "empty", Namespace: "kube-system"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if got, err := decodeList(nil); err != nil || got != nil {
		t.Errorf("no pods: %v, %v", got, err)
	}
}

func TestDecodeListRefusesBrokenMessages(t *testing.T) {
	good, err := proto.Marshal(&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Name: "p", Namespace: "n", Containers: []*podresourcesv1.ContainerResources{{Name: "c",
			Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-a"}}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	// field wraps v as field num of a message.
	field := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	badName := field(1, field(1, []byte("\xff\xfe")))
	// A container whose devices field claims 10 bytes and has 2.
	cutDevices := field(1, field(3, append(protowire.AppendTag(nil, 2, protowire.BytesType), 10, 'a', 'b')))
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"cut short", good[:len(good)-3], "ListPodResourcesResponse: field 1: unexpected EOF"},
		{"cut inside a container", cutDevices, "ContainerResources: field 2: unexpected EOF"},
		{"cut in the outer message", good[:4], "ListPodResourcesResponse"},
		{"a tag alone", []byte{0x0a}, "ListPodResourcesResponse: field 1"},
		{"field number 0", []byte{0x02, 0x00}, "ListPodResourcesResponse: field tag"},
		{"a name that is not UTF-8", badName, "PodResources.name is not valid UTF-8"},
	} {
		if _, err := decodeList(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to name %q", c.name, err, c.want)
		}
	}
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/sim"
)

// collectives --check on the simulated p5: aws-ofi-nccl, the devices and
// EFA with GPUDirect RDMA, ready; with nccl_net_socket the container sees
// no RDMA device, and the check fails naming it.
func TestCollectivesCheckOnSimulatedNode(t *testing.T) {
	faults := filepath.Join(t.TempDir(), "faults.yaml")
	if err := os.WriteFile(faults, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := sim.Start(sim.Config{Profile: "aws-p5", FaultsFile: faults, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var out bytes.Buffer
	if code := runNCCLCheck("libnccl.so.2", n.FS(), n, &out); code != 0 {
		t.Errorf("exit %d:\n%s", code, &out)
	}
	for _, want := range []string{
		"ok       library           /usr/lib/x86_64-linux-gnu/libnccl.so.2, NCCL 2.27.3\n",
		"ok       network_plugin    /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so\n",
		"ok       rdma_devices      32 devices, /dev/infiniband/uverbs0 to /dev/infiniband/uverbs31\n",
		"info     expected_network  GPU 0000:53:00.0: EFA with GPUDirect RDMA (rail rdmap76s0+rdmap77s0+rdmap78s0+rdmap79s0, PXB)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, &out)
		}
	}

	if err := os.WriteFile(faults, []byte("faults:\n- {kind: nccl_net_socket}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := n.Advance(time.Now()); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := runNCCLCheck("libnccl.so.2", n.FS(), n, &out); code != 1 ||
		!strings.Contains(out.String(), "missing  rdma_devices      no /dev/infiniband/uverbs*, but the NICs have EFA ports up") {
		t.Errorf("nccl_net_socket: exit %d:\n%s", code, &out)
	}
}

package sim

import (
	"fmt"
	"path"
	"slices"

	"github.com/gpulink/gpulink_exporter/internal/ncclcheck"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/probes/nccl"
)

// What the exporter's container sees of NCCL on the simulated node, for
// the nccl source's check (internal/ncclcheck), which reads it below the
// node's root as it reads / on a real node: the library where NVIDIA's
// libnccl2 package puts it, aws-ofi-nccl where the profile's network
// needs it, and one /dev/infiniband/uverbsN per RDMA device. The
// nccl_net_socket fault takes the devices away, as a container started
// without them has none, and NCCL falls back to sockets.

// ProfileNCCL is a profile's NCCL setup: the environment the exporter runs
// with and the network plugin's file, below the root ("" for none).
type ProfileNCCL struct {
	Env    map[string]string
	Plugin string
}

// libDir is where Debian's and Ubuntu's libnccl2 install the library.
const libDir = "usr/lib/x86_64-linux-gnu"

// NCCLEnv is the check's environment on the simulated node: its root, its
// profile's variables, and no memlock limit (as the chart's IPC_LOCK
// gives). The library is not loaded: its version is in its file's name.
func (n *Node) NCCLEnv(library string) ncclcheck.Env {
	env := n.profile.NCCL.Env
	return ncclcheck.Env{Root: n.root, Library: library, Getenv: func(k string) string { return env[k] },
		Memlock: func() (uint64, error) { return ncclcheck.Unlimited, nil }}
}

// container lays the container's files over m, the tick's machine, so
// that the node's Syncer writes them with the rest of the tree and
// removes those the faults in force take away. n.mu is held.
func (n *Node) container(m *machine.Machine) {
	versioned := path.Join(libDir, "libnccl.so."+nccl.VersionString(ncclVersionCode))
	if m.Overrides == nil {
		m.Overrides = map[string]string{}
	}
	if m.Links == nil {
		m.Links = map[string]string{}
	}
	m.Overrides[versioned] = "simulated NCCL\n"
	m.Links[path.Join(libDir, "libnccl.so.2")] = versioned
	if p := n.profile.NCCL.Plugin; p != "" {
		m.Overrides[p] = "simulated network plugin\n"
	}
	if slices.ContainsFunc(n.faults, func(f *activeFault) bool { return f.Kind == NCCLNetSocket }) {
		return
	}
	devices := 0
	walkDevices(m, func(d *machine.Device) { devices += len(d.RDMA) })
	for i := range devices {
		m.Overrides[fmt.Sprintf("dev/infiniband/uverbs%d", i)] = ""
	}
}

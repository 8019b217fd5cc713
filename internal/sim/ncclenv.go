package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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

// writeContainer brings the container's files up to date with the faults
// in force. n.mu is held.
func (n *Node) writeContainer(m *machine.Machine) error {
	versioned := "libnccl.so." + nccl.VersionString(ncclVersionCode)
	files := map[string]string{filepath.Join(libDir, versioned): "simulated NCCL\n"}
	if p := n.profile.NCCL.Plugin; p != "" {
		files[p] = "simulated network plugin\n"
	}
	for p, content := range files {
		if err := writeIfMissing(filepath.Join(n.root, p), content); err != nil {
			return err
		}
	}
	link := filepath.Join(n.root, libDir, "libnccl.so.2")
	if _, err := os.Lstat(link); errors.Is(err, fs.ErrNotExist) {
		if err := os.Symlink(versioned, link); err != nil {
			return err
		}
	}
	devices := 0
	walkDevices(m, func(d *machine.Device) { devices += len(d.RDMA) })
	if slices.ContainsFunc(n.faults, func(f *activeFault) bool { return f.Kind == NCCLNetSocket }) {
		devices = 0
	}
	dir := filepath.Join(n.root, "dev", "infiniband")
	old, _ := filepath.Glob(filepath.Join(dir, "uverbs*"))
	for _, p := range old {
		var i int
		if _, err := fmt.Sscanf(filepath.Base(p), "uverbs%d", &i); err != nil || i >= devices {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	for i := range devices {
		if err := writeIfMissing(filepath.Join(dir, fmt.Sprintf("uverbs%d", i)), ""); err != nil {
			return err
		}
	}
	return nil
}

func writeIfMissing(path, content string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

package main

import (
	"context"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/ncclcheck"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes/nccl"
)

// ncclEnv is what the check reads on this node: the container's own
// files below /, the process's environment and memlock limit. The daemon
// leaves NCCL unloaded (loading it is the child's), so load is nil there.
func ncclEnv(library string, load func(string) (int, error)) ncclcheck.Env {
	return ncclcheck.Env{Root: "/", Library: library, Getenv: os.Getenv, Memlock: memlockLimit, LoadVersion: load}
}

// startNCCLCheck starts the nccl source: the check, sampled, over the
// topology and NIC samples (the NICs read afresh where the nic source is
// off). The simulated node gives its own environment: its tree's root
// holds the library, the plugin and /dev/infiniband as its profile has
// them.
func startNCCLCheck(w *wiring, s setting) {
	env := ncclEnv(w.cfg.ncclLib, nil)
	if w.sim != nil {
		env = w.sim.NCCLEnv(w.cfg.ncclLib)
	}
	src := &ncclcheck.Source{Env: env, Topology: w.topology.LatestData, Ready: []<-chan struct{}{w.topology.FirstSampled()}}
	if w.nic != nil {
		src.NICs = w.nic.LatestData
		src.Ready = append(src.Ready, w.nic.FirstSampled())
	} else {
		r := &nic.Reader{FS: w.fsys}
		src.NICs = func() *nic.Snapshot {
			snap, _ := r.Sample(context.Background())
			return snap
		}
	}
	var ids interface{ Identities() []nvml.Identity }
	if w.reader != nil {
		ids = w.reader
	}
	w.reg.MustRegister(collector.NewNCCLCheckCollector(sample(w, s, src), ids))
}

// memlockLimit is this process's soft RLIMIT_MEMLOCK, which the collective
// child inherits.
func memlockLimit() (uint64, error) {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &l); err != nil {
		return 0, err
	}
	if l.Cur == unix.RLIM_INFINITY {
		return ncclcheck.Unlimited, nil
	}
	return l.Cur, nil
}

// runNCCLCheck is collectives --check: the report on stdout, exit status 1
// where the node is not ready. On a real node the library is loaded (not
// initialised: ncclGetVersion only) for its version; the simulated node's
// is read from its file name.
func runNCCLCheck(library string, fsys hostfs.Root, node *sim.Node, stdout io.Writer) int {
	env := ncclEnv(library, ncclVersion)
	if node != nil {
		env = node.NCCLEnv(library)
	}
	topo, _ := numa.ReadTopology(fsys)
	ports, _ := (&nic.Reader{FS: fsys}).Sample(context.Background())
	r := ncclcheck.Check(env, topo, ports)
	if err := r.Write(stdout); err != nil || !r.Ready() {
		return 1
	}
	return 0
}

// ncclVersion loads the library the loader finds for library and asks
// its version.
func ncclVersion(library string) (int, error) {
	l, err := nccl.Open(library)
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Version()
}

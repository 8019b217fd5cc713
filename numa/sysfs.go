// Package numa discovers where things sit in a machine: NUMA nodes and their
// distances, the PCIe tree from every GPU, NIC and NVMe drive up to its root
// port, the path class between each GPU and NIC as nvidia-smi topo -m names
// it, and the verdict on a process's placement against its GPU's node
// (Judge). NIC ports are the nic package's (internal/nic), the processes'
// placement the process package's (internal/process).
//
// Everything is read from a sysfs root, so fixture trees stand in for a
// machine in tests. Parsing is kept apart from metrics: this package returns
// typed results and knows nothing of Prometheus.
//
// prometheus/procfs's sysfs PCI reader is not used: it drops a whole device
// (or the whole class) when one file is unreadable or holds an unexpected
// value, which is the failure node_exporter#3265 describes. Here one bad
// file drops one value and is counted.
package numa

import "github.com/gpulink/gpulink_exporter/internal/hostfs"

// reader reads one filesystem root (hostfs.Root): this package reads Sys,
// and from Proc only what the kernel says of itself and the NVIDIA driver
// (dmabuf.go); internal/process reads the processes. The reading methods
// hang off it; ReadTopology and ReadPCIeLink are the ways in.
type reader struct{ hostfs.Root }

func (f reader) sys(parts ...string) string { return f.SysPath(parts...) }

func (f reader) proc(parts ...string) string { return f.ProcPath(parts...) }

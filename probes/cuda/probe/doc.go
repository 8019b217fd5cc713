// Package probe is the CUDA child, `gpulink_exporter probe`: it opens the
// driver (probes/cuda), measures each GPU's host, local and peer copies and
// latencies through probes.MeasureRound, and prints the round as JSON for
// the daemon or as a table for a person (command.go, table.go). The
// measurements themselves are here: copy bandwidth (bandwidth.go), pointer
// chase and launch latencies (latency.go), timing behind a spin kernel
// (timing.go), pinned host memory on a chosen NUMA node (hostmem.go), and
// the per-GPU worker threads that hold the contexts (worker.go).
//
// It lives under probes/cuda rather than in it: the contract (probes)
// imports the NCCL binding, which imports the CUDA binding, so the binding
// cannot import the contract (see package probes).
package probe

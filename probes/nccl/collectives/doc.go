// Package collectives is the NCCL child, `gpulink_exporter collectives`:
// it opens libcuda and libnccl (the bindings in probes/cuda and
// probes/nccl), joins a communicator over this node's GPUs (and, for
// node-to-node probes, another node's), runs each collective through
// probes.MeasureCollectiveRound, and prints the round as JSON for the
// daemon or as nccl-tests' table for a person (command.go, table.go). It
// reads which transport NCCL chose from NCCL's own log (probes.TransportsOf
// over internal/nccllog) and sets the environment NCCL runs under, NVLS
// off unless asked (env.go).
//
// It is a sub-package of the binding, not part of it: the contract
// (probes) imports the binding to check a --unique-id at start, so the
// binding cannot import the contract, which the child needs. The binding
// stays a leaf that knows only libnccl.
package collectives

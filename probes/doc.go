// Package probes measures the links that feed a GPU by moving bytes through
// them: host<->device copies with the host buffer on each NUMA node, local
// HBM copies, peer copies over NVLink, round-trip latencies, and NCCL's
// collectives across the node's GPUs. A round runs in a child process
// (`gpulink_exporter probe` or `collectives`, the same binary) so a wedged
// driver or a crash never takes the daemon down.
//
// This package is the contract between the daemon and its children, and
// knows neither CUDA nor NCCL nor when rounds run:
//
//   - what is measured: the probe kinds and collectives, their options
//     (validated at start, so a bad flag stops the daemon), results and
//     rounds as the child prints them (result.go, collective.go);
//   - what a path should give, and nowhere else: a GPU's links
//     (expect.go), a collective's (collective_expect.go), the network to
//     another node and what its rail NICs carry (network_expect.go), each
//     from the NVML, topology and NIC snapshots, joined for the daemon and
//     the tests by Expectations (expectations.go);
//   - the round functions, MeasureRound and MeasureCollectiveRound, over
//     the seam of what a GPU can measure (Measurer, CollectiveMeasurer):
//     the real children and the simulated node both go through them;
//   - the daemon's end of the process boundary, ChildRunner (runner.go): the
//     child's argv (Options.Args), its exit statuses, and the versioned JSON
//     it prints. The scheduler and the node-to-node probes both run
//     children through it, and the children's own process tests run them
//     through it too, so it lives with the contract and not the scheduler.
//
// Below it, one package per part:
//
//   - probes/cuda: the CUDA driver API, loaded at run time (cgo shim);
//   - probes/cuda/probe: the CUDA child, `gpulink_exporter probe`, and its
//     measurements (bandwidth, latency, timing, host memory, workers);
//   - probes/nccl: the NCCL binding, loaded at run time (cgo shim);
//   - probes/nccl/collectives: the NCCL child, `gpulink_exporter
//     collectives` (command, table, transports, environment);
//   - probes/schedule: the daemon's scheduling of probe and collective
//     rounds (policy, duty cycle, skips, contention, sessions).
//
// This package has no cgo and imports neither binding: the NCCL unique id
// (UniqueID, ParseUniqueID) is the contract's, and a failure the daemon
// tells apart is typed here (ErrNoLibrary), which a child returns and the
// scheduler tests with errors.Is. The bindings stay leaves that know only
// their libraries (the NCCL one imports the CUDA one); each child, which
// imports both its binding and this contract, sits in a sub-package of
// its binding. deps_test.go keeps these directions.
//
// PathFor, CollectivePathFor, PeerReachable, NetworksFor and NearestNICRate
// take the samplers' snapshots (internal/nvml, numa, internal/nic): what a
// path should give is read from the same typed state the daemon samples,
// and a public copy of those types would only have to be kept in step with
// them. Every caller is in this module.
package probes

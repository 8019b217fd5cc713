// Package schedule is the daemon's scheduling of probe and collective
// rounds: when a GPU is probed (policy, interval, jitter, the duty-cycle
// bound), why one is skipped, what shared a GPU while its round ran
// (watched and judged by probes' sharing.go, which the commands use too),
// node-to-node sessions that reserve GPUs (session.go),
// and the collective rounds across the node's idle GPUs (collective.go).
// It runs each round through a probes.RoundRunner or
// probes.CollectiveRunner (a child process, or the simulated node) and
// publishes a Status that the collectors render; it never touches CUDA or
// NCCL itself.
//
// Two internal types cross its API. SchedulerConfig reads the node as the
// NVML sampler's snapshots and process lists (internal/nvml): the
// scheduler decides from the same typed state the daemon samples and
// exports. Latest and Status are the sampler's (internal/sampler): the
// scheduler is a source like any other, and the collectors and the
// source-health metrics read every source through those. Every caller is
// in this module.
package schedule

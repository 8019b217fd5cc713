// Package ncclcheck says, without running a collective, what an NCCL
// session between this node and another would use and what it lacks: the
// NCCL library, the network plugin, the RDMA devices a container must
// see, the memlock limit RDMA registration needs, GPUDirect RDMA's kernel
// side, and the network the node's own NICs call for. The check command
// prints it; the daemon exports it (the nccl source).
//
// Everything is read below a filesystem root (Env.Root) and through two
// functions (the memlock limit, the library's version), so that tests run
// the same code on fixture trees.
package ncclcheck

package collectives

import (
	"io"

	"github.com/gpulink/gpulink_exporter/probes"
)

// NCCL says which transport it chose for each connection only in its INFO
// log, one line per channel, from the transport's setup (src/transport/
// p2p.cc, shm.cc, net.cc, coll_net.cc, nvls.cc):
//
//	host:pid:tid [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
//	host:pid:tid [6] NCCL INFO Channel 09 : 6[6] -> 7[7] via SHM/direct/direct
//	host:pid:tid [7] NCCL INFO Channel 14/0 : 15[7] -> 0[0] [send] via NET/Socket/0
//	host:pid:tid [0] NCCL INFO CollNet 00/0 : 3 [send] via COLLNET/SHARP/0/GDRDMA
//	host:pid:tid [0] NCCL INFO NVLS comm 0x55d0c0a0 headRank 0 nHeads 8 ...
//
// and which network carried a NET connection in the lines beside them
// ("Using network IB", the IB transport's device list with each port's
// link layer, aws-ofi-nccl's provider). internal/nccllog parses all of
// it; probes.TransportsOf turns it into the round's Transports, for this
// child and the simulated node alike.

// parseTransports picks the connections out of NCCL's INFO log, one per
// (channel, from rank, to rank), sorted in that order: of the
// connections a channel has between two ranks, the lowest connection
// index's, the first logged among equals. A CollNet line names one rank:
// the other end is the network's reduction, given as rank -1. NVLS is
// set up per communicator, not per channel: its line gives channel -1
// and ranks -1. Any other line is ignored.
func parseTransports(log io.Reader) []probes.Transport { return probes.TransportsOf(log) }

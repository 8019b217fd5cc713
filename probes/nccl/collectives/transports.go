package collectives

import (
	"bufio"
	"cmp"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpulink/gpulink_exporter/probes"
)

// NCCL says which transport it chose for each connection only in its INFO
// log, one line per channel, from the transport's setup in NCCL 2.18 to
// 2.27 (src/transport/p2p.cc, shm.cc, net.cc, coll_net.cc, nvls.cc):
//
//	host:pid:tid [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
//	host:pid:tid [6] NCCL INFO Channel 09 : 6[6] -> 7[7] via SHM/direct/direct
//	host:pid:tid [7] NCCL INFO Channel 14/0 : 15[7] -> 0[0] [send] via NET/Socket/0
//	host:pid:tid [0] NCCL INFO CollNet 00/0 : 3 [send] via COLLNET/SHARP/0/GDRDMA
//	host:pid:tid [0] NCCL INFO NVLS comm 0x55d0c0a0 headRank 0 nHeads 8 ...
//
// "a[b]" is rank a on device b (a bus id in hex before 2.12). The
// channel's "/n" is the connection index: 0 for the rings and trees, 1
// for send/recv (NET/Socket/0/Shared where the ring's is NET/Socket/0);
// SHM and older versions leave it out. A network connection is logged by
// both ends, "[send]" and "[receive]", with the sender first either way.
var (
	channelLine = regexp.MustCompile(`NCCL INFO Channel (\d+)(?:/(\d+))? : (\d+)\[[^\]]*\] -> (\d+)\[[^\]]*\](?: \[(?:send|receive)\])? via (\S.*)$`)
	collNetLine = regexp.MustCompile(`NCCL INFO Coll(?:Net)? (\d+)(?:/(\d+))? : (\d+) \[(send|receive)\] via (\S.*)$`)
	nvlsLine    = regexp.MustCompile(`NCCL INFO NVLS comm 0x[0-9a-fA-F]+ headRank -?\d+ nHeads \d+`)
)

// maxTransportLog bounds what is read of NCCL's log: a node's
// communicator logs a few thousand lines; anything past this is not the
// connection setup.
const maxTransportLog = 16 << 20

// parseTransports picks the connections out of NCCL's INFO log, one per
// (channel, from rank, to rank), sorted in that order: of the
// connections a channel has between two ranks, the lowest connection
// index's, the first logged among equals. A CollNet line names one rank:
// the other end is the network's reduction, given as rank -1. NVLS is
// set up per communicator, not per channel: its line gives channel -1
// and ranks -1. Any other line is ignored.
func parseTransports(log io.Reader) []probes.Transport {
	type key struct{ channel, from, to int }
	type found struct {
		t    probes.Transport
		conn int
	}
	seen := map[key]int{} // index in out
	var out []found
	add := func(t probes.Transport, conn string) {
		f := found{t, atoi(conn)} // none: 0
		k := key{t.Channel, t.FromRank, t.ToRank}
		i, ok := seen[k]
		switch {
		case !ok:
			seen[k] = len(out)
			out = append(out, f)
		case f.conn < out[i].conn:
			out[i] = f
		}
	}
	sc := bufio.NewScanner(io.LimitReader(log, maxTransportLog))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r ")
		if m := channelLine.FindStringSubmatch(line); m != nil {
			add(probes.Transport{Channel: atoi(m[1]), FromRank: atoi(m[3]), ToRank: atoi(m[4]), Kind: transportKind(m[5]), Detail: m[5]}, m[2])
			continue
		}
		if m := collNetLine.FindStringSubmatch(line); m != nil {
			t := probes.Transport{Channel: atoi(m[1]), FromRank: atoi(m[3]), ToRank: -1, Kind: transportKind(m[5]), Detail: m[5]}
			if m[4] == "receive" {
				t.FromRank, t.ToRank = -1, t.FromRank
			}
			add(t, m[2])
			continue
		}
		if nvlsLine.MatchString(line) {
			add(probes.Transport{Channel: -1, FromRank: -1, ToRank: -1, Kind: probes.TransportNVLS, Detail: "NVLS"}, "")
		}
	}
	// A line longer than the scanner's buffer ends the scan: what was read
	// before it stands.
	var ts []probes.Transport
	for _, f := range out {
		ts = append(ts, f.t)
	}
	slices.SortFunc(ts, func(a, b probes.Transport) int {
		return cmp.Or(cmp.Compare(a.Channel, b.Channel), cmp.Compare(a.FromRank, b.FromRank), cmp.Compare(a.ToRank, b.ToRank))
	})
	return ts
}

// transportKind is the kind of NCCL's name for a transport ("P2P/CUMEM").
func transportKind(detail string) string {
	name, _, _ := strings.Cut(detail, "/")
	switch strings.ToUpper(name) {
	case "P2P":
		return probes.TransportP2P
	case "SHM":
		return probes.TransportSHM
	case "NET":
		return probes.TransportNet
	case "COLLNET":
		return probes.TransportCollNet
	case "NVLS":
		return probes.TransportNVLS
	}
	return probes.TransportUnknown
}

// atoi is for digits the expressions above matched, which fit an int,
// or nothing: 0.
func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

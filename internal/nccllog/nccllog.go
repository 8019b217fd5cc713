// Package nccllog reads what NCCL's INFO log says about the connections it
// made: the transport of every channel between two ranks, and for the
// network transport which network carried it (sockets, InfiniBand, RoCE,
// EFA through aws-ofi-nccl, or another plugin) and whether GPUDirect RDMA
// did. It parses only; the probes turn its results into metrics.
//
// The formats, NCCL 2.14 to 2.30 and aws-ofi-nccl to 1.21, with the source
// file of each line, are in the project's reference nccl_net_logs.md. In
// short, behind NCCL's prefix "host:pid:tid [cudaDev] NCCL INFO ":
//
//	Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read            (INIT|P2P)
//	Channel 09 : 6[6] -> 7[7] via SHM/direct/direct            (INIT|SHM)
//	Channel 14/0 : 15[7] -> 0[0] [send] via NET/IB/0/GDRDMA    (INIT|NET)
//	CollNet 00/0 : 3 [send] via COLLNET/SHARP/0/GDRDMA          (INIT|NET)
//	NVLS comm 0x55d0c0a0 headRank 0 nHeads 8 ...               (INIT|NVLS)
//	Using network IB                                           (INIT)
//	NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB ...  (INIT|NET)
//	NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)  (INIT|NET)
//
// Every line this package reads is logged under INIT, so NCCL_DEBUG=INFO
// with the default NCCL_DEBUG_SUBSYS shows them all; the probes ask for
// INIT,P2P,SHM,NET in case a version logs one without INIT.
package nccllog

import (
	"bufio"
	"cmp"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Kinds of transport NCCL connects two ranks with.
const (
	KindP2P     = "p2p"     // CUDA peer to peer: NVLink, or PCIe where the platform allows
	KindSHM     = "shm"     // through host shared memory
	KindNet     = "net"     // the network: sockets, IB verbs, or a plugin (EFA...)
	KindCollNet = "collnet" // in-network reduction (SHARP)
	KindNVLS    = "nvls"    // NVLink SHARP (multicast)
	KindUnknown = "unknown"
)

// Networks a connection's Network names besides a plugin's own name.
const (
	NetworkSocket = "Socket" // NCCL's TCP socket transport
	NetworkIB     = "IB"     // InfiniBand through NCCL's IB verbs transport (or a plugin built on it)
	NetworkRoCE   = "RoCE"   // RDMA over Converged Ethernet, through the same transport
	NetworkEFA    = "EFA"    // AWS Elastic Fabric Adapter, through aws-ofi-nccl's libfabric provider efa
)

// Connection is one connection line: rank From sends to rank To on
// Channel. A CollNet line names one rank; its other end, the network's
// reduction, is rank -1. NVLS is set up per communicator: channel -1,
// ranks -1.
type Connection struct {
	Channel, From, To int
	// Conn is the connection index NCCL prints after the channel
	// ("Channel 00/1"): 0 for rings and trees, 1 for send/recv; 0 where
	// the line has none.
	Conn int
	// Kind is one of the Kind* constants.
	Kind string
	// Detail is NCCL's own name for it, everything after "via":
	// "P2P/CUMEM/read", "NET/IB/0/GDRDMA", "NET/AWS Libfabric/1/GDRDMA/Shared".
	Detail string
	// Net is the network's name as the line gives it ("IB", "Socket",
	// "AWS Libfabric", "Libfabric", "IBext_v8"; "SHARP" for CollNet);
	// Device the network device's index, -1 where none. Both only for net
	// and collnet.
	Net    string
	Device int
	// GDR says the connection carries data by GPUDirect RDMA: its detail
	// has a "/GDRDMA" part (with or without 2.26's "(PCI)"). Without it,
	// NCCL stages the data through host memory.
	GDR bool
}

// IBDevice is one device of NCCL's IB transport's device list
// ("NET/IB : Using [0]mlx5_0:1/RoCE ..."), which both IB and RoCE use.
type IBDevice struct {
	Index int
	Name  string
	Port  int
	// LinkLayer is "IB", "RoCE" or, from 2.26, "UNSPECIFIED".
	LinkLayer string
}

// Log is what one NCCL process's log says about its connections.
type Log struct {
	// Network is the network NCCL chose ("Using network <name>"), the
	// last one logged; "" where the log has no such line.
	Network string
	// IBDevices are the IB transport's devices, from its last device list.
	IBDevices []IBDevice
	// OFIProvider and OFIFabric are aws-ofi-nccl's libfabric provider and
	// fabric ("efa", "efa-direct"); "" where the plugin did not log them
	// (the fabric only from aws-ofi-nccl 1.14).
	OFIProvider, OFIFabric string
	// Connections are one per (channel, from, to), in that order: of a
	// channel's connections between two ranks, the lowest connection
	// index's, the first logged among equals.
	Connections []Connection
}

var (
	// "Ring" is the word before NCCL 2.5, and ranks then had no "[dev]".
	channelLine = regexp.MustCompile(`NCCL INFO (?:Channel|Ring) (\d+)(?:/(\d+))? : (\d+)(?:\[[^\]]*\])? -> (\d+)(?:\[[^\]]*\])?(?: \[(?:send|receive)\])?\s+via\s+(\S.*)$`)
	collNetLine = regexp.MustCompile(`NCCL INFO Coll(?:Net)? (\d+)(?:/(\d+))? : (\d+) \[(send|receive)\]\s+via\s+(\S.*)$`)
	nvlsLine    = regexp.MustCompile(`NCCL INFO NVLS comm 0x[0-9a-fA-F]+ headRank -?\d+ nHeads \d+`)
	networkLine = regexp.MustCompile(`NCCL INFO Using network (\S.*)$`)
	ibListLine  = regexp.MustCompile(`NCCL INFO NET/IB ?: Using((?: \[\d+\][^\s:\[]+:\d+/\S+)+)`)
	ibDevice    = regexp.MustCompile(`\[(\d+)\]([^\s:\[]+):(\d+)/(\S+)`)
	// 1.6 to 1.13: "Selected Provider is efa (found 4 nics)"; 1.14 on:
	// "Selected provider is efa, fabric is efa-direct (found 16 nics)".
	ofiProviderLine = regexp.MustCompile(`NET/OFI Selected [Pp]rovider is ([^,\s]+)(?:, fabric is (\S+))?`)
	// The network name holds no "/" but may hold spaces ("AWS Libfabric");
	// a proxy rank "(n)" may follow the device (PXN).
	netDetail = regexp.MustCompile(`^(?:NET|COLLNET)/([^/]+)/(\d+)(?:\(\d+\))?(.*)$`)
)

// maxLog bounds what is read: a communicator logs a few thousand lines;
// anything past this is not its setup.
const maxLog = 16 << 20

// Parse reads an NCCL INFO log. Lines of any other kind, and lines
// longer than 64 KiB (which end the reading: what came before stands),
// are ignored; a launcher's prefix before NCCL's ("[1,7]<stdout>:") does
// not matter.
func Parse(r io.Reader) *Log {
	l := &Log{}
	type key struct{ channel, from, to int }
	seen := map[key]int{} // index in l.Connections
	add := func(c Connection) {
		k := key{c.Channel, c.From, c.To}
		i, ok := seen[k]
		switch {
		case !ok:
			seen[k] = len(l.Connections)
			l.Connections = append(l.Connections, c)
		case c.Conn < l.Connections[i].Conn:
			l.Connections[i] = c
		}
	}
	sc := bufio.NewScanner(io.LimitReader(r, maxLog))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r \t")
		if !strings.Contains(line, "NCCL INFO ") {
			continue
		}
		if c, ok := parseConnection(line); ok {
			add(c)
			continue
		}
		if m := networkLine.FindStringSubmatch(line); m != nil {
			l.Network = m[1]
			continue
		}
		if m := ibListLine.FindStringSubmatch(line); m != nil {
			l.IBDevices = parseIBDevices(m[1])
			continue
		}
		if m := ofiProviderLine.FindStringSubmatch(line); m != nil {
			l.OFIProvider, l.OFIFabric = m[1], m[2]
		}
	}
	slices.SortStableFunc(l.Connections, func(a, b Connection) int {
		return cmp.Or(cmp.Compare(a.Channel, b.Channel), cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
	return l
}

// parseConnection reads a channel, CollNet or NVLS line.
func parseConnection(line string) (Connection, bool) {
	if m := channelLine.FindStringSubmatch(line); m != nil {
		c := Connection{Channel: atoi(m[1]), Conn: atoi(m[2]), From: atoi(m[3]), To: atoi(m[4])}
		c.describe(m[5])
		return c, true
	}
	if m := collNetLine.FindStringSubmatch(line); m != nil {
		c := Connection{Channel: atoi(m[1]), Conn: atoi(m[2]), From: atoi(m[3]), To: -1}
		if m[4] == "receive" {
			c.From, c.To = -1, c.From
		}
		c.describe(m[5])
		return c, true
	}
	if nvlsLine.MatchString(line) {
		return Connection{Channel: -1, From: -1, To: -1, Kind: KindNVLS, Detail: "NVLS", Device: -1}, true
	}
	return Connection{}, false
}

// describe sets c's kind, and for the network its name, device and
// GPUDirect RDMA, from NCCL's name for the connection.
func (c *Connection) describe(detail string) {
	c.Detail, c.Kind, c.Device = detail, kindOf(detail), -1
	if c.Kind != KindNet && c.Kind != KindCollNet {
		return
	}
	m := netDetail.FindStringSubmatch(detail)
	if m == nil {
		return
	}
	c.Net, c.Device = m[1], atoi(m[2])
	// The rest: "/GDRDMA", "(PCI)" (2.26+), "/Shared", and whatever a
	// later version appends ("/flush=None").
	for part := range strings.SplitSeq(m[3], "/") {
		if strings.TrimSuffix(part, "(PCI)") == "GDRDMA" {
			c.GDR = true
		}
	}
}

// kindOf is the kind of NCCL's name for a transport ("P2P/CUMEM").
func kindOf(detail string) string {
	name, _, _ := strings.Cut(detail, "/")
	switch strings.ToUpper(name) {
	case "P2P":
		return KindP2P
	case "SHM":
		return KindSHM
	case "NET":
		return KindNet
	case "COLLNET":
		return KindCollNet
	case "NVLS":
		return KindNVLS
	}
	return KindUnknown
}

func parseIBDevices(list string) []IBDevice {
	var out []IBDevice
	for _, m := range ibDevice.FindAllStringSubmatch(list, -1) {
		// "IB", "RoCE", and with the HPC-X plugin "IB/SHARP".
		layer, _, _ := strings.Cut(m[4], "/")
		out = append(out, IBDevice{Index: atoi(m[1]), Name: m[2], Port: atoi(m[3]), LinkLayer: layer})
	}
	return out
}

// maxNetworkName bounds a network's name as a label value: a plugin names
// itself, and nothing past this is a name.
const maxNetworkName = 32

// NetworkOf is the network that carries c, as the label says it: Socket,
// IB, RoCE, EFA, or the plugin's own name; "" for a connection that is not
// over a network (p2p, shm, nvls), or one whose name cannot be read.
//
//   - NCCL's IB transport names itself IB for InfiniBand and RoCE alike,
//     and so do the plugins built on it (HPC-X's IBext, IBext_v8): the
//     device list tells them apart by each device's link layer.
//   - aws-ofi-nccl names itself "AWS Libfabric" (to 1.12), "Libfabric"
//     (1.13 on) or "OFI" (if NCCL_NET says so), whatever libfabric
//     provider it runs on: only the provider line says efa.
//   - "NET/Socket : Using ..." is logged even where IB is chosen: only
//     the connection's own NET/Socket says sockets.
func (l *Log) NetworkOf(c Connection) string {
	if c.Kind != KindNet && c.Kind != KindCollNet {
		return ""
	}
	name := c.Net
	switch {
	case name == "":
		return ""
	case c.Kind == KindCollNet:
		// The CollNet plugin's name (SHARP).
	case name == NetworkSocket:
		return NetworkSocket
	case strings.HasPrefix(name, "IB"):
		return l.ibLinkLayer(c.Device)
	case isOFIName(name):
		if l.OFIProvider == "efa" {
			return NetworkEFA
		}
	}
	return labelSafe(name)
}

// ibLinkLayer is IB or RoCE for the IB transport's device dev: its link
// layer in the device list, or where dev is not listed, the one link
// layer all listed devices share; IB where the list does not tell.
func (l *Log) ibLinkLayer(dev int) string {
	layer := ""
	for _, d := range l.IBDevices {
		if d.Index == dev {
			layer = d.LinkLayer
			break
		}
		switch {
		case layer == "":
			layer = d.LinkLayer
		case layer != d.LinkLayer:
			layer = "mixed"
		}
	}
	if layer == "RoCE" {
		return NetworkRoCE
	}
	return NetworkIB
}

// OFINames are the names aws-ofi-nccl gives its network.
var OFINames = []string{"AWS Libfabric", "Libfabric", "OFI"}

func isOFIName(name string) bool { return slices.Contains(OFINames, name) }

// labelSafe is name, cut to maxNetworkName bytes of printable ASCII; ""
// where nothing printable is left.
func labelSafe(name string) string {
	var b strings.Builder
	for i := 0; i < len(name) && b.Len() < maxNetworkName; i++ {
		if c := name[i]; c >= 0x20 && c < 0x7f {
			b.WriteByte(c)
		}
	}
	return strings.TrimSpace(b.String())
}

// atoi is for digits the expressions above matched, or nothing: 0. A
// number too long for an int is 0 as well.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

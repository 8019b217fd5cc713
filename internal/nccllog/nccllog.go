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
//	NET/IB : Made virtual device [8] name=mlx5_0+mlx5_1 ...    (NET, 2.24 on)
//	NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)  (INIT|NET)
//
// The IB transport's device list has taken four forms; a channel's
// NET/IB/<n> names the n-th device of it, whatever number it prints:
//
//	[0]mlx5_0:1/IB                           2.14-2.19, 2.24-2.30.4
//	[0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} [2]mlx5_4:1/RoCE
//	                                         2.20-2.23: a card's ports merged into
//	                                         one device; a plain one prints its
//	                                         port's number (2), not its own (1)
//	[0]mlx5_0:1:3:0/IB, [1]mlx5_1:1::0/IB    2.30.7: rail and plane after the port
//	[0]mlx5_0:1/IB/SHARP                     HPC-X's plugin
//
// From 2.24 NCCL may join ports into a virtual device numbered after the
// physical ones, and says so in a "Made virtual device" line.
//
// Every line this package reads but the virtual devices is logged under
// INIT, so NCCL_DEBUG=INFO with the default NCCL_DEBUG_SUBSYS shows them;
// the probes ask for INIT,P2P,SHM,NET, which shows those too.
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

// Networks (fabrics) NetworkOf names.
const (
	NetworkSocket = "Socket" // NCCL's TCP socket transport
	NetworkIB     = "IB"     // InfiniBand through NCCL's IB verbs transport (or a plugin built on it)
	NetworkRoCE   = "RoCE"   // RDMA over Converged Ethernet, through the same transport or GCP's gIB
	NetworkEFA    = "EFA"    // AWS Elastic Fabric Adapter, through aws-ofi-nccl's libfabric provider efa
	// NetworkOther is a plugin whose fabric the log does not tell: an
	// unknown plugin, or aws-ofi-nccl on a provider other than efa.
	NetworkOther = "other"
)

// PluginOther is the plugin label of a network whose name is not a plain
// name (PluginOf).
const PluginOther = "other"

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
	// Index is the device's number as the channels name it (NET/IB/<n>):
	// its place in the list, which 2.20-2.23 do not always print.
	Index int
	// Name is the port's device, or a merged device's ports' joined by
	// "+" as NCCL names it ("mlx5_2+mlx5_3"); Port the (first) port.
	Name string
	Port int
	// LinkLayer is "IB", "RoCE" or, from 2.26, "UNSPECIFIED"; for a
	// merged device its ports', which NCCL merges only when they share
	// it.
	LinkLayer string
}

// Log is what one NCCL process's log says about its connections.
type Log struct {
	// Network is the network NCCL chose ("Using network <name>"), the
	// last one logged; "" where the log has no such line.
	Network string
	// IBDevices are the IB transport's devices, from its last device list.
	IBDevices []IBDevice
	// IBVirtual are, by number, the devices NCCL made of the IB
	// transport's ports (2.24 on), as the names of those ports' devices.
	IBVirtual map[int][]string
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
	// The list runs from "Using" to " ; OOB" (or "[RO]; OOB").
	ibListLine = regexp.MustCompile(`NCCL INFO NET/IB ?: Using( \[.*?) ?(?:\[RO\])?; OOB `)
	// One device: a port ("[0]mlx5_0:1/IB", with 2.30.7's rail and plane
	// "[0]mlx5_0:1:3:0/IB", HPC-X's "[0]mlx5_0:1/IB/SHARP"), or
	// 2.20-2.23's merged ports ("[0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE}").
	ibDevice = regexp.MustCompile(`^ \[\d+\](?:(` + ibPort + `)|=\{((?:\[\d+\] ` + ibPort + `(?:, )?)+)\})`)
	ibPortRe = regexp.MustCompile(ibPort)
	// "Made virtual device [4] name=mlx5_0+mlx5_1 speed=... ndevs=2"
	// (2.30.7 adds rail and plane).
	ibVirtualLine = regexp.MustCompile(`NCCL INFO NET/IB ?: Made virtual device \[(\d+)\] name=(\S+)`)
	// 1.6 to 1.13: "Selected Provider is efa (found 4 nics)"; 1.14 on:
	// "Selected provider is efa, fabric is efa-direct (found 16 nics)".
	ofiProviderLine = regexp.MustCompile(`NET/OFI Selected [Pp]rovider is ([^,\s]+)(?:, fabric is (\S+))?`)
	// The network name holds no "/" but may hold spaces ("AWS Libfabric");
	// a proxy rank "(n)" may follow the device (PXN).
	netDetail = regexp.MustCompile(`^(?:NET|COLLNET)/([^/]+)/(\d+)(?:\(\d+\))?(.*)$`)
)

// ibPort is one port in the device list: name, port, rail and plane
// (2.30.7; either may be empty), link layer and what HPC-X's plugin adds
// ("/SHARP").
const ibPort = `([^\s:\[\]{},]+):(\d+)(?::-?\d*)?(?::-?\d+)?/([A-Za-z]+)(?:/[A-Za-z]+)?`

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
		if m := ibVirtualLine.FindStringSubmatch(line); m != nil {
			if l.IBVirtual == nil {
				l.IBVirtual = map[int][]string{}
			}
			l.IBVirtual[atoi(m[1])] = strings.Split(m[2], "+")
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

// parseIBDevices reads the device list, each device numbered by its place
// in it; it stops at the first entry it cannot read.
func parseIBDevices(list string) []IBDevice {
	var out []IBDevice
	for list != "" {
		m := ibDevice.FindStringSubmatchIndex(list)
		if m == nil {
			break
		}
		entry := list[:m[1]]
		d := IBDevice{Index: len(out)}
		for i, p := range ibPortRe.FindAllStringSubmatch(entry, -1) {
			switch {
			case i == 0:
				d.Name, d.Port, d.LinkLayer = p[1], atoi(p[2]), p[3]
			default:
				d.Name += "+" + p[1]
				if d.LinkLayer != p[3] {
					d.LinkLayer = ""
				}
			}
		}
		out = append(out, d)
		list = list[m[1]:]
	}
	return out
}

// NetworkOf is the fabric that carries c, as the network label says it:
// Socket, IB, RoCE, EFA, or "other" where the log does not tell; "" for a
// connection that is not over a network (p2p, shm, nvls), or one whose
// name cannot be read. The plugin's own name is PluginOf's.
//
//   - NCCL's IB transport names itself IB for InfiniBand and RoCE alike,
//     and so do the plugins built on it (HPC-X's IBext, IBext_v8; its
//     CollNet, SHARP): the device list tells them apart by each device's
//     link layer.
//   - GCP's gIB (A3 Ultra, A4, A4X) is the IB transport on Google's RoCE
//     network, and logs no device list of NCCL's.
//   - aws-ofi-nccl names itself "AWS Libfabric" (to 1.12), "Libfabric"
//     (1.13 on) or "OFI" (if NCCL_NET says so), whatever libfabric
//     provider it runs on: only the provider line says efa.
//   - "NET/Socket : Using ..." is logged even where IB is chosen: only
//     the connection's own NET/Socket says sockets.
func (l *Log) NetworkOf(c Connection) string {
	if (c.Kind != KindNet && c.Kind != KindCollNet) || c.Net == "" {
		return ""
	}
	switch name := c.Net; {
	case c.Kind == KindCollNet || isIBName(name):
		return l.ibLinkLayer(c.Device)
	case name == NetworkSocket:
		return NetworkSocket
	case name == "gIB":
		return NetworkRoCE
	case isOFIName(name) && l.OFIProvider == "efa":
		return NetworkEFA
	}
	return NetworkOther
}

// ibName is how NCCL's IB transport and HPC-X's plugin built on it name
// themselves: IB, IBext, IBext_v<api version>.
var ibName = regexp.MustCompile(`^IB(?:ext(?:_v\d{1,2})?)?$`)

func isIBName(name string) bool { return ibName.MatchString(name) }

// ibLinkLayer is IB or RoCE for the IB transport's device dev: the link
// layer of the ports of the virtual device dev, else of the listed
// device dev, else the one link layer all listed devices share; IB where
// the list does not tell.
func (l *Log) ibLinkLayer(dev int) string {
	var devs []IBDevice
	if ports, ok := l.IBVirtual[dev]; ok && len(ports) > 1 {
		for _, d := range l.IBDevices {
			if slices.Contains(ports, d.Name) {
				devs = append(devs, d)
			}
		}
	} else if dev >= 0 && dev < len(l.IBDevices) {
		devs = l.IBDevices[dev : dev+1]
	} else {
		devs = l.IBDevices
	}
	layer := ""
	for i, d := range devs {
		if i > 0 && d.LinkLayer != layer {
			return NetworkIB
		}
		layer = d.LinkLayer
	}
	if layer == "RoCE" {
		return NetworkRoCE
	}
	return NetworkIB
}

// OFINames are the names aws-ofi-nccl gives its network.
var OFINames = []string{"AWS Libfabric", "Libfabric", "OFI"}

func isOFIName(name string) bool { return slices.Contains(OFINames, name) }

// pluginName is a name a plugin can give itself: letters, digits and
// "_.-+", words apart by single spaces ("AWS Libfabric"), at most 32
// bytes, starting with a letter.
var pluginName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.+-]*(?: [A-Za-z0-9_.+-]+)*$`)

// maxPluginName bounds a plugin's name as a label value.
const maxPluginName = 32

// PluginOf is the name of the network (NCCL's own transport or the
// plugin) a net or collnet connection's detail names ("IB" for
// "NET/IB/0/GDRDMA", "gIB", "Libfabric", "Socket", "SHARP"), as the
// plugin label says it: PluginOther where that is not a plain name
// (pluginName); "" for a detail that names no network.
func PluginOf(detail string) string {
	m := netDetail.FindStringSubmatch(detail)
	if m == nil {
		return ""
	}
	if len(m[1]) > maxPluginName || !pluginName.MatchString(m[1]) {
		return PluginOther
	}
	return m[1]
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

package nccllog

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// Each case is lines as they were posted in a public NCCL, nccl-tests,
// aws-ofi-nccl or nv_peer_memory issue (source), unchanged, and what each
// connection of them should come to: "channel from->to kind network gdr".
var postedLogs = []logCase{
	{
		name:   "InfiniBand with GPUDirect RDMA (NCCL 2.x, bus ids)",
		source: "https://github.com/NVIDIA/nccl/issues/707",
		lines: []string{
			"10-90-43-152:120890:121563 [3] NCCL INFO Channel 01 : 3[ca000] -> 2[c7000] [send] via NET/IB/2/GDRDMA",
			"10-90-43-152:120890:121560 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA",
		},
		want: []string{"1 2->0 net IB gdr=1", "1 3->2 net IB gdr=1"},
	},
	{
		name:   "InfiniBand without GPUDirect RDMA (NCCL 2.4.7, GPU and HCA too far apart)",
		source: "https://github.com/Mellanox/nv_peer_memory/issues/56",
		lines: []string{
			"master_node:11715:11984 [0] NCCL INFO NET/Socket : Using [0]ib0:192.168.11.1<0>",
			"master_node:11715:11984 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>",
			"master_node:11717:11986 [2] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2)",
			"master_node:11717:11986 [2] NCCL INFO Ring 00 : 6 -> 2 [receive] via NET/IB/0",
			"master_node:11718:11985 [3] NCCL INFO Ring 01 : 3 -> 6 [send] via NET/IB/0",
			"master_node:11715:11984 [0] NCCL INFO Ring 00 : 0[0] -> 2[2] via P2P/IPC",
		},
		want: []string{"0 0->2 p2p - -", "0 6->2 net IB gdr=0", "1 3->6 net IB gdr=0"},
	},
	{
		name:   "IB through HPC-X's plugin (IBext), SHARP-capable devices",
		source: "https://github.com/NVIDIA/nccl/issues/988 (device list), https://github.com/NVIDIA/nccl/issues/1814 (channel)",
		lines: []string{
			"ad5b8ae33076:28331:28331 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1/IB/SHARP [2]mlx5_2:1/IB/SHARP [3]mlx5_3:1/IB/SHARP [4]mlx5_4:1/IB/SHARP [5]mlx5_5:1/IB/SHARP [6]mlx5_6:1/IB/SHARP [7]mlx5_7:1/IB/SHARP ; OOB eth0:10.0.1.2<0>",
			"ad5b8ae33076:28331:28331 [0] NCCL INFO Using network IBext",
			"hostname-test:984:1257 [4] NCCL INFO Channel 06/0 : 36[4] -> 20[4] [send] via NET/IBext_v8/3",
		},
		want: []string{"6 36->20 net IB gdr=0"},
	},
	{
		name:   "RoCE without GPUDirect RDMA (NCCL 2.5.7)",
		source: "https://github.com/NVIDIA/nccl/issues/392",
		lines: []string{
			" [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB br0:10.137.141.16<0>",
			" [0] NCCL INFO Ring 00 : 15[41000] -> 0[1b000] [receive] via NET/IB/0",
			" [0] NCCL INFO Ring 00 : 0[1b000] -> 1[1c000] via P2P/IPC",
		},
		want: []string{"0 0->1 p2p - -", "0 15->0 net RoCE gdr=0"},
	},
	{
		name:   "RoCE device list with relaxed ordering (NCCL 2.19.3), NCCL's own channel format",
		source: "https://github.com/NVIDIA/nccl-tests/issues/185 (device list and network); the channel line is net.cc's format filled in",
		lines: []string{
			"dgxh100-4:460770:460842 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:11.1.128.136<0>",
			"dgxh100-4:460770:460842 [0] NCCL INFO Using network IB",
			"dgxh100-4:460770:460842 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/1/GDRDMA",
		},
		want: []string{"0 0->8 net RoCE gdr=1"},
	},
	{
		name:   "EFA through aws-ofi-nccl under its old name, with GPUDirect RDMA (NCCL 2.9.9)",
		source: "https://github.com/NVIDIA/nccl/issues/527",
		lines: []string{
			"ip-10-216-178-255:416481:416522 [3] NCCL INFO Channel 03/0 : 19[201d0] -> 26[201c0] [send] via NET/AWS Libfabric/0/GDRDMA",
			"ip-10-216-179-119:416601:416650 [0] NCCL INFO Channel 01 : 24[101c0] -> 31[a01d0] via P2P/IPC/read",
		},
		// No provider line in the excerpt: the fabric is not told (the
		// plugin label keeps "AWS Libfabric").
		want: []string{"1 24->31 p2p - -", "3 19->26 net other gdr=1"},
	},
	{
		name:   "EFA through aws-ofi-nccl under its old name, send/recv's shared connections, provider line",
		source: "https://github.com/aws/aws-ofi-nccl/issues/715",
		lines: []string{
			"algo-1:18059:18146 [2] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
			"algo-1:18059:20782 [2] NCCL INFO Channel 04/1 : 15[7] -> 2[2] [receive] via NET/AWS Libfabric/1/GDRDMA/Shared",
			"2024-12-04T05:27:48.125Z",
			"algo-1:18059:20782 [2] NCCL INFO Channel 00/1 : 2[2] -> 5[5] via P2P/CUMEM/read",
		},
		want: []string{"0 2->5 p2p - -", "4 15->2 net EFA gdr=1"},
	},
	{
		name:   "EFA through aws-ofi-nccl without GPUDirect RDMA (NCCL 2.7.8, aws-ofi-nccl 1.1.2, p4d)",
		source: "https://github.com/aws/aws-ofi-nccl/issues/64",
		lines: []string{
			"ip-172-31-6-104:9922:9980 [1] NCCL INFO Channel 01 : 9[101d0] -> 0[101c0] [send] via NET/AWS Libfabric/0",
		},
		want: []string{"1 9->0 net other gdr=0"},
	},
	{
		name:   "EFA through aws-ofi-nccl under its new name (1.13 on)",
		source: "https://github.com/NVIDIA/nccl/issues/1597 (network and provider); the channel line is net.cc's format filled in with that network",
		lines: []string{
			"8h200-2:6831:6840 [0] NCCL INFO NET/OFI Support for DMA-BUF registrations: false",
			"8h200-2:6831:6840 [0] NCCL INFO Using network Libfabric",
			"8h200-3:6310:6318 [0] NCCL INFO NET/OFI Selected Provider is efa (found 16 nics)",
			"8h200-2:6831:6840 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Libfabric/0/GDRDMA",
		},
		want: []string{"0 1->0 net EFA gdr=1"},
	},
	{
		name:   "EFA under the old name, through an mpirun prefix (Ring form, NCCL 2.4)",
		source: "https://github.com/aws/aws-ofi-nccl/issues/24",
		lines: []string{
			"[1,7]<stdout>:ip-172-32-38-1:21471:22316 [7] NCCL INFO Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0",
			"[1,26]<stdout>:ip-172-32-36-209:8716:9558 [2] NCCL INFO Ring 00 : 26[2] -> 30[6] via P2P/IPC",
		},
		want: []string{"0 7->8 net other gdr=0", "0 26->30 p2p - -"},
	},
	{
		name:   "Socket fallback (a socket interface list is no fallback by itself)",
		source: "https://github.com/NVIDIA/nccl-tests/issues/166 (channels), https://github.com/NVIDIA/nccl-tests/issues/179 (network)",
		lines: []string{
			"manolinux1:12260:12268 [0] NCCL INFO Using network Socket",
			"ubuntu:9621:9692 [7] NCCL INFO Channel 14/0 : 15[7] -> 0[0] [send] via NET/Socket/0",
			"ubuntu:9621:9688 [3] NCCL INFO Channel 05 : 11[3] -> 12[4] via SHM/direct/direct",
		},
		want: []string{"5 11->12 shm - -", "14 15->0 net Socket gdr=0"},
	},
	{
		name:   "Socket between nodes over mpirun's rank prefix",
		source: "https://github.com/NVIDIA/nccl/issues/1232",
		lines: []string{
			"[0] node0:13571:13571 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
			"[1] node2:22555:22555 [0] NCCL INFO Channel 01/0 : 2[1] -> 1[0] [receive] via NET/Socket/0",
		},
		want: []string{"0 0->1 net Socket gdr=0", "1 2->1 net Socket gdr=0"},
	},
	{
		// No posted log we found shows a CollNet connection line; this is
		// coll_net.cc's format ("CollNet %02d/%1d : %d [send] via
		// COLLNET/%s/%d%s") filled in, beside a real device list of
		// SHARP-capable ports.
		name:   "CollNet (SHARP)",
		source: "https://github.com/NVIDIA/nccl/issues/988 (device list); src/transport/coll_net.cc (the CollNet lines)",
		lines: []string{
			"ad5b8ae33076:28331:28331 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1/IB/SHARP ; OOB eth0:10.0.1.2<0>",
			"gpu1:100:200 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA",
			"gpu1:100:200 [0] NCCL INFO CollNet 00/0 : 0 [receive] via COLLNET/SHARP/0",
		},
		// SHARP runs on the InfiniBand ports of the list.
		want: []string{"0 -1->0 collnet IB gdr=0", "0 0->-1 collnet IB gdr=1"},
	},
}

func describe(l *Log) []string {
	var out []string
	for _, c := range l.Connections {
		net, gdr := l.NetworkOf(c), "-"
		if c.Kind == KindNet || c.Kind == KindCollNet {
			gdr = "gdr=0"
			if c.GDR {
				gdr = "gdr=1"
			}
		}
		if net == "" {
			net = "-"
		}
		out = append(out, fmt.Sprintf("%d %d->%d %s %s %s", c.Channel, c.From, c.To, c.Kind, net, gdr))
	}
	return out
}

// logCase is a log's lines, where they come from, and what its
// connections come to as a describe function puts them.
type logCase struct {
	name, source string
	lines        []string
	want         []string
}

func checkLogs(t *testing.T, cases []logCase, describe func(*Log) []string) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := Parse(strings.NewReader(strings.Join(tc.lines, "\n")))
			if got := describe(l); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s\n got %q\nwant %q", tc.source, got, tc.want)
			}
		})
	}
}

func TestParsePostedLogs(t *testing.T) { checkLogs(t, postedLogs, describe) }

// The device list and the provider line, read apart.
func TestParseNetworkLines(t *testing.T) {
	l := Parse(strings.NewReader(strings.Join([]string{
		// https://github.com/NVIDIA/nccl-tests/issues/185
		"dgxh100-4:460770:460842 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:11.1.128.136<0>",
		"dgxh100-4:460770:460842 [0] NCCL INFO Using network IB",
		// aws-ofi-nccl 1.14+'s format (src/nccl_ofi_net.cpp), as in
		// the reference's public notes.
		"host:1:257 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)",
	}, "\n")))
	want := &Log{Network: "IB", IBDevices: []IBDevice{{0, "mlx5_10", 1, "RoCE"}, {1, "mlx5_11", 1, "RoCE"}},
		OFIProvider: "efa", OFIFabric: "efa-direct"}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("got %+v\nwant %+v", l, want)
	}
}

// The connection's own network decides, not the lists: NCCL logs its
// socket interfaces even where it takes IB, and a libfabric provider
// other than efa (HPE Slingshot's cxi) is no fabric the label names.
func TestNetworkOf(t *testing.T) {
	ib := []IBDevice{{0, "mlx5_0", 1, "IB"}, {1, "mlx5_1", 1, "RoCE"}}
	for _, tc := range []struct {
		log  Log
		c    Connection
		want string
	}{
		{Log{}, Connection{Kind: KindP2P, Detail: "P2P/CUMEM"}, ""},
		{Log{}, Connection{Kind: KindNVLS}, ""},
		{Log{Network: "Socket"}, Connection{Kind: KindNet, Net: "IB", Device: 0}, "IB"},
		{Log{IBDevices: ib}, Connection{Kind: KindNet, Net: "IB", Device: 1}, "RoCE"},
		{Log{IBDevices: ib}, Connection{Kind: KindNet, Net: "IB", Device: 0}, "IB"},
		{Log{IBDevices: ib}, Connection{Kind: KindNet, Net: "IB", Device: 7}, "IB"}, // unlisted among mixed: NCCL's name
		{Log{IBDevices: ib[1:]}, Connection{Kind: KindNet, Net: "IB", Device: 7}, "RoCE"},
		{Log{OFIProvider: "cxi"}, Connection{Kind: KindNet, Net: "AWS Libfabric"}, "other"},
		{Log{OFIProvider: "efa"}, Connection{Kind: KindNet, Net: "OFI"}, "EFA"},
		{Log{OFIProvider: "efa"}, Connection{Kind: KindNet, Net: "Socket"}, "Socket"},
		{Log{}, Connection{Kind: KindNet, Net: "GPUDirectTCPX"}, "other"},
		{Log{}, Connection{Kind: KindNet, Net: "gIB"}, "RoCE"},
		{Log{IBDevices: ib}, Connection{Kind: KindCollNet, Net: "SHARP", Device: 1}, "RoCE"},
		{Log{IBDevices: ib, IBVirtual: map[int][]string{2: {"mlx5_0", "mlx5_1"}}}, Connection{Kind: KindNet, Net: "IB", Device: 2}, "IB"}, // mixed: NCCL's name
		{Log{IBDevices: ib, IBVirtual: map[int][]string{2: {"mlx5_1"}}}, Connection{Kind: KindNet, Net: "IB", Device: 1}, "RoCE"},
		{Log{IBDevices: ib}, Connection{Kind: KindNet, Net: "IBM"}, "other"},
		{Log{}, Connection{Kind: KindNet}, ""},
	} {
		if got := tc.log.NetworkOf(tc.c); got != tc.want {
			t.Errorf("%+v NetworkOf(%+v) = %q, want %q", tc.log, tc.c, got, tc.want)
		}
	}
}

func TestConnectionParts(t *testing.T) {
	for detail, want := range map[string]Connection{
		"NET/IB/0/GDRDMA":                    {Kind: KindNet, Net: "IB", Device: 0, GDR: true},
		"NET/IB/3(2)/GDRDMA(PCI)/Shared":     {Kind: KindNet, Net: "IB", Device: 3, GDR: true},
		"NET/Libfabric/0/GDRDMA/flush=None":  {Kind: KindNet, Net: "Libfabric", Device: 0, GDR: true},
		"NET/Socket/1/Shared":                {Kind: KindNet, Net: "Socket", Device: 1},
		"NET/AWS Libfabric/12":               {Kind: KindNet, Net: "AWS Libfabric", Device: 12},
		"NET/IB/x":                           {Kind: KindNet, Device: -1},
		"COLLNET/SHARP/0/GDRDMA":             {Kind: KindCollNet, Net: "SHARP", GDR: true},
		"P2P/CUMEM/read":                     {Kind: KindP2P, Device: -1},
		"SHM/direct/direct":                  {Kind: KindSHM, Device: -1},
		"P2P/direct pointer":                 {Kind: KindP2P, Device: -1},
		"Something/New":                      {Kind: KindUnknown, Device: -1},
		"NET/IB/0/NOTGDRDMA/GDRDMAX":         {Kind: KindNet, Net: "IB"},
		"NET/Socket/99999999999999999999999": {Kind: KindNet, Net: "Socket"},
	} {
		var c Connection
		c.describe(detail)
		want.Detail = detail
		if c != want {
			t.Errorf("%q: %+v, want %+v", detail, c, want)
		}
	}
}

// Of a channel's connections between two ranks, the lowest connection
// index's stands (the ring's, not send/recv's), the first among equals;
// the result is sorted by channel, then ranks.
func TestParseKeepsOnePerChannelAndRanks(t *testing.T) {
	log := strings.Join([]string{
		"h:1:2 [0] NCCL INFO Channel 01/1 : 0[0] -> 1[0] [send] via NET/Socket/0/Shared",
		"h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
		"h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [receive] via NET/IB/0",
		"h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0",
	}, "\n")
	got := describe(Parse(strings.NewReader(log)))
	want := []string{"0 1->0 net Socket gdr=0", "1 0->1 net Socket gdr=0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestParseIgnoresEverythingElse(t *testing.T) {
	log := strings.Join([]string{
		"h:1:2 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.",
		"h:1:2 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
		"h:1:2 [0] NCCL INFO Channel 00/02 :    0   1",        // the ring listing, not a connection
		"h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via", // cut short
		"h:1:2 [0] NCCL WARN Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
		"h:1:2 [0] NCCL WARN Using network IB",
		"h:1:2 [0] NCCL INFO NET/IB : No device found.",
		"",
		"h:1:2 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via Something/New\r",
	}, "\n")
	got := Parse(strings.NewReader(log))
	want := &Log{Connections: []Connection{{Channel: 2, From: 0, To: 1, Kind: KindUnknown, Detail: "Something/New", Device: -1}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse = %+v, want %+v", got, want)
	}
	if got := Parse(strings.NewReader("")); !reflect.DeepEqual(got, &Log{}) {
		t.Errorf("empty log: %+v", got)
	}
}

// A line longer than the reader's buffer ends the reading; what came
// before it stands.
func TestParseStopsAtAnOverlongLine(t *testing.T) {
	log := "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n" + strings.Repeat("x", 70<<10) +
		"\nh:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
	if got := describe(Parse(strings.NewReader(log))); !reflect.DeepEqual(got, []string{"0 0->1 p2p - -"}) {
		t.Errorf("got %q", got)
	}
}

// Each case is lines written from NCCL's own format strings at a tag of
// github.com/NVIDIA/nccl (the source names the file and line), filled in
// as that version fills them, and what each connection comes to:
// "channel from->to kind network plugin gdr". The device list's net
// device numbers are what the channel lines name (NET/IB/<n>): in
// 2.20-2.23 a merged device prints its outer number but a plain one its
// physical device's, so only the position in the list says which is
// which.
var versionLogs = []logCase{
	{
		name: "2.18: one device per port",
		source: "v2.18.3-1 src/transport/net_ib.cc:259 (\" [%d]%s:%d/%s\") and :264 (\"NET/IB : Using%s %s; OOB %s:%s\"); " +
			"src/init.cc:310 (\"Using network %s\"); src/transport/net.cc:186 (\"Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s\")",
		lines: []string{
			"n1:10:20 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_8:1/RoCE [RO]; OOB ibp25s0:10.0.0.1<0>",
			"n1:10:20 [0] NCCL INFO Using network IB",
			"n1:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
			"n1:10:20 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/2",
		},
		want: []string{"0 0->8 net IB IB gdr=1", "1 0->8 net RoCE IB gdr=0"},
	},
	{
		name: "2.20-2.23: a dual-port card's ports merged into one device",
		source: "v2.20.3-1 src/transport/net_ib.cc:313 (\" [%d]={\"), :316 (\"[%d] %s:%d/%s%s\", ibDev, ..., \", \"), :324 " +
			"(\" [%d]%s:%d/%s\", ibDev) and :330 (\"NET/IB : Using%s %s; OOB %s:%s\"); the same at v2.21.5-1 :521-538, v2.22.3-1 " +
			":573-590, v2.23.4-1 :652-669; src/transport/net.cc:194 (send) and :233 (\"... [receive] via NET/%s/%d%s%s\")",
		lines: []string{
			"n1:10:20 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} [1]={[2] mlx5_4:1/RoCE, [3] mlx5_5:1/RoCE} [RO]; OOB eth0:10.1.0.5<0>",
			"n1:10:20 [0] NCCL INFO Using network IB",
			"n1:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/1/GDRDMA",
			"n1:10:20 [0] NCCL INFO Channel 01/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
		},
		want: []string{"0 0->8 net RoCE IB gdr=1", "1 8->0 net RoCE IB gdr=1"},
	},
	{
		name:   "2.20-2.23: merged InfiniBand ports, then a plain RoCE port printed with its physical number",
		source: "v2.23.4-1 src/transport/net_ib.cc:652, :655, :663 (the plain device prints ibDev, 2, though it is net device 1) and :669",
		lines: []string{
			"n1:10:20 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_0:1/IB, [1] mlx5_1:1/IB} [2]mlx5_8:1/RoCE ; OOB ibp25s0:10.0.0.1<0>",
			"n1:10:20 [0] NCCL INFO Using network IB",
			"n1:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
			"n1:10:20 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/1",
		},
		want: []string{"0 0->8 net IB IB gdr=1", "1 0->8 net RoCE IB gdr=0"},
	},
	{
		name:   "2.20-2.23 through HPC-X's plugin: its channels name the merged device's outer number",
		source: "v2.22.3-1 src/transport/net_ib.cc:573-590 (the list); src/transport/net.cc:196 with the plugin's name (IBext_v8, as in https://github.com/NVIDIA/nccl/issues/1814)",
		lines: []string{
			"n1:10:20 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} [1]={[2] mlx5_4:1/RoCE, [3] mlx5_5:1/RoCE} ; OOB eth0:10.1.0.5<0>",
			"n1:10:20 [0] NCCL INFO Using network IBext_v8",
			"n1:10:20 [4] NCCL INFO Channel 06/0 : 36[4] -> 20[4] [send] via NET/IBext_v8/1",
		},
		want: []string{"6 36->20 net RoCE IBext_v8 gdr=0"},
	},
	{
		name: "2.24-2.29: a virtual device NCCL made of two ports, numbered after the physical ones",
		source: "v2.26.2-1 src/transport/net_ib.cc:549 (\"NET/IB : Made virtual device [%d] name=%s speed=%d ndevs=%d\", NCCL_NET), :680 " +
			"(\" [%d]%s:%d/%s\", NCCL_IB_LLSTR) and :684; src/transport/net.cc:217 (\"... [send] via NET/%s/%d%s%s%s\": /GDRDMA, (PCI), /Shared)",
		lines: []string{
			"n1:10:20 [0] NCCL INFO NET/IB : Made virtual device [0] name=mlx5_0 speed=400000 ndevs=1",
			"n1:10:20 [0] NCCL INFO NET/IB : Made virtual device [1] name=mlx5_1 speed=400000 ndevs=1",
			"n1:10:20 [0] NCCL INFO NET/IB : Made virtual device [2] name=mlx5_8 speed=200000 ndevs=1",
			"n1:10:20 [0] NCCL INFO NET/IB : Made virtual device [3] name=mlx5_9 speed=200000 ndevs=1",
			"n1:10:20 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_8:1/RoCE [3]mlx5_9:1/RoCE [RO]; OOB ibp25s0:10.0.0.1<0>",
			"n1:10:20 [0] NCCL INFO Using network IB",
			"n1:10:20 [0] NCCL INFO NET/IB : Made virtual device [4] name=mlx5_8+mlx5_9 speed=400000 ndevs=2",
			"n1:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/4/GDRDMA(PCI)",
			"n1:10:20 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/1/GDRDMA",
		},
		want: []string{"0 0->8 net RoCE IB gdr=1", "1 0->8 net IB IB gdr=1"},
	},
	{
		name: "2.30: rail and plane after the port",
		source: "v2.30.7-1 src/transport/net_ib/init.cc:494 (\" [%d]%s:%d\"), :497 (\":%d\" rail), :499 (\":\" where only the plane is set), " +
			":502 (\":%d\" plane), :504 (\"/%s\" NCCL_IB_LLSTR), :513 (\"NET/IB : Using%s %s; OOB %s:%s\"), :259 (\"... ndevs=%d rail=%d plane=%d\"); " +
			"src/init.cc:486; src/transport/net.cc:324 and :377",
		lines: []string{
			"n1:10:20 [0] NCCL INFO NET/IB : Made virtual device [0] name=mlx5_0 speed=400000 ndevs=1 rail=0 plane=-1",
			"n1:10:20 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1:0/IB [1]mlx5_1:1:1:0/IB [2]mlx5_8:1::1/RoCE [3]mlx5_9:1/RoCE ; OOB ibp25s0:10.0.0.1<0>",
			"n1:10:20 [0] NCCL INFO Using network IB",
			"n1:10:20 [0] NCCL INFO NET/IB : Made virtual device [4] name=mlx5_0+mlx5_1 speed=800000 ndevs=2 rail=-1 plane=16384",
			"n1:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/2/GDRDMA",
			"n1:10:20 [0] NCCL INFO Channel 01/0 : 8[0] -> 0[0] [receive] via NET/IB/4/GDRDMA",
			"n1:10:20 [0] NCCL INFO Channel 02/0 : 0[0] -> 8[0] [send] via NET/IB/3",
		},
		want: []string{"0 0->8 net RoCE IB gdr=1", "1 8->0 net IB IB gdr=1", "2 0->8 net RoCE IB gdr=0"},
	},
	{
		// GCP's gIB plugin (A3 Ultra, A4, A4X) is NCCL's IB transport
		// for Google's RoCE network: its channels say NET/gIB and no
		// device list of NCCL's tells the link layer.
		name: "gIB on GCP's RoCE fabric",
		source: "v2.28.9-1 src/init.cc:428 (\"Using network %s\") and src/transport/net.cc:313 with the plugin's name gIB " +
			"(https://cloud.google.com/ai-hypercomputer/docs/nccl/overview; NET/gIB/<n>/GDRDMA as a GKE A4 deployment reports it)",
		lines: []string{
			"a4-0:10:20 [0] NCCL INFO Using network gIB",
			"a4-0:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/gIB/0/GDRDMA",
			"a4-0:10:20 [3] NCCL INFO Channel 03/0 : 11[3] -> 3[3] [receive] via NET/gIB/3/GDRDMA",
		},
		want: []string{"0 0->8 net RoCE gIB gdr=1", "3 11->3 net RoCE gIB gdr=1"},
	},
	{
		name:   "EFA through aws-ofi-nccl: the fabric from the provider, the plugin's name beside it",
		source: "aws-ofi-nccl v1.14.0 src/nccl_ofi_net.cpp (\"Selected provider is %s, fabric is %s (found %d nics)\"); v2.28.9-1 src/transport/net.cc:313",
		lines: []string{
			"p5-0:10:20 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)",
			"p5-0:10:20 [0] NCCL INFO Using network Libfabric",
			"p5-0:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Libfabric/0/GDRDMA",
		},
		want: []string{"0 0->8 net EFA Libfabric gdr=1"},
	},
	{
		// A plugin the parser does not know: the fabric is "other"; the
		// plugin's own name stands beside it.
		name:   "an unknown plugin (GPUDirect-TCPX)",
		source: "v2.18.3-1 src/transport/net.cc:186 with the name github.com/google/nccl-plugin-gpudirecttcpx gives",
		lines: []string{
			"a3-0:10:20 [0] NCCL INFO Using network GPUDirectTCPX",
			"a3-0:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/GPUDirectTCPX/1",
		},
		want: []string{"0 0->8 net other GPUDirectTCPX gdr=0"},
	},
}

func describePlugins(l *Log) []string {
	var out []string
	for i, d := range describe(l) {
		c := l.Connections[i]
		if c.Kind != KindNet && c.Kind != KindCollNet {
			out = append(out, d)
			continue
		}
		f := strings.Fields(d)
		// "channel from->to kind network gdr" with the plugin before gdr;
		// a network name may hold a space.
		out = append(out, strings.Join(f[:len(f)-1], " ")+" "+PluginOf(c.Detail)+" "+f[len(f)-1])
	}
	return out
}

func TestParseEveryVersionsDeviceList(t *testing.T) { checkLogs(t, versionLogs, describePlugins) }

// The plugin label is NCCL's name for the network where it is a plain
// name, and "other" where it is not: a plugin names itself, and a label
// takes no value a log can make up.
func TestPluginOf(t *testing.T) {
	for detail, want := range map[string]string{
		"NET/IB/0/GDRDMA":                       "IB",
		"NET/IBext_v8/3":                        "IBext_v8",
		"NET/gIB/3/GDRDMA":                      "gIB",
		"NET/AWS Libfabric/0/GDRDMA":            "AWS Libfabric",
		"NET/Socket/0":                          "Socket",
		"COLLNET/SHARP/0/GDRDMA":                "SHARP",
		"NET/A\x00B/0":                          "other",
		"NET/ lead/0":                           "other",
		"NET/trail /0":                          "other",
		"NET/a{b}/0":                            "other",
		"NET/" + strings.Repeat("x", 33) + "/0": "other",
		"NET/IB/x":                              "",
		"P2P/CUMEM/read":                        "",
		"SHM/direct/direct":                     "",
		"NVLS":                                  "",
	} {
		if got := PluginOf(detail); got != want {
			t.Errorf("PluginOf(%q) = %q, want %q", detail, got, want)
		}
	}
}

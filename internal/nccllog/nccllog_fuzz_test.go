package nccllog

import (
	"slices"
	"strings"
	"testing"
)

// FuzzParse: any log parses without a panic to connections that are
// sorted and one per (channel, from, to), whose network label is short
// printable ASCII and set only for the network's kinds.
func FuzzParse(f *testing.F) {
	for _, tc := range postedLogs {
		f.Add(strings.Join(tc.lines, "\n"))
	}
	f.Add("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/3(2)/GDRDMA(PCI)/Shared\n" +
		"h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/IB [RO]; OOB eth0:10.0.0.1<0>")
	f.Fuzz(func(t *testing.T, log string) {
		l := Parse(strings.NewReader(log))
		type key struct{ channel, from, to int }
		seen := map[key]bool{}
		for i, c := range l.Connections {
			k := key{c.Channel, c.From, c.To}
			if seen[k] {
				t.Fatalf("connection %+v twice", k)
			}
			seen[k] = true
			if i > 0 {
				p := l.Connections[i-1]
				if slices.Compare([]int{p.Channel, p.From, p.To}, []int{c.Channel, c.From, c.To}) > 0 {
					t.Fatalf("not sorted: %+v before %+v", p, c)
				}
			}
			net := l.NetworkOf(c)
			if net != "" && c.Kind != KindNet && c.Kind != KindCollNet {
				t.Fatalf("%+v: network %q on a %s connection", c, net, c.Kind)
			}
			if len(net) > maxNetworkName || strings.TrimSpace(net) != net {
				t.Fatalf("network label %q", net)
			}
			for _, b := range []byte(net) {
				if b < 0x20 || b >= 0x7f {
					t.Fatalf("network label %q holds %#x", net, b)
				}
			}
			if c.GDR && c.Kind != KindNet && c.Kind != KindCollNet {
				t.Fatalf("%+v: GPUDirect RDMA off the network", c)
			}
		}
	})
}

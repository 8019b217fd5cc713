package nccllog

import (
	"slices"
	"strings"
	"testing"
)

// FuzzParse: any log parses without a panic to connections that are
// sorted and one per (channel, from, to), whose network label is one of
// the fabrics and plugin label a plain name or "other", both set only for
// the network's kinds.
func FuzzParse(f *testing.F) {
	for _, tc := range postedLogs {
		f.Add(strings.Join(tc.lines, "\n"))
	}
	f.Add("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/3(2)/GDRDMA(PCI)/Shared\n" +
		"h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/IB [RO]; OOB eth0:10.0.0.1<0>")
	for _, tc := range versionLogs {
		f.Add(strings.Join(tc.lines, "\n"))
	}
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
			net, plugin := l.NetworkOf(c), PluginOf(c.Detail)
			if net != "" && c.Kind != KindNet && c.Kind != KindCollNet {
				t.Fatalf("%+v: network %q on a %s connection", c, net, c.Kind)
			}
			if !slices.Contains([]string{"", NetworkSocket, NetworkIB, NetworkRoCE, NetworkEFA, NetworkOther}, net) {
				t.Fatalf("network label %q", net)
			}
			if (net == "") != (plugin == "") {
				t.Fatalf("%+v: network %q, plugin %q", c, net, plugin)
			}
			if plugin != "" && plugin != PluginOther && (len(plugin) > maxPluginName || !pluginName.MatchString(plugin)) {
				t.Fatalf("plugin label %q", plugin)
			}
			if c.GDR && c.Kind != KindNet && c.Kind != KindCollNet {
				t.Fatalf("%+v: GPUDirect RDMA off the network", c)
			}
		}
	})
}

package probes

import (
	"io"
	"slices"

	"github.com/gpulink/gpulink_exporter/internal/nccllog"
)

// TransportsOf are the connections NCCL's INFO log records (internal/
// nccllog, the one parser of it), as a round reports them: one per
// (channel, from rank, to rank), in that order, each with the network
// that carries it and whether GPUDirect RDMA does. nil for none.
func TransportsOf(log io.Reader) []Transport {
	l := nccllog.Parse(log)
	var out []Transport
	for _, c := range l.Connections {
		t := Transport{Channel: c.Channel, FromRank: c.From, ToRank: c.To, Kind: c.Kind, Detail: c.Detail}
		if t.Network = l.NetworkOf(c); t.Network != "" {
			t.GDR = c.GDR
		}
		out = append(out, t)
	}
	return out
}

// TransportKinds are the kinds a channel's transport label takes; a kind
// the child names otherwise is counted as unknown, so the label stays
// bounded.
var TransportKinds = []string{TransportP2P, TransportSHM, TransportNet, TransportCollNet, TransportNVLS, TransportUnknown}

// Labels are t's label values on the channel families: its transport (a
// TransportKinds), the fabric that carries it (nccllog's NetworkOf: "" off
// the network), the network plugin's own name (nccllog's PluginOf, from
// the detail: "IB", "gIB", "Libfabric") and gdr, "1" where GPUDirect RDMA
// carries it and "0" where not; plugin and gdr "" off the network.
func (t Transport) Labels() (transport, network, plugin, gdr string) {
	transport = t.Kind
	if !slices.Contains(TransportKinds, transport) {
		transport = TransportUnknown
	}
	if t.Network == "" || (transport != TransportNet && transport != TransportCollNet) {
		return transport, "", "", ""
	}
	gdr = "0"
	if t.GDR {
		gdr = "1"
	}
	return transport, t.Network, nccllog.PluginOf(t.Detail), gdr
}

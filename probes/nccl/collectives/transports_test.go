package collectives

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"testing"

	"github.com/gpulink/gpulink_exporter/probes"
)

func parseTransportsOf(t *testing.T, paths ...string) []probes.Transport {
	t.Helper()
	var logs []io.Reader
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		logs = append(logs, f)
	}
	return probes.TransportsOf(io.MultiReader(logs...))
}

// The lines of testdata/nccl/posted-issues.log, as posted in NCCL and
// nccl-tests issues (the file names each), give these connections.
func TestParseTransportsOfPostedLogs(t *testing.T) {
	got := parseTransportsOf(t, "testdata/nccl/posted-issues.log")
	want := []probes.Transport{
		{Channel: -1, FromRank: -1, ToRank: -1, Kind: probes.TransportNVLS, Detail: "NVLS"},
		// SHARP over the log's InfiniBand ports.
		{Channel: 0, FromRank: -1, ToRank: 0, Kind: probes.TransportCollNet, Detail: "COLLNET/SHARP/0/GDRDMA", Network: "IB", GDR: true},
		{Channel: 0, FromRank: 0, ToRank: -1, Kind: probes.TransportCollNet, Detail: "COLLNET/SHARP/0/GDRDMA", Network: "IB", GDR: true},
		{Channel: 0, FromRank: 0, ToRank: 4, Kind: probes.TransportSHM, Detail: "SHM/direct/direct"},
		{Channel: 0, FromRank: 1, ToRank: 3, Kind: probes.TransportNet, Detail: "NET/IB/2/GDRDMA", Network: "IB", GDR: true},
		{Channel: 0, FromRank: 3, ToRank: 2, Kind: probes.TransportP2P, Detail: "P2P/CUMEM"},
		{Channel: 1, FromRank: 0, ToRank: 2, Kind: probes.TransportNet, Detail: "NET/IB/5/GDRDMA", Network: "IB", GDR: true},
		{Channel: 1, FromRank: 0, ToRank: 4, Kind: probes.TransportSHM, Detail: "SHM/direct/direct"},
		{Channel: 1, FromRank: 1, ToRank: 0, Kind: probes.TransportP2P, Detail: "P2P/CUMEM"},
		// Logged by both ends; the first line, the receiver's, is kept.
		{Channel: 1, FromRank: 2, ToRank: 0, Kind: probes.TransportNet, Detail: "NET/IB/5/GDRDMA", Network: "IB", GDR: true},
		{Channel: 1, FromRank: 3, ToRank: 1, Kind: probes.TransportNet, Detail: "NET/IB/2/GDRDMA", Network: "IB", GDR: true},
		{Channel: 1, FromRank: 8, ToRank: 15, Kind: probes.TransportP2P, Detail: "P2P/IPC/read"},
		{Channel: 2, FromRank: 3, ToRank: 4, Kind: probes.TransportP2P, Detail: "P2P/direct pointer"},
		{Channel: 3, FromRank: 1, ToRank: 0, Kind: probes.TransportP2P, Detail: "P2P/CUMEM"},
		{Channel: 5, FromRank: 11, ToRank: 12, Kind: probes.TransportSHM, Detail: "SHM/direct/direct"},
		{Channel: 14, FromRank: 15, ToRank: 0, Kind: probes.TransportNet, Detail: "NET/Socket/0", Network: "Socket"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("TransportsOf:\n got %v\nwant %v", got, want)
	}
}

// NCCL 2.28.9's logs of two processes made two hosts, held to the
// network (testdata/nccl/README.md): each end logs every connection, the
// ring's (NET/Socket/0) and send/recv's (NET/Socket/0/Shared) on the same
// channels; the ring's stands for the channel.
func TestParseTransportsOfTwoHostsOverSockets(t *testing.T) {
	want := []probes.Transport{
		{Channel: 0, FromRank: 0, ToRank: 1, Kind: probes.TransportNet, Detail: "NET/Socket/0", Network: "Socket"}, {Channel: 0, FromRank: 1, ToRank: 0, Kind: probes.TransportNet, Detail: "NET/Socket/0", Network: "Socket"},
		{Channel: 1, FromRank: 0, ToRank: 1, Kind: probes.TransportNet, Detail: "NET/Socket/0", Network: "Socket"}, {Channel: 1, FromRank: 1, ToRank: 0, Kind: probes.TransportNet, Detail: "NET/Socket/0", Network: "Socket"},
	}
	for _, logs := range [][]string{
		{"testdata/nccl/2.28.9-socket-rank0.log"}, {"testdata/nccl/2.28.9-socket-rank1.log"},
		{"testdata/nccl/2.28.9-socket-rank0.log", "testdata/nccl/2.28.9-socket-rank1.log"},
	} {
		if got := parseTransportsOf(t, logs...); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", logs, got, want)
		}
	}
	if got := parseTransportsOf(t, "testdata/nccl/2.28.9-duplicate-gpu.log"); got != nil {
		t.Errorf("a communicator that never formed: %v", got)
	}
}

// NCCL 2.28.9 on two NVLink H100s: P2P/CUMEM each way on 24 ring channels
// and 32 send/recv ones, each logged by the sender.
func TestParseTransportsOverNVLink(t *testing.T) {
	var want []probes.Transport
	for ch := range 32 {
		want = append(want, probes.Transport{Channel: ch, FromRank: 0, ToRank: 1, Kind: probes.TransportP2P, Detail: "P2P/CUMEM"}, probes.Transport{Channel: ch, FromRank: 1, ToRank: 0, Kind: probes.TransportP2P, Detail: "P2P/CUMEM"})
	}
	got := parseTransportsOf(t, "testdata/nccl/2.28.9-p2p-nvlink-rank0.log", "testdata/nccl/2.28.9-p2p-nvlink-rank1.log")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}

// The logs the nccl package's helper collected (probes/nccl/testdata)
// parse to connections of the kinds their names say, whatever prefix a
// launcher put before NCCL's.
func TestParseTransportsOfLaunchersLogs(t *testing.T) {
	for file, kinds := range map[string][]string{
		"nccl-issue-1232-socket-shm.log":   {probes.TransportNet, probes.TransportSHM},
		"nccl-issue-1817-p2p-sendrecv.log": {probes.TransportP2P},
		"nccl-issue-1189-ib-cumem.log":     {probes.TransportNet, probes.TransportP2P},
	} {
		got := map[string]bool{}
		for _, tr := range parseTransportsOf(t, "../testdata/"+file) {
			got[tr.Kind] = true
		}
		if fmt.Sprint(got) != fmt.Sprint(setOf(kinds)) {
			t.Errorf("%s: kinds %v, want %v", file, got, kinds)
		}
	}
}

func setOf(ss []string) map[string]bool {
	m := map[string]bool{}
	for _, s := range ss {
		m[s] = true
	}
	return m
}

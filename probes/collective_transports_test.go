package probes

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
)

func parseTransportsOf(t *testing.T, paths ...string) []Transport {
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
	return parseTransports(io.MultiReader(logs...))
}

// The lines of testdata/nccl/posted-issues.log, as posted in NCCL and
// nccl-tests issues (the file names each), give these connections.
func TestParseTransportsOfPostedLogs(t *testing.T) {
	got := parseTransportsOf(t, "testdata/nccl/posted-issues.log")
	want := []Transport{
		{-1, -1, -1, TransportNVLS, "NVLS"},
		{0, -1, 0, TransportCollNet, "COLLNET/SHARP/0/GDRDMA"},
		{0, 0, -1, TransportCollNet, "COLLNET/SHARP/0/GDRDMA"},
		{0, 0, 4, TransportSHM, "SHM/direct/direct"},
		{0, 1, 3, TransportNet, "NET/IB/2/GDRDMA"},
		{0, 3, 2, TransportP2P, "P2P/CUMEM"},
		{1, 0, 2, TransportNet, "NET/IB/5/GDRDMA"},
		{1, 0, 4, TransportSHM, "SHM/direct/direct"},
		{1, 1, 0, TransportP2P, "P2P/CUMEM"},
		// Logged by both ends; the first line, the receiver's, is kept.
		{1, 2, 0, TransportNet, "NET/IB/5/GDRDMA"},
		{1, 3, 1, TransportNet, "NET/IB/2/GDRDMA"},
		{1, 8, 15, TransportP2P, "P2P/IPC/read"},
		{2, 3, 4, TransportP2P, "P2P/direct pointer"},
		{3, 1, 0, TransportP2P, "P2P/CUMEM"},
		{5, 11, 12, TransportSHM, "SHM/direct/direct"},
		{14, 15, 0, TransportNet, "NET/Socket/0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseTransports:\n got %v\nwant %v", got, want)
	}
}

// NCCL 2.28.9's logs of two processes made two hosts, held to the
// network (testdata/nccl/README.md): each end logs every connection, the
// ring's (NET/Socket/0) and send/recv's (NET/Socket/0/Shared) on the same
// channels; the ring's stands for the channel.
func TestParseTransportsOfTwoHostsOverSockets(t *testing.T) {
	want := []Transport{
		{0, 0, 1, TransportNet, "NET/Socket/0"}, {0, 1, 0, TransportNet, "NET/Socket/0"},
		{1, 0, 1, TransportNet, "NET/Socket/0"}, {1, 1, 0, TransportNet, "NET/Socket/0"},
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
	var want []Transport
	for ch := range 32 {
		want = append(want, Transport{ch, 0, 1, TransportP2P, "P2P/CUMEM"}, Transport{ch, 1, 0, TransportP2P, "P2P/CUMEM"})
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
		"nccl-issue-1232-socket-shm.log":   {TransportNet, TransportSHM},
		"nccl-issue-1817-p2p-sendrecv.log": {TransportP2P},
		"nccl-issue-1189-ib-cumem.log":     {TransportNet, TransportP2P},
	} {
		got := map[string]bool{}
		for _, tr := range parseTransportsOf(t, "nccl/testdata/"+file) {
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

func TestParseTransportsIgnoresEverythingElse(t *testing.T) {
	log := strings.Join([]string{
		"h:1:2 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.",
		"h:1:2 [0] NCCL INFO Connected all rings",
		"h:1:2 [0] NCCL INFO Channel 00/02 :    0   1",        // the ring listing, not a connection
		"h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via", // cut short
		"h:1:2 [0] NCCL WARN Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
		"",
		"h:1:2 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via Something/New\r",
	}, "\n")
	got := parseTransports(strings.NewReader(log))
	want := []Transport{{2, 0, 1, TransportUnknown, "Something/New"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseTransports = %v, want %v", got, want)
	}
	if got := parseTransports(strings.NewReader("")); got != nil {
		t.Errorf("empty log: %v", got)
	}
}

func TestTransportKind(t *testing.T) {
	for detail, want := range map[string]string{
		"P2P/CUMEM/read": TransportP2P, "P2P/direct pointer": TransportP2P, "SHM/direct/direct": TransportSHM,
		"NET/IB/0/GDRDMA": TransportNet, "NET/Socket/1": TransportNet, "NET/AWS Libfabric/0": TransportNet,
		"COLLNET/SHARP/0": TransportCollNet, "CollNet/x": TransportCollNet, "NVLS": TransportNVLS, "PXN": TransportUnknown, "": TransportUnknown,
	} {
		if got := transportKind(detail); got != want {
			t.Errorf("transportKind(%q) = %q, want %q", detail, got, want)
		}
	}
}

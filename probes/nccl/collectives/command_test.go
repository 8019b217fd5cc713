package collectives

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
	"github.com/gpulink/gpulink_exporter/probes"
)

// parseCollectiveCommand parses argv as the exporter does.
func parseCollectiveCommand(t *testing.T, args ...string) *CollectiveCommand {
	t.Helper()
	app := kingpin.New("gpulink_exporter", "")
	c := &CollectiveCommand{}
	AddCollectiveCommand(app, c)
	if _, err := app.Parse(append([]string{"collectives"}, args...)); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCollectiveCommandDefaults(t *testing.T) {
	c := parseCollectiveCommand(t)
	o, err := c.options()
	if err != nil {
		t.Fatal(err)
	}
	want := probes.DefaultCollectiveOptions()
	if o.SizeBytes != want.SizeBytes || o.SmallBytes != want.SmallBytes || o.Warmup != want.Warmup ||
		o.Iterations != want.Iterations || o.Samples != want.Samples || len(c.GPUs) != 1 || c.GPUs[0] != "all" ||
		c.Library != "libnccl.so.2" || c.NVLS || c.Output != "table" {
		t.Errorf("defaults: %+v from %+v", o, c)
	}
}

// Bad values are refused before any library is loaded, naming this
// command's flags and the value as given, in the one error form.
func TestCollectiveCommandUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--size=64GiB"}, "--size=64GiB: want 1MiB to 4GiB"},
		{[]string{"--size=lots"}, "--size=lots: want bytes or a size such as 64MiB"},
		{[]string{"--small-size=4"}, "--small-size=4: want 1KiB to 1MiB"},
		{[]string{"--warmup=-1"}, "--warmup=-1: want 0 to 1000"},
		{[]string{"--iters=0"}, "--iters=0: want 1 to 1000"},
		{[]string{"--samples=0"}, "--samples=0: want 1 to 100"},
		{[]string{"--collective=broadcast"}, "--collective=broadcast: unknown collective"},
		{[]string{"--id-fd=1"}, "--id-fd=1: want 3 or more"},
	} {
		c := parseCollectiveCommand(t, tc.args...)
		var stdout, stderr bytes.Buffer
		if st := c.Run(context.Background(), &stdout, &stderr); st != probes.ExitUsage || !strings.HasPrefix(stderr.String(), probes.ErrorPrefix+tc.want) || stdout.Len() != 0 {
			t.Errorf("%q: status %d, stderr %q, stdout %q; want %d and %q", tc.args, st, stderr.String(), stdout.String(), probes.ExitUsage, tc.want)
		}
	}
}

func TestCollectiveTable(t *testing.T) {
	from, to := 0, 1
	round := &probes.CollectiveRound{NCCLVersion: 22703, GPUs: []string{"0000:18:00.0", "0000:2a:00.0"}, Ranks: 2, Seconds: 1.5,
		Results: []probes.CollectiveResult{
			{Collective: probes.AllReduce, SizeBytes: 256 << 20, Ranks: 2, Seconds: 1e-3, SampleMin: 1e-3, SampleMax: 1e-3,
				AlgBytesPerSecond: 268435456e3, BusBytesPerSecond: 268435456e3},
			{Collective: probes.AllGather, SizeBytes: 256 << 20, Ranks: 2, Error: "ncclAllGather: unhandled cuda error"},
			{Collective: probes.SendRecv, SizeBytes: 8192, Ranks: 2, FromRank: &from, ToRank: &to, Seconds: 10e-6,
				AlgBytesPerSecond: 8192e5, BusBytesPerSecond: 8192e5},
		},
		Transports:  []probes.Transport{{Channel: 0, FromRank: 0, ToRank: 1, Kind: probes.TransportP2P, Detail: "P2P/CUMEM/read"}, {Channel: 1, FromRank: 0, ToRank: 1, Kind: probes.TransportP2P, Detail: "P2P/CUMEM/read"}, {Channel: 0, FromRank: 1, ToRank: 0, Kind: probes.TransportP2P, Detail: "P2P/CUMEM/read"}},
		BusySeconds: 0.25, DeviceMemoryBytes: 512 << 20, ContextSeconds: 1.25}
	var b bytes.Buffer
	WriteCollectiveTable(&b, round)
	out := b.String()
	for _, want := range []string{
		"# NCCL 2.27.3, 2 ranks, ranks 0-1 here: 0000:18:00.0 0000:2a:00.0; 1.50 s",
		// 256 MiB in 1 ms: 268.44 GB/s, and the bus factor of 2 ranks is 1.
		// Sizes with their unit, as every command prints them.
		"     all_reduce      2      256 MiB    1000.00   268.44   268.44\n",
		"     all_gather      2      256 MiB  error: ncclAllGather: unhandled cuda error\n",
		"      send_recv   0->1        8 KiB      10.00     0.82     0.82\n",
		"#   0 -> 1 p2p (P2P/CUMEM/read) on 2 channel(s)",
		"#   1 -> 0 p2p (P2P/CUMEM/read) on 1 channel(s)",
		"# cost: GPU busy 0.250 s, context held 1.250 s, device memory 512 MiB on each GPU",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	round.Error = "loading NCCL: libnccl.so.2: cannot open shared object file"
	b.Reset()
	WriteCollectiveTable(&b, round)
	if !strings.Contains(b.String(), "# not measured: loading NCCL") || strings.Contains(b.String(), "all_reduce") {
		t.Errorf("table of a failed round:\n%s", b.String())
	}
}

package probes

import (
	"reflect"
	"strings"
	"testing"
)

var (
	testGPUs = []string{"0000:18:00.0", "0000:2a:00.0"}
	// testUniqueID has the form of NCCL's 128-byte id in hex.
	testUniqueID = strings.Repeat("0a1b", 64)
)

func TestCollectiveOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*CollectiveOptions)
		want string // "" for valid
	}{
		{"the daemon's template", func(*CollectiveOptions) {}, ""},
		{"a node's round", func(o *CollectiveOptions) { o.GPUs, o.Ranks = testGPUs, 2 }, ""},
		{"rank 0 of two nodes", func(o *CollectiveOptions) { o.GPUs, o.Ranks = testGPUs[:1], 2 }, ""},
		{"rank 1 of two nodes", func(o *CollectiveOptions) {
			o.GPUs, o.Ranks, o.FirstRank, o.UniqueID = testGPUs[1:], 2, 1, testUniqueID
		}, ""},
		{"limits", func(o *CollectiveOptions) {
			o.SizeBytes, o.SmallBytes, o.Warmup, o.Iterations, o.Samples = 4<<30, 1<<20, 0, 1000, 100
		}, ""},
		{"every collective", func(o *CollectiveOptions) { o.Collectives = Collectives }, ""},

		{"size below", func(o *CollectiveOptions) { o.SizeBytes = 512 << 10 }, "--collective.size=512KiB: want 1MiB to 4GiB"},
		{"size above", func(o *CollectiveOptions) { o.SizeBytes = 8 << 30 }, "--collective.size=8GiB: want 1MiB to 4GiB"},
		{"small below", func(o *CollectiveOptions) { o.SmallBytes = 8 }, "--collective.small-size=8B: want 1KiB to 1MiB"},
		{"small above", func(o *CollectiveOptions) { o.SmallBytes = 2 << 20 }, "--collective.small-size=2MiB: want 1KiB to 1MiB"},
		{"warm-up negative", func(o *CollectiveOptions) { o.Warmup = -1 }, "--collective.warmup=-1: want 0 to 1000"},
		{"iterations zero", func(o *CollectiveOptions) { o.Iterations = 0 }, "--collective.iterations=0: want 1 to 1000"},
		{"iterations above", func(o *CollectiveOptions) { o.Iterations = 1001 }, "--collective.iterations=1001: want 1 to 1000"},
		{"samples zero", func(o *CollectiveOptions) { o.Samples = 0 }, "--collective.samples=0: want 1 to 100"},
		{"unknown collective", func(o *CollectiveOptions) { o.Collectives = []Collective{AllReduce, "broadcast"} },
			"--collective.kind=broadcast: unknown collective; known: all_reduce, all_gather, reduce_scatter, all_to_all, send_recv"},

		{"one rank", func(o *CollectiveOptions) { o.GPUs, o.Ranks = testGPUs[:1], 1 }, "--ranks=1: want 2 to 1024"},
		{"ranks but no GPU", func(o *CollectiveOptions) { o.Ranks = 2 }, "--gpu=: want at least one GPU"},
		{"fewer ranks than GPUs", func(o *CollectiveOptions) { o.GPUs, o.Ranks, o.UniqueID = []string{"a", "b", "c"}, 2, testUniqueID },
			"--ranks=2: want at least the 3 GPUs given"},
		{"GPUs past the last rank", func(o *CollectiveOptions) { o.GPUs, o.Ranks, o.FirstRank, o.UniqueID = testGPUs, 2, 1, testUniqueID },
			"--first-rank=1: want 0 to 0: 2 GPUs from it must fit in 2 ranks"},
		{"negative first rank", func(o *CollectiveOptions) {
			o.GPUs, o.Ranks, o.FirstRank, o.UniqueID = testGPUs[:1], 2, -1, testUniqueID
		},
			"--first-rank=-1"},
		{"not rank 0 without an id", func(o *CollectiveOptions) { o.GPUs, o.Ranks, o.FirstRank = testGPUs[1:], 2, 1 },
			"--unique-id=: want the id rank 0 made"},
		{"an id that is not one", func(o *CollectiveOptions) { o.GPUs, o.Ranks, o.FirstRank, o.UniqueID = testGPUs[1:], 2, 1, "not-an-id" },
			"--unique-id=not-an-id: want an NCCL unique id"},
		{"a small size too small for the ranks", func(o *CollectiveOptions) {
			o.GPUs, o.Ranks, o.UniqueID, o.SmallBytes = testGPUs, 512, testUniqueID, 1<<10
		}, "--collective.small-size=1KiB: want at least 4 bytes (one float) for each of 512 ranks"},
		{"a GPU twice", func(o *CollectiveOptions) { o.GPUs, o.Ranks = []string{testGPUs[0], testGPUs[0]}, 2 }, "--gpu=0000:18:00.0: want each GPU once"},
		{"a send/recv offset past the ranks", func(o *CollectiveOptions) { o.GPUs, o.Ranks, o.SendRecvOffset = testGPUs[:1], 2, 2 },
			"--send-recv-offset=2: want 0 (every pair) to 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultCollectiveOptions()
			tc.edit(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCollectiveOptionsArgs(t *testing.T) {
	o := CollectiveOptions{GPUs: testGPUs[:1], Collectives: []Collective{SendRecv, AllReduce}, SizeBytes: 1 << 20, SmallBytes: 4096,
		Warmup: 2, Iterations: 7, Samples: 3, Ranks: 2, FirstRank: 1, UniqueID: testUniqueID, Peer: "node-b:9849", SendRecvOffset: 1}
	want := []string{"--gpu=0000:18:00.0", "--collective=send_recv", "--collective=all_reduce", "--size=1048576", "--small-size=4096",
		"--warmup=2", "--iters=7", "--samples=3", "--ranks=2", "--first-rank=1", "--unique-id=" + testUniqueID, "--peer=node-b:9849",
		"--send-recv-offset=1"}
	if got := o.Args(); !reflect.DeepEqual(got, want) {
		t.Errorf("Args() = %q\nwant       %q", got, want)
	}
}

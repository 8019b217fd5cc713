package collectives

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/nccl"
)

// WriteCollectiveTable prints a collective round for a person, as
// nccl-tests prints its results, but the size with its unit as every
// command prints sizes (8 KiB, 256 MiB, not 268435456): time in microseconds,
// algorithm and bus bandwidth in GB/s (decimal); then the transports NCCL
// chose, one line per pair of ranks.
func WriteCollectiveTable(w io.Writer, round *probes.CollectiveRound) {
	version := "NCCL version unknown"
	if round.NCCLVersion > 0 {
		version = "NCCL " + nccl.VersionString(round.NCCLVersion)
	}
	fmt.Fprintf(w, "# %s, %d ranks, ranks %d-%d here: %s", version, round.Ranks, round.FirstRank, round.FirstRank+len(round.GPUs)-1, strings.Join(round.GPUs, " "))
	if round.Peer != "" {
		fmt.Fprintf(w, "; peer %s", round.Peer)
	}
	fmt.Fprintf(w, "; %.2f s\n", round.Seconds)
	if round.Error != "" {
		fmt.Fprintf(w, "# not measured: %s\n", round.Error)
		return
	}
	if lines := round.Contention.Describe(); len(lines) > 0 {
		fmt.Fprintf(w, "# contended (%s): other work shared the GPUs, every result below measured it too\n", strings.Join(round.Contention.For(""), ", "))
		for _, l := range lines {
			fmt.Fprintf(w, "#   shared: %s\n", l)
		}
	}
	// Fixed widths, as nccl-tests prints: a header line starts with #.
	const row = "%1s%14s %6s %12s %10s %8s %8s\n"
	fmt.Fprintf(w, row, "#", "collective", "ranks", "size", "time", "algbw", "busbw")
	fmt.Fprintf(w, row, "#", "", "", "", "(us)", "(GB/s)", "(GB/s)")
	for _, r := range round.Results {
		ranks := strconv.Itoa(r.Ranks)
		if r.FromRank != nil && r.ToRank != nil {
			ranks = fmt.Sprintf("%d->%d", *r.FromRank, *r.ToRank)
		}
		size := probes.SizeString(r.SizeBytes)
		if r.Error != "" {
			fmt.Fprintf(w, "%1s%14s %6s %12s  error: %s\n", "", r.Collective, ranks, size, r.Error)
			continue
		}
		fmt.Fprintf(w, row, "", r.Collective, ranks, size, fmt.Sprintf("%.2f", r.Seconds*1e6),
			fmt.Sprintf("%.2f", r.AlgBytesPerSecond/1e9), fmt.Sprintf("%.2f", r.BusBytesPerSecond/1e9))
	}
	if len(round.Transports) > 0 {
		fmt.Fprintln(w, "#\n# transports NCCL chose:")
		for _, l := range transportSummary(round.Transports) {
			fmt.Fprintf(w, "#   %s\n", l)
		}
	}
	fmt.Fprintf(w, "# cost: GPU busy %.3f s, context held %.3f s, device memory %s on each GPU\n",
		round.BusySeconds, round.ContextSeconds, probes.SizeString(round.DeviceMemoryBytes))
}

// transportSummary is one line per pair of ranks and NCCL name: "0 -> 1
// p2p (P2P/CUMEM/read) on 16 channels". Rank -1 is the network's
// reduction (CollNet) or, for NVLS, the whole communicator.
func transportSummary(ts []probes.Transport) []string {
	type key struct {
		from, to     int
		kind, detail string
	}
	count := map[key]int{}
	var keys []key
	for _, t := range ts {
		k := key{t.FromRank, t.ToRank, t.Kind, t.Detail}
		if count[k] == 0 {
			keys = append(keys, k)
		}
		count[k]++
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to), cmp.Compare(a.detail, b.detail))
	})
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		from, to := strconv.Itoa(k.from), strconv.Itoa(k.to)
		if k.from < 0 {
			from = "network"
		}
		if k.to < 0 {
			to = "network"
		}
		if k.kind == probes.TransportNVLS {
			out = append(out, fmt.Sprintf("NVLS (%s) set up for the communicator", k.detail))
			continue
		}
		out = append(out, fmt.Sprintf("%s -> %s %s (%s) on %d channel(s)", from, to, k.kind, k.detail, count[k]))
	}
	return out
}

package probe

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpulink/gpulink_exporter/probes"
)

// WriteTable prints a round for a person, one block per GPU, in the units
// nvbandwidth uses (GB/s, decimal) beside what each path should give.
func WriteTable(w io.Writer, round *probes.Round) {
	fmt.Fprintf(w, "CUDA driver %d.%d, %d GPU(s), %.2f s\n", round.DriverVersion/1000, round.DriverVersion%1000/10, len(round.GPUs), round.Seconds)
	for _, g := range round.GPUs {
		fmt.Fprintf(w, "\nGPU %s", g.PCIBusID)
		if g.Name != "" {
			fmt.Fprintf(w, " %s", g.Name)
		}
		if g.CUDADevice >= 0 {
			fmt.Fprintf(w, " (CUDA device %d)", g.CUDADevice)
		}
		fmt.Fprintln(w)
		if g.Error != "" {
			fmt.Fprintf(w, "  not probed: %s\n", g.Error)
			continue
		}
		for _, l := range g.Contention.Describe() {
			fmt.Fprintf(w, "  shared: %s\n", l)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  probe\tdirection\tpeer\thost node\tsize\tresult\tspread\texpected\tratio\tcontended")
		for _, r := range g.Results {
			node := ""
			if r.HostNUMANode != nil {
				node = strconv.Itoa(*r.HostNUMANode)
			}
			value, spread, expected, ratio := "", "", "", ""
			switch {
			case r.Skipped != nil:
				value = "skipped: " + r.Skipped.Error()
			case r.Error != "":
				value = "error: " + r.Error
			case r.BytesPerSecond > 0:
				value = fmt.Sprintf("%.2f GB/s", r.BytesPerSecond/1e9)
				if r.ExpectedBytesPerSecond > 0 {
					expected = fmt.Sprintf("%.2f GB/s", r.ExpectedBytesPerSecond/1e9)
					ratio = fmt.Sprintf("%.3f", r.BytesPerSecond/r.ExpectedBytesPerSecond)
				}
			default:
				value = fmt.Sprintf("%.3f us", r.Seconds*1e6)
			}
			if sp := r.Spread(); r.Error == "" && sp > 0 {
				// (max - min) / median of the samples; noisy ones are
				// what another process sharing the GPU does.
				spread = fmt.Sprintf("%.1f%%", 100*sp)
				if r.Noisy() {
					spread += " noisy"
				}
			}
			size := ""
			if r.SizeBytes > 0 {
				size = probes.SizeString(r.SizeBytes)
			}
			contended := strings.Join(g.Contention.For(r.Peer), ",")
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Probe, r.Direction, r.Peer, node, size, value, spread, expected, ratio, contended)
		}
		tw.Flush()
		writeStorage(w, g.Results)
		if l := g.LinkUnderLoad; l != nil {
			how := "read while copying, but the copy had finished by then"
			if l.Confirmed {
				how = "confirmed while copying"
			}
			fmt.Fprintf(w, "  PCIe link under load: Gen%d x%d (%s)\n", l.Generation, l.Width, how)
		}
		fmt.Fprintf(w, "  cost: GPU busy %.3f s, context held %.3f s, device memory %s at most (%s in use on the GPU), pinned host memory %s\n",
			g.BusySeconds, g.ContextSeconds, probes.SizeString(g.DeviceMemoryBytes), probes.SizeString(g.ContextMemoryBytes), probes.SizeString(g.HostMemoryBytes))
	}
}

// writeStorage says how the storage probes moved their bytes: the mode,
// the filesystem and drive, and why cuFile did not serve the file where it
// did not.
func writeStorage(w io.Writer, results []probes.Result) {
	for _, r := range results {
		if r.StorageMode == "" {
			continue
		}
		drive := r.StorageDrive
		if drive == "" {
			drive = "no local NVMe drive"
		}
		fmt.Fprintf(w, "  storage: %s through %s, %s on %s", r.Probe, r.StorageMode, r.StorageFilesystem, drive)
		if r.StorageNote != "" {
			fmt.Fprintf(w, " (%s)", r.StorageNote)
		}
		fmt.Fprintln(w)
	}
}

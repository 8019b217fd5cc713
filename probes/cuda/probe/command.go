package probe

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda"
)

// Command is `gpulink_exporter probe`: one round, printed as JSON for the
// daemon or as a table for a person.
type Command struct {
	Library string
	// CuFileLibrary is the cuFile library the storage probes try.
	CuFileLibrary string
	FS            hostfs.Root
	// GPUs: "all", a PCI address, or an index in PCI address order (which
	// is nvidia-smi's numbering).
	GPUs []string
	// Peers: PCI addresses, or "all" for every GPU this one can reach peer
	// to peer. With --gpu=all and no --peer, all.
	Peers         []string
	HostNodes     []int
	NoHostBinding bool
	Probes        []string
	Size          string
	Samples       int
	StorageDir    string
	StorageSize   string
	Output        string
	// Topology, if set, is the PCIe tree already read by the caller; else
	// it is read when the default host nodes need it.
	Topology *numa.Topology
	// Annotate, if set, fills in what each path should give (the table
	// shows it; the daemon annotates on its side).
	Annotate func(*probes.GPURound)
	// Sharing, if set, watches the GPUs for other work while the round
	// runs, as the daemon watches its probe rounds; SharingUnavailable
	// says why it is not set (no NVML). NoSharingCheck (the daemon's
	// children: it watches them itself) turns both off.
	Sharing            *probes.SharingCheck
	SharingUnavailable error
	NoSharingCheck     bool
}

// AddCommand registers the probe subcommand and its flags on app.
func AddCommand(app *kingpin.Application, c *Command) *kingpin.CmdClause {
	cmd := app.Command("probe", "Run one round of CUDA link probes and print the results (the daemon runs this as a child process). "+
		"The other compute processes on the GPUs are listed (NVML) before, during and after the round; a shared GPU's results are marked contended, in the table, the JSON and on stderr.")
	cmd.Flag("gpu", "GPU to probe: all, a PCI address, or an index in PCI address order (nvidia-smi's). Repeatable.").Default("all").StringsVar(&c.GPUs)
	cmd.Flag("peer", "Peer GPU for the peer probes: a PCI address, or all. Repeatable. Default: all when --gpu=all, else none.").StringsVar(&c.Peers)
	cmd.Flag("host-node", "NUMA node to bind the pinned host buffer to; each is probed in turn. Repeatable. Default: every node with memory, the GPU's own first.").IntsVar(&c.HostNodes)
	cmd.Flag("host-node-binding", "Bind host buffers to --host-node (--no-host-node-binding: leave them unbound, for a kernel without NUMA support).").Default("true").SetValue(probes.Negated{P: &c.NoHostBinding})
	cmd.Flag("probe", "Probe to run: "+probes.KindList()+". Repeatable. Default: all.").StringsVar(&c.Probes)
	cmd.Flag("size", "Size of one transfer for the bandwidth probes (bytes, or with a unit: 64MiB).").Default(units.Base2Bytes(probes.DefaultSizeBytes).String()).StringVar(&c.Size)
	cmd.Flag("samples", "Timed samples per result; the median is reported.").Default(strconv.Itoa(probes.DefaultSamples)).IntVar(&c.Samples)
	cmd.Flag("storage-dir", "Directory for the storage probes' file (written, read back, removed). Empty: none.").PlaceHolder("DIR").StringVar(&c.StorageDir)
	cmd.Flag("storage-size", "Size of the storage probes' file, whole MiB.").Default(units.Base2Bytes(probes.DefaultStorageBytes).String()).StringVar(&c.StorageSize)
	cmd.Flag("output", "table or json.").Default("table").EnumVar(&c.Output, "table", "json")
	cmd.Flag("sharing-check", "List the GPUs' other processes (--no-sharing-check: do not).").Default("true").SetValue(probes.Negated{P: &c.NoSharingCheck})
	return cmd
}

// commandFlags are this command's flags for the daemon's that
// Options.Validate names.
var commandFlags = map[string]string{"--probe.size": "--size", "--probe.samples": "--samples", "--probe.kind": "--probe", "--probe.storage-size": "--storage-size"}

// usageError is err from Options.Validate in this command's terms: its
// flag, and the size as given.
func (c *Command) usageError(err error) error {
	oe, ok := err.(*probes.OptionError)
	if !ok {
		return err
	}
	e := *oe
	switch e.Flag {
	case "--probe.size":
		e.Value = c.Size
	case "--probe.storage-size":
		e.Value = c.StorageSize
	}
	e.Want = strings.ReplaceAll(e.Want, "--probe.storage-dir", "--storage-dir")
	e.Flag = commandFlags[e.Flag]
	return &e
}

// Run runs the command; it returns the exit status.
func (c *Command) Run(ctx context.Context, stdout, stderr io.Writer) int {
	size, err := probes.ParseSize("--size", c.Size)
	if err != nil {
		probes.PrintError(stderr, err)
		return probes.ExitUsage
	}
	var kinds []probes.Kind
	for _, k := range c.Probes {
		kinds = append(kinds, probes.Kind(k))
	}
	// Every GPU's options share these; the rest are addresses and nodes.
	template := probes.Options{Probes: kinds, SizeBytes: size, Samples: c.Samples, StorageDir: c.StorageDir}
	if c.StorageDir != "" {
		if template.StorageBytes, err = probes.ParseSize("--storage-size", c.StorageSize); err != nil {
			probes.PrintError(stderr, err)
			return probes.ExitUsage
		}
		// cuFile echoes its errors on file descriptor 1, where the round
		// goes: move them to stderr before it loads.
		if stdout, err = guardStdout(stdout); err != nil {
			probes.PrintError(stderr, err)
			return probes.ExitUsage
		}
	}
	if err := template.Validate(); err != nil {
		probes.PrintError(stderr, c.usageError(err))
		return probes.ExitUsage
	}
	var round *probes.Round
	drv, err := cuda.Open(c.Library)
	switch {
	case err == nil:
		defer drv.Close()
		opts, err := c.options(drv, template)
		if err != nil {
			probes.PrintError(stderr, err)
			return probes.ExitUsage
		}
		watch := c.startSharingCheck(opts, stderr)
		round = runRound(ctx, drv, c.FS, c.CuFileLibrary, opts)
		c.judgeSharing(watch, round, opts, stderr)
	case probes.AddressesOnly(c.GPUs):
		// The daemon names GPUs by address: it gets a round saying why
		// each could not be probed, not a bare failure.
		round = failedRound(c.GPUs, err)
	default:
		probes.PrintError(stderr, err)
		return probes.ExitUsage
	}
	status := probes.ExitOK
	for i := range round.GPUs {
		if c.Annotate != nil {
			c.Annotate(&round.GPUs[i])
		}
		if round.GPUs[i].Error != "" {
			status = probes.ExitGPUFail
		}
	}
	if c.Output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", " ")
		if err := enc.Encode(round); err != nil {
			probes.PrintError(stderr, err)
			return probes.ExitUsage
		}
	} else {
		WriteTable(stdout, round)
	}
	return status
}

// startSharingCheck starts watching every GPU the round uses; nil when
// sharing is not checked, which stderr then says unless the caller asked.
func (c *Command) startSharingCheck(opts []probes.Options, stderr io.Writer) *probes.CommandWatch {
	if c.NoSharingCheck {
		return nil
	}
	var addrs []string
	for _, o := range opts {
		addrs = probes.AppendNew(addrs, append([]string{o.GPU}, o.Peers...)...)
	}
	return probes.StartSharingCheck(c.Sharing, c.SharingUnavailable, addrs, stderr)
}

// judgeSharing marks each GPU's results with what shared it and says so
// on stderr.
func (c *Command) judgeSharing(watch *probes.CommandWatch, round *probes.Round, opts []probes.Options, stderr io.Writer) {
	if watch == nil {
		return
	}
	watch.Stop()
	for i := range round.GPUs {
		gr := &round.GPUs[i]
		var peers []string
		for _, o := range opts {
			if pciaddr.Normalize(o.GPU) == pciaddr.Normalize(gr.PCIBusID) {
				peers = o.Peers
			}
		}
		gr.Contention = watch.Round(gr, peers, os.Getpid())
		gr.Contention.Report(stderr, "GPU "+gr.PCIBusID+" was shared while it was measured; its results are marked contended")
	}
}

// options resolves the GPU and peer selectors against the devices CUDA
// sees and fills in the default host nodes, for each GPU a copy of
// template.
func (c *Command) options(drv *cuda.Driver, template probes.Options) ([]probes.Options, error) {
	addrs, err := cuda.PCIOrder(drv)
	if err != nil {
		return nil, err
	}
	var gpus []string
	allGPUs := false
	for _, sel := range c.GPUs {
		got, err := probes.ResolveGPUs(addrs, sel, "gpu")
		if err != nil {
			return nil, err
		}
		allGPUs = allGPUs || sel == "all"
		gpus = probes.AppendNew(gpus, got...)
	}
	peerSel := c.Peers
	if len(peerSel) == 0 && allGPUs {
		peerSel = []string{"all"}
	}
	// Only the default host nodes need the topology; a tree that cannot be
	// read leaves the buffers unbound.
	topo := c.Topology
	if topo == nil && !c.NoHostBinding && len(c.HostNodes) == 0 {
		topo, _ = numa.ReadTopology(c.FS)
	}
	var out []probes.Options
	for _, g := range gpus {
		o := template
		o.GPU = g
		for _, sel := range peerSel {
			if sel == "all" {
				o.Peers = probes.AppendNew(o.Peers, reachablePeers(drv, g, addrs)...)
				continue
			}
			got, err := probes.ResolveGPUs(addrs, sel, "peer")
			if err != nil {
				return nil, err
			}
			o.Peers = probes.AppendNew(o.Peers, got...)
		}
		o.Peers = slices.DeleteFunc(o.Peers, func(p string) bool { return p == g })
		switch {
		case c.NoHostBinding:
		case len(c.HostNodes) > 0:
			o.HostNodes = c.HostNodes
		default:
			o.HostNodes = topo.HostNodes(g)
		}
		out = append(out, o)
	}
	return out, nil
}

// reachablePeers are the GPUs that gpu can access peer to peer.
func reachablePeers(drv *cuda.Driver, gpu string, addrs []string) []string {
	dev, err := drv.DeviceByPCIBusID(gpu)
	if err != nil {
		return nil
	}
	var out []string
	for _, a := range addrs {
		if a == gpu {
			continue
		}
		peer, err := drv.DeviceByPCIBusID(a)
		if err != nil {
			continue
		}
		if ok, err := dev.CanAccessPeer(peer); err == nil && ok {
			out = append(out, a)
		}
	}
	return out
}

package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes/cuda"
)

// Command is `gpulink_exporter probe`: one round, printed as JSON for the
// daemon or as a table for a person.
type Command struct {
	Library string
	FS      numa.FS
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
	Output        string
	// Topology, if set, is the PCIe tree already read by the caller; else
	// it is read when the default host nodes need it.
	Topology *numa.Topology
	// Annotate, if set, fills in what each path should give (the table
	// shows it; the daemon annotates on its side).
	Annotate func(*GPURound)
}

// AddCommand registers the probe subcommand and its flags on app.
func AddCommand(app *kingpin.Application, c *Command) *kingpin.CmdClause {
	cmd := app.Command("probe", "Run one round of CUDA link probes and print the results (the daemon runs this as a child process).")
	cmd.Flag("gpu", "GPU to probe: all, a PCI address, or an index in PCI address order (nvidia-smi's). Repeatable.").Default("all").StringsVar(&c.GPUs)
	cmd.Flag("peer", "Peer GPU for the peer probes: a PCI address, or all. Repeatable. Default: all when --gpu=all, else none.").StringsVar(&c.Peers)
	cmd.Flag("host-node", "NUMA node to bind the pinned host buffer to; each is probed in turn. Repeatable. Default: every node with memory, the GPU's own first.").IntsVar(&c.HostNodes)
	cmd.Flag("no-host-node-binding", "Leave host buffers unbound (a kernel without NUMA support).").BoolVar(&c.NoHostBinding)
	cmd.Flag("probe", "Probe to run: "+kindList()+". Repeatable. Default: all.").StringsVar(&c.Probes)
	cmd.Flag("size", "Size of one transfer for the bandwidth probes (bytes, or with a unit: 64MiB).").Default(strconv.Itoa(DefaultSizeBytes)).StringVar(&c.Size)
	cmd.Flag("samples", "Timed samples per result; the median is reported.").Default(strconv.Itoa(DefaultSamples)).IntVar(&c.Samples)
	cmd.Flag("output", "table or json.").Default("table").EnumVar(&c.Output, "table", "json")
	return cmd
}

// parseSize takes plain bytes or a size with a unit for flag; the
// options' Validate checks the range.
func parseSize(flag, s string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		b, uerr := units.ParseBase2Bytes(strings.TrimSpace(s))
		if uerr != nil {
			return 0, fmt.Errorf("%s=%s: want bytes or a size such as 64MiB", flag, s)
		}
		n = int64(b)
	}
	return n, nil
}

// commandFlags are this command's flags for the daemon's that
// Options.Validate names.
var commandFlags = map[string]string{"--probe.size": "--size", "--probe.samples": "--samples", "--probe.kind": "--probe"}

// usageError is err from Options.Validate in this command's terms: its
// flag, and the size as given.
func (c *Command) usageError(err error) error {
	oe, ok := err.(*OptionError)
	if !ok {
		return err
	}
	e := *oe
	if e.Flag == "--probe.size" {
		e.Value = c.Size
	}
	e.Flag = commandFlags[e.Flag]
	return &e
}

// Exit statuses of the child.
const (
	ExitOK      = 0
	ExitUsage   = 1 // nothing was probed; the message is on stderr
	ExitGPUFail = 2 // the round is printed, but some GPU could not be probed
)

// Run runs the command; it returns the exit status.
func (c *Command) Run(ctx context.Context, stdout, stderr io.Writer) int {
	size, err := parseSize("--size", c.Size)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return ExitUsage
	}
	var kinds []Kind
	for _, k := range c.Probes {
		kinds = append(kinds, Kind(k))
	}
	// Every GPU's options share these; the rest are addresses and nodes.
	template := Options{Probes: kinds, SizeBytes: size, Samples: c.Samples}
	if err := template.Validate(); err != nil {
		fmt.Fprintln(stderr, c.usageError(err))
		return ExitUsage
	}
	var round *Round
	drv, err := cuda.Open(c.Library)
	switch {
	case err == nil:
		defer drv.Close()
		opts, err := c.options(drv, template)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return ExitUsage
		}
		round = runRound(ctx, drv, c.FS, opts)
	case addressesOnly(c.GPUs):
		// The daemon names GPUs by address: it gets a round saying why
		// each could not be probed, not a bare failure.
		round = failedRound(c.GPUs, err)
	default:
		fmt.Fprintln(stderr, err)
		return ExitUsage
	}
	status := ExitOK
	for i := range round.GPUs {
		if c.Annotate != nil {
			c.Annotate(&round.GPUs[i])
		}
		if round.GPUs[i].Error != "" {
			status = ExitGPUFail
		}
	}
	if c.Output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", " ")
		if err := enc.Encode(round); err != nil {
			fmt.Fprintln(stderr, err)
			return ExitUsage
		}
	} else {
		WriteTable(stdout, round)
	}
	return status
}

// addressesOnly reports whether there are GPU selectors and every one is
// a PCI address.
func addressesOnly(sels []string) bool {
	for _, g := range sels {
		if !strings.Contains(g, ":") {
			return false
		}
	}
	return len(sels) > 0
}

// options resolves the GPU and peer selectors against the devices CUDA
// sees and fills in the default host nodes, for each GPU a copy of
// template.
func (c *Command) options(drv *cuda.Driver, template Options) ([]Options, error) {
	addrs, err := pciOrder(drv)
	if err != nil {
		return nil, err
	}
	var gpus []string
	allGPUs := false
	for _, sel := range c.GPUs {
		got, err := resolveGPUs(addrs, sel, "gpu")
		if err != nil {
			return nil, err
		}
		allGPUs = allGPUs || sel == "all"
		gpus = appendNew(gpus, got...)
	}
	peerSel := c.Peers
	if len(peerSel) == 0 && allGPUs {
		peerSel = []string{"all"}
	}
	// Only the default host nodes need the topology; a tree that cannot be
	// read leaves the buffers unbound.
	topo := c.Topology
	if topo == nil && !c.NoHostBinding && len(c.HostNodes) == 0 {
		topo, _ = c.FS.Topology()
	}
	var out []Options
	for _, g := range gpus {
		o := template
		o.GPU = g
		for _, sel := range peerSel {
			if sel == "all" {
				o.Peers = appendNew(o.Peers, reachablePeers(drv, g, addrs)...)
				continue
			}
			got, err := resolveGPUs(addrs, sel, "peer")
			if err != nil {
				return nil, err
			}
			o.Peers = appendNew(o.Peers, got...)
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

// resolveGPUs resolves one selector of flag against addrs, the PCI
// addresses CUDA sees, sorted: all of them, an index among them
// (nvidia-smi's numbering), or a PCI address, in any of its forms.
func resolveGPUs(addrs []string, sel, flag string) ([]string, error) {
	if sel == "all" {
		return addrs, nil
	}
	if i, err := strconv.Atoi(sel); err == nil {
		if i < 0 || i >= len(addrs) {
			return nil, fmt.Errorf("--%s=%s: there are %d GPUs (0-%d)", flag, sel, len(addrs), len(addrs)-1)
		}
		return addrs[i : i+1], nil
	}
	return []string{nvml.NormalizeBusID(sel)}, nil
}

func appendNew(list []string, more ...string) []string {
	for _, s := range more {
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}

// pciOrder lists the PCI addresses of the GPUs CUDA sees, sorted.
func pciOrder(drv *cuda.Driver) ([]string, error) {
	n, err := drv.DeviceCount()
	if err != nil {
		return nil, err
	}
	var addrs []string
	for i := range n {
		dev, err := drv.Device(i)
		if err != nil {
			return nil, err
		}
		a, err := dev.PCIBusID()
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	return addrs, nil
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

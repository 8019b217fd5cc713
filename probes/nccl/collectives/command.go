package collectives

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda"
	"github.com/gpulink/gpulink_exporter/probes/nccl"
)

// CollectiveCommand is `gpulink_exporter collectives`: one collective
// round over NCCL, printed as JSON for the daemon or as a table like
// nccl-tests' for a person.
type CollectiveCommand struct {
	// CUDALibrary is the driver library: the exporter's --cuda.library.
	CUDALibrary string
	// Library is the NCCL library.
	Library string
	// GPUs: "all", a PCI address, or an index in PCI address order.
	GPUs        []string
	Collectives []string
	Size        string
	SmallSize   string
	Warmup      int
	Iterations  int
	Samples     int
	// Ranks 0 is the number of GPUs.
	Ranks     int
	FirstRank int
	UniqueID  string
	// IDFD is the descriptor the new unique id is written to; 0 for
	// none (it then goes to stderr).
	IDFD    int
	Peer    string
	NVLS    bool
	Timeout time.Duration
	Output  string
	// SendRecvOffset: see probes.CollectiveOptions.
	SendRecvOffset int
	// Sharing, if set, watches the GPUs for other work while the round
	// runs, as the daemon watches its collective rounds;
	// SharingUnavailable says why it is not set (no NVML).
	// NoSharingCheck (the daemon's children: it watches them itself)
	// turns both off.
	Sharing            *probes.SharingCheck
	SharingUnavailable error
	NoSharingCheck     bool
}

const collectivesHelp = `Run one round of NCCL collectives over the GPUs and print the results as nccl-tests does (the daemon runs this as a child process).

NCCL takes its NCCL_* variables from this environment, so it takes the paths jobs take, except: NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE are overridden (its log names the transports), and NCCL_NVLS_ENABLE is 0 unless --nvls. Communicators block, as nccl-tests' do.`

// LibraryEnv names the NCCL library where no flag does: this command's
// --library and the daemon's --nccl.library both read it.
const LibraryEnv = "GPULINK_NCCL_LIBRARY"

// AddCollectiveCommand registers the collectives subcommand and its flags
// on app. The CUDA driver is the application's --cuda.library, as for
// the probe command.
func AddCollectiveCommand(app *kingpin.Application, c *CollectiveCommand) *kingpin.CmdClause {
	cmd := app.Command("collectives", collectivesHelp)
	cmd.Flag("gpu", "GPU to take a rank on: all, a PCI address, or an index in PCI address order (nvidia-smi's). Repeatable; ranks follow the order given.").Default("all").StringsVar(&c.GPUs)
	cmd.Flag("collective", "Collective to run: "+probes.CollectiveList()+". Repeatable. Default: all.").StringsVar(&c.Collectives)
	cmd.Flag("size", "Size of the bandwidth results, as nccl-tests' -b (bytes, or with a unit: 256MiB).").Default(units.Base2Bytes(probes.DefaultCollectiveSizeBytes).String()).StringVar(&c.Size)
	cmd.Flag("small-size", "Size of the latency results.").Default(units.Base2Bytes(probes.DefaultCollectiveSmallBytes).String()).StringVar(&c.SmallSize)
	cmd.Flag("warmup", "Untimed operations first (nccl-tests' -w).").Default(strconv.Itoa(probes.DefaultCollectiveWarmup)).IntVar(&c.Warmup)
	cmd.Flag("iters", "Operations per timed sample (nccl-tests' -n).").Default(strconv.Itoa(probes.DefaultCollectiveIterations)).IntVar(&c.Iterations)
	cmd.Flag("samples", "Timed samples per result (median reported).").Default(strconv.Itoa(probes.DefaultCollectiveSamples)).IntVar(&c.Samples)
	cmd.Flag("ranks", "Ranks in the communicator, if other processes (nodes) hold some. Default: the number of GPUs.").IntVar(&c.Ranks)
	cmd.Flag("first-rank", "Rank of the first GPU.").Default("0").IntVar(&c.FirstRank)
	cmd.Flag("unique-id", "NCCL unique id (hex) to join, as rank 0's process printed it. Default: make one (rank 0 here).").StringVar(&c.UniqueID)
	cmd.Flag("id-fd", "File descriptor (3 or more) for a new unique id when other processes hold ranks. Default: stderr.").Default("0").IntVar(&c.IDFD)
	cmd.Flag("peer", "The other node of a node-to-node probe, as the results name it.").StringVar(&c.Peer)
	// Set by the daemon's node-to-node sessions (each GPU to its
	// counterpart on the other node); hidden to keep the help short.
	cmd.Flag("send-recv-offset", "Send/recv only from each rank r to rank r+N; 0 for every pair.").Default("0").Hidden().IntVar(&c.SendRecvOffset)
	// The variable the daemon's --nccl.library reads too (the image and the
	// chart's nccl.hostPath set it), so a command run in the exporter's
	// container loads the daemon's NCCL.
	cmd.Flag("library", "Path or name of the NCCL library.").Envar(LibraryEnv).Default(nccl.DefaultLibrary).StringVar(&c.Library)
	cmd.Flag("nvls", "Let NCCL use NVLS (multicast), which can put a shared machine's GPUs out of service.").BoolVar(&c.NVLS)
	cmd.Flag("timeout", "Abort and report what was measured after this long; 0: no limit.").Default("0s").DurationVar(&c.Timeout)
	cmd.Flag("output", "table or json.").Default("table").EnumVar(&c.Output, "table", "json")
	cmd.Flag("sharing-check", "List the GPUs' other processes (--no-sharing-check: do not).").Default("true").SetValue(probes.Negated{P: &c.NoSharingCheck})
	return cmd
}

// collectiveFlags are this command's flags for the daemon's that
// CollectiveOptions.Validate names; the others are the command's own.
var collectiveFlags = map[string]string{
	"--collective.size": "--size", "--collective.small-size": "--small-size", "--collective.warmup": "--warmup",
	"--collective.iterations": "--iters", "--collective.samples": "--samples", "--collective.kind": "--collective",
}

// usageError is err from CollectiveOptions.Validate in this command's
// terms: its flag, and a size as given.
func (c *CollectiveCommand) usageError(err error) error {
	oe, ok := err.(*probes.OptionError)
	if !ok {
		return err
	}
	e := *oe
	switch e.Flag {
	case "--collective.size":
		e.Value = c.Size
	case "--collective.small-size":
		e.Value = c.SmallSize
	}
	if f, ok := collectiveFlags[e.Flag]; ok {
		e.Flag = f
	}
	return &e
}

// Run runs the command; it returns the exit status, as the probe
// command's: probes.ExitUsage when nothing was measured for a reason on stderr,
// probes.ExitGPUFail when the round is printed but has an error in it.
func (c *CollectiveCommand) Run(ctx context.Context, stdout, stderr io.Writer) int {
	usage := func(err error) int {
		probes.PrintError(stderr, err)
		return probes.ExitUsage
	}
	o, err := c.options()
	if err != nil {
		return usage(err)
	}
	var idOut *os.File
	if c.IDFD != 0 {
		if c.IDFD < 3 {
			return usage(fmt.Errorf("--id-fd=%d: want 3 or more (0, 1 and 2 are stdin, the round and errors)", c.IDFD))
		}
		idOut = os.NewFile(uintptr(c.IDFD), "id-fd")
		defer idOut.Close()
	}
	// Before NCCL is loaded: it reads its environment once.
	log, err := setNCCLEnvironment(c.NVLS)
	if err != nil {
		return usage(err)
	}
	defer os.Remove(log)
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}

	var m probes.CollectiveMeasurer
	drv, err := cuda.Open(c.CUDALibrary)
	switch {
	case err == nil:
		defer drv.Close()
		if o.GPUs, err = c.gpus(drv); err != nil {
			return usage(err)
		}
	case probes.AddressesOnly(c.GPUs):
		// The daemon names GPUs by address: it gets a round saying why
		// nothing was measured, not a bare failure.
		for _, g := range c.GPUs {
			o.GPUs = probes.AppendNew(o.GPUs, pciaddr.Normalize(g))
		}
		m = unavailable{err}
	default:
		return usage(err)
	}
	if o.Ranks == 0 {
		o.Ranks = len(o.GPUs)
	}
	if err := o.Validate(); err != nil {
		return usage(c.usageError(err))
	}
	if m == nil {
		lib, err := nccl.Open(c.Library)
		if err != nil {
			m = unavailable{probes.NoLibrary(err)}
		} else {
			defer lib.Close()
			m = &ncclMeasurer{drv: drv, lib: lib, log: log}
		}
	}

	var ids chan string
	idsDone := make(chan struct{})
	if o.UniqueID == "" && o.Ranks > len(o.GPUs) {
		ids = make(chan string, 1)
		go func() {
			defer close(idsDone)
			c.handOut(ids, idOut, stderr)
		}()
	} else {
		close(idsDone)
	}
	watch := c.startSharingCheck(o.GPUs, stderr)
	round := probes.MeasureCollectiveRound(ctx, m, o, ids)
	if ids != nil {
		close(ids)
	}
	<-idsDone
	if watch != nil {
		watch.Stop()
		round.Contention = watch.Collective(o.GPUs, os.Getpid())
		round.Contention.Report(stderr, "the GPUs were shared while the collectives ran; every result is marked contended")
	}

	status := probes.ExitOK
	if round.Error != "" {
		status = probes.ExitGPUFail
		probes.PrintError(stderr, fmt.Errorf("collective round: %s", round.Error))
	}
	for _, r := range round.Results {
		if r.Error != "" {
			status = probes.ExitGPUFail
		}
	}
	if c.Output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", " ")
		if err := enc.Encode(round); err != nil {
			return usage(err)
		}
	} else {
		WriteCollectiveTable(stdout, round)
	}
	return status
}

// startSharingCheck starts watching the round's GPUs; nil when sharing
// is not checked, which stderr then says unless the caller asked.
func (c *CollectiveCommand) startSharingCheck(gpus []string, stderr io.Writer) *probes.CommandWatch {
	if c.NoSharingCheck {
		return nil
	}
	return probes.StartSharingCheck(c.Sharing, c.SharingUnavailable, gpus, stderr)
}

// options are the flags' options, checked as far as they can be before
// the GPUs are known.
func (c *CollectiveCommand) options() (probes.CollectiveOptions, error) {
	size, err := probes.ParseSize("--size", c.Size)
	if err != nil {
		return probes.CollectiveOptions{}, err
	}
	small, err := probes.ParseSize("--small-size", c.SmallSize)
	if err != nil {
		return probes.CollectiveOptions{}, err
	}
	o := probes.CollectiveOptions{SizeBytes: size, SmallBytes: small, Warmup: c.Warmup, Iterations: c.Iterations, Samples: c.Samples,
		Ranks: c.Ranks, FirstRank: c.FirstRank, UniqueID: c.UniqueID, Peer: c.Peer, SendRecvOffset: c.SendRecvOffset}
	for _, k := range c.Collectives {
		o.Collectives = append(o.Collectives, probes.Collective(k))
	}
	early := o
	early.Ranks = 0 // the rest waits for the GPUs
	if err := early.Validate(); err != nil {
		return o, c.usageError(err)
	}
	return o, nil
}

// gpus resolves the --gpu selectors against the GPUs CUDA sees, in the
// order given.
func (c *CollectiveCommand) gpus(drv *cuda.Driver) ([]string, error) {
	addrs, err := cuda.PCIOrder(drv)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sel := range c.GPUs {
		got, err := probes.ResolveGPUs(addrs, sel, "gpu")
		if err != nil {
			return nil, err
		}
		out = probes.AppendNew(out, got...)
	}
	return out, nil
}

// handOut writes each unique id to the --id-fd descriptor, or stderr for
// a person to pass on, and closes the descriptor after the first: the
// reader then knows there is no other.
func (c *CollectiveCommand) handOut(ids <-chan string, f *os.File, stderr io.Writer) {
	for id := range ids {
		if f == nil {
			fmt.Fprintf(stderr, "NCCL unique id (give it to the other ranks' processes as --unique-id): %s\n", id)
			continue
		}
		if _, err := fmt.Fprintln(f, id); err != nil {
			probes.PrintError(stderr, fmt.Errorf("writing the unique id to --id-fd=%d: %v", c.IDFD, err))
		}
		f.Close()
		f = nil
	}
}

// unavailable is the measurer when CUDA or NCCL could not be loaded: the
// round says why, and no other probe is affected.
type unavailable struct{ err error }

func (u unavailable) NCCLVersion() int { return 0 }

func (u unavailable) OpenComm(context.Context, probes.CollectiveOptions, chan<- string) (probes.Communicator, error) {
	return nil, u.err
}

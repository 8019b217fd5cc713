package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/gpulink/gpulink_exporter/internal/dcgm"
	"github.com/gpulink/gpulink_exporter/internal/nodeprobe"
	"github.com/gpulink/gpulink_exporter/internal/sim"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cuda/probe"
	"github.com/gpulink/gpulink_exporter/probes/cufile"
	"github.com/gpulink/gpulink_exporter/probes/nccl"
	"github.com/gpulink/gpulink_exporter/probes/nccl/collectives"
	"github.com/gpulink/gpulink_exporter/probes/schedule"
)

// defaultAddress avoids node_exporter (9100), dcgm-exporter (9400) and
// nvidia_gpu_exporter (9835).
const defaultAddress = ":9849"

// config is where the flags land. The sources' own flags are registered
// from the table (sources.go); the rest here.
type config struct {
	metricsPath       string
	maxRequests       int
	noExporterMetrics bool
	pprof             bool
	maxProcs          int
	sysfs, procfs     string
	cudaLib           string
	cufileLib         string
	cufileConfig      string
	sim, simFaults    string
	simHostProcesses  bool
	web               *web.FlagConfig
	log               promslog.Config

	// One per row of the table: its switch, interval and timeout.
	src [numSources]setting
	// The sources' other flags.
	nvmlLib  string
	nvmlSlow time.Duration
	// nvlinkSpeed exports the per-link speed series.
	nvlinkSpeed bool
	// nvlinkTraffic reads and exports each NVLink's data counters.
	nvlinkTraffic bool
	perProcess    bool
	// probe holds the scheduler's flags; main adds what it runs on.
	probe      schedule.SchedulerConfig
	probeKinds []string
	// collectiveKinds are --collective.kind; the rest of the collective
	// round's flags land in probe.
	collectiveKinds []string
	ncclLib         string
	ncclNVLS        bool
	dcgm            dcgm.Config
	podSocket       string
	slurmMappingDir string
	nodeProbe       nodeProbeConfig
}

// nodeProbeConfig holds the node-to-node probes' flags, and the modules
// file as start-up read and checked it.
type nodeProbeConfig struct {
	configFile  string
	minInterval time.Duration
	enabled     bool
	gpus        []string
	file        *nodeprobe.File // nil: the default module only
	// tokenFile is --node-probe.token-file; token what start-up read
	// from it, and webBasicAuth whether the web config checks basic auth
	// (a /probe call carrying it passed that check).
	tokenFile    string
	token        string
	webBasicAuth bool
}

// setting is one source's name (from the table) and its common flags.
type setting struct {
	name              string
	on                bool // --collector.<name>; always true without a switch
	interval, timeout time.Duration
	timeoutSet        bool // --<name>.timeout was given
}

// deadline is the timeout a sample gets: --<name>.timeout as given, or
// its default cut to the interval where that is shorter, so that a
// shorter interval alone needs no timeout beside it.
func (s setting) deadline() time.Duration {
	if s.timeoutSet {
		return s.timeout
	}
	return min(s.timeout, s.interval)
}

// cli is the parsed command line: the app, its flags' values and the
// subcommands.
type cli struct {
	app                *kingpin.Application
	cfg                *config
	topology, probeCmd *kingpin.CmdClause
	probe              *probe.Command
	collectivesCmd     *kingpin.CmdClause
	collectives        *collectives.CollectiveCommand
	// ncclCheck is collectives --check: say what a session between nodes
	// would use and lack instead of running one (ncclcheck.go).
	ncclCheck bool
}

// newCLI registers every flag and command; main and the tests parse it.
func newCLI() *cli {
	app := kingpin.New("gpulink_exporter", "Prometheus exporter for GPU links: PCIe, NVLink, NICs and NUMA placement.")
	c := &config{}
	// The help lists flags as they are registered: the web server's
	// together (exporter-toolkit's first), then each source's.
	c.web = kingpinflag.AddFlags(app, defaultAddress)
	app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&c.metricsPath)
	app.Flag("web.max-requests", "Maximum number of parallel scrape requests; 0 disables the limit.").Default("10").IntVar(&c.maxRequests)
	app.Flag("web.disable-exporter-metrics", "Exclude the exporter's own go_* and process_* metrics.").BoolVar(&c.noExporterMetrics)
	app.Flag("web.enable-pprof", "Serve Go's profiles under /debug/pprof/ (behind the web config), to find where the exporter's own CPU and memory go.").BoolVar(&c.pprof)
	app.Flag("path.sysfs", "sysfs mount point.").Default("/sys").StringVar(&c.sysfs)
	app.Flag("path.procfs", "procfs mount point.").Default("/proc").StringVar(&c.procfs)
	app.Flag("cuda.library", "Path or name of the CUDA driver library the probes load.").Default("libcuda.so.1").StringVar(&c.cudaLib)
	app.Flag("cufile.library", "cuFile (GPUDirect Storage) library the storage probes try, else O_DIRECT.").Envar(cufile.LibraryEnv).Default(cufile.DefaultLibrary).StringVar(&c.cufileLib)
	app.Flag("cufile.config", "cuFile's configuration file, as cuFile finds it ($CUFILE_ENV_PATH_JSON, else /etc/cufile.json): the topology source reports whether it allows compatibility mode.").Envar(numa.CuFileConfigEnv).Default(numa.DefaultCuFileConfig).StringVar(&c.cufileConfig)
	app.Flag("runtime.gomaxprocs", "The target number of CPUs Go will run on (GOMAXPROCS).").Envar("GOMAXPROCS").Default("1").IntVar(&c.maxProcs)
	app.Flag("sim", "Serve a simulated node instead of this machine: NVML, sysfs/procfs and the probe runner are modelled, everything else is the real exporter. One of: "+strings.Join(sim.ProfileNames(), ", ")+".").PlaceHolder("PROFILE").EnumVar(&c.sim, sim.ProfileNames()...)
	app.Flag("sim.faults", "YAML file of faults to inject into the simulated node (with --sim); re-read when it changes. Missing or empty: a healthy node.").PlaceHolder("FILE").StringVar(&c.simFaults)
	app.Flag("sim.host-processes", "With --sim: this machine's processes whose CUDA_VISIBLE_DEVICES names simulated GPUs (by index or UUID) are those GPUs' compute processes, read through --path.procfs: real jobs of a real scheduler (Slurm) in front of the simulated node.").BoolVar(&c.simHostProcesses)
	for id := range sources {
		sources[id].register(app, c, sourceID(id))
	}
	collectiveFlags(app, c)
	app.Command("serve", "Run the exporter (the default).").Default()
	l := &cli{app: app, cfg: c, probe: &probe.Command{}, collectives: &collectives.CollectiveCommand{}}
	l.topology = app.Command("topology", "Print the GPU and NIC topology matrix as nvidia-smi topo -m does, and exit.")
	l.probeCmd = probe.AddCommand(app, l.probe)
	l.collectivesCmd = collectives.AddCollectiveCommand(app, l.collectives)
	l.collectivesCmd.Flag("check", "Say what NCCL between nodes would use and lack.").BoolVar(&l.ncclCheck)
	flag.AddFlags(app, &c.log)
	app.Version(version.Print("gpulink_exporter"))
	app.HelpFlag.Short('h')
	commandHelp(app)
	return l
}

// register adds the row's flags: --collector.<name> where it has a switch,
// --<name>.interval and --<name>.timeout where it has them, and its own.
func (s *source) register(app *kingpin.Application, c *config, id sourceID) {
	st := &c.src[id]
	st.name, st.on = s.name, true
	if s.help != "" {
		def := strconv.FormatBool(s.on)
		app.Flag("collector."+s.name, fmt.Sprintf("Enable the %s collector: %s (default: %s)", s.name, s.help, def)).
			Default(def).BoolVar(&st.on)
	}
	if s.interval.def != "" {
		app.Flag(s.name+".interval", s.interval.help).Default(s.interval.def).DurationVar(&st.interval)
	}
	if s.timeout.def != "" {
		help := s.timeout.help
		if !s.ownTimer {
			help += fmt.Sprintf(" At most --%s.interval; left unset, the interval where that is shorter.", s.name)
		}
		app.Flag(s.name+".timeout", help).Default(s.timeout.def).IsSetByUser(&st.timeoutSet).DurationVar(&st.timeout)
	}
	if s.flags != nil {
		s.flags(func(suffix, help string) *kingpin.FlagClause { return app.Flag(s.name+"."+suffix, help) }, c)
	}
}

// probeFlags are the probe row's own flags, bound to the scheduler's
// config; interval and timeout come from the row.
func probeFlags(f flagFunc, c *config) {
	f("policy", "When to run the CUDA link probes: idle (only on a GPU with no other compute process and low utilisation), always, or off. Never on a GPU in EXCLUSIVE_PROCESS or PROHIBITED compute mode, with MIG on, or lost.").Default(schedule.PolicyIdle).EnumVar(&c.probe.Policy, schedule.Policies...)
	f("max-duty", "Most of a GPU's time the probes may take: a round that cost a GPU L seconds (its probes and its peers' against it) is followed by at least L / this. 1 turns the bound off.").Default(formatFloat(probes.DefaultMaxDuty)).Float64Var(&c.probe.MaxDuty)
	f("first-delay", "Wait before the first probe round after start-up.").Default("1m").DurationVar(&c.probe.FirstDelay)
	f("jitter", "Spread of the probe interval and first delay, as a fraction of them (0 to 0.5), so a fleet does not probe in step; 0: none, rounds exactly every interval.").Default(formatFloat(probes.DefaultJitter)).Float64Var(&c.probe.Jitter)
	f("size", "Size of one transfer for the bandwidth probes; each probe holds at most two such buffers on the GPU and two pinned on the host.").Default(units.Base2Bytes(probes.DefaultSizeBytes).String()).BytesVar((*units.Base2Bytes)(&c.probe.Options.SizeBytes))
	f("samples", "Timed samples per probe result; the median is exported.").Default(strconv.Itoa(probes.DefaultSamples)).IntVar(&c.probe.Options.Samples)
	f("kind", "Probe to run (repeatable); default all (the storage probes only with --probe.storage-dir).").EnumsVar(&c.probeKinds, probes.KindNames()...)
	f("storage-dir", "Directory on the drive the storage probes measure (device_to_storage, storage_to_device): each round writes a file of --probe.storage-size there from GPU memory, reads it back into it, and removes it. Empty: no storage probes, since they spend the drive's bandwidth.").PlaceHolder("DIR").StringVar(&c.probe.Options.StorageDir)
	f("storage-size", "Size of the storage probes' file: written once, read --probe.samples times, in whole MiB.").Default(units.Base2Bytes(probes.DefaultStorageBytes).String()).BytesVar((*units.Base2Bytes)(&c.probe.Options.StorageBytes))
	f("utilization-threshold", "NVML utilisation (0..1) above which a GPU is busy: the idle policy skips it, and a round beside it is marked contended. 0: any utilisation is busy.").Default(formatFloat(probes.DefaultUtilizationThreshold)).Float64Var(&c.probe.UtilizationThreshold)
}

// formatFloat writes a flag's default as the flag would be given.
func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// formatDuration writes a flag's default duration as a person would give
// it: 10m, not time.Duration's 10m0s.
func formatDuration(d time.Duration) string {
	switch {
	case d > 0 && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d > 0 && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

// nodeProbeFlags are the node-to-node probes' flags.
func nodeProbeFlags(f flagFunc, c *config) {
	f("config.file", "Modules file of the node-to-node probes (/probe?target=&module=): what each module runs and how the prober calls the target (http_client: TLS, basic auth). Checked at start, re-read on SIGHUP. Without it the one module is "+nodeprobe.DefaultModuleName+".").PlaceHolder("FILE").StringVar(&c.nodeProbe.configFile)
	f("min-interval", "Least time between two node-to-node sessions this node takes part in, in each role. Only a session that ran counts: a decline, an unreachable target, a reservation given back or expired do not. A call inside it is declined as declined_rate_limited. 0 is no limit.").Default("1m").DurationVar(&c.nodeProbe.minInterval)
	f("enabled", "Answer "+nodeprobe.ReservePath+" and "+nodeprobe.JoinPath+": let other exporters' /probe run node-to-node sessions with this node's idle GPUs. /probe itself (this node as the prober) is always served.").Default("false").BoolVar(&c.nodeProbe.enabled)
	f("gpu", "GPU node-to-node sessions may use, by PCI address (0000:18:00.0). Repeatable. Default: every GPU. Two exporters on one host (a test of the network path) each name their own; the child is also limited to them through CUDA_VISIBLE_DEVICES if the operator sets it.").PlaceHolder("PCI_ADDRESS").StringsVar(&c.nodeProbe.gpus)
	f("token-file", "File holding the token the exporters of a ring share (at least 32 characters): /probe, "+nodeprobe.ReservePath+" and "+nodeprobe.JoinPath+" refuse (401) every request without it before they take any lock or limit, and this node sends it to its targets ("+nodeprobe.TokenHeader+"). Prometheus sends it to /probe as a bearer token (authorization: credentials_file), or the web config's basic auth. Read at start. Empty: no token, anyone who reaches the port may run sessions.").PlaceHolder("FILE").StringVar(&c.nodeProbe.tokenFile)
}

// collectiveFlags are the flags of the node's collective round, which the
// probe scheduler runs after a pass, and of the NCCL library it loads.
func collectiveFlags(app *kingpin.Application, c *config) {
	// The NCCL library's first, beside the nccl source's (the last row
	// of the table), so that the help keeps the --nccl.* flags together.
	app.Flag("nccl.library", "Path or name of the NCCL library the collective child loads (the image with NCCL sets it through GPULINK_NCCL_LIBRARY).").Envar(collectives.LibraryEnv).Default(nccl.DefaultLibrary).StringVar(&c.ncclLib)
	app.Flag("nccl.nvls", "Let NCCL use NVLink SHARP (multicast) in the collective child. Off, the child runs with NCCL_NVLS_ENABLE=0: on shared machines a multicast program can put the host's GPUs out of service.").
		Default("false").BoolVar(&c.ncclNVLS)
	p := &c.probe
	app.Flag("collective.interval", "Least time between the node's NCCL collective rounds over every usable GPU (with jitter); a round runs after a probe pass, only when every GPU it uses is idle under --probe.policy, and is stretched when it costs more than --probe.max-duty allows.").
		Default(schedule.DefaultCollectiveInterval.String()).DurationVar(&p.CollectiveInterval)
	app.Flag("collective.timeout", "Deadline of one collective round's child; past it the child is killed.").Default(schedule.DefaultCollectiveTimeout.String()).DurationVar(&p.CollectiveTimeout)
	app.Flag("collective.size", "Size of one collective operation for the bandwidth results, as nccl-tests' -b; each GPU holds a send and a receive buffer of about this size.").
		Default(units.Base2Bytes(probes.DefaultCollectiveSizeBytes).String()).BytesVar((*units.Base2Bytes)(&p.CollectiveOptions.SizeBytes))
	app.Flag("collective.small-size", "Size of one collective operation for the latency results.").
		Default(units.Base2Bytes(probes.DefaultCollectiveSmallBytes).String()).BytesVar((*units.Base2Bytes)(&p.CollectiveOptions.SmallBytes))
	app.Flag("collective.warmup", "Untimed operations before the timed ones, as nccl-tests' -w.").Default(strconv.Itoa(probes.DefaultCollectiveWarmup)).IntVar(&p.CollectiveOptions.Warmup)
	app.Flag("collective.iterations", "Operations timed together and averaged, as nccl-tests' -n.").Default(strconv.Itoa(probes.DefaultCollectiveIterations)).IntVar(&p.CollectiveOptions.Iterations)
	app.Flag("collective.samples", "Timed samples of the iterations per result; the median is exported.").Default(strconv.Itoa(probes.DefaultCollectiveSamples)).IntVar(&p.CollectiveOptions.Samples)
	app.Flag("collective.kind", "Collective to run (repeatable); default all: "+strings.Join(probes.CollectiveNames(), ", ")+".").
		EnumsVar(&c.collectiveKinds, probes.CollectiveNames()...)
}

// typed is names, which flags checked against the known values, as the
// kinds (probes.Kind, probes.Collective) they name.
func typed[T ~string](names []string) []T {
	var out []T
	for _, n := range names {
		out = append(out, T(n))
	}
	return out
}

// collectors names the switched-on collectors, sorted, for the log.
func (c *config) collectors() []string {
	var names []string
	for id := range sources {
		if sources[id].help != "" && c.src[id].on {
			names = append(names, c.src[id].name)
		}
	}
	slices.Sort(names)
	return names
}

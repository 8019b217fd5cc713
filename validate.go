package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v3"

	"github.com/gpulink/gpulink_exporter/internal/nodeprobe"
	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/probes"
)

// flagError is a flag whose value start-up refuses.
type flagError struct {
	flag  string // without the dashes
	value string
	want  string // what the flag takes
}

func (e *flagError) Error() string { return fmt.Sprintf("--%s=%s: want %s", e.flag, e.value, e.want) }

func badDuration(flag string, v time.Duration, want string) error {
	return &flagError{flag, v.String(), want}
}

// validate checks every flag before anything starts: the first bad value
// is returned, naming the flag and what it takes. A missing path that can
// legitimately appear later (a library the loader finds by name, the
// kubelet's socket) is a warning. command is the parsed command.
func (l *cli) validate(command string, logger *slog.Logger) error {
	c := l.cfg
	switch {
	case c.sim != "" && command == l.probeCmd.FullCommand():
		return errors.New("--sim serves a simulated node; the probe command needs a real GPU")
	case c.sim != "" && command == l.collectivesCmd.FullCommand() && !l.ncclCheck:
		return errors.New("--sim serves a simulated node; the collectives command needs real GPUs")
	case c.sim == "" && c.simFaults != "":
		return errors.New("--sim.faults needs --sim")
	case c.sim == "" && c.simHostProcesses:
		return errors.New("--sim.host-processes needs --sim")
	case c.maxRequests < 0:
		return &flagError{"web.max-requests", strconv.Itoa(c.maxRequests), "0 (no limit) or more"}
	case c.maxProcs < 1:
		return &flagError{"runtime.gomaxprocs", strconv.Itoa(c.maxProcs), "1 or more"}
	case !strings.HasPrefix(c.metricsPath, "/"):
		return &flagError{"web.telemetry-path", c.metricsPath, "a path starting with /"}
	case slices.Contains(nodeprobe.Paths, c.metricsPath):
		return &flagError{"web.telemetry-path", c.metricsPath, "a path other than " + strings.Join(nodeprobe.Paths, ", ")}
	}
	// --sim serves its own tree and ignores these.
	if c.sim == "" {
		for _, p := range []struct{ flag, dir string }{{"path.sysfs", c.sysfs}, {"path.procfs", c.procfs}} {
			if fi, err := os.Stat(p.dir); err != nil || !fi.IsDir() {
				return &flagError{p.flag, p.dir, "an existing directory (the mount point)"}
			}
		}
	}
	for id := range sources {
		if err := sources[id].validate(c, c.src[id], logger.Warn); err != nil {
			return err
		}
	}
	return checkCollectives(c, logger.Warn)
}

// validate checks the row's interval and timeout, then its own flags.
func (s *source) validate(c *config, st setting, warn func(string, ...any)) error {
	interval, timeout := st.name+".interval", st.name+".timeout"
	if s.interval.def != "" && st.interval <= 0 {
		return badDuration(interval, st.interval, "a duration above 0")
	}
	if s.timeout.def != "" && st.timeout <= 0 {
		return badDuration(timeout, st.timeout, "a duration above 0")
	}
	// The interval is above 0 by now: what the sampler can refuse is a
	// timeout given above it.
	if s.interval.def != "" && !s.ownTimer {
		if err := (sampler.Options{Interval: st.interval, Timeout: st.deadline()}).Validate(); err != nil {
			return badDuration(timeout, st.timeout, fmt.Sprintf("a duration above 0 and at most --%s (%s)", interval, st.interval))
		}
	}
	if s.check != nil {
		return s.check(c, st, warn)
	}
	return nil
}

// checkLibrary warns when a library named by path is not there (the
// defaults are bare names, the loader's to find).
func checkLibrary(c *config, flag, lib string, warn func(string, ...any)) {
	if c.sim != "" || !strings.Contains(lib, "/") {
		return
	}
	if _, err := os.Stat(lib); err != nil {
		warn("library not found; its source reports down until it is there", "flag", "--"+flag, "err", err)
	}
}

func checkNVML(c *config, st setting, warn func(string, ...any)) error {
	checkLibrary(c, st.name+".library", c.nvmlLib, warn)
	if c.nvmlSlow <= 0 {
		return badDuration(st.name+".slow-interval", c.nvmlSlow, "a duration above 0 (at most every --nvml.interval is read)")
	}
	return nil
}

func checkDCGM(c *config, st setting, warn func(string, ...any)) error {
	// DCGM takes its update interval in whole microseconds.
	if st.interval < time.Microsecond {
		return badDuration(st.name+".interval", st.interval, "1µs or more")
	}
	checkLibrary(c, st.name+".library", c.dcgm.Library, warn)
	return nil
}

func checkKubernetes(c *config, st setting, warn func(string, ...any)) error {
	if _, err := os.Stat(c.podSocket); err != nil && st.on {
		warn("the kubelet's pod-resources socket is not there (yet); the kubernetes source reports down until it is",
			"flag", "--"+st.name+".pod-resources-socket", "err", err)
	}
	return nil
}

// checkSlurm refuses a job-mapping directory that is there but is no
// directory; one not there yet is a warning (a prolog makes it, under
// /run, which is empty after a boot).
func checkSlurm(c *config, st setting, warn func(string, ...any)) error {
	dir := c.slurmMappingDir
	if dir == "" {
		return nil
	}
	flag := st.name + ".job-mapping-dir"
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		warn("the job-mapping directory is not there (yet); no GPU has a job from it until a prolog makes it", "flag", "--"+flag, "dir", dir)
	case err != nil:
		return &flagError{flag, dir, "a directory the exporter can read: " + err.Error()}
	case !fi.IsDir():
		return &flagError{flag, dir, "a directory of job-mapping files, not a file"}
	}
	return nil
}

// checkProbes checks the scheduler's flags and the collective round's,
// whatever the policy, by the check the scheduler itself runs
// (schedule.SchedulerConfig.Validate, which names the flags): the config
// as the flags set it, with the row's interval and timeout, the kinds
// asked for, and the collective options checked as where rounds run.
func checkProbes(c *config, st setting, warn func(string, ...any)) error {
	p := c.probe
	p.Interval, p.Timeout = st.interval, st.timeout
	p.Options.Probes = typed[probes.Kind](c.probeKinds)
	p.CollectiveOptions.Collectives = typed[probes.Collective](c.collectiveKinds)
	p.CollectiveRunner = &probes.ChildRunner{} // not run: its options are checked as where it is
	if err := p.Validate(); err != nil {
		return err
	}
	checkLibrary(c, "cuda.library", c.cudaLib, warn)
	return nil
}

// checkNodeProbe checks the node-to-node flags and reads the modules file:
// a bad module stops start-up with the file, module and field named.
func checkNodeProbe(c *config, st setting, _ func(string, ...any)) error {
	np := &c.nodeProbe
	if np.minInterval < 0 {
		return badDuration(st.name+".min-interval", np.minInterval, "0 (no limit) or more")
	}
	for _, g := range np.gpus {
		if !pciaddr.IsSysfs(strings.ToLower(pciaddr.Normalize(g))) {
			return fmt.Errorf("--%s.gpu=%s: want a PCI address such as 0000:18:00.0", st.name, g)
		}
	}
	if np.tokenFile != "" {
		tok, err := nodeprobe.ReadToken(np.tokenFile)
		if err != nil {
			return fmt.Errorf("--%s.token-file=%s: %w", st.name, np.tokenFile, err)
		}
		np.token = tok
		if np.webBasicAuth, err = webChecksBasicAuth(c.web); err != nil {
			return err
		}
	}
	if np.configFile == "" {
		return nil
	}
	f, err := nodeprobe.LoadFile(np.configFile)
	if err != nil {
		return fmt.Errorf("--%s.config.file=%s: %w", st.name, np.configFile, err)
	}
	np.file = f
	return nil
}

// checkCollectives warns of the collective round's library; its flags'
// values are checkProbes' (schedule.SchedulerConfig.Validate).
func checkCollectives(c *config, warn func(string, ...any)) error {
	checkLibrary(c, "nccl.library", c.ncclLib, warn)
	return nil
}

// webChecksBasicAuth reports whether the web config names basic-auth
// users: then exporter-toolkit refuses a request whose credentials are
// wrong before any handler, and one that carries them passed.
func webChecksBasicAuth(fc *web.FlagConfig) (bool, error) {
	if fc == nil || fc.WebConfigFile == nil || *fc.WebConfigFile == "" {
		return false, nil
	}
	b, err := os.ReadFile(*fc.WebConfigFile)
	if err != nil {
		return false, fmt.Errorf("--web.config.file=%s: %w", *fc.WebConfigFile, err)
	}
	var wc struct {
		Users map[string]any `yaml:"basic_auth_users"`
	}
	if err := yaml.Unmarshal(b, &wc); err != nil {
		return false, fmt.Errorf("--web.config.file=%s: %w", *fc.WebConfigFile, err)
	}
	return len(wc.Users) > 0, nil
}

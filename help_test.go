package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
)

// helpOf runs the exporter (this test binary, as main) with args and
// returns what it printed on stdout; it must exit 0.
func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%q: %v; stderr %q", args, err, stderr.String())
	}
	return string(out)
}

// listsFlag reports whether help lists --name (a bool flag as --[no-]name).
func listsFlag(help, name string) bool {
	return strings.Contains(help, "--"+name+"=") || strings.Contains(help, "--"+name+" ") ||
		strings.Contains(help, "--[no-]"+name+" ") || strings.Contains(help, "--[no-]"+name+"\n")
}

// Each tool command's help is its own: its flags and the few global ones it
// reads, short enough to read, and none of the daemon's.
func TestCommandHelpIsItsOwn(t *testing.T) {
	daemonOnly := []string{"web.listen-address", "web.config.file", "probe.policy", "probe.size", "nvml.interval",
		"collector.dcgm", "kubernetes.pod-resources-socket", "collective.size", "nccl.library", "node-probe.enabled"}
	for _, tc := range []struct {
		command string
		lists   []string
	}{
		{"probe", []string{"gpu", "peer", "probe", "size", "samples", "storage-dir", "storage-size", "output", "cuda.library", "cufile.library", "nvml.library", "path.sysfs", "probe.utilization-threshold", "log.level", "help"}},
		{"collectives", []string{"gpu", "collective", "size", "small-size", "iters", "samples", "library", "nvls", "output", "cuda.library", "log.level", "help",
			"probe.utilization-threshold", "sim", "sim.faults"}},
		{"topology", []string{"path.sysfs", "path.procfs", "nvml.library", "cufile.config", "sim", "log.level", "help"}},
	} {
		help := helpOf(t, tc.command, "--help")
		if n := strings.Count(help, "\n"); n >= 75 {
			t.Errorf("%s --help: %d lines, want under 75:\n%s", tc.command, n, help)
		}
		if !strings.HasPrefix(help, "usage: gpulink_exporter "+tc.command) {
			t.Errorf("%s --help does not start with its usage:\n%s", tc.command, help)
		}
		for _, f := range tc.lists {
			if !listsFlag(help, f) {
				t.Errorf("%s --help does not list --%s:\n%s", tc.command, f, help)
			}
		}
		for _, f := range daemonOnly {
			if listsFlag(help, f) {
				t.Errorf("%s --help lists the daemon's --%s", tc.command, f)
			}
		}
	}
}

// The daemon's help, with no command or with serve, still lists every
// flag the app has.
func TestDaemonHelpListsEveryFlag(t *testing.T) {
	flags := newCLI().app.Model().Flags
	for _, args := range [][]string{{"--help"}, {"serve", "--help"}} {
		help := helpOf(t, args...)
		for _, f := range flags {
			if !f.Hidden && !listsFlag(help, f.Name) {
				t.Errorf("%q does not list --%s", args, f.Name)
			}
		}
	}
}

// The global flags a command's help names are flags the app has, of
// commands it has: a renamed flag must not drop out of the help unseen.
func TestCommandGlobalsExist(t *testing.T) {
	model := newCLI().app.Model()
	var names []string
	for _, f := range model.Flags {
		names = append(names, f.Name)
	}
	for _, f := range alwaysShown {
		if !slices.Contains(names, f) {
			t.Errorf("alwaysShown names --%s, which the app does not have", f)
		}
	}
	for cmd, globals := range commandGlobals {
		if !slices.ContainsFunc(model.Commands, func(c *kingpin.CmdModel) bool { return c.FullCommand == cmd }) {
			t.Errorf("commandGlobals names the command %q, which the app does not have", cmd)
		}
		for _, f := range globals {
			if !slices.Contains(names, f) {
				t.Errorf("commandGlobals[%q] names --%s, which the app does not have", cmd, f)
			}
		}
	}
}

// Flags are named for what they turn on: kingpin offers --no-<name> of
// every switch, so a flag named no-... read as --no-no-... in the help
// (issue 38). The switches the daemon passes its children off keep their
// spelling: --no-sharing-check and --no-host-node-binding.
func TestFlagNamesArePositive(t *testing.T) {
	l := newCLI()
	m := l.app.Model()
	flags := m.Flags
	for _, c := range m.Commands {
		flags = append(flags, c.Flags...)
	}
	for _, f := range flags {
		if strings.HasPrefix(f.Name, "no-") {
			t.Errorf("flag --%s is named for what it turns off; kingpin offers --no-%s too", f.Name, f.Name)
		}
	}
	if _, err := l.app.Parse([]string{"probe", "--no-sharing-check", "--no-host-node-binding"}); err != nil {
		t.Fatal(err)
	}
	if !l.probe.NoSharingCheck || !l.probe.NoHostBinding {
		t.Errorf("probe --no-sharing-check --no-host-node-binding: NoSharingCheck %v, NoHostBinding %v; want both true",
			l.probe.NoSharingCheck, l.probe.NoHostBinding)
	}
	l = newCLI()
	if _, err := l.app.Parse([]string{"collectives"}); err != nil {
		t.Fatal(err)
	}
	if l.collectives.NoSharingCheck {
		t.Error("collectives without --no-sharing-check skips the check")
	}
}

// The daemon's help lists the flags of one kind together: the web server's
// (--web.*), then each source's, as sources.go registers them.
func TestDaemonHelpGroupsFlags(t *testing.T) {
	var prefixes []string
	for _, f := range newCLI().app.Model().Flags {
		p, rest, _ := strings.Cut(f.Name, ".")
		if p == "collector" {
			p = rest // a source's switch heads its flags
		}
		if n := len(prefixes); n == 0 || prefixes[n-1] != p {
			prefixes = append(prefixes, p)
		}
	}
	seen := map[string]bool{}
	for _, p := range prefixes {
		if seen[p] {
			t.Errorf("the --%s.* flags are split across the help: %v", p, prefixes)
		}
		seen[p] = true
	}
}

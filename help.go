package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"text/template"

	"github.com/alecthomas/kingpin/v2"
)

// The tool commands (probe, collectives, topology) share the app, and so
// parse every daemon flag: the daemon passes its --cuda.library and
// --path.* to its children, and an operator's habitual --path.sysfs works
// anywhere. kingpin would also list every one of them in each command's
// help, some 250 lines of web, NVML, DCGM and Kubernetes flags above the
// command's own dozen. A command's help lists its own flags and only the
// global ones that command reads; the daemon's help (no command, or serve)
// is unchanged.

// alwaysShown are the global flags every command's help lists.
var alwaysShown = []string{"help", "log.level", "log.format"}

// commandGlobals are, by command, the other global flags it reads.
var commandGlobals = map[string][]string{
	// The probe child loads libcuda; the table a person reads adds what
	// each path should give, from one NVML sample and the PCIe tree; what
	// shares the GPUs is judged as the daemon judges it.
	"probe": {"cuda.library", "cufile.library", "nvml.library", "path.sysfs", "path.procfs", "probe.utilization-threshold"},
	// The collectives child loads libcuda (its own --library is NCCL's);
	// run by hand it lists the GPUs' processes through NVML (sysfs for
	// the sample, procfs for their names) and judges them by
	// --probe.utilization-threshold, as probe does; --check reads a
	// simulated node's files with --sim.
	"collectives": {"cuda.library", "nvml.library", "path.sysfs", "path.procfs", "probe.utilization-threshold", "sim", "sim.faults"},
	// The matrix is read from sysfs and one NVML sample, of this machine
	// or of a simulated one.
	"topology": {"path.sysfs", "path.procfs", "nvml.library", "cufile.config", "sim", "sim.faults"},
}

// ownFlagsMarker is where the usage template lists the flags.
const ownFlagsMarker = "{{.Context.Flags|FlagsToTwoColumns|FormatTwoColumns}}"

// commandHelp makes each tool command's help its own, and sends help to
// stdout (it is what was asked for: `probe --help | less`).
func commandHelp(app *kingpin.Application) {
	if !strings.Contains(kingpin.DefaultUsageTemplate, ownFlagsMarker) {
		// kingpin's template changed under us: a test catches this.
		panic(fmt.Sprintf("kingpin's usage template no longer lists flags as %s", ownFlagsMarker))
	}
	app.UsageTemplate(strings.Replace(kingpin.DefaultUsageTemplate, ownFlagsMarker,
		"{{OwnFlags .Context.SelectedCommand .Context.Flags|FlagsToTwoColumns|FormatTwoColumns}}", 1))
	app.UsageFuncs(template.FuncMap{"OwnFlags": ownFlags})
	app.UsageWriter(os.Stdout)
}

// ownFlags are the flags cmd's help lists: all of them for the daemon,
// else the command's own, then the global ones it reads.
func ownFlags(cmd *kingpin.CmdModel, flags []*kingpin.FlagModel) []*kingpin.FlagModel {
	if cmd == nil {
		return flags
	}
	globals, ok := commandGlobals[cmd.FullCommand]
	if !ok {
		return flags
	}
	own := func(f *kingpin.FlagModel) bool {
		return slices.ContainsFunc(cmd.Flags, func(o *kingpin.FlagModel) bool { return o.Name == f.Name })
	}
	var out, global []*kingpin.FlagModel
	for _, f := range flags {
		switch {
		case own(f):
			out = append(out, f)
		case slices.Contains(alwaysShown, f.Name) || slices.Contains(globals, f.Name):
			global = append(global, f)
		}
	}
	return append(out, global...)
}

package probe

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/alecthomas/kingpin/v2"
	"github.com/gpulink/gpulink_exporter/probes"
)

// The process tests run the test binary itself as the probe child: with
// helperEnv set to "real", TestMain plays the real child over whatever
// libcuda it is given instead of running the tests.
const helperEnv = "GPULINK_PROBE_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		if mode != "real" {
			fmt.Fprintln(os.Stderr, "probe helper: unknown mode", mode)
			os.Exit(65)
		}
		os.Exit(realChild(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// realChild parses argv as the exporter does for `probe` and runs it.
func realChild(args []string) int {
	app := kingpin.New("gpulink_exporter", "")
	cmd := &Command{}
	AddCommand(app, cmd)
	app.Flag("cuda.library", "").StringVar(&cmd.Library)
	app.Flag("path.sysfs", "").StringVar(&cmd.FS.Sys)
	if _, err := app.Parse(args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return probes.ExitUsage
	}
	return cmd.Run(context.Background(), os.Stdout, os.Stderr)
}

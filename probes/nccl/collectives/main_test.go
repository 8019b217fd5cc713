package collectives

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/alecthomas/kingpin/v2"
	"github.com/gpulink/gpulink_exporter/probes"
)

// The process tests run the test binary itself as the collectives child:
// with helperEnv set to "real-collectives", TestMain plays the real child
// over the libraries it is given instead of running the tests.
const helperEnv = "GPULINK_PROBE_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		if mode != "real-collectives" {
			fmt.Fprintln(os.Stderr, "collectives helper: unknown mode", mode)
			os.Exit(65)
		}
		os.Exit(realCollectivesChild(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// realCollectivesChild parses argv as the exporter does for
// `collectives` and runs it.
func realCollectivesChild(args []string) int {
	app := kingpin.New("gpulink_exporter", "")
	cmd := &CollectiveCommand{}
	AddCollectiveCommand(app, cmd)
	app.Flag("cuda.library", "").StringVar(&cmd.CUDALibrary)
	app.Flag("path.sysfs", "").String()
	if _, err := app.Parse(args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return probes.ExitUsage
	}
	return cmd.Run(context.Background(), os.Stdout, os.Stderr)
}

package collectives

import (
	"testing"

	"github.com/alecthomas/kingpin/v2"
	"github.com/gpulink/gpulink_exporter/probes/internal/childtest"
)

// The process tests run the test binary itself as the collectives child
// (childtest.Self): TestMain then plays the real child over the libraries
// it is given instead of running the tests.
func TestMain(m *testing.M) { childtest.Main(m, realCollectivesChild) }

// realCollectivesChild parses argv as the exporter does for
// `collectives` and runs it.
func realCollectivesChild(args []string) int {
	cmd := &CollectiveCommand{}
	return childtest.Command(args, func(app *kingpin.Application) {
		AddCollectiveCommand(app, cmd)
		app.Flag("cuda.library", "").StringVar(&cmd.CUDALibrary)
		app.Flag("path.sysfs", "").String()
	}, cmd.Run)
}

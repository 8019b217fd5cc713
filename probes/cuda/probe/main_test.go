package probe

import (
	"testing"

	"github.com/alecthomas/kingpin/v2"
	"github.com/gpulink/gpulink_exporter/probes/internal/childtest"
)

// The process tests run the test binary itself as the probe child
// (childtest.Self): TestMain then plays the real child over whatever
// libcuda it is given instead of running the tests.
func TestMain(m *testing.M) { childtest.Main(m, realChild) }

// realChild parses argv as the exporter does for `probe` and runs it.
func realChild(args []string) int {
	cmd := &Command{}
	return childtest.Command(args, func(app *kingpin.Application) {
		AddCommand(app, cmd)
		app.Flag("cuda.library", "").StringVar(&cmd.Library)
		app.Flag("path.sysfs", "").StringVar(&cmd.FS.Sys)
		app.Flag("path.procfs", "").StringVar(&cmd.FS.Proc)
		app.Flag("cufile.library", "").StringVar(&cmd.CuFileLibrary)
	}, cmd.Run)
}

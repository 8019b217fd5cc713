// Package childtest lets a probe package's tests run the test binary itself
// as the real child the daemon starts (`probe`, `collectives`): TestMain
// calls Main, and a test points a probes.ChildRunner at Self.
package childtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/alecthomas/kingpin/v2"
	"github.com/gpulink/gpulink_exporter/probes"
)

// env, when set, makes the test binary play the child instead of running
// the tests.
const env = "GPULINK_PROBE_CHILD"

// Main is a TestMain: the child, run over os.Args[1:], where Self set env,
// and the tests otherwise.
func Main(m *testing.M, child func(args []string) int) {
	if os.Getenv(env) != "" {
		os.Exit(child(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// Self is the test binary's path, set (for the rest of t) to play the
// child when started.
func Self(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(env, "1")
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	return exe
}

// Command parses args as the exporter does for one subcommand, which add
// registers with the root flags it reads, and runs it: a child for Main.
func Command(args []string, add func(app *kingpin.Application), run func(ctx context.Context, stdout, stderr io.Writer) int) int {
	app := kingpin.New("gpulink_exporter", "")
	add(app)
	if _, err := app.Parse(args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return probes.ExitUsage
	}
	return run(context.Background(), os.Stdout, os.Stderr)
}

package probes

// The commands' (probe, collectives) shared command-line pieces.

import (
	"fmt"
	"io"
	"strconv"
)

// ErrorPrefix starts every error a command prints before it exits, as
// kingpin starts the errors of the flags it parses ("gpulink_exporter:
// error: ..."), so that the daemon, its commands and the flag parser
// speak with one voice.
const ErrorPrefix = "gpulink_exporter: error: "

// PrintError writes err to w in that form.
func PrintError(w io.Writer, err error) {
	fmt.Fprintf(w, "%s%v\n", ErrorPrefix, err)
}

// Negated is a boolean flag value that stores the opposite of what is
// set, for a flag named for what it turns on (--sharing-check, on by
// default) over a field named for the exception (NoSharingCheck, whose
// zero value leaves the check on). kingpin offers --no-<name> for every
// boolean flag, so a flag named no-sharing-check was also offered as
// --no-no-sharing-check; as --sharing-check, --no-sharing-check (what the
// daemon passes its children) is kingpin's own negation. It satisfies
// kingpin.Value and kingpin's boolean-flag interface without importing
// kingpin into the contract.
type Negated struct{ P *bool }

// Set stores the opposite of s (true, false, 1, 0...).
func (n Negated) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*n.P = !v
	return nil
}

func (n Negated) String() string {
	if n.P == nil {
		return "true"
	}
	return strconv.FormatBool(!*n.P)
}

// IsBoolFlag makes the flag a switch: --name and --no-name, no value.
func (Negated) IsBoolFlag() bool { return true }

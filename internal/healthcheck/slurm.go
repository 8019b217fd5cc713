package healthcheck

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// Slurm drains the node a check finds unfit and resumes it once fit, as
// LBNL NHC does: only a node whose drain reason starts with Prefix, its
// own, is ever resumed, and a node drained for another reason is left as
// it is. An Unknown verdict changes nothing.
type Slurm struct {
	// Scontrol is the scontrol command; Node the node's name in Slurm.
	Scontrol, Node string
	// Prefix starts every reason the check gives (gpulink:).
	Prefix string
	// Run runs scontrol with args and returns its standard output; nil
	// runs Scontrol.
	Run func(ctx context.Context, args ...string) (string, error)
}

// NodeState is what scontrol says of the node: its state flags
// (IDLE+DRAIN) and drain reason.
type NodeState struct {
	State, Reason string
}

// Drained says whether the node is drained or draining.
func (s NodeState) Drained() bool { return strings.Contains(s.State, "DRAIN") }

// scontrolDirs are where scontrol is looked for when PATH does not have
// it: slurmd runs HealthCheckProgram with an empty environment, PATH
// included.
var scontrolDirs = []string{"/usr/bin", "/usr/local/bin", "/opt/slurm/bin", "/usr/local/slurm/bin"}

// scontrol is the scontrol to run: Scontrol where it is a path or PATH
// finds it, else the first of scontrolDirs that has it.
func (s *Slurm) scontrol() string {
	if strings.Contains(s.Scontrol, "/") {
		return s.Scontrol
	}
	if p, err := exec.LookPath(s.Scontrol); err == nil {
		return p
	}
	for _, d := range scontrolDirs {
		if p, err := exec.LookPath(filepath.Join(d, s.Scontrol)); err == nil {
			return p
		}
	}
	return s.Scontrol
}

func (s *Slurm) run(ctx context.Context, args ...string) (string, error) {
	if s.Run != nil {
		return s.Run(ctx, args...)
	}
	out, err := exec.CommandContext(ctx, s.scontrol(), args...).Output()
	if ee, ok := err.(*exec.ExitError); ok {
		err = fmt.Errorf("%s %s: %w: %s", s.Scontrol, strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
	} else if err != nil {
		err = fmt.Errorf("--slurm.scontrol %s: %w (looked in PATH and %s)", s.Scontrol, err, strings.Join(scontrolDirs, ", "))
	}
	return string(out), err
}

// State asks scontrol for the node's state and reason.
func (s *Slurm) State(ctx context.Context) (NodeState, error) {
	out, err := s.run(ctx, "show", "node", s.Node, "--oneliner")
	if err != nil {
		return NodeState{}, err
	}
	return parseNodeState(out)
}

// parseNodeState reads State= and Reason= from scontrol show node's one
// line. The reason is free text with spaces, followed by
// " [user@time]" and, in some versions, more fields: it runs up to that
// bracket.
func parseNodeState(out string) (NodeState, error) {
	var st NodeState
	fields := strings.Fields(out)
	found := false
	for _, f := range fields {
		if v, ok := strings.CutPrefix(f, "State="); ok {
			st.State, found = v, true
		}
	}
	if !found {
		return st, fmt.Errorf("scontrol show node: no State= in %q", strings.TrimSpace(out))
	}
	if i := strings.Index(out, " Reason="); i >= 0 {
		r := out[i+len(" Reason="):]
		if j := strings.LastIndex(r, " ["); j >= 0 {
			r = r[:j]
		} else if j := strings.IndexByte(r, '\n'); j >= 0 {
			r = r[:j]
		}
		st.Reason = strings.TrimSpace(r)
	}
	return st, nil
}

// Act drains or resumes the node after result and says what it did.
func (s *Slurm) Act(ctx context.Context, r Result) (string, error) {
	if r.Status == Unknown {
		return "node left as it is (the check could not judge it)", nil
	}
	st, err := s.State(ctx)
	if err != nil {
		return "", err
	}
	ours := strings.HasPrefix(st.Reason, s.Prefix)
	switch {
	case r.Status == OK && st.Drained() && ours:
		if _, err := s.run(ctx, "update", "nodename="+s.Node, "state=resume"); err != nil {
			return "", err
		}
		return "node " + s.Node + " resumed (drained by this check: " + st.Reason + ")", nil
	case r.Status == OK:
		return "node " + s.Node + " left as it is", nil
	case st.Drained() && !ours:
		return "node " + s.Node + " left drained by another reason: " + st.Reason, nil
	}
	reason := s.Prefix + " " + strings.TrimPrefix(r.Line(), "NOT OK: ")
	if st.Drained() && st.Reason == reason {
		return "node " + s.Node + " already drained: " + reason, nil
	}
	if _, err := s.run(ctx, "update", "nodename="+s.Node, "state=drain", "reason="+reason); err != nil {
		return "", err
	}
	return "node " + s.Node + " drained: " + reason, nil
}

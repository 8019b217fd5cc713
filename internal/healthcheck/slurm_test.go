package healthcheck

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
)

// fakeScontrol answers show node with state and reason, and records the
// updates asked for.
type fakeScontrol struct {
	state, reason string
	updates       []string
}

func (f *fakeScontrol) run(_ context.Context, args ...string) (string, error) {
	if args[0] == "show" {
		// As Slurm 22.05's scontrol show node --oneliner prints it.
		out := "NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=" + f.state + " ThreadsPerCore=1 Partitions=p"
		if f.reason != "" {
			out += " Reason=" + f.reason + " [root@2026-12-07T03:00:00]"
		}
		return out + "\n", nil
	}
	f.updates = append(f.updates, strings.Join(args, " "))
	return "", nil
}

func TestSlurmDrainsAndResumesOnlyItsOwn(t *testing.T) {
	bad := Result{Status: NotOK, Findings: []Finding{{Alert: "GPUNVLinkDown", Labels: labels.FromStrings("gpu", "1"), Where: []string{"link=3"}, Value: 0, Expected: nan()}}}
	reason := "gpulink: GPUNVLinkDown gpu=1 link=3 value=0"
	for _, tc := range []struct {
		name          string
		state, reason string
		result        Result
		want          []string
	}{
		{"unfit idle node drained", "IDLE", "", bad, []string{"update nodename=n1 state=drain reason=" + reason}},
		{"drained by us, same reason", "IDLE+DRAIN", reason, bad, nil},
		{"drained by us, another fault", "IDLE+DRAIN", "gpulink: GPUPCIeLinkDowntrained gpu=0 value=8 expected=16", bad,
			[]string{"update nodename=n1 state=drain reason=" + reason}},
		{"drained by an operator stays so", "IDLE+DRAIN", "bad fan", bad, nil},
		{"fit, drained by us: resumed", "IDLE+DRAIN", reason, Result{Status: OK}, []string{"update nodename=n1 state=resume"}},
		{"fit, drained by an operator: left", "MIXED+DRAIN", "bad fan", Result{Status: OK}, nil},
		{"unknown drains nothing", "IDLE", "", Result{Status: Unknown, Why: "exporter down"}, nil},
		{"unknown resumes nothing", "IDLE+DRAIN", reason, Result{Status: Unknown, Why: "exporter down"}, nil},
	} {
		f := &fakeScontrol{state: tc.state, reason: tc.reason}
		s := &Slurm{Node: "n1", Prefix: "gpulink:", Run: f.run}
		if _, err := s.Act(context.Background(), tc.result); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if strings.Join(f.updates, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: scontrol %q, want %q", tc.name, f.updates, tc.want)
		}
	}
}

func TestParseNodeState(t *testing.T) {
	st, err := parseNodeState("NodeName=n1 Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 Reason=gpulink: GPUNVLinkDown gpu=1 [root@2026-12-07T03:00:00] Comment=x\n")
	if err != nil || st.State != "IDLE+DRAIN" || st.Reason != "gpulink: GPUNVLinkDown gpu=1" || !st.Drained() {
		t.Errorf("%+v %v", st, err)
	}
	if _, err := parseNodeState("Node n9 not found\n"); err == nil || !strings.Contains(err.Error(), "no State=") {
		t.Errorf("unknown node: %v", err)
	}
}

package probes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// collectivesHelper is a stand-in collectives child. The round echoes its
// argv in Peer; with --id-fd it writes helperUniqueID there first.
func collectivesHelper(mode string, args []string) int {
	o, idFD, _, err := parseCollectivesHelperArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "collectives helper:", err)
		return 64
	}
	if idFD != 0 {
		f := os.NewFile(uintptr(idFD), "id")
		fmt.Fprintln(f, helperUniqueID)
		f.Close()
	}
	round := CollectiveRound{Version: CollectiveContractVersion, Started: time.Unix(1700000000, 0).UTC(), NCCLVersion: 22703,
		GPUs: o.GPUs, Ranks: o.Ranks, FirstRank: o.FirstRank, Peer: strings.Join(args, " "), Results: []CollectiveResult{}}
	switch mode {
	case "coll-ok":
	case "coll-badversion":
		round.Version = 99
	case "coll-hang":
		select {}
	default:
		fmt.Fprintln(os.Stderr, "collectives helper: unknown mode", mode)
		return 65
	}
	if err := json.NewEncoder(os.Stdout).Encode(round); err != nil {
		panic(err)
	}
	return 0
}

var helperUniqueID = strings.Repeat("5e", 128)

// parseCollectivesHelperArgs accepts what RunCollectives passes: the
// "collectives" subcommand and --path.* flags from the command prefix,
// --output=json and --no-sharing-check (both required: the daemon watches
// its rounds itself), CollectiveOptions.Args, --timeout and --id-fd.
// Anything else is an error.
func parseCollectivesHelperArgs(args []string) (o CollectiveOptions, idFD int, timeout time.Duration, err error) {
	sawOutput, sawNoSharing := false, false
	for _, a := range args {
		name, val, _ := strings.Cut(a, "=")
		switch name {
		case "collectives":
		case "--output":
			sawOutput = val == "json"
		case "--no-sharing-check":
			sawNoSharing = true
		case "--gpu":
			o.GPUs = append(o.GPUs, val)
		case "--collective":
			o.Collectives = append(o.Collectives, Collective(val))
		case "--size":
			o.SizeBytes, err = strconv.ParseInt(val, 10, 64)
		case "--small-size":
			o.SmallBytes, err = strconv.ParseInt(val, 10, 64)
		case "--warmup":
			o.Warmup, err = strconv.Atoi(val)
		case "--iters":
			o.Iterations, err = strconv.Atoi(val)
		case "--samples":
			o.Samples, err = strconv.Atoi(val)
		case "--ranks":
			o.Ranks, err = strconv.Atoi(val)
		case "--first-rank":
			o.FirstRank, err = strconv.Atoi(val)
		case "--unique-id":
			o.UniqueID = val
		case "--peer":
			o.Peer = val
		case "--id-fd":
			idFD, err = strconv.Atoi(val)
		case "--timeout":
			timeout, err = time.ParseDuration(val)
		default:
			if !strings.HasPrefix(name, "--path.") {
				return o, 0, 0, fmt.Errorf("unknown argument %q", a)
			}
		}
		if err != nil {
			return o, 0, 0, fmt.Errorf("%s: %v", a, err)
		}
	}
	if !sawNoSharing {
		return o, 0, 0, fmt.Errorf("no --no-sharing-check in %q", args)
	}
	if !sawOutput {
		return o, 0, 0, fmt.Errorf("no --output=json in %q", args)
	}
	return o, idFD, timeout, nil
}

func collectivesHelperRunner(t *testing.T, mode string, timeout time.Duration) *ChildRunner {
	r := helperRunner(t, mode, timeout)
	r.Command = []string{r.Command[0], "collectives", "--path.sysfs=/nonexistent/sys"}
	return r
}

func TestRunCollectivesArgsRoundTrip(t *testing.T) {
	r := collectivesHelperRunner(t, "coll-ok", 20*time.Second)
	o := DefaultCollectiveOptions()
	o.GPUs, o.Ranks, o.Collectives, o.Peer = testGPUs, 2, []Collective{AllReduce, SendRecv}, "node-b:9849"
	round, err := r.RunCollectives(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if round.PID <= 0 || round.PID == os.Getpid() || round.NCCLVersion != 22703 {
		t.Errorf("round %+v, want the child's PID", round)
	}
	back, idFD, timeout, err := parseCollectivesHelperArgs(strings.Fields(round.Peer))
	if err != nil || !reflect.DeepEqual(back, o) {
		t.Errorf("the child got %+v (%v), want %+v", back, err, o)
	}
	// Inside one node no id is handed out; the child's deadline is ahead
	// of the kill.
	if idFD != 0 || timeout != 17*time.Second {
		t.Errorf("child got --id-fd=%d --timeout=%s, want no id descriptor and 17s", idFD, timeout)
	}
}

// The process holding rank 0 of a communicator spanning processes hands
// the unique id out through descriptor 3 as soon as it has it.
func TestRunCollectivesHandsTheUniqueIDOut(t *testing.T) {
	r := collectivesHelperRunner(t, "coll-ok", 20*time.Second)
	o := DefaultCollectiveOptions()
	o.GPUs, o.Ranks = testGPUs[:1], 2
	ids := make(chan string) // unbuffered: the id must be taken while the child runs
	got := make(chan string, 1)
	go func() { got <- <-ids }()
	round, err := r.RunCollectives(context.Background(), o, ids)
	if err != nil {
		t.Fatal(err)
	}
	if id := <-got; id != helperUniqueID {
		t.Errorf("id %q, want %q", id, helperUniqueID)
	}
	if _, idFD, _, _ := parseCollectivesHelperArgs(strings.Fields(round.Peer)); idFD != 3 {
		t.Errorf("child got --id-fd=%d, want 3", idFD)
	}

	// No one to take it: refused before a child starts.
	_, err = r.RunCollectives(context.Background(), o, nil)
	var rf *RunFailure
	if !errors.As(err, &rf) || rf.Result != RunError || !rf.Collectives || !strings.Contains(err.Error(), "collective probe of GPUs 0000:18:00.0: error: other processes hold ranks") {
		t.Errorf("without an ids channel: %v", err)
	}
}

func TestRunCollectivesRefusesAnotherVersion(t *testing.T) {
	_, err := collectivesHelperRunner(t, "coll-badversion", 20*time.Second).RunCollectives(context.Background(),
		CollectiveOptions{GPUs: testGPUs, Ranks: 2}, nil)
	var rf *RunFailure
	if !errors.As(err, &rf) || rf.Result != RunCrash || !strings.Contains(err.Error(), "contract version 99, want 1") {
		t.Errorf("err = %v, want a crash naming the version", err)
	}
}

// A child that ignores its own deadline is killed at the run's.
func TestRunCollectivesKillsAHungChild(t *testing.T) {
	start := time.Now()
	_, err := collectivesHelperRunner(t, "coll-hang", 2*time.Second).RunCollectives(context.Background(),
		CollectiveOptions{GPUs: testGPUs, Ranks: 2}, nil)
	var rf *RunFailure
	if !errors.As(err, &rf) || rf.Result != RunTimeout || !strings.Contains(err.Error(), "0000:18:00.0,0000:2a:00.0") {
		t.Errorf("err = %v, want a timeout naming the GPUs", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestChildDeadline(t *testing.T) {
	for limit, want := range map[time.Duration]time.Duration{
		0: 0, 2 * time.Second: time.Second, 5 * time.Second: 2500 * time.Millisecond, 20 * time.Second: 17 * time.Second,
		time.Minute: 54 * time.Second, 10 * time.Minute: 590 * time.Second,
	} {
		if got := childDeadline(limit); got != want {
			t.Errorf("childDeadline(%s) = %s, want %s", limit, got, want)
		}
	}
}

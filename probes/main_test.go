package probes

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The runner tests run the test binary itself as the probe child: with
// helperEnv set, TestMain plays a child instead of running the tests.
const (
	helperEnv     = "GPULINK_PROBE_HELPER"      // what the child does
	helperPIDsEnv = "GPULINK_PROBE_HELPER_PIDS" // file the child writes its and its own child's pids to
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(probeHelper(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// probeHelper is a stand-in child; it returns the exit status.
func probeHelper(mode string, args []string) int {
	if mode == "sleep" { // a grandchild: no flags, no output
		select {}
	}
	if strings.HasPrefix(mode, "coll-") {
		return collectivesHelper(mode, args)
	}
	o, err := parseHelperArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe helper:", err)
		return 64
	}
	// The round echoes what the child was asked, so a test can check the
	// flags made it through: the whole argv in Name, and one result per
	// probe, peer and host node.
	round := Round{Version: ContractVersion, Started: time.Unix(1700000000, 0).UTC(), Seconds: 0.5, DriverVersion: 13000,
		GPUs: []GPURound{{PCIBusID: o.GPU, Name: strings.Join(args, " "), Results: helperResults(o), BusySeconds: 0.1, ContextSeconds: 0.4}}}
	printRound := func() {
		if err := json.NewEncoder(os.Stdout).Encode(round); err != nil {
			panic(err)
		}
	}
	switch mode {
	case "ok":
		printRound()
	case "exit2":
		round.GPUs[0].Results = nil
		round.GPUs[0].Error = "cuCtxCreate: CUDA_ERROR_OUT_OF_MEMORY"
		printRound()
		return 2
	case "hang":
		writeHelperPIDs(spawnSleeper())
		fmt.Fprintln(os.Stderr, "probe helper: hanging")
		select {}
	case "leftover":
		// Exits with a descendant still holding stdout: the daemon must
		// kill it, and must not wait for the pipe to close.
		writeHelperPIDs(spawnSleeper())
		printRound()
	case "crash":
		fmt.Fprintln(os.Stderr, "probe: cuInit: CUDA_ERROR_NO_DEVICE")
		return 3
	case "panic":
		panic("helper panics")
	case "signal":
		printRound()
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "garbage":
		fmt.Println("this is not a round")
	case "truncated":
		fmt.Print(`{"version":1,"gpus":[{"pci_bus_id":`)
	case "badtype":
		fmt.Print(`{"version":1,"gpus":"all of them"}`)
	case "badversion":
		round.Version = 99
		printRound()
	case "noversion":
		fmt.Print(`{"gpus":[]}`)
	case "empty":
	case "bigoutput":
		chunk := []byte(strings.Repeat("x", 64<<10))
		for {
			if _, err := os.Stdout.Write(chunk); err != nil {
				return 1
			}
		}
	case "stderrflood":
		for i := range 2000 {
			fmt.Fprintf(os.Stderr, "noise line %04d .............................................\n", i)
		}
		fmt.Fprintln(os.Stderr, "LAST LINE")
		return 3
	default:
		fmt.Fprintln(os.Stderr, "probe helper: unknown mode", mode)
		return 65
	}
	return 0
}

// parseHelperArgs accepts what ChildRunner passes: a "probe" subcommand and
// --path.* flags from the command prefix, then --output=json,
// --no-sharing-check (the daemon watches its rounds itself) and
// Options.Args. Anything else is an error, so a stray flag fails the test.
func parseHelperArgs(args []string) (Options, error) {
	var o Options
	sawOutput, sawNoSharing := false, false
	for _, a := range args {
		name, val, _ := strings.Cut(a, "=")
		var err error
		switch name {
		case "probe":
		case "--output":
			if val != "json" {
				return o, fmt.Errorf("--output=%s", val)
			}
			sawOutput = true
		case "--no-sharing-check":
			sawNoSharing = true
		case "--gpu":
			o.GPU = val
		case "--peer":
			o.Peers = append(o.Peers, val)
		case "--host-node":
			var n int
			n, err = strconv.Atoi(val)
			o.HostNodes = append(o.HostNodes, n)
		case "--no-host-node-binding":
		case "--probe":
			o.Probes = append(o.Probes, Kind(val))
		case "--size":
			o.SizeBytes, err = strconv.ParseInt(val, 10, 64)
		case "--samples":
			o.Samples, err = strconv.Atoi(val)
		default:
			if !strings.HasPrefix(name, "--path.") {
				return o, fmt.Errorf("unknown argument %q", a)
			}
		}
		if err != nil {
			return o, fmt.Errorf("%s: %v", a, err)
		}
	}
	if !sawOutput {
		return o, fmt.Errorf("no --output=json in %q", args)
	}
	if !sawNoSharing {
		return o, fmt.Errorf("no --no-sharing-check in %q", args)
	}
	return o, nil
}

func helperResults(o Options) []Result {
	kinds := o.Probes
	if len(kinds) == 0 {
		kinds = Kinds
	}
	var out []Result
	for _, k := range kinds {
		base := Result{Probe: k, SizeBytes: o.SizeBytes, Samples: o.Samples, BytesPerSecond: 1e9}
		switch k {
		case PeerCopy, PeerBidirectional, PeerLatency:
			for _, p := range o.Peers {
				r := base
				r.Peer = p
				out = append(out, r)
			}
		case HostToDevice, DeviceToHost, HostBidirectional, HostLatency:
			for _, n := range o.HostNodes {
				r := base
				r.HostNUMANode = &n
				out = append(out, r)
			}
		default:
			out = append(out, base)
		}
	}
	return out
}

// spawnSleeper starts a grandchild in the helper's process group, holding
// the helper's stdout and stderr, and returns its pid.
func spawnSleeper() int {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=sleep")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	return cmd.Process.Pid
}

func writeHelperPIDs(grandchild int) {
	f := os.Getenv(helperPIDsEnv)
	if f == "" {
		return
	}
	// Written to a temporary name and renamed, so a reader never sees half.
	data := fmt.Sprintf("%d %d\n", os.Getpid(), grandchild)
	if err := os.WriteFile(f+".tmp", []byte(data), 0o644); err != nil {
		panic(err)
	}
	if err := os.Rename(f+".tmp", f); err != nil {
		panic(err)
	}
}

package e2e

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/healthcheck"
	"github.com/gpulink/gpulink_exporter/internal/sim"
)

// buildHealthCheck builds gpulink_healthcheck into dir.
func buildHealthCheck(t *testing.T, dir string) string {
	return build(t, dir, "gpulink_healthcheck", "./cmd/gpulink_healthcheck")
}

// runCheck runs gpulink_healthcheck and returns its line and exit status.
func runCheck(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("healthcheck: %v", err)
	}
	return strings.TrimSpace(string(out)), code
}

// findings are the alert keys (alertKey's form, "GPUNVLinkDown gpu=2") a
// NOT OK line names.
func findings(line string) []string {
	rest, ok := strings.CutPrefix(line, "NOT OK: ")
	if !ok {
		return nil
	}
	var out []string
	for _, f := range strings.Split(rest, "; ") {
		fields := strings.Fields(f)
		key := fields[0]
		for _, kv := range fields[1:] {
			if strings.HasPrefix(kv, "gpu=") {
				key += " " + kv
			}
		}
		out = append(out, key)
	}
	slices.Sort(out)
	return out
}

// otherFaults are the fault kinds the alert tests inject elsewhere or not
// at all, none of which breaks a link: the check must stay OK through
// them as the link alerts do.
const otherFaults = `- {kind: nccl_transport, transport: shm, gpus: [7]}
- {kind: nccl_net_socket}
- {kind: nccl_gdr_off}
- {kind: process_exit, pid: 5151}
- {kind: process_far_memory, gpu: 2}
`

// The health check and the shipped alert rules agree on every fault the
// simulated node can inject: with all of TestAlertsEndToEnd's faults in
// force at once (each on its own GPU, NIC or bridge), and the fault kinds
// it leaves to other tests, the check names exactly the link alerts that
// test sees Prometheus fire (GPUPCIeLinkDowntrained on GPUs 0 and 1,
// GPUNVLinkDown on GPU 2), by alert and GPU, and nothing else; before the
// faults it says OK, and after they are cleared OK again.
func TestHealthCheckAgreesWithAlerts(t *testing.T) {
	dir := t.TempDir()
	bin, hc := buildExporter(t, dir), buildHealthCheck(t, dir)
	addr, faults, state := freeAddr(t), filepath.Join(dir, "faults.yml"), filepath.Join(dir, "hc.state")
	writeFile(t, faults, "faults: []\n")
	start(t, dir, "exporter", bin, "--sim=dgx-h100", "--sim.faults="+faults, "--web.listen-address="+addr,
		"--probe.policy=always", "--probe.interval=5s", "--probe.first-delay=0", "--probe.max-duty=1",
		"--nvml.interval=1s", "--nvml.slow-interval=1s", "--nic.interval=1s", "--topology.interval=1s", "--process.interval=1s")
	waitHTTP(t, "http://"+addr+"/metrics", 30*time.Second)
	check := func() (string, int) {
		return runCheck(t, hc, "--exporter.url=http://"+addr+"/metrics", "--state.file="+state)
	}

	var text strings.Builder
	text.WriteString("faults:\n")
	kinds := map[sim.FaultKind]bool{}
	var want []string
	scope := healthcheck.DefaultAlerts
	for _, f := range injected {
		text.WriteString("- " + f.fault + "\n")
		for _, a := range f.alerts {
			if slices.Contains(scope, strings.Fields(a)[0]) {
				want = append(want, a)
			}
		}
	}
	text.WriteString(otherFaults)
	fs, err := sim.ParseFaults("faults.yml", []byte(text.String()))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		kinds[f.Kind] = true
	}
	for _, k := range sim.FaultKinds {
		if !kinds[k] {
			t.Errorf("fault kind %s is not injected here: add it to the alert tests' faults or otherFaults", k)
		}
	}
	slices.Sort(want)

	// Healthy, long enough for a probe pass under load to be read.
	waitFor(t, 20*time.Second, "healthy node: OK", func() (bool, error) {
		line, code := check()
		return code == 0, errors.New(line)
	})
	time.Sleep(6 * time.Second)
	if line, code := check(); code != 0 {
		t.Fatalf("healthy node: %d %s", code, line)
	}

	writeFile(t, faults, text.String())
	var line string
	waitFor(t, 30*time.Second, "every link fault named", func() (bool, error) {
		var code int
		line, code = check()
		got := findings(line)
		return code == 1 && len(got) >= len(want) && slices.Equal(got, want), errors.New(line)
	})
	// And nothing more while the probes and samplers go on.
	for range 5 {
		time.Sleep(time.Second)
		if line, code := check(); code != 1 || !slices.Equal(findings(line), want) {
			t.Errorf("faults in force: %d %q; want exactly %v", code, line, want)
		}
	}
	t.Logf("with every fault in force: %s", line)

	writeFile(t, faults, "faults: []\n")
	waitFor(t, 30*time.Second, "faults cleared: OK", func() (bool, error) {
		line, code := check()
		return code == 0, errors.New(line)
	})
}

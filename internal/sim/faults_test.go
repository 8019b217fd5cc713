package sim

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/probes"
)

// contractFile is the README's example fault file: every kind once, and
// the optional forms.
const contractFile = `
faults:
- {kind: pcie_width,        gpu: 0, width: 8}
- {kind: pcie_generation,   gpu: 1, generation: 3}
- {kind: nvlink_down,       gpu: 2, link: 5}
- {kind: nvlink_errors,     gpu: 3, link: 2, per_second: 50}
- {kind: nic_rate,          device: mlx5_0, fraction: 0.5}
- {kind: nic_down,          device: mlx5_1}
- {kind: nic_flapping,      device: mlx5_2, period: 3s}
- {kind: nic_symbol_errors, device: mlx5_3, per_second: 5}
- {kind: process_far_socket, gpu: 0}
- {kind: process_far_memory, gpu: 2, pid: 6161}
- {kind: process_exit,      pid: 5151}
- {kind: throttle,          gpu: 4, reason: hw_thermal_slowdown}
- {kind: xid,               gpu: 5, code: 79}
- {kind: probe_bandwidth,   gpu: 6, probe: host_to_device, fraction: 0.5}
- {kind: probe_latency,     gpu: 7, probe: host_latency, factor: 3}
- {kind: fabric_down,       gpu: 6}
- {kind: recovery_action,   gpu: 7, action: 1}
- {kind: acs_redirect,      gpu: 1}
- {kind: peermem_missing}
- kind: probe_bandwidth
  gpu: 6
  probe: peer_copy
  peer_gpu: 7
  fraction: 0.25
- {kind: pcie_width, device: "0000:b8:00.0", width: 4}
- {kind: acs_redirect, device: "0000:39:01.0"}
- {kind: nccl_transport,    transport: shm, gpus: [1, 0]}
- {kind: nccl_transport,    transport: net, gpus: [3]}
- {kind: nccl_net_socket}
- {kind: nccl_gdr_off}
- {kind: nvidia_fs_missing}
`

func TestParseContractFile(t *testing.T) {
	faults, err := ParseFaults("faults.yaml", []byte(contractFile))
	if err != nil {
		t.Fatal(err)
	}
	want := []Fault{
		{Kind: PCIeWidth, GPU: 0, Width: 8, PeerGPU: -1},
		{Kind: PCIeGeneration, GPU: 1, Generation: 3, PeerGPU: -1},
		{Kind: NVLinkDown, GPU: 2, Link: 5, PeerGPU: -1},
		{Kind: NVLinkErrors, GPU: 3, Link: 2, PerSecond: 50, PeerGPU: -1},
		{Kind: NICRate, GPU: -1, Device: "mlx5_0", Fraction: 0.5, PeerGPU: -1},
		{Kind: NICDown, GPU: -1, Device: "mlx5_1", PeerGPU: -1},
		{Kind: NICFlapping, GPU: -1, Device: "mlx5_2", Period: 3 * time.Second, PeerGPU: -1},
		{Kind: NICSymbolErrors, GPU: -1, Device: "mlx5_3", PerSecond: 5, PeerGPU: -1},
		{Kind: ProcessFarSocket, GPU: 0, PeerGPU: -1},
		{Kind: ProcessFarMemory, GPU: 2, PID: 6161, PeerGPU: -1},
		{Kind: ProcessExit, GPU: -1, PID: 5151, PeerGPU: -1},
		{Kind: Throttle, GPU: 4, Reason: "hw_thermal_slowdown", PeerGPU: -1},
		{Kind: XID, GPU: 5, Code: 79, PeerGPU: -1},
		{Kind: ProbeBandwidth, GPU: 6, Probe: probes.HostToDevice, Fraction: 0.5, PeerGPU: -1},
		{Kind: ProbeLatency, GPU: 7, Probe: probes.HostLatency, Factor: 3, PeerGPU: -1},
		{Kind: FabricDown, GPU: 6, PeerGPU: -1},
		{Kind: RecoveryAction, GPU: 7, Action: 1, PeerGPU: -1},
		{Kind: ACSRedirect, GPU: 1, PeerGPU: -1},
		{Kind: PeermemMissing, GPU: -1, PeerGPU: -1},
		{Kind: ProbeBandwidth, GPU: 6, Probe: probes.PeerCopy, PeerGPU: 7, Fraction: 0.25},
		{Kind: PCIeWidth, GPU: -1, Device: "0000:b8:00.0", Width: 4, PeerGPU: -1},
		{Kind: ACSRedirect, GPU: -1, Device: "0000:39:01.0", PeerGPU: -1},
		{Kind: NCCLTransport, GPU: -1, PeerGPU: -1, Transport: "shm", GPUs: "0,1"},
		{Kind: NCCLTransport, GPU: -1, PeerGPU: -1, Transport: "net", GPUs: "3"},
		{Kind: NCCLNetSocket, GPU: -1, PeerGPU: -1},
		{Kind: NCCLGDROff, GPU: -1, PeerGPU: -1},
		{Kind: NVFSMissing, GPU: -1, PeerGPU: -1},
	}
	if len(faults) != len(want) {
		t.Fatalf("got %d faults, want %d: %+v", len(faults), len(want), faults)
	}
	for i := range want {
		if faults[i] != want[i] {
			t.Errorf("faults[%d] = %+v, want %+v", i, faults[i], want[i])
		}
	}
	// Every kind of the contract is in it, so every kind parses.
	seen := map[FaultKind]bool{}
	for _, f := range faults {
		seen[f.Kind] = true
	}
	for _, k := range FaultKinds {
		if !seen[k] {
			t.Errorf("kind %s not covered", k)
		}
	}
}

func TestParseHealthy(t *testing.T) {
	for name, data := range map[string]string{
		"empty":      "",
		"comment":    "# nothing broken today\n",
		"no faults":  "faults:\n",
		"empty list": "faults: []\n",
	} {
		faults, err := ParseFaults("f.yaml", []byte(data))
		if err != nil || len(faults) != 0 {
			t.Errorf("%s: %v, %v; want no faults", name, faults, err)
		}
	}
}

func TestParseOtherForms(t *testing.T) {
	faults, err := ParseFaults("f.yaml", []byte(`
faults:
- {kind: nic_flapping, device: ens32, period: 1.5}
- {kind: nic_rate, device: mlx5_0, fraction: 1}
- {kind: throttle, gpu: 0, reason: sw_power_cap}
- {kind: probe_latency, gpu: 1, probe: peer_latency, peer_gpu: 3, factor: 2.5}
- {kind: nccl_transport, transport: net}
`))
	if err != nil {
		t.Fatal(err)
	}
	if faults[0].Period != 1500*time.Millisecond || faults[1].Fraction != 1 || faults[3].PeerGPU != 3 || faults[3].Factor != 2.5 ||
		faults[4].Transport != "net" || faults[4].GPUs != "" || faults[4].GPUs.Indices() != nil {
		t.Errorf("parsed %+v", faults)
	}
}

// TestParseErrors: every bad file is refused with the file, the entry
// and the field named.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		name, data string
		entry      int
		field      string
		msg        string
	}{
		{"not yaml", "faults: [", -1, "", "not a YAML mapping"},
		{"a list", "- kind: xid\n", -1, "", "not a YAML mapping"},
		{"unknown top key", "fault:\n- {kind: xid, gpu: 0, code: 79}\n", -1, "", `unknown top-level key fault`},
		{"faults not a list", "faults: {kind: xid}\n", -1, "", "want a list of faults, got a mapping"},
		{"entry not a map", "faults:\n- nic_down\n", 0, "", `want a mapping such as`},
		{"no kind", "faults:\n- {gpu: 0}\n", 0, "kind", "missing"},
		{"unknown kind", "faults:\n- {kind: xid, gpu: 0, code: 79}\n- {kind: gpu_on_fire, gpu: 0}\n", 1, "kind", `unknown kind "gpu_on_fire"`},
		{"missing field", "faults:\n- {kind: pcie_width, gpu: 0}\n", 0, "width", "missing"},
		{"unknown field", "faults:\n- {kind: nic_down, device: mlx5_1, gpu: 0}\n", 0, "gpu", "not a field of nic_down"},
		{"misspelt field", "faults:\n- {kind: nvlink_errors, gpu: 3, link: 2, per_sec: 50}\n", 0, "per_sec", "not a field of nvlink_errors"},
		{"string for int", "faults:\n- {kind: pcie_width, gpu: zero, width: 8}\n", 0, "gpu", `want a whole number, got "zero"`},
		{"float for int", "faults:\n- {kind: pcie_width, gpu: 0, width: 8.5}\n", 0, "width", "want a whole number"},
		{"negative gpu", "faults:\n- {kind: xid, gpu: -1, code: 79}\n", 0, "gpu", "out of range"},
		{"odd width", "faults:\n- {kind: pcie_width, gpu: 0, width: 7}\n", 0, "width", "not a PCIe link width"},
		{"generation 9", "faults:\n- {kind: pcie_generation, gpu: 0, generation: 9}\n", 0, "generation", "out of range [1, 6]"},
		{"fraction 0", "faults:\n- {kind: nic_rate, device: mlx5_0, fraction: 0}\n", 0, "fraction", "want a fraction in (0, 1]"},
		{"fraction 2", "faults:\n- {kind: probe_bandwidth, gpu: 0, probe: host_to_device, fraction: 2}\n", 0, "fraction", "want a fraction"},
		{"rate 0", "faults:\n- {kind: nic_symbol_errors, device: mlx5_3, per_second: 0}\n", 0, "per_second", "want more than 0"},
		{"bad period", "faults:\n- {kind: nic_flapping, device: mlx5_2, period: often}\n", 0, "period", "want a duration"},
		{"short period", "faults:\n- {kind: nic_flapping, device: mlx5_2, period: 10ms}\n", 0, "period", "too short"},
		{"bad reason", "faults:\n- {kind: throttle, gpu: 0, reason: gpu_idle}\n", 0, "reason", `unknown reason "gpu_idle"`},
		{"xid 0", "faults:\n- {kind: xid, gpu: 0, code: 0}\n", 0, "code", "out of range"},
		{"latency probe for bandwidth", "faults:\n- {kind: probe_bandwidth, gpu: 0, probe: host_latency, fraction: 0.5}\n", 0, "probe", "not a bandwidth probe"},
		{"bandwidth probe for latency", "faults:\n- {kind: probe_latency, gpu: 0, probe: peer_copy, factor: 2}\n", 0, "probe", "not a latency probe"},
		{"faster latency", "faults:\n- {kind: probe_latency, gpu: 0, probe: host_latency, factor: 0.5}\n", 0, "factor", "faster"},
		{"peer of host probe", "faults:\n- {kind: probe_bandwidth, gpu: 0, probe: host_to_device, peer_gpu: 1, fraction: 0.5}\n", 0, "peer_gpu", "only peer probes"},
		{"own peer", "faults:\n- {kind: probe_bandwidth, gpu: 2, probe: peer_copy, peer_gpu: 2, fraction: 0.5}\n", 0, "peer_gpu", "its own peer"},
		{"empty device", "faults:\n- {kind: nic_down, device: \"\"}\n", 0, "device", "want a name"},
		{"conflict", "faults:\n- {kind: nic_down, device: mlx5_1}\n- {kind: nic_flapping, device: mlx5_1, period: 3s}\n", 1, "", "faults[0] sets already"},
		{"repeat", "faults:\n- {kind: pcie_width, gpu: 0, width: 8}\n- {kind: pcie_width, gpu: 0, width: 4}\n", 1, "", "faults[0] sets already"},
		{"duplicate key", "faults:\n- {kind: xid, gpu: 0, gpu: 1, code: 79}\n", 0, "gpu", "given twice"},
		{"pcie without link", "faults:\n- {kind: pcie_width, width: 8}\n", 0, "gpu or device", "missing"},
		{"pcie gpu and device", "faults:\n- {kind: pcie_width, gpu: 0, device: \"0000:38:00.0\", width: 8}\n", 0, "device", "give gpu or device, not both"},
		{"pid 0", "faults:\n- {kind: process_far_socket, gpu: 0, pid: 0}\n", 0, "pid", "want a process ID"},
		{"pid of another kind", "faults:\n- {kind: xid, gpu: 0, code: 79, pid: 4242}\n", 0, "pid", "not a field of xid"},
		{"one process twice", "faults:\n- {kind: process_far_socket, gpu: 0, pid: 4242}\n- {kind: process_far_memory, gpu: 0, pid: 4242}\n", 1, "", "faults[0] sets already"},
		{"two new processes", "faults:\n- {kind: process_far_socket, gpu: 1}\n- {kind: process_far_memory, gpu: 1}\n", 1, "", "faults[0] sets already"},
		{"exit without pid", "faults:\n- {kind: process_exit}\n", 0, "pid", "missing"},
		{"exit of a gpu", "faults:\n- {kind: process_exit, gpu: 0, pid: 4242}\n", 0, "gpu", "not a field of process_exit"},
		{"exit pid 0", "faults:\n- {kind: process_exit, pid: 0}\n", 0, "pid", "want a process ID"},
		{"exit twice", "faults:\n- {kind: process_exit, pid: 4242}\n- {kind: process_exit, pid: 4242}\n", 1, "", "faults[0] sets already"},
		{"move an ended process", "faults:\n- {kind: process_exit, pid: 4242}\n- {kind: process_far_socket, gpu: 0, pid: 4242}\n", 1, "pid", "moves process 4242, which faults[0] ends"},
		{"end a moved process", "faults:\n- {kind: process_far_memory, gpu: 0, pid: 4242}\n- {kind: process_exit, pid: 4242}\n", 1, "pid", "ends process 4242, which faults[0] moves"},
		{"faults twice", "faults: []\nfaults: []\n", -1, "", "faults given twice"},
		{"key not a string", "faults:\n- {kind: xid, gpu: 0, code: 79, 7: 8}\n", 0, "", "field name 7 is not a string"},
		{"kind not a string", "faults:\n- {kind: [xid], gpu: 0}\n", 0, "kind", "unknown kind a list"},
		{"nan", "faults:\n- {kind: nic_rate, device: mlx5_0, fraction: .nan}\n", 0, "fraction", "want a fraction in (0, 1], got NaN"},
		{"number for name", "faults:\n- {kind: nic_down, device: 5}\n", 0, "device", "want a name, got 5"},
		{"negative code", "faults:\n- {kind: xid, gpu: 0, code: -79}\n", 0, "code", "want a whole number, got -79"},
		{"list for int", "faults:\n- {kind: xid, gpu: [0], code: 79}\n", 0, "gpu", "want a whole number, got a list"},
		{"acs without port", "faults:\n- {kind: acs_redirect}\n", 0, "gpu or device", "missing"},
		{"acs gpu and device", "faults:\n- {kind: acs_redirect, gpu: 0, device: \"0000:17:00.0\"}\n", 0, "device", "give gpu or device, not both"},
		{"peermem with a gpu", "faults:\n- {kind: peermem_missing, gpu: 0}\n", 0, "gpu", "not a field of peermem_missing"},
		{"peermem twice", "faults:\n- {kind: peermem_missing}\n- {kind: peermem_missing}\n", 1, "", "faults[0] sets already"},
		{"no transport", "faults:\n- {kind: nccl_transport, gpus: [0]}\n", 0, "transport", "missing"},
		{"unknown transport", "faults:\n- {kind: nccl_transport, transport: p2p}\n", 0, "transport", `unknown transport "p2p"; one of shm, net`},
		{"gpus not a list", "faults:\n- {kind: nccl_transport, transport: shm, gpus: 0}\n", 0, "gpus", "want a list of GPU indices such as [0, 3], got 0"},
		{"gpus of names", "faults:\n- {kind: nccl_transport, transport: shm, gpus: [a]}\n", 0, "gpus", `got "a" in the list`},
		{"gpus empty", "faults:\n- {kind: nccl_transport, transport: shm, gpus: []}\n", 0, "gpus", "an empty list"},
		{"gpu twice", "faults:\n- {kind: nccl_transport, transport: shm, gpus: [2, 2]}\n", 0, "gpus", "GPU 2 listed twice"},
		{"negative gpu in list", "faults:\n- {kind: nccl_transport, transport: shm, gpus: [-1]}\n", 0, "gpus", "out of range"},
		{"gpu of another kind", "faults:\n- {kind: nccl_transport, transport: shm, gpu: 0}\n", 0, "gpu", "not a field of nccl_transport"},
		{"two transports for all", "faults:\n- {kind: nccl_transport, transport: shm}\n- {kind: nccl_transport, transport: net}\n", 1, "", "faults[0] sets already"},
		{"one GPU two transports", "faults:\n- {kind: nccl_transport, transport: shm, gpus: [0, 1]}\n- {kind: nccl_transport, transport: net, gpus: [1, 2]}\n", 1, "gpus", "faults[0] already sends"},
		{"every GPU and one", "faults:\n- {kind: nccl_transport, transport: shm, gpus: [4]}\n- {kind: nccl_transport, transport: net}\n", 1, "gpus", "faults[0] already sends"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseFaults("bad.yaml", []byte(c.data))
			var fe *FaultError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a *FaultError", err)
			}
			if fe.File != "bad.yaml" || fe.Entry != c.entry || fe.Field != c.field {
				t.Errorf("error names file %q entry %d field %q; want bad.yaml, %d, %q (%v)", fe.File, fe.Entry, fe.Field, c.entry, c.field, err)
			}
			if !strings.Contains(err.Error(), c.msg) || !strings.HasPrefix(err.Error(), "bad.yaml") {
				t.Errorf("error %q does not start with the file and say %q", err, c.msg)
			}
			if c.entry >= 0 && !strings.Contains(err.Error(), "faults["+string(rune('0'+c.entry))+"]") {
				t.Errorf("error %q does not name the entry", err)
			}
		})
	}
}

// TestValidate: a fault made in Go is checked as the file's are.
func TestValidate(t *testing.T) {
	ok := Fault{Kind: ProbeBandwidth, GPU: 1, PeerGPU: -1, Probe: probes.HostToDevice, Fraction: 0.5}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", ok, err)
	}
	for field, f := range map[string]Fault{
		"kind":      {Kind: "gpu_on_fire", GPU: -1, PeerGPU: -1},
		"gpu":       {Kind: XID, GPU: -1, PeerGPU: -1, Code: 79},
		"fraction":  {Kind: NICRate, GPU: -1, PeerGPU: -1, Device: "mlx5_0", Fraction: 2},
		"peer_gpu":  {Kind: ProbeBandwidth, GPU: 1, PeerGPU: 1, Probe: probes.PeerCopy, Fraction: 0.5},
		"transport": {Kind: NCCLTransport, GPU: -1, PeerGPU: -1, Transport: "collnet"},
	} {
		var fe *FaultError
		if err := f.Validate(); !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", f, err, field)
		}
	}
}

// TestCheckAgainstMachine: faults must name what the running profile
// has.
func TestCheckAgainstMachine(t *testing.T) {
	n := startNode(t, "dgx-h100", "")
	p5 := startNode(t, "aws-p5", "")
	for _, c := range []struct {
		name  string
		node  *Node
		data  string
		field string
		msg   string
	}{
		{"gpu 8", n, "faults:\n- {kind: xid, gpu: 8, code: 79}\n", "gpu", "GPU 8: this node has GPUs 0-7"},
		{"peer gpu 9", n, "faults:\n- {kind: probe_bandwidth, gpu: 0, probe: peer_copy, peer_gpu: 9, fraction: 0.5}\n", "peer_gpu", "GPU 9"},
		{"link 18", n, "faults:\n- {kind: nvlink_down, gpu: 0, link: 18}\n", "link", "NVLinks 0-17"},
		{"x32", n, "faults:\n- {kind: pcie_width, gpu: 0, width: 32}\n", "width", "wider than"},
		{"gen6", n, "faults:\n- {kind: pcie_generation, gpu: 0, generation: 6}\n", "generation", "beyond"},
		{"no such nic", n, "faults:\n- {kind: nic_down, device: mlx5_10}\n", "device", `no RDMA device or network interface "mlx5_10"`},
		{"efa on dgx", n, "faults:\n- {kind: nic_down, device: rdmap76s0}\n", "device", "no RDMA device"},
		{"mlx5 on p5", p5, "faults:\n- {kind: nic_down, device: mlx5_0}\n", "device", "no RDMA device"},
		{"efa symbol errors", p5, "faults:\n- {kind: nic_symbol_errors, device: rdmap76s0, per_second: 5}\n", "device", "no symbol_error counter"},
		{"ena rate", p5, "faults:\n- {kind: nic_rate, device: ens32, fraction: 0.5}\n", "device", "no rate or speed"},
		{"no such function", n, "faults:\n- {kind: pcie_width, device: \"0000:42:00.0\", width: 8}\n", "device", "no PCI function 0000:42:00.0"},
		{"a GPU's address", n, "faults:\n- {kind: pcie_width, device: \"0000:18:00.0\", width: 8}\n", "device", "is GPU 0: write gpu: 0"},
		{"root port", n, "faults:\n- {kind: pcie_generation, device: \"0000:37:01.0\", generation: 3}\n", "device", "upper end"},
		{"switch x32", n, "faults:\n- {kind: pcie_width, device: \"0000:38:00.0\", width: 32}\n", "width", "wider than 0000:38:00.0's link can train (x16)"},
		{"no such pid", n, "faults:\n- {kind: process_far_socket, gpu: 0, pid: 5151}\n", "pid", "no process 5151 on GPU 0"},
		{"no process to end", n, "faults:\n- {kind: process_exit, pid: 3131}\n", "pid", "no process 3131 on this node (it has 4242, 5151, 6161)"},
		{"acs on an endpoint", n, "faults:\n- {kind: acs_redirect, device: \"0000:19:00.0\"}\n", "device", "not a root or downstream port"},
		{"acs on an upstream port", n, "faults:\n- {kind: acs_redirect, device: \"0000:16:00.0\"}\n", "device", "only those have ACS"},
		{"acs on no function", n, "faults:\n- {kind: acs_redirect, device: \"0000:42:00.0\"}\n", "device", "no PCI function 0000:42:00.0"},
		{"transport for gpu 8", n, "faults:\n- {kind: nccl_transport, transport: shm, gpus: [0, 8]}\n", "gpus", "GPU 8: this node has GPUs 0-7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			faults, err := ParseFaults("f.yaml", []byte(c.data))
			if err != nil {
				t.Fatal(err)
			}
			err = CheckFaults("f.yaml", c.node.Machine(), faults)
			var fe *FaultError
			if !errors.As(err, &fe) || fe.Entry != 0 || fe.Field != c.field || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("Check = %v; want entry 0, field %s, saying %q", err, c.field, c.msg)
			}
		})
	}
	// The borrowed VM (no simulated node runs it): its GPUs sit on the
	// root bus, and it has neither nvidia_peermem nor a known driver.
	for _, c := range []struct{ data, field, msg string }{
		{"faults:\n- {kind: acs_redirect, gpu: 0}\n", "gpu", "sits on a root bus"},
		{"faults:\n- {kind: peermem_missing}\n", "kind", "nothing to take away"},
	} {
		faults, err := ParseFaults("f.yaml", []byte(c.data))
		if err != nil {
			t.Fatal(err)
		}
		err = CheckFaults("f.yaml", machine.H200VM(), faults)
		var fe *FaultError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("h200-vm: Check = %v; want field %s, saying %q", err, c.field, c.msg)
		}
	}
	// What each profile has passes.
	for node, data := range map[*Node]string{
		n: contractFile,
		p5: "faults:\n- {kind: nic_down, device: rdmap76s0}\n- {kind: nic_rate, device: rdmap93s0, fraction: 0.5}\n- {kind: nic_flapping, device: ens32, period: 2s}\n- {kind: pcie_width, gpu: 7, width: 4}\n" +
			"- {kind: peermem_missing}\n- {kind: acs_redirect, device: \"0000:4b:00.0\"}\n",
	} {
		faults, err := ParseFaults("f.yaml", []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckFaults("f.yaml", node.Machine(), faults); err != nil {
			t.Errorf("%s: %v", node.Profile().Name, err)
		}
	}
}

func TestScaleRate(t *testing.T) {
	for _, c := range []struct {
		rate     string
		fraction float64
		want     string
	}{
		{"400 Gb/sec (4X NDR)", 0.5, "200 Gb/sec (4X HDR)"},
		{"400 Gb/sec (4X NDR)", 0.25, "100 Gb/sec (4X EDR)"},
		{"100 Gb/sec (4X EDR)", 0.5, "50 Gb/sec (2X EDR)"},
		{"400 Gb/sec (4X NDR)", 0.33, "132 Gb/sec"},
		{"200 Gb/sec (4X HDR)", 0.3, "60 Gb/sec"},
		{"400 Gb/sec (4X NDR)", 1.0 / 128, "3 Gb/sec"},
	} {
		if got := scaleRate(c.rate, c.fraction); got != c.want {
			t.Errorf("scaleRate(%q, %g) = %q, want %q", c.rate, c.fraction, got, c.want)
		}
	}
}

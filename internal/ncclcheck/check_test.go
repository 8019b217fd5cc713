package ncclcheck

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/numa"
)

// node extracts a fixture machine (numa/testdata/<name>.txtar) and adds
// files (path -> content; content "->x" makes a symbolic link to x).
func node(t *testing.T, name string, files map[string]string) (root string, topo *numa.Topology, ports *nic.Snapshot) {
	t.Helper()
	root = t.TempDir()
	f, err := os.Open(filepath.Join("..", "..", "numa", "testdata", name+".txtar"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := machine.ExtractTxtar(f, root); err != nil {
		t.Fatal(err)
	}
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, full)
		} else {
			err = os.WriteFile(full, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	fsys := hostfs.Under(root)
	topo, err = numa.ReadTopology(fsys)
	if topo == nil {
		t.Fatalf("topology: %v", err)
	}
	ports, err = (&nic.Reader{FS: fsys}).Sample(context.Background())
	if ports == nil {
		t.Fatalf("NICs: %v", err)
	}
	return root, topo, ports
}

func env(root string, vars map[string]string, memlock uint64) Env {
	return Env{Root: root, Library: "libnccl.so.2", Getenv: func(k string) string { return vars[k] },
		Memlock: func() (uint64, error) { return memlock, nil }}
}

func lines(r *Report) string {
	var b bytes.Buffer
	_ = r.Write(&b)
	return b.String()
}

func item(t *testing.T, r *Report, check string) Item {
	t.Helper()
	i := slices.IndexFunc(r.Items, func(it Item) bool { return it.Check == check })
	if i < 0 {
		t.Fatalf("no %s item in\n%s", check, lines(r))
	}
	return r.Items[i]
}

// The borrowed H200 VM: no RDMA NICs, so sockets are expected and the
// check passes with NCCL found; it fails naming the library where the
// library is nowhere.
func TestCheckH200VM(t *testing.T) {
	root, topo, ports := node(t, "h200-vm", map[string]string{
		"usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5": "ELF",
		"usr/lib/x86_64-linux-gnu/libnccl.so.2":      "->libnccl.so.2.21.5",
	})
	r := Check(env(root, nil, 8<<20), topo, ports)
	out := lines(r)
	if !r.Ready() {
		t.Errorf("not ready:\n%s", out)
	}
	for _, want := range []string{
		"ok       library           /usr/lib/x86_64-linux-gnu/libnccl.so.2, NCCL 2.21.5\n",
		"ok       network_plugin    none (no libnccl-net.so): NCCL's own IB and Socket transports\n",
		"info     rdma_devices      none, and no RDMA port is up: sockets are all there is\n",
		"info     memlock           RLIMIT_MEMLOCK 8 MiB (only RDMA needs it)\n",
		"expected_network  GPU 0000:",
		": Socket (",
		"ready: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if r.LibraryPath != "/usr/lib/x86_64-linux-gnu/libnccl.so.2" || r.Version != "2.21.5" || r.Plugin != "" {
		t.Errorf("library %q version %q plugin %q", r.LibraryPath, r.Version, r.Plugin)
	}

	e := env(root, nil, 8<<20)
	e.Library = "/nowhere/libnccl.so.2"
	r = Check(e, topo, ports)
	if r.Ready() || r.Passed(CheckLibrary) || !strings.Contains(item(t, r, CheckLibrary).Detail, "/nowhere/libnccl.so.2 not found") {
		t.Errorf("library nowhere:\n%s", lines(r))
	}
	if !strings.HasPrefix(lines(r), "missing  library           /nowhere/libnccl.so.2 not found") {
		t.Errorf("library nowhere:\n%s", lines(r))
	}
	if !strings.HasSuffix(lines(r), "NOT READY: see the lines marked missing\n") {
		t.Errorf("verdict:\n%s", lines(r))
	}

	// Loading decides where the caller may load: its error, or too old a
	// version, fails.
	e = env(root, nil, 8<<20)
	e.LoadVersion = func(string) (int, error) { return 0, errors.New("libnccl.so.2: cannot open shared object file") }
	if r := Check(e, topo, ports); r.Passed(CheckLibrary) || !strings.Contains(item(t, r, CheckLibrary).Detail, "cannot open shared object file") {
		t.Errorf("load error:\n%s", lines(r))
	}
	e.LoadVersion = func(string) (int, error) { return 21305, nil }
	if r := Check(e, topo, ports); r.Passed(CheckLibrary) || !strings.Contains(item(t, r, CheckLibrary).Detail, "NCCL 2.13.5; the probes need 2.14") {
		t.Errorf("2.13:\n%s", lines(r))
	}
	// Before 2.9 ncclGetVersion's code had a narrower minor field: 2804
	// is 2.8.4, not 0.28.4.
	e.LoadVersion = func(string) (int, error) { return 2804, nil }
	if r := Check(e, topo, ports); r.Passed(CheckLibrary) || !strings.Contains(item(t, r, CheckLibrary).Detail, "NCCL 2.8.4; the probes need 2.14") {
		t.Errorf("2.8:\n%s", lines(r))
	}
	e.LoadVersion = func(string) (int, error) { return 22809, nil }
	if r := Check(e, topo, ports); !r.Ready() || r.Version != "2.28.9" {
		t.Errorf("2.28.9:\n%s", lines(r))
	}
}

// A DGX H100 in a container that sees neither /dev/infiniband nor an
// unlimited memlock: RDMA is impossible, and the check says both.
func TestCheckDGXH100(t *testing.T) {
	root, topo, ports := node(t, "dgx-h100", map[string]string{
		"opt/nccl/lib/libnccl.so.2":  "ELF",
		"etc/ld.so.conf.d/nccl.conf": "# NCCL\n/opt/nccl/lib\ninclude /etc/other/*.conf\n",
	})
	r := Check(env(root, nil, 64<<10), topo, ports)
	if r.Ready() || r.Passed(CheckRDMADevices) || r.Passed(CheckMemlock) || !r.Passed(CheckLibrary) || !r.Passed(CheckPlugin) {
		t.Errorf("want rdma_devices and memlock missing:\n%s", lines(r))
	}
	if got := item(t, r, CheckLibrary).Detail; got != "/opt/nccl/lib/libnccl.so.2, version unknown until a collective round loads it" {
		t.Errorf("library: %q", got)
	}
	if got := item(t, r, CheckMemlock).Detail; !strings.Contains(got, "64 KiB") {
		t.Errorf("memlock: %q", got)
	}
	if got := item(t, r, CheckNICPorts).Detail; got != "mlx5_0 port 1: infiniband, up, 400 Gb/s" {
		t.Errorf("first port: %q", got)
	}
	if got := item(t, r, CheckNetworkGPU).Detail; !strings.HasSuffix(got, ": IB with GPUDirect RDMA (rail mlx5_0, PIX)") {
		t.Errorf("first GPU: %q", got)
	}

	// With the devices, an unlimited memlock (or CAP_IPC_LOCK): ready.
	root, topo, ports = node(t, "dgx-h100", map[string]string{
		"usr/lib/libnccl.so.2":   "ELF",
		"dev/infiniband/uverbs0": "",
		"dev/infiniband/uverbs1": "",
		"proc/self/status":       "Name:\tgpulink\nCapEff:\t0000000000004000\n",
	})
	r = Check(env(root, nil, 64<<10), topo, ports)
	if !r.Ready() || item(t, r, CheckRDMADevices).Detail != "/dev/infiniband/uverbs0 /dev/infiniband/uverbs1" {
		t.Errorf("want ready:\n%s", lines(r))
	}
	if got := item(t, r, CheckMemlock).Detail; got != "RLIMIT_MEMLOCK 64 KiB, but CAP_IPC_LOCK lifts it" {
		t.Errorf("memlock: %q", got)
	}
	if r := Check(env(root, nil, Unlimited), topo, ports); item(t, r, CheckMemlock).Detail != "RLIMIT_MEMLOCK unlimited" {
		t.Errorf("unlimited:\n%s", lines(r))
	}
}

// An AWS p5 needs aws-ofi-nccl: found by NCCL_NET_PLUGIN's name on
// LD_LIBRARY_PATH, missing without it, and off with "none".
func TestCheckAWSP5Plugin(t *testing.T) {
	root, topo, ports := node(t, "aws-p5", map[string]string{
		"usr/lib/libnccl.so.2":                       "ELF",
		"dev/infiniband/uverbs0":                     "",
		"opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so": "ELF",
	})
	vars := map[string]string{"NCCL_NET_PLUGIN": "ofi", "LD_LIBRARY_PATH": "/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib"}
	r := Check(env(root, vars, Unlimited), topo, ports)
	if !r.Ready() || r.Plugin != "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so" {
		t.Errorf("plugin %q:\n%s", r.Plugin, lines(r))
	}
	r = Check(env(root, map[string]string{"NCCL_NET_PLUGIN": "ofi"}, Unlimited), topo, ports)
	if r.Passed(CheckPlugin) || !strings.Contains(item(t, r, CheckPlugin).Detail, "no libnccl-net-ofi.so on the library path: EFA is reached only through aws-ofi-nccl") {
		t.Errorf("no plugin:\n%s", lines(r))
	}
	r = Check(env(root, map[string]string{"NCCL_NET_PLUGIN": "none"}, Unlimited), topo, ports)
	if r.Passed(CheckPlugin) {
		t.Errorf("plugins off on EFA:\n%s", lines(r))
	}
	r = Check(env(root, map[string]string{"NCCL_NET_PLUGIN": "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"}, Unlimited), topo, ports)
	if !r.Passed(CheckPlugin) {
		t.Errorf("plugin by path:\n%s", lines(r))
	}
}

func TestVersionFromName(t *testing.T) {
	for name, want := range map[string]int{
		"/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5": 22105, "libnccl.so.2.28.9": 22809, "libnccl.so.2": 0,
		"libnccl.so.2.300.1": 0, "libnccl-net.so.2.21.5": 0,
	} {
		if got := versionFromName(name); got != want {
			t.Errorf("versionFromName(%q) = %d, want %d", name, got, want)
		}
	}
}

// Many devices are counted, first and last in number order.
func TestCheckManyRDMADevices(t *testing.T) {
	files := map[string]string{"usr/lib/libnccl.so.2": "ELF"}
	for i := range 12 {
		files[filepath.Join("dev", "infiniband", "uverbs"+strconv.Itoa(i))] = ""
	}
	root, topo, ports := node(t, "dgx-h100", files)
	r := Check(env(root, nil, Unlimited), topo, ports)
	if got := item(t, r, CheckRDMADevices).Detail; got != "12 devices, /dev/infiniband/uverbs0 to /dev/infiniband/uverbs11" {
		t.Errorf("devices: %q", got)
	}
}

// The daemon's sample waits for the topology and NIC samplers' first
// samples, within its deadline, and only then reads them.
func TestSourceWaitsForItsInputs(t *testing.T) {
	topoReady, nicsReady := make(chan struct{}), make(chan struct{})
	close(topoReady)
	read := make(chan struct{}, 2)
	s := &Source{Env: env(t.TempDir(), nil, Unlimited), Ready: []<-chan struct{}{topoReady, nicsReady},
		Topology: func() *numa.Topology { read <- struct{}{}; return nil },
		NICs:     func() *nic.Snapshot { read <- struct{}{}; return nil }}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if r, err := s.Sample(ctx); r != nil || err == nil || !strings.Contains(err.Error(), "not read in time") {
		t.Fatalf("NICs never sampled: %v, %v; want the deadline's error", r, err)
	}
	if len(read) != 0 {
		t.Fatal("the topology or NICs were read before their first sample")
	}

	time.AfterFunc(20*time.Millisecond, func() { close(nicsReady) })
	if r, err := s.Sample(context.Background()); r == nil || err != nil {
		t.Fatalf("after the NICs' first sample: %v, %v", r, err)
	}
	if len(read) != 2 {
		t.Errorf("%d of the topology and NICs read, want both", len(read))
	}
}

// What each GPU should use comes from the NICs that can carry traffic
// (nic's Usable: a port up, the PCIe link neither down nor narrow), as
// NCCL's IB transport lists only active ports: a GPU whose rail port is
// down is dealt another NIC (on a DGX H100 its neighbour's, under the same
// PCIe switch, so GPUDirect RDMA stays), and a node whose RDMA ports are
// all down expects sockets without naming a dead port as the way out.
// Fails on 87dce87, which dealt rails out among every NIC: "IB without
// GPUDirect RDMA (rail mlx5_0, PIX)" and "Socket (rail mlx5_0, PIX)".
func TestCheckNetworkFromUsableNICs(t *testing.T) {
	root, topo, ports := node(t, "dgx-h100", map[string]string{"usr/lib/libnccl.so.2": "ELF"})
	down := func(i int) {
		ports.Ports[i].StateID.V, ports.Ports[i].State = 1, "DOWN"
	}
	networks := func(r *Report) []string {
		var out []string
		for _, it := range r.Items {
			if it.Check == CheckNetworkGPU {
				out = append(out, it.Detail)
			}
		}
		return out
	}
	first := ports.Ports[0].Device
	down(0)
	r := Check(env(root, nil, Unlimited), topo, ports)
	got := networks(r)
	if len(got) != 8 {
		t.Fatalf("%d GPUs:\n%s", len(got), lines(r))
	}
	// Its neighbour's NIC shares its PCIe switch: GPUDirect RDMA stays.
	if want := "IB with GPUDirect RDMA (rail " + ports.Ports[1].Device + ", PIX)"; !strings.HasSuffix(got[0], want) {
		t.Errorf("GPU 0, its rail %s down: %q, want %q", first, got[0], want)
	}
	if !strings.HasSuffix(got[1], "IB with GPUDirect RDMA (rail "+ports.Ports[1].Device+", PIX)") {
		t.Errorf("GPU 1, its rail up: %q", got[1])
	}

	for i := range ports.Ports {
		down(i)
	}
	r = Check(env(root, nil, Unlimited), topo, ports)
	for i, d := range networks(r) {
		if !strings.HasSuffix(d, ": Socket (no usable NIC)") {
			t.Errorf("GPU %d, every RDMA port down: %q, want Socket through no RDMA NIC", i, d)
		}
	}
	if !r.Ready() || item(t, r, CheckRDMADevices).Status != StatusInfo {
		t.Errorf("sockets need no RDMA devices:\n%s", lines(r))
	}
}

package sim

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
)

var update = flag.Bool("update", false, "rewrite numa/testdata/<name>.txtar from the fixtures")

// testdataDir is numa/testdata, found from this source file.
func testdataDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "numa", "testdata")
}

// writeTree writes a machine's tree to a fresh directory.
func writeTree(t *testing.T, m *machine.Machine) string {
	t.Helper()
	root := t.TempDir()
	if err := m.Write(root); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestFixtures: every archive in numa/testdata is the tree of its fixture,
// written now. Run with -update after changing a profile or a fault.
func TestFixtures(t *testing.T) {
	fixtures := Fixtures()
	for _, name := range slices.Sorted(maps.Keys(fixtures)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := fixtures[name]()
			if m.Name != name {
				t.Errorf("fixture %s is called %s", name, m.Name)
			}
			var b bytes.Buffer
			if err := machine.WriteTxtar(&b, writeTree(t, m)); err != nil {
				t.Fatal(err)
			}
			got := b.Bytes()
			if len(got) > 1_500_000 {
				t.Errorf("archive is %d bytes; keep it under 1.5 MB", len(got))
			}
			path := filepath.Join(testdataDir(), name+".txtar")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/sim -run TestFixtures -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is stale, %s; run go test ./internal/sim -run TestFixtures -update", path, firstDiff(got, want))
			}
		})
	}
	archives, _ := filepath.Glob(filepath.Join(testdataDir(), "*.txtar"))
	for _, a := range archives {
		if name := strings.TrimSuffix(filepath.Base(a), ".txtar"); fixtures[name] == nil {
			t.Errorf("%s is the tree of no fixture", a)
		}
	}
}

// firstDiff describes where two archives part.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d: got %q, want %q", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("got %d lines, want %d", len(g), len(w))
}

// TestFaultyFixtures checks what the faulty fixtures' comments promise
// and the numa package's tests rely on, file by file.
func TestFaultyFixtures(t *testing.T) {
	pci := func(addr, f string) string { return "sys/bus/pci/devices/" + addr + "/" + f }
	port := func(ib, f string) string { return "sys/class/infiniband/" + ib + "/ports/1/" + f }
	for name, files := range map[string]map[string]string{
		"dgx-h100-faults": {
			pci("0000:38:00.0", "current_link_width"):       "8\n",
			pci("0000:38:00.0", "max_link_width"):           "16\n",
			pci("0000:37:01.0", "current_link_width"):       "8\n",
			pci("0000:37:01.0", "max_link_width"):           "16\n",
			pci("0000:3a:00.0", "current_link_width"):       "16\n",
			port("mlx5_2", "rate"):                          "200 Gb/sec (4X HDR)\n",
			port("mlx5_2", "state"):                         "4: ACTIVE\n",
			"sys/class/net/ibp59s0/speed":                   "200000\n",
			port("mlx5_3", "state"):                         "1: DOWN\n",
			port("mlx5_3", "phys_state"):                    "3: Disabled\n",
			port("mlx5_3", "rate"):                          "10 Gb/sec (4X SDR)\n",
			port("mlx5_3", "lid"):                           "0xffff\n",
			"sys/class/net/ibp92s0/operstate":               "down\n",
			"sys/class/net/ibp92s0/carrier":                 "0\n",
			"sys/class/net/ibp92s0/speed":                   "-1\n",
			"sys/class/net/ibp92s0/carrier_down_count":      "1\n",
			port("mlx5_1", "counters/symbol_error"):         "N/A\n",
			pci("0000:73:00.0", "numa_node"):                "0\n",
			"sys/class/infiniband/mlx5_9/ports/1/state":     "",
			"proc/4242/task/4242/stat":                      "",
			"sys/devices/pci0000:70/0000:70:01.0/numa_node": "0\n",
			pci("0000:e3:01.0", "class"):                    "",
			pci("0000:39:00.0", "config"):                   string(machine.ConfigSpace(0x1000, 0xc030, 0x060400, 0xb0, true, machine.ACSRedirect)),
			pci("0000:39:01.0", "config"):                   string(machine.ConfigSpace(0x1000, 0xc030, 0x060400, 0xb0, true, 0)),
			"sys/module/nvidia_peermem/initstate":           "",
			"sys/module/nvidia/initstate":                   "live\n",
		},
		"aws-p5-faults": {
			port("rdmap127s0", "state"):               "1: DOWN\n",
			port("rdmap127s0", "rate"):                "100 Gb/sec (4X EDR)\n",
			pci("0000:a8:00.0", "current_link_width"): "8\n",
			pci("0000:a7:00.0", "current_link_width"): "8\n",
			pci("0000:b9:00.0", "current_link_width"): "16\n",
		},
	} {
		root := writeTree(t, Fixtures()[name]())
		for path, want := range files {
			b, err := os.ReadFile(filepath.Join(root, path))
			switch {
			case path == "proc/4242/task/4242/stat":
				// The main thread last ran on node 1 (CPU 56 is its first).
				if f := strings.Fields(string(b)); err != nil || len(f) < 39 || f[38] != "56" {
					t.Errorf("%s: %s: cpu %v, %v; want 56", name, path, f[38:39], err)
				}
			case want == "" && err == nil:
				t.Errorf("%s: %s exists", name, path)
			case want != "" && string(b) != want:
				t.Errorf("%s: %s = %q, %v; want %q", name, path, b, err, want)
			}
		}
	}
}

// TestFaultyPlacement: the misplaced processes of the faulty fixtures
// are where the faults put them.
func TestFaultyPlacement(t *testing.T) {
	for _, c := range []struct {
		fixture   string
		pid       int
		cpus      string
		pages     []uint64
		gpu, comm string
	}{
		{"dgx-h100-faults", 4242, "56-111,168-223", []uint64{200_000, 1_800_000}, "0000:18:00.0", "python"},
		{"aws-p5-faults", 3232, "48-95,144-191", []uint64{1_200_000, 300_000}, "0000:b9:00.0", "python"},
	} {
		m := Fixtures()[c.fixture]()
		p := m.Process(c.pid)
		if p == nil || p.CPUsAllowed != c.cpus || !slices.Equal(p.Pages, c.pages) || !slices.Equal(p.GPUs, []string{c.gpu}) || p.Comm != c.comm {
			t.Errorf("%s: pid %d is %+v", c.fixture, c.pid, p)
			continue
		}
		cpus := mustCPUs(c.cpus)
		for _, th := range p.Threads {
			if !slices.Contains(cpus, th.CPU) {
				t.Errorf("%s: pid %d thread %d on CPU %d, outside %s", c.fixture, c.pid, th.TID, th.CPU, c.cpus)
			}
		}
	}
}

package machine

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func profileNames() []string { return slices.Sorted(maps.Keys(Profiles())) }

// archive writes a machine to disk and dumps it, as the fixture archives
// are made.
func archive(t *testing.T, m *Machine) []byte {
	t.Helper()
	root := t.TempDir()
	if err := m.Write(root); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteTxtar(&b, root); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
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

func TestDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	for _, buf := range []*bytes.Buffer{&a, &b} {
		tr, err := DGXH100FarNICs().tree(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.format(buf); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("two builds differ: %s", firstDiff(a.Bytes(), b.Bytes()))
	}
}

// TestRoundTrip extracts each archive in numa/testdata (the profiles'
// and the faulty ones internal/sim makes), checks that every symlink leads
// to a path in the tree, as the kernel's always do, and that dumping the
// tree gives the archive back.
func TestRoundTrip(t *testing.T) {
	archives, err := filepath.Glob(filepath.Join(testdataDir(), "*.txtar"))
	if err != nil || len(archives) < len(Profiles()) {
		t.Fatalf("archives %v, %v", archives, err)
	}
	for _, path := range archives {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			if err := ExtractTxtar(bytes.NewReader(want), root); err != nil {
				t.Fatal(err)
			}
			err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.Type()&os.ModeSymlink == 0 {
					return err
				}
				if _, err := os.Stat(p); err != nil {
					t.Errorf("dangling link: %v", err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := WriteTxtar(&got, root); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("extract then dump differs: %s", firstDiff(got.Bytes(), want))
			}
		})
	}
}

func TestLoad(t *testing.T) {
	root := Load(t, "dgx-h100")
	for path, want := range map[string]string{
		"sys/bus/pci/devices/0000:18:00.0/class":                      "0x030200\n",
		"sys/bus/pci/devices/0000:18:00.0/driver/0000:18:00.0/device": "0x2330\n",
		"sys/class/infiniband/mlx5_0/device/numa_node":                "0\n",
		"sys/class/infiniband/mlx5_0/ports/1/rate":                    "400 Gb/sec (4X NDR)\n",
		"sys/class/net/ibp25s0/device/infiniband/mlx5_0/hca_type":     "MT4129\n",
		"sys/devices/system/node/node1/cpulist":                       "56-111,168-223\n",
		"proc/4242/comm":                                              "python\n",
	} {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", path, b, err, want)
		}
	}
	target, err := os.Readlink(filepath.Join(root, "sys/bus/pci/devices/0000:18:00.0"))
	if want := "../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"; err != nil || target != want {
		t.Errorf("bus link -> %q, %v; want %q", target, err, want)
	}
}

// files returns a profile's files in memory, with "@" plus the target for
// symlinks.
func files(t *testing.T, m *Machine) map[string]string {
	t.Helper()
	tr, err := m.tree(nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for p, e := range tr.entries {
		out[p] = e.data
		if e.isLink {
			out[p] = "@" + e.target
		}
	}
	return out
}

// TestLinkEnds checks the link files' contract: both ends of a link show
// the same trained speed and width, and no end trains above its maximum.
func TestLinkEnds(t *testing.T) {
	for _, name := range profileNames() {
		m := Profiles()[name]()
		fs := files(t, m)
		m.walk(func(_ *HostBridge, parent, d *Device) bool {
			dir := m.DevicePath(d.Addr)
			if d.MaxGen == 0 {
				if _, ok := fs[dir+"/current_link_speed"]; ok {
					t.Errorf("%s: %s is not PCIe but has link files", name, d.Addr)
				}
				return true
			}
			for _, f := range []string{"speed", "width"} {
				cur, maxv := fs[dir+"/current_link_"+f], fs[dir+"/max_link_"+f]
				if cur == "" || maxv == "" {
					t.Errorf("%s: %s lacks link %s files", name, d.Addr, f)
				}
				if f == "width" && atoi(cur) > atoi(maxv) {
					t.Errorf("%s: %s trained x%s above its x%s", name, d.Addr, cur, maxv)
				}
				// A switch's upstream and downstream ports share an internal
				// bus, not a link.
				if parent != nil && parent.Kind != UpstreamPort {
					if up := fs[m.DevicePath(parent.Addr)+"/current_link_"+f]; up != cur {
						t.Errorf("%s: link %s-%s: %s %q above, %q below", name, parent.Addr, d.Addr, f, up, cur)
					}
				}
			}
			return true
		})
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(strings.TrimSpace(s))
	return n
}

// TestFacts checks what the profiles' doc comments promise and tests of
// other packages rely on.
func TestFacts(t *testing.T) {
	dev := func(m *Machine, addr, f string) string { return m.DevicePath(addr) + "/" + f }
	port := func(m *Machine, ib, f string) string { return m.IBPortDir(ib, 1) + "/" + f }
	cases := []struct {
		profile string
		path    func(m *Machine) string
		want    string // "" means absent
	}{
		{"dgx-h100", func(m *Machine) string { return dev(m, "0000:18:00.0", "current_link_speed") }, "32.0 GT/s PCIe\n"},
		{"dgx-h100", func(m *Machine) string { return dev(m, "0000:15:01.0", "class") }, "0x060400\n"},
		{"dgx-h100", func(m *Machine) string { return dev(m, "0000:db:00.0", "local_cpulist") }, "56-111,168-223\n"},
		{"dgx-h100", func(m *Machine) string { return dev(m, "0000:1a:00.0", "current_link_width") }, "4\n"},
		{"dgx-h100", func(m *Machine) string { return dev(m, "0000:6c:00.0", "net/enp108s0f0np0/speed") }, "200000\n"},
		{"dgx-h100", func(m *Machine) string { return port(m, "mlx5_9", "link_layer") }, "Ethernet\n"},
		{"dgx-h100", func(m *Machine) string { return "sys/devices/system/node/node0/distance" }, "10 21\n"},
		{"dgx-h100", func(m *Machine) string { return "sys/devices/system/cpu/online" }, "0-223\n"},
		{"dgx-h100", func(m *Machine) string { return "proc/5151/cgroup" }, "0::" + cgroupK8sCgroupfs + "\n"},
		{"dgx-h100", func(m *Machine) string { return "sys/devices/virtual/net/lo/speed" }, ""},
		{"dgx-h100", func(m *Machine) string { return "proc/sys/kernel/osrelease" }, "5.15.0-1042-nvidia\n"},
		{"dgx-h100", func(m *Machine) string { return "sys/module/nvidia_peermem/initstate" }, "live\n"},
		{"dgx-h100", func(m *Machine) string { return "sys/module/nvidia/version" }, "535.161.08\n"},
		{"dgx-h100", func(m *Machine) string { return dev(m, "0000:18:00.0", "iommu_group") }, "@../../../../../../kernel/iommu_groups/0"},
		{"dgx-h100", func(m *Machine) string { return "sys/kernel/iommu_groups/0/devices/0000:18:00.0" },
			"@../../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"},
		{"dgx-h100", func(m *Machine) string { return dev(m, "0000:5d:00.0", "iommu_group") }, "@../../../../../../kernel/iommu_groups/1"},
		{"dgx-h100", func(m *Machine) string { return "sys/kernel/iommu_groups/1/type" }, "identity\n"},
		{"aws-p5", func(m *Machine) string { return "sys/module/nvidia_peermem/initstate" }, ""},
		{"aws-p5", func(m *Machine) string { return "sys/kernel/iommu_groups/0/type" }, ""},
		{"h200-vm", func(m *Machine) string { return "sys/module/nvidia/initstate" }, "live\n"},
		{"h200-vm", func(m *Machine) string { return "proc/driver/nvidia/version" }, ""},
		{"no-gpu", func(m *Machine) string { return "sys/module/nvidia/initstate" }, ""},
		{"aws-p5", func(m *Machine) string { return dev(m, "0000:48:00.0", "current_link_speed") }, "16.0 GT/s PCIe\n"},
		{"aws-p5", func(m *Machine) string { return dev(m, "0000:48:00.0", "max_link_speed") }, "32.0 GT/s PCIe\n"},
		{"aws-p5", func(m *Machine) string { return dev(m, "0000:48:00.0", "current_link_width") }, "8\n"},
		{"aws-p5", func(m *Machine) string { return dev(m, "0000:47:01.0", "max_link_speed") }, "16.0 GT/s PCIe\n"},
		{"aws-p5", func(m *Machine) string { return port(m, "rdmap79s0", "link_layer") }, "Unspecified\n"},
		{"aws-p5", func(m *Machine) string { return port(m, "rdmap79s0", "rate") }, "100 Gb/sec (4X EDR)\n"},
		{"aws-p5", func(m *Machine) string { return port(m, "rdmap79s0", "counters/symbol_error") }, ""},
		{"aws-p5", func(m *Machine) string { return dev(m, "0000:11:00.0", "net/ens32/speed") }, ""},
		{"aws-p5", func(m *Machine) string { return dev(m, "0000:ca:00.0", "numa_node") }, "1\n"},
		{"no-gpu", func(m *Machine) string { return dev(m, "0000:41:00.0", "net/enp65s0f0/speed") }, "25000\n"},
		{"h200-vm", func(m *Machine) string { return dev(m, "0000:00:03.0", "virtio2/net/eth0/device") }, "@../../../virtio2"},
		{"h200-vm", func(m *Machine) string { return "sys/class/net/eth0" },
			"@../../devices/pci0000:00/0000:00:03.0/virtio2/net/eth0"},
		{"h200-vm", func(m *Machine) string { return dev(m, "0000:00:03.0", "virtio2/net/eth0/duplex") }, "unknown\n"},
		{"h200-vm", func(m *Machine) string { return dev(m, "0000:00:03.0", "current_link_speed") }, ""},
		{"h200-vm", func(m *Machine) string { return dev(m, "0000:00:07.0", "current_link_speed") }, "32.0 GT/s PCIe\n"},
		{"h200-vm", func(m *Machine) string { return dev(m, "0000:00:07.0", "numa_node") }, "-1\n"},
		{"h200-vm", func(m *Machine) string { return dev(m, "0000:00:07.0", "local_cpulist") }, "0-31\n"},
		{"h200-vm", func(m *Machine) string { return "sys/devices/virtual/net/ifb0/speed" }, ""},
		{"h200-vm", func(m *Machine) string { return "sys/devices/virtual/net/ifb0/operstate" }, "down\n"},
		{"h200-vm", func(m *Machine) string { return "sys/devices/system/node/node0/numastat" },
			"numa_hit 554609\nnuma_miss 0\nnuma_foreign 0\ninterleave_hit 1345\nlocal_node 554609\nother_node 0\n"},
		{"h200-vm", func(m *Machine) string { return "proc/793/cgroup" }, "0::/process_api/98e385b556f11a16e066cff4ff314805\n"},
	}
	for _, c := range cases {
		m := Profiles()[c.profile]()
		fs := files(t, m)
		p := c.path(m)
		got, ok := fs[p]
		if (c.want == "") == ok || got != c.want {
			t.Errorf("%s: %s = %q (present %v), want %q", c.profile, p, got, ok, c.want)
		}
	}
	// The two flavours of the NVIDIA driver say which they are on the
	// first line, as NVIDIA's documents tell them apart.
	for profile, want := range map[string]string{
		"dgx-h100": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  ",
		"aws-p5":   "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.127.05  ",
	} {
		if got := files(t, Profiles()[profile]())["proc/driver/nvidia/version"]; !strings.HasPrefix(got, want) {
			t.Errorf("%s: proc/driver/nvidia/version %q, want it to start %q", profile, got, want)
		}
	}
	// The meminfo lines line up as the kernel's do.
	fs := files(t, H200VM())
	if got := fs["sys/devices/system/node/node0/meminfo"]; !strings.HasPrefix(got,
		"Node 0 MemTotal:        4812272 kB\nNode 0 MemFree:         3381940 kB\nNode 0 MemUsed:         1430332 kB\n") {
		t.Errorf("meminfo starts %q", got[:120])
	}
}

// TestProcesses checks each process's files against its model: status
// masks and lists, the 52 stat fields with the thread's CPU as field 39,
// and numa_maps adding up to the pages per node.
func TestProcesses(t *testing.T) {
	for _, name := range profileNames() {
		m := Profiles()[name]()
		fs := files(t, m)
		for _, p := range m.Processes {
			dir := fmt.Sprintf("proc/%d", p.PID)
			status := fs[dir+"/status"]
			for _, want := range []string{
				"Name:\t" + p.Comm + "\n", "Cpus_allowed_list:\t" + p.CPUsAllowed + "\n",
				fmt.Sprintf("Threads:\t%d\n", len(p.Threads)), fmt.Sprintf("Tgid:\t%d\n", p.PID),
			} {
				if !strings.Contains(status, want) {
					t.Errorf("%s: %s/status lacks %q", name, dir, want)
				}
			}
			for _, th := range p.Threads {
				f := strings.Fields(fs[fmt.Sprintf("%s/task/%d/stat", dir, th.TID)])
				if len(f) != 52 || f[0] != strconv.Itoa(th.TID) || f[38] != strconv.Itoa(th.CPU) {
					t.Errorf("%s: task %d stat has %d fields, pid %s, cpu %v", name, th.TID, len(f), f[0], f[38:39])
				}
			}
			sums := make([]uint64, len(p.Pages))
			for _, line := range strings.Split(strings.TrimSpace(fs[dir+"/numa_maps"]), "\n") {
				mult := uint64(1)
				if strings.HasSuffix(line, "kernelpagesize_kB=2048") {
					mult = 512
				}
				for _, f := range strings.Fields(line) {
					var n int
					var c uint64
					if _, err := fmt.Sscanf(f, "N%d=%d", &n, &c); err == nil {
						sums[n] += c * mult
					}
				}
			}
			if !slices.Equal(sums, p.Pages) {
				t.Errorf("%s: pid %d numa_maps sums to %v pages, want %v", name, p.PID, sums, p.Pages)
			}
		}
	}
	dgx := files(t, DGXH100())
	if got, want := dgx["proc/4242/status"], "Cpus_allowed:\t00000000,000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff\n"; !strings.Contains(got, want) {
		t.Errorf("4242 status lacks %q", want)
	}
	if got := dgx["proc/4242/status"]; !strings.Contains(got, "Mems_allowed:\t"+strings.Repeat("00000000,", 31)+"00000003\n") {
		t.Errorf("4242 status Mems_allowed wrong")
	}
}

// TestPlacement checks the processes' placement against their NUMA nodes:
// which node's CPUs their threads ran on and where most of their pages
// are.
func TestPlacement(t *testing.T) {
	for _, c := range []struct {
		m        *Machine
		pid      int
		cpuNode  int     // -1: threads on more than one node
		pageNode int     // node with most pages
		minShare float64 // its share of the pages
	}{
		{DGXH100(), 4242, 0, 0, 0.99},
		{DGXH100(), 5151, 1, 1, 0.99},
		{DGXH100(), 6161, -1, 0, 0.55},
		{AWSP5(), 3131, 0, 0, 0.99},
		{H200VM(), 793, 0, 0, 1},
	} {
		p := c.m.Process(c.pid)
		nodes := map[int]bool{}
		for _, th := range p.Threads {
			for _, n := range c.m.Nodes {
				if slices.Contains(mustList(n.CPUs), th.CPU) {
					nodes[n.ID] = true
				}
			}
		}
		if (c.cpuNode < 0 && len(nodes) < 2) || (c.cpuNode >= 0 && (len(nodes) != 1 || !nodes[c.cpuNode])) {
			t.Errorf("%s pid %d: threads on nodes %v, want %d", c.m.Name, c.pid, nodes, c.cpuNode)
		}
		var total uint64
		for _, n := range p.Pages {
			total += n
		}
		if share := float64(p.Pages[c.pageNode]) / float64(total); share < c.minShare || slices.Max(p.Pages) != p.Pages[c.pageNode] {
			t.Errorf("%s pid %d: %.2f of pages on N%d, want at least %.2f", c.m.Name, c.pid, share, c.pageNode, c.minShare)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		list  string
		nbits int
		mask  string
	}{
		{"0-31", 32, "ffffffff"},
		{"0-15", 16, "ffff"},
		{"0", 36, "0,00000001"},
		{"35", 36, "8,00000000"},
		{"48-95,144-191", 192, "ffffffff,ffff0000,00000000,ffffffff,ffff0000,00000000"},
	} {
		l := mustList(c.list)
		if got := formatMask(l, c.nbits); got != c.mask {
			t.Errorf("formatMask(%s, %d) = %s, want %s", c.list, c.nbits, got, c.mask)
		}
		if got := FormatList(l); got != c.list {
			t.Errorf("FormatList(%s) = %s", c.list, got)
		}
	}
}

// TestCheck checks that models the kernel could not show are refused.
func TestCheck(t *testing.T) {
	for name, breakIt := range map[string]func(m *Machine){
		"duplicate address": func(m *Machine) { m.Device("0000:1a:00.0").Addr = "0000:18:00.0" },
		"bus reused":        func(m *Machine) { m.Device("0000:1a:00.0").Addr = "0000:18:00.1" },
		"duplicate rdma":    func(m *Machine) { m.IB("mlx5_1").Name = "mlx5_0" },
		"no main thread":    func(m *Machine) { m.Process(4242).Threads[0].TID = 1 },
		"bad cpu list":      func(m *Machine) { m.Process(4242).CPUsAllowed = "3-1" },
		"bad node":          func(m *Machine) { m.Device("0000:18:00.0").NUMANode = 7 },
		"switch below endpoint": func(m *Machine) {
			g := m.Device("0000:18:00.0")
			g.Children = []*Device{pexPort.fn(DownstreamPort, 0x30, 0)}
		},
	} {
		m := DGXH100()
		breakIt(m)
		if err := m.Write(t.TempDir()); err == nil {
			t.Errorf("%s: Write succeeded", name)
		}
	}
}

func TestTxtarRefuses(t *testing.T) {
	for name, content := range map[string]string{
		"no final newline": "x",
		"header line":      "a\n-- b --\n",
	} {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "f"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := WriteTxtar(new(bytes.Buffer), root); err == nil {
			t.Errorf("%s: archived", name)
		}
	}
	for name, archive := range map[string]string{
		"escaping path":   "-- ../x --\n",
		"absolute path":   "-- /x --\n",
		"link with body":  "-- a -> b --\nbody\n",
		"file twice":      "-- a --\n-- a --\n",
		"file below link": "-- a -> b --\n-- a/c --\n",
	} {
		if err := ExtractTxtar(strings.NewReader(archive), t.TempDir()); err == nil {
			t.Errorf("%s: extracted", name)
		}
	}
}

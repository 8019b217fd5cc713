package process

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// numaMapsVM is the start of a PyTorch process's numa_maps on the
// borrowed 2x H200 VM (one node), with lines of every kind it had.
const numaMapsVM = `55d4c5a00000 default file=/usr/bin/python3.10 mapped=108 mapmax=3 N0=108 kernelpagesize_kB=4
55d4c5a6c000 default file=/usr/bin/python3.10 mapped=700 mapmax=3 N0=700 kernelpagesize_kB=4
55d4c7b9f000 default heap anon=64234 dirty=64234 active=4010 N0=64234 kernelpagesize_kB=4
7f5e10000000 default
7f5e14000000 default anon=33 dirty=33 active=0 N0=33 kernelpagesize_kB=4
7f5e18021000 default file=/dev/zero\040(deleted) dirty=512 mapmax=2 active=0 N0=512 kernelpagesize_kB=4
7f5e40000000 default file=/anon_hugepage\040(deleted) huge anon=4 dirty=4 N0=4 kernelpagesize_kB=2048
7f5e8a3fe000 default file=/dev/nvidiactl
7f5e8a600000 default file=/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15 mapped=4096 mapmax=4 N0=4096 kernelpagesize_kB=4
7ffd3c9a2000 default stack anon=40 dirty=40 active=0 N0=40 kernelpagesize_kB=4
7ffd3c9f4000 default
`

func TestParseNUMAMaps(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[int]uint64
		bad      bool
	}{
		{name: "VM", in: numaMapsVM, want: map[int]uint64{0: (108+700+64234+33+512+4096+40)*4096 + 4*2<<20}},
		{name: "empty", in: "", want: map[int]uint64{}},
		{name: "no pages", in: "7f5e10000000 default\n7f5e8a3fe000 default file=/dev/nvidiactl\n", want: map[int]uint64{}},
		{
			name: "two nodes and THP counted in base pages",
			in: "7f3a1c000000 default anon=8448 dirty=8448 active=0 N0=6144 N1=2304 kernelpagesize_kB=4\n" +
				"7f3a40000000 bind:1 anon=512 dirty=512 N1=512 kernelpagesize_kB=4\n",
			want: map[int]uint64{0: 6144 * 4096, 1: (2304 + 512) * 4096},
		},
		{
			name: "1G hugetlb",
			in:   "7f0000000000 default file=/dev/hugepages/buf huge dirty=2 N1=2 kernelpagesize_kB=1048576\n",
			want: map[int]uint64{1: 2 << 30},
		},
		{
			name: "policies with spaces",
			in: "7f0000000000 prefer (many):0-1 anon=1 dirty=1 N1=1 kernelpagesize_kB=4\n" +
				"7f0000200000 weighted interleave:0-1 anon=2 dirty=2 N0=1 N1=1 kernelpagesize_kB=4\n",
			want: map[int]uint64{0: 4096, 1: 2 * 4096},
		},
		{name: "no trailing newline", in: "7f00 default anon=1 N3=1 kernelpagesize_kB=4", want: map[int]uint64{3: 4096}},
		{name: "node not a number", in: "7f00 default N0x=1 kernelpagesize_kB=4\n", bad: true},
		{name: "pages not a number", in: "7f00 default N0=-1 kernelpagesize_kB=4\n", bad: true},
		{name: "N field without =", in: "7f00 default N0 kernelpagesize_kB=4\n", bad: true},
		{name: "no page size", in: "7f00 default anon=1 N0=1\n", bad: true},
		{name: "zero page size", in: "7f00 default anon=1 N0=1 kernelpagesize_kB=0\n", bad: true},
		{name: "page size not a number", in: "7f00 default N0=1 kernelpagesize_kB=4k\n", bad: true},
		{name: "node out of range", in: "7f00 default N1024=1 kernelpagesize_kB=4\n", bad: true},
		{name: "overflow", in: "7f00 default N0=9999999999999999999 kernelpagesize_kB=1048576\n", bad: true},
		{name: "sum overflows", in: strings.Repeat("7f00 default N0=4000000000000000 kernelpagesize_kB=1024\n", 5), bad: true},
		{name: "too many digits", in: "7f00 default N0=99999999999999999999 kernelpagesize_kB=4\n", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseNUMAMaps(strings.NewReader(tc.in))
			if tc.bad {
				if err == nil {
					t.Fatalf("got %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// A parser reused from file to file starts each from nothing.
func TestNUMAMapsScratchReuse(t *testing.T) {
	var s numaMapsScratch
	buf := make([]byte, 128)
	if _, err := s.parse(strings.NewReader("7f00 default N0=1 N1=2 kernelpagesize_kB=4\n"), buf); err != nil {
		t.Fatal(err)
	}
	got, err := s.parse(strings.NewReader("7f00 default N1=1 kernelpagesize_kB=4\n"), buf)
	if err != nil || !maps.Equal(got, map[int]uint64{1: 4096}) {
		t.Fatalf("got %v, %v; want only node 1's 4096 bytes", got, err)
	}
	// Lines longer than the initial buffer are read whole.
	long := "7f00 default file=/" + strings.Repeat("a", 5000) + " N2=1 kernelpagesize_kB=4\n"
	if got, err := s.parse(strings.NewReader(long), buf); err != nil || got[2] != 4096 {
		t.Fatalf("long line: got %v, %v", got, err)
	}
}

func BenchmarkParseNUMAMaps(b *testing.B) {
	in := strings.Repeat(numaMapsVM, 48) // about 522 lines, as on the VM
	var s numaMapsScratch
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.parse(strings.NewReader(in), buf); err != nil {
			b.Fatal(err)
		}
	}
}

// statLine is a thread's stat as the kernel writes it (modelled on one
// read on the VM), last CPU cpu.
func statLine(comm string, cpu string) string {
	return "4242 (" + comm + ") S 1 4242 4242 0 -1 4194560 120394 0 12 0 10234 2345 0 0 20 0 34 0 " +
		"1234567 21474836480 1048576 18446744073709551615 94873740963840 94873740983721 140737324577520 0 0 " +
		"0 16386 0 0 0 0 0 17 " + cpu + " 0 0 0 0 0 94873740999728 94873741001344 94874722516992 140737324579327 " +
		"140737324579347 140737324579347 140737324580843 0\n"
}

func TestParseStatCPU(t *testing.T) {
	if f := strings.Fields(statLine("python", "37")); len(f) != 52 || f[38] != "37" {
		t.Fatalf("statLine is not shaped like the kernel's: %d fields, field 39 %q", len(f), f[38])
	}
	for _, tc := range []struct {
		in   string
		want int
		bad  bool
	}{
		{in: statLine("python", "37"), want: 37},
		{in: statLine("my (weird) proc", "5"), want: 5},
		{in: statLine("a) S 1 2 3 4 5 6", "112"), want: 112},
		{in: statLine(") ) )", "0"), want: 0},
		{in: strings.TrimSuffix(statLine("x", "9"), "\n"), want: 9},
		{in: statLine("x", "-1"), bad: true},
		{in: statLine("x", "8192"), bad: true},
		{in: statLine("x", "zz"), bad: true},
		{in: "4242 (python) S 1 2 3\n", bad: true},
		{in: "4242 python S 1 2 3\n", bad: true},
		{in: "", bad: true},
	} {
		got, err := parseStatCPU([]byte(tc.in))
		switch {
		case tc.bad && err == nil:
			t.Errorf("parseStatCPU(%q) = %d, want an error", tc.in, got)
		case !tc.bad && (err != nil || got != tc.want):
			t.Errorf("parseStatCPU(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseStatusCPUs(t *testing.T) {
	status := "Name:\tpython\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nThreads:\t34\n" +
		"Cpus_allowed:\tffffffff\nCpus_allowed_list:\t0-31\nMems_allowed_list:\t0\n"
	cpus, found, err := parseStatusCPUs([]byte(status))
	if err != nil || !found || cpus.String() != "0-31" {
		t.Fatalf("got %v, %v, %v; want 0-31", cpus, found, err)
	}
	if _, found, err := parseStatusCPUs([]byte("Name:\tx\n")); found || err != nil {
		t.Fatalf("no Cpus_allowed_list: found %v, err %v", found, err)
	}
	if _, found, err := parseStatusCPUs([]byte("Cpus_allowed_list:\t0-x\n")); found || err == nil {
		t.Fatalf("malformed list: found %v, err %v; want an error", found, err)
	}
	if cpus, found, err := parseStatusCPUs([]byte("Cpus_allowed_list:\t\n")); !found || err != nil || cpus.Count() != 0 {
		t.Fatalf("empty list: %v %v %v", cpus, found, err)
	}
}

// writeProc writes files under root/<pid>.
func writeProc(t *testing.T, root string, pid string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(root, pid, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadProcess(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, "4242", map[string]string{
		"comm":             "my (weird) proc\n",
		"status":           "Name:\tmy (weird) proc\nCpus_allowed_list:\t0-55,112-167\n",
		"cgroup":           "0::/kubepods/burstable/pod" + podU + "/" + ctrID + "\n",
		"task/4242/stat":   statLine("my (weird) proc", "3"),
		"task/4250/stat":   statLine("pt_autograd_0", "120"),
		"task/4251/stat":   statLine("pt_autograd_1", "60"),
		"numa_maps":        "7f00 default anon=3 N0=2 N1=1 kernelpagesize_kB=4\n",
		"task/4252/status": "thread exited: no stat\n",
	})
	p, err := Read(root, 4242)
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != 4242 || p.Comm != "my (weird) proc" || p.PodUID != podU || p.ContainerID != ctrID {
		t.Errorf("identity %+v", p)
	}
	if !p.AllowedCPUs.Valid || p.AllowedCPUs.V.String() != "0-55,112-167" {
		t.Errorf("allowed CPUs %v", p.AllowedCPUs)
	}
	if want := []int{3, 120, 60}; len(p.ThreadCPUs) != 3 || p.ThreadCPUs[0]+p.ThreadCPUs[1]+p.ThreadCPUs[2] != 183 {
		t.Errorf("thread CPUs %v, want %v in any order", p.ThreadCPUs, want)
	}
	if !p.MemoryByNode.Valid || !maps.Equal(p.MemoryByNode.V, map[int]uint64{0: 8192, 1: 4096}) {
		t.Errorf("memory %v", p.MemoryByNode)
	}
}

func TestReadProcessGone(t *testing.T) {
	root := t.TempDir()
	if _, err := Read(root, 999); !errors.Is(err, ErrGone) {
		t.Fatalf("no directory: err %v, want ErrGone", err)
	}
	// Files vanish with the directory: ENOENT on a file of a directory
	// that is gone too.
	writeProc(t, root, "1000", map[string]string{"comm": "x\n"})
	os.RemoveAll(filepath.Join(root, "1000"))
	if _, err := Read(root, 1000); !errors.Is(err, ErrGone) {
		t.Fatalf("removed: err %v, want ErrGone", err)
	}
	// The process exits between its small files and numa_maps.
	writeProc(t, root, "1002", map[string]string{"comm": "x\n", "numa_maps": ""})
	if _, err := readFiles(root, 1002, nil); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(root, "1002"))
	if _, err := readMemory(root, 1002, newMapsScratch()); !errors.Is(err, ErrGone) {
		t.Fatalf("numa_maps gone: err %v, want ErrGone", err)
	}
	// A file missing from a directory still there is not there on this
	// kernel: nothing to count.
	writeProc(t, root, "1001", map[string]string{"comm": "x\n", "task/1001/stat": statLine("x", "1")})
	p, err := Read(root, 1001)
	if err != nil || p.AllowedCPUs.Valid || p.MemoryByNode.Valid || len(p.ThreadCPUs) != 1 {
		t.Fatalf("trimmed tree: %+v, %v", p, err)
	}
}

// numa_maps needs ptrace rights: without them its value is dropped and
// counted, the rest kept.
func TestReadProcessUnreadable(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, "7", map[string]string{
		"comm": "x\n", "status": "Cpus_allowed_list:\t0-3\n", "cgroup": "0::/\n",
		"task/7/stat": statLine("x", "1"), "numa_maps": "7f00 default N0=1 kernelpagesize_kB=4\n",
	})
	want := makeUnreadable(t, filepath.Join(root, "7", "numa_maps"))
	p, err := Read(root, 7)
	var partial *sampler.PartialError
	if !errors.As(err, &partial) || partial.Count != 1 || !errors.Is(err, want) {
		t.Fatalf("err %v, want a PartialError counting %v once", err, want)
	}
	if p.MemoryByNode.Valid || !p.AllowedCPUs.Valid || len(p.ThreadCPUs) != 1 {
		t.Fatalf("placement %+v: want everything but memory", p)
	}
}

// makeUnreadable makes the file at path fail to read, as a file of
// another user's process does without ptrace rights, and returns the
// error a read gets. Root reads whatever the mode, so there a directory
// in its place stands for the file.
func makeUnreadable(t *testing.T, path string) syscall.Errno {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0); err != nil {
			t.Fatal(err)
		}
		return syscall.EACCES
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	return syscall.EISDIR
}

func TestReadProcessMalformed(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, "8", map[string]string{
		"comm": "x\n", "status": "Cpus_allowed_list:\t0-x\n", "cgroup": "0::/\n",
		"task/8/stat": "8 (x) S 1\n", "numa_maps": "7f00 default N0=z kernelpagesize_kB=4\n",
	})
	p, err := Read(root, 8)
	var partial *sampler.PartialError
	if !errors.As(err, &partial) || partial.Count != 3 {
		t.Fatalf("err %v, want a PartialError counting 3", err)
	}
	if p.Comm != "x" || p.AllowedCPUs.Valid || p.MemoryByNode.Valid || len(p.ThreadCPUs) != 0 {
		t.Fatalf("placement %+v", p)
	}
}

// The running test process reads as a real one.
func TestReadProcessSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/numa_maps"); err != nil {
		t.Skip("no numa_maps here")
	}
	p, err := Read("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if p.Comm == "" || !p.AllowedCPUs.Valid || len(p.ThreadCPUs) == 0 || !p.MemoryByNode.Valid || len(p.MemoryByNode.V) == 0 {
		t.Fatalf("self: %+v", p)
	}
}

// Comm reads a process's name as readFiles does, and is empty for a
// process that is not there.
func TestComm(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "4242"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "4242", "comm"), []byte("python3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Comm(root, 4242); got != "python3" {
		t.Errorf("Comm of 4242 = %q, want python3", got)
	}
	if got := Comm(root, 4343); got != "" {
		t.Errorf("Comm of a process not there = %q, want empty", got)
	}
}

package numa

import (
	"slices"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		count    int
		bad      bool
	}{
		{"0-55,112-167", "0-55,112-167", 112, false},
		{"0-31\n", "0-31", 32, false},
		{"", "", 0, false},
		{"3", "3", 1, false},
		{"0,2,4-5", "0,2,4-5", 4, false},
		{"5-3", "", 0, true},
		{"0-", "", 0, true},
		{"a", "", 0, true},
		{"-1", "", 0, true},
		{"0-99999999", "", 0, true}, // must not allocate for ever
	} {
		got, err := ParseCPUList(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("ParseCPUList(%q) error = %v, want error %v", tc.in, err, tc.bad)
			continue
		}
		if got.String() != tc.want || got.Count() != tc.count {
			t.Errorf("ParseCPUList(%q) = %q (%d CPUs), want %q (%d)", tc.in, got, got.Count(), tc.want, tc.count)
		}
	}
}

func TestCPUSetOps(t *testing.T) {
	a, _ := ParseCPUList("0-55,112-167")
	b, _ := ParseCPUList("50-60")
	if got := a.Intersect(b).String(); got != "50-55" {
		t.Errorf("intersect = %q, want 50-55", got)
	}
	if !a.Contains(112) || a.Contains(56) || a.Contains(-1) || a.Contains(100000) {
		t.Error("Contains wrong")
	}
	c, _ := ParseCPUList("112-167,0-55")
	if !a.Equal(c) || a.Equal(b) {
		t.Error("Equal wrong")
	}
}

func TestParseLinkSpeed(t *testing.T) {
	for _, tc := range []struct {
		in    string
		want  float64
		valid bool
		bad   bool
	}{
		{"32.0 GT/s PCIe", 32e9, true, false},
		{"2.5 GT/s PCIe", 2.5e9, true, false},
		{"8 GT/s", 8e9, true, false}, // kernels before 4.19 print no "PCIe"
		{"Unknown", 0, false, false},
		{"Unknown speed", 0, false, false},
		{"", 0, false, false},
		{"fast", 0, false, true},
		{"32.0 Gb/s", 0, false, true},
		{"-5 GT/s", 0, false, true},
	} {
		got, err := parseLinkSpeed(tc.in)
		if (err != nil) != tc.bad || got.Valid != tc.valid || got.V != tc.want {
			t.Errorf("parseLinkSpeed(%q) = %v, %v; want %v valid=%v err=%v", tc.in, got, err, tc.want, tc.valid, tc.bad)
		}
	}
	if g := Generation(32e9); g != 5 {
		t.Errorf("Generation(32e9) = %d", g)
	}
	if g := Generation(12e9); g != 0 {
		t.Errorf("Generation(12e9) = %d, want 0", g)
	}
	// links.md: Gen5 x16 is 63.0 GB/s, Gen4 x8 15.75 GB/s, one direction.
	if bw := LaneBandwidth(32e9) * 16; bw < 63.0e9 || bw > 63.1e9 {
		t.Errorf("Gen5 x16 = %v", bw)
	}
	if bw := LaneBandwidth(16e9) * 8; bw < 15.75e9 || bw > 15.76e9 {
		t.Errorf("Gen4 x8 = %v", bw)
	}
}

func TestParseNodeFiles(t *testing.T) {
	d, err := parseDistances("10 21", []int{0, 1})
	if err != nil || d[0] != 10 || d[1] != 21 {
		t.Errorf("distances = %v, %v", d, err)
	}
	if _, err := parseDistances("10 21 32", []int{0, 1}); err == nil {
		t.Error("3 distances for 2 nodes accepted")
	}
	st, err := parseKeyValues("numa_hit 554609\nnuma_miss 0\nbogus\nother_node 7\n")
	if err == nil || st["numa_hit"] != 554609 || st["other_node"] != 7 || len(st) != 3 {
		t.Errorf("numastat = %v, %v; want 3 values and an error for the bad line", st, err)
	}
	mem, err := parseNodeMeminfo("Node 0 MemTotal:        4812272 kB\nNode 0 MemFree:         3381940 kB\nNode 0 HugePages_Total:     0\n")
	if err != nil || mem["MemTotal"] != 4812272*1024 || mem["MemFree"] != 3381940*1024 {
		t.Errorf("meminfo = %v, %v", mem, err)
	}
}

func TestNaturalCompare(t *testing.T) {
	names := []string{"mlx5_10", "mlx5_2", "mlx5_1", "rdmap79s0", "mlx5_0", "rdmap160s0"}
	slices.SortFunc(names, NaturalCompare)
	want := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_10", "rdmap79s0", "rdmap160s0"}
	if !slices.Equal(names, want) {
		t.Errorf("sorted = %v, want %v", names, want)
	}
}

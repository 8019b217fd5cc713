package machine

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// process writes proc/<pid>: comm, cgroup, environ (where the model
// gives one), status, stat, numa_maps and task/<tid>/stat for every
// thread.
func (w *writer) process(p *Process) {
	t := w.t
	dir := fmt.Sprintf("proc/%d", p.PID)
	maps := w.maps[p.PID]
	main := p.Threads[0] // check made sure the main thread is there
	for _, th := range p.Threads {
		if th.TID == p.PID {
			main = th
		}
	}
	t.line(dir+"/comm", p.Comm)
	t.line(dir+"/cgroup", "0::"+p.Cgroup)
	if len(p.Environ) > 0 {
		t.file(dir+"/environ", strings.Join(p.Environ, "\x00")+"\x00")
	}
	t.file(dir+"/status", w.status(p, maps))
	t.file(dir+"/stat", stat(p, main, maps))
	t.file(dir+"/numa_maps", maps.text)
	for _, th := range p.Threads {
		t.file(fmt.Sprintf("%s/task/%d/stat", dir, th.TID), stat(p, th, maps))
	}
}

// vma is one mapping of the numa_maps layout every fake process shares.
type vma struct {
	addr uint64
	what string // " file=...", " heap", " stack", or "" for plain anonymous memory
	kind pageKind
	// perMille is the mapping's share of each node's pages; 0 gives a
	// line without pages, such as a guard region or a device mapping.
	perMille uint64
}

type pageKind uint8

const (
	anonPages  pageKind = iota // anon= dirty= active=0
	spillPages                 // anonPages that also take what does not fill a hugepage
	filePages                  // mapped=
	hugePages                  // hugetlbfs: dirty=, counted in 2 MiB pages
)

// hugeRatio is 2 MiB pages in 4 KiB pages.
const hugeRatio = 512

// layout lists a process's mappings in address order, as numa_maps does.
// The shares add up to 1000.
func layout(p *Process) []vma {
	exe := p.Exe
	if exe == "" {
		exe = "/usr/bin/" + p.Comm
	}
	return []vma{
		{0x00400000, " file=" + exe, filePages, 3},
		{0x01d8a000, " heap", anonPages, 60},
		{0x7ffd0000, "", anonPages, 0},
		{0x7f2a00000000, "", anonPages, 400},
		{0x7f2c00000000, "", spillPages, 316},
		{0x7f2e00000000, ` file=/anon_hugepage\040(deleted)`, hugePages, 200},
		{0x7f3000000000, " file=/dev/nvidiactl", filePages, 0},
		{0x7f3100000000, " file=/usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07", filePages, 20},
		{0x7f3200000000, " file=/usr/lib/x86_64-linux-gnu/libc.so.6", filePages, 0},
		{0x7ffd12340000, " stack", anonPages, 1},
	}
}

// mapsInfo is a process's numa_maps and the totals status and stat show.
type mapsInfo struct {
	text          string
	anonKB        uint64   // RssAnon
	fileKB        uint64   // RssFile
	hugetlbKB     uint64   // HugetlbPages, which is not part of VmRSS
	hugePerNode   []uint64 // 2 MiB pages by node
	residentPages uint64   // stat's rss, in 4 KiB pages
}

// numaMaps spreads each node's pages over the layout's mappings so that
// every line shows the process's placement and the lines add up to Pages
// exactly.
func numaMaps(p *Process) mapsInfo {
	vmas := layout(p)
	counts := make([][]uint64, len(vmas)) // counts[vma][node]
	for i := range counts {
		counts[i] = make([]uint64, len(p.Pages))
	}
	huge := slices.IndexFunc(vmas, func(v vma) bool { return v.kind == hugePages })
	spill := slices.IndexFunc(vmas, func(v vma) bool { return v.kind == spillPages })
	for n, pages := range p.Pages {
		for i, c := range apportion(pages, vmas) {
			counts[i][n] = c
		}
		// Whole hugepages only; the rest stays in small pages.
		counts[spill][n] += counts[huge][n] % hugeRatio
		counts[huge][n] /= hugeRatio
	}
	var info mapsInfo
	var b strings.Builder
	for i, v := range vmas {
		fmt.Fprintf(&b, "%x default%s", v.addr, v.what)
		if v.kind == hugePages {
			b.WriteString(" huge")
		}
		var total uint64
		for _, c := range counts[i] {
			total += c
		}
		if total == 0 {
			b.WriteByte('\n')
			continue
		}
		// The kernel prints anon, dirty, mapped (when it differs from
		// both) and active (when below the total, never for hugetlbfs).
		pageKB := uint64(4)
		switch v.kind {
		case anonPages, spillPages:
			fmt.Fprintf(&b, " anon=%d dirty=%d active=0", total, total)
			info.anonKB += total * 4
		case filePages:
			fmt.Fprintf(&b, " mapped=%d", total)
			info.fileKB += total * 4
		case hugePages:
			fmt.Fprintf(&b, " dirty=%d", total)
			pageKB = 4 * hugeRatio
			info.hugetlbKB += total * pageKB
			info.hugePerNode = counts[i]
		}
		for n, c := range counts[i] {
			if c > 0 {
				fmt.Fprintf(&b, " N%d=%d", n, c)
			}
		}
		fmt.Fprintf(&b, " kernelpagesize_kB=%d\n", pageKB)
	}
	info.text = b.String()
	info.residentPages = (info.anonKB + info.fileKB) / 4
	return info
}

// apportion splits pages by the mappings' shares, which add up to 1000,
// handing the pages rounding leaves over to the largest remainders (at
// most one each), so the parts add up exactly.
func apportion(pages uint64, vmas []vma) []uint64 {
	parts := make([]uint64, len(vmas))
	var order []int // mappings with a share, largest remainder first
	left := pages
	for i, v := range vmas {
		parts[i] = pages * v.perMille / 1000
		left -= parts[i]
		if v.perMille > 0 {
			order = append(order, i)
		}
	}
	rem := func(i int) uint64 { return pages * vmas[i].perMille % 1000 }
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rem(b), rem(a)) })
	for _, i := range order[:left] {
		parts[i]++
	}
	return parts
}

// Virtual sizes beyond what is resident: CUDA reserves a large address
// space up front, which is why GPU processes show tens of GiB of VmSize.
const (
	reservedKB = 64 << 20
	exeKB      = 2852
	libKB      = 190412
	stackKB    = 132
)

// status prints proc/<pid>/status in the kernel's layout; fields the
// numa package does not read hold typical values.
func (w *writer) status(p *Process, mi mapsInfo) string {
	rss := mi.anonKB + mi.fileKB
	size := rss + mi.hugetlbKB + reservedKB
	mems := p.MemsAllowed
	if mems == "" {
		var ids []int
		for _, n := range w.m.Nodes {
			ids = append(ids, n.ID)
		}
		mems = FormatList(ids)
	}
	cpus := mustList(p.CPUsAllowed) // check parsed both lists
	rows := []struct{ k, v string }{
		{"Name", p.Comm},
		{"Umask", "0022"},
		{"State", "S (sleeping)"},
		{"Tgid", fmt.Sprint(p.PID)},
		{"Ngid", "0"},
		{"Pid", fmt.Sprint(p.PID)},
		{"PPid", fmt.Sprint(p.PPID)},
		{"TracerPid", "0"},
		{"Uid", "0\t0\t0\t0"},
		{"Gid", "0\t0\t0\t0"},
		{"FDSize", "512"},
		{"Groups", "0"},
		{"NStgid", fmt.Sprint(p.PID)},
		{"NSpid", fmt.Sprint(p.PID)},
		{"NSpgid", fmt.Sprint(p.PID)},
		{"NSsid", fmt.Sprint(p.PPID)},
		{"Kthread", "0"},
		{"VmPeak", kB(size + 1<<20)},
		{"VmSize", kB(size)},
		{"VmLck", kB(0)},
		{"VmPin", kB(0)},
		{"VmHWM", kB(rss)},
		{"VmRSS", kB(rss)},
		{"RssAnon", kB(mi.anonKB)},
		{"RssFile", kB(mi.fileKB)},
		{"RssShmem", kB(0)},
		{"VmData", kB(mi.anonKB + reservedKB/2)},
		{"VmStk", kB(stackKB)},
		{"VmExe", kB(exeKB)},
		{"VmLib", kB(libKB)},
		{"VmPTE", kB(size / 512)},
		{"VmSwap", kB(0)},
		{"HugetlbPages", kB(mi.hugetlbKB)},
		{"CoreDumping", "0"},
		{"THP_enabled", "1"},
		{"untag_mask", "0xffffffffffffffff"},
		{"Threads", fmt.Sprint(len(p.Threads))},
		{"SigQ", "0/4125498"},
		{"SigPnd", "0000000000000000"},
		{"ShdPnd", "0000000000000000"},
		{"SigBlk", "0000000000000000"},
		{"SigIgn", "0000000001001000"},
		{"SigCgt", "0000000180004002"},
		{"CapInh", "0000000000000000"},
		{"CapPrm", "000001ffffffffff"},
		{"CapEff", "000001ffffffffff"},
		{"CapBnd", "000001ffffffffff"},
		{"CapAmb", "0000000000000000"},
		{"NoNewPrivs", "0"},
		{"Seccomp", "0"},
		{"Seccomp_filters", "0"},
		{"Speculation_Store_Bypass", "thread vulnerable"},
		{"SpeculationIndirectBranch", "conditional enabled"},
		{"Cpus_allowed", formatMask(cpus, w.nrCPUs)},
		{"Cpus_allowed_list", FormatList(cpus)},
		{"Mems_allowed", formatMask(mustList(mems), maxNumNodes)},
		{"Mems_allowed_list", mems},
		{"voluntary_ctxt_switches", fmt.Sprint(p.PID * 37)},
		{"nonvoluntary_ctxt_switches", fmt.Sprint(p.PID * 3)},
	}
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "%s:\t%s\n", r.k, r.v)
	}
	return b.String()
}

// kB prints a status memory value as the kernel does: right-aligned in 8
// columns.
func kB(v uint64) string { return fmt.Sprintf("%8d kB", v) }

// stat prints the 52 fields of proc/<pid>/stat or task/<tid>/stat for
// thread th. Field 39 is the CPU the thread last ran on.
func stat(p *Process, th Thread, mi mapsInfo) string {
	size := (mi.anonKB + mi.fileKB + mi.hugetlbKB + reservedKB) * 1024
	tid := uint64(th.TID)
	f := []any{
		th.TID, "(" + p.Comm + ")", "S", p.PPID, p.PID, p.PPID, // pid, comm, state, ppid, pgrp, session
		0, -1, 4194560, // tty_nr, tpgid, flags
		tid * 911, 0, tid % 97, 0, // minflt, cminflt, majflt, cmajflt
		tid * 53, tid * 7, 0, 0, // utime, stime, cutime, cstime
		20, 0, len(p.Threads), 0, // priority, nice, num_threads, itrealvalue
		p.PID * 101, size, mi.residentPages, uint64(math.MaxUint64), // starttime, vsize, rss, rsslim
		0x400000, 0x400000 + exeKB*1024, 0x7ffd12345670, 0, 0, // startcode, endcode, startstack, kstkesp, kstkeip
		0, 0, 0x1001000, 0x180004002, 1, 0, 0, 17, // signal, blocked, sigignore, sigcatch, wchan, nswap, cnswap, exit_signal
		th.CPU, 0, 0, 0, 0, 0, // processor, rt_priority, policy, delayacct_blkio_ticks, guest_time, cguest_time
		0xb2c000, 0xb5e000, 0x1d8a000, // start_data, end_data, start_brk
		0x7ffd12347a10, 0x7ffd12347a3c, 0x7ffd12347a3c, 0x7ffd12347fe8, 0, // arg_start, arg_end, env_start, env_end, exit_code
	}
	// Sprintln separates the fields with single spaces, as the kernel does.
	return fmt.Sprintln(f...)
}

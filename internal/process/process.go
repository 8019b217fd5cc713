// Package process reads where the processes holding GPUs run and keep their
// memory, from procfs: each process's allowed CPUs, the CPU each of its
// threads last ran on, its resident memory by NUMA node (numa_maps), and
// the pod and container or the Slurm job step its cgroup names. Reader
// judges each against its GPU's NUMA node with numa.Judge. The procfs root
// is a parameter, so fixture trees stand in for a machine in tests.
//
// prometheus/procfs reads comm and cgroup. Four files are parsed here
// instead, each for a reason given at its parser: numa_maps (procfs does
// not parse it), each thread's stat (procfs's parser costs several times
// as much, per thread of every process, every sample), status (procfs
// reads a malformed Cpus_allowed_list as CPU 0 and expands ranges without
// a bound) and environ (procfs reads it whole, for the one variable
// wanted, SLURM_JOB_ID).
package process

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sysfs"
	"github.com/gpulink/gpulink_exporter/numa"

	"github.com/prometheus/procfs"
)

// ErrGone is what Read returns (wrapped) when the process
// exited while it was being read: its /proc directory vanished, or the
// kernel answered ESRCH. It is no failure: a process list is out of date as
// soon as it is taken.
var ErrGone = errors.New("process exited")

// maxProcThreads bounds the threads read per process, each one small
// file read. A PyTorch process has a thread per core for OpenMP (224 on a
// DGX H100) plus a few dozen of its own, below this. Beyond it the first
// threads, in the kernel's order (main thread first), stand for the rest.
const maxProcThreads = 512

// maxNUMANode bounds node numbers read from numa_maps: Linux's
// CONFIG_NODES_SHIFT tops out at 10.
const maxNUMANode = 1 << 10

// maxProcFile bounds the small per-process files read whole here
// (status, stat).
const maxProcFile = 1 << 20

// Placement is where a process may run, where its threads last ran
// and where its resident memory is.
type Placement struct {
	PID  int
	Comm string
	// AllowedCPUs is status's Cpus_allowed_list: the CPUs the scheduler
	// may put the process's main thread on (taskset, cgroup cpuset).
	AllowedCPUs sampler.Opt[numa.CPUSet]
	// ThreadCPUs is the CPU each thread last ran on (stat field 39), at
	// most maxProcThreads of them; empty when none could be read.
	ThreadCPUs []int
	// MemoryByNode is resident memory in bytes by NUMA node, summed over
	// numa_maps: anonymous and file pages the process maps. Absent when
	// numa_maps may not be read (it needs ptrace access to the process:
	// root or CAP_SYS_PTRACE).
	MemoryByNode sampler.Opt[map[int]uint64]
	// PodUID and ContainerID come from the process's cgroup path; empty
	// when it is not in a Kubernetes pod or a container.
	PodUID, ContainerID string
	// Slurm is the Slurm job step its cgroup path names (and, where the
	// path gives the job's SLUID alone, its environment's SLURM_JOB_ID);
	// the zero value outside Slurm.
	Slurm SlurmJob
}

// Read reads the placement of process pid under the procfs root. When the process exited
// during the read the error satisfies errors.Is(err, ErrGone) and
// the placement is to be dropped. Values that could not be read (EACCES on
// numa_maps without ptrace rights, hidepid) are left out and counted in a
// *sampler.PartialError returned with the rest.
func Read(root string, pid int) (Placement, error) {
	p, err := readFiles(root, pid, make([]byte, 0, 4096))
	if errors.Is(err, ErrGone) {
		return p, err
	}
	mem, merr := readMemory(root, pid, newMapsScratch())
	if errors.Is(merr, ErrGone) {
		return p, merr
	}
	p.MemoryByNode = mem
	var t sampler.Tally
	t.Merge(err)
	t.Merge(merr)
	return p, t.Err()
}

// procErr sorts a failed read of one of a process's files: the process is
// gone (the error to stop with is returned), the file is not on this
// kernel or in this tree (nothing to count), or the value is dropped and
// counted.
func procErr(t *sampler.Tally, pid int, dir string, err error) (gone error) {
	switch {
	case err == nil:
	case errors.Is(err, syscall.ESRCH):
		return fmt.Errorf("pid %d: %w: %w", pid, ErrGone, err)
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := os.Stat(dir); serr != nil {
			return fmt.Errorf("pid %d: %w: %w", pid, ErrGone, err)
		}
	default:
		t.Add(err)
	}
	return nil
}

// Comm is the command name of process pid under the proc root, as
// readFiles reads it; "" when it cannot be read (gone, or not ours to
// read). For the commands, which name what shared a GPU.
func Comm(root string, pid int) string {
	pfs, err := procfs.NewFS(root)
	if err != nil {
		return ""
	}
	proc, err := pfs.Proc(pid)
	if err != nil {
		return ""
	}
	comm, err := proc.Comm()
	if err != nil {
		return ""
	}
	return comm
}

// readFiles reads everything but numa_maps: comm and cgroup through
// procfs, status and each thread's stat by hand, buf reused for each.
func readFiles(root string, pid int, buf []byte) (Placement, error) {
	p := Placement{PID: pid}
	var t sampler.Tally
	dir := filepath.Join(root, strconv.Itoa(pid))

	// procfs stats the process's directory: a process already gone is
	// found out before anything is read.
	pfs, err := procfs.NewFS(root)
	if err != nil {
		return p, err
	}
	proc, err := pfs.Proc(pid)
	if gone := procErr(&t, pid, dir, err); gone != nil {
		return p, gone
	}
	if err != nil {
		return p, t.Err()
	}
	comm, err := proc.Comm()
	if gone := procErr(&t, pid, dir, err); gone != nil {
		return p, gone
	}
	p.Comm = comm

	b, err := sysfs.ReadFile(dir+"/status", buf, maxProcFile)
	if gone := procErr(&t, pid, dir, err); gone != nil {
		return p, gone
	}
	if err == nil {
		cpus, found, perr := parseStatusCPUs(b)
		switch {
		case perr != nil:
			t.Add(fmt.Errorf("%s/status: %w", dir, perr))
		case found:
			p.AllowedCPUs = sampler.Some(cpus)
		}
	}

	cgroups, err := proc.Cgroups()
	if err != nil && !errors.As(err, new(*fs.PathError)) {
		err = fmt.Errorf("%s/cgroup: %w", dir, err) // a parse error
	}
	if gone := procErr(&t, pid, dir, err); gone != nil {
		return p, gone
	}
	if err == nil {
		p.PodUID, p.ContainerID = cgroupPod(cgroups)
		p.Slurm = cgroupSlurmJob(cgroups)
	}
	if p.Slurm.SLUID != "" && p.Slurm.ID == "" {
		id, found, err := readEnvironJobID(dir + "/environ")
		if gone := procErr(&t, pid, dir, err); gone != nil {
			return p, gone
		}
		if found {
			p.Slurm.ID = id
		}
	}

	cpus, err := threadCPUs(dir, b, &t)
	if gone := procErr(&t, pid, dir, err); gone != nil {
		return p, gone
	}
	p.ThreadCPUs = cpus
	return p, t.Err()
}

// threadCPUs reads the last CPU of each thread. A thread that exits
// between listing and reading is skipped; the task directory itself
// missing means the process is gone.
func threadCPUs(dir string, buf []byte, t *sampler.Tally) ([]int, error) {
	d, err := os.Open(dir + "/task")
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(maxProcThreads)
	d.Close()
	if err != nil && err != io.EOF {
		return nil, err
	}
	cpus := make([]int, 0, len(names))
	for _, tid := range names {
		path := dir + "/task/" + tid + "/stat"
		b, err := sysfs.ReadFile(path, buf, maxProcFile)
		buf = b
		switch {
		case err == nil:
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ESRCH):
			continue // the thread exited
		default:
			t.Add(err)
			continue
		}
		cpu, err := parseStatCPU(b)
		if err != nil {
			t.Add(fmt.Errorf("%s: %w", path, err))
			continue
		}
		cpus = append(cpus, cpu)
	}
	return cpus, nil
}

// mapsScratch is what a numa_maps reader reuses from file to file.
type mapsScratch struct {
	buf  []byte
	numa numaMapsScratch
}

// numaMapsBuffer is the size of each numa_maps read. The kernel walks
// the page tables while it fills the buffer, so the read is long (about
// 7 ms for a PyTorch process of 1.8 GiB resident); a buffer that takes
// the whole file (650 lines, 70 KB, in that process) makes it one read,
// not several, each of which must win a scheduler slot back at
// GOMAXPROCS=1.
const numaMapsBuffer = 128 << 10

func newMapsScratch() *mapsScratch { return &mapsScratch{buf: make([]byte, numaMapsBuffer)} }

// readMemory reads numa_maps: resident bytes by node. It streams
// the file through the parser, read once and never held whole.
func readMemory(root string, pid int, s *mapsScratch) (sampler.Opt[map[int]uint64], error) {
	var t sampler.Tally
	dir := filepath.Join(root, strconv.Itoa(pid))
	path := dir + "/numa_maps"
	fd, err := sysfs.Open(path)
	if gone := procErr(&t, pid, dir, err); gone != nil || err != nil {
		return sampler.Opt[map[int]uint64]{}, cmp.Or(gone, t.Err())
	}
	defer syscall.Close(fd)
	m, err := s.numa.parse(sysfs.FDReader{FD: fd, Path: path}, s.buf)
	if err != nil && !errors.As(err, new(*fs.PathError)) {
		err = fmt.Errorf("%s: %w", path, err) // a parse error
	}
	if gone := procErr(&t, pid, dir, err); gone != nil || err != nil {
		return sampler.Opt[map[int]uint64]{}, cmp.Or(gone, t.Err())
	}
	return sampler.Some(m), nil
}

// parseNUMAMaps sums a numa_maps file by node, in bytes: each line's
// N<node>=<pages> times its kernelpagesize_kB. Hugetlb lines count huge
// pages and give the huge page size; transparent huge pages are counted
// in base pages. Lines with no N fields (nothing resident) count nothing.
// A malformed N or kernelpagesize_kB field is an error.
func parseNUMAMaps(r io.Reader) (map[int]uint64, error) {
	var s numaMapsScratch
	return s.parse(r, make([]byte, 4096))
}

type nodePages struct {
	node  int
	pages uint64
}

// numaMapsScratch keeps the parser's slices between files.
type numaMapsScratch struct {
	byNode []uint64
	seen   []bool
	line   []nodePages
}

func (s *numaMapsScratch) parse(r io.Reader, buf []byte) (map[int]uint64, error) {
	clear(s.byNode)
	clear(s.seen)
	sc := bufio.NewScanner(r)
	// A line holds at most a path of 4096 bytes, each byte escaped to 4
	// at worst, and a few dozen fields.
	sc.Buffer(buf, max(len(buf), 64<<10))
	lineNo := 0
	for sc.Scan() {
		lineNo++
		if err := s.line1(sc.Bytes()); err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := map[int]uint64{}
	for n, ok := range s.seen {
		if ok {
			out[n] = s.byNode[n]
		}
	}
	return out, nil
}

var pageSizeKey = []byte("kernelpagesize_kB=")

// line1 adds one numa_maps line, as the kernel writes it:
//
//	7f3a1c000000 default anon=8448 dirty=8448 active=0 N0=6144 N1=2304 kernelpagesize_kB=4
//
// The policy may hold a space ("prefer (many):0-1"); a file path may not
// (the kernel escapes it as \040).
func (s *numaMapsScratch) line1(b []byte) error {
	s.line = s.line[:0]
	var pageKB uint64
	for len(b) > 0 {
		var tok []byte
		tok, b = nextToken(b, ' ')
		switch {
		case len(tok) >= 2 && tok[0] == 'N' && tok[1] >= '0' && tok[1] <= '9':
			eq := bytes.IndexByte(tok, '=')
			if eq < 0 {
				return fmt.Errorf("field %q: want N<node>=<pages>", tok)
			}
			node, ok1 := parseDecimal(tok[1:eq])
			pages, ok2 := parseDecimal(tok[eq+1:])
			if !ok1 || !ok2 || node >= maxNUMANode {
				return fmt.Errorf("field %q: want N<node>=<pages>", tok)
			}
			s.line = append(s.line, nodePages{int(node), pages})
		case bytes.HasPrefix(tok, pageSizeKey):
			v, ok := parseDecimal(tok[len(pageSizeKey):])
			if !ok || v == 0 || v > 1<<30 {
				return fmt.Errorf("field %q: want a page size in kB", tok)
			}
			pageKB = v
		}
	}
	if len(s.line) == 0 {
		return nil
	}
	if pageKB == 0 {
		return errors.New("node page counts (N<node>=) without kernelpagesize_kB")
	}
	pageBytes := pageKB << 10
	for _, np := range s.line {
		if np.pages > math.MaxUint64/pageBytes {
			return fmt.Errorf("node %d: %d pages of %d kB overflows", np.node, np.pages, pageKB)
		}
		for len(s.byNode) <= np.node {
			s.byNode = append(s.byNode, 0)
			s.seen = append(s.seen, false)
		}
		sum := s.byNode[np.node] + np.pages*pageBytes
		if sum < s.byNode[np.node] {
			return fmt.Errorf("node %d total overflows", np.node)
		}
		s.byNode[np.node], s.seen[np.node] = sum, true
	}
	return nil
}

// parseDecimal parses an unsigned decimal without allocating.
func parseDecimal(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 { // 19 digits always fit in 64 bits
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// parseStatCPU returns the CPU a task last ran on, field 39 of its stat
// line. The command name (field 2) may hold spaces and parentheses, so
// fields are counted from after the last ')'.
//
// procfs's Proc.Stat parses the line too, but this file is read once per
// thread of every process, every sample, and there procfs costs several
// times as much: os.Open and io.ReadAll for each file, fmt.Fscan over
// 42 fields. With procfs reading the threads' stat (and status),
// BenchmarkPlacementSample (8 processes of 34 threads) took 1.4 to 2.4
// times as long (8 interleaved runs on a loaded 2-core machine) with 7
// times the allocations. Proc.Stat also panics on a line that ends at
// the ')'.
func parseStatCPU(b []byte) (int, error) {
	r := bytes.LastIndexByte(b, ')')
	if r < 0 {
		return 0, errors.New("stat: no ')' closing the command name")
	}
	b = bytes.TrimRight(b[r+1:], "\n") // the kernel ends the line, never breaks it
	field := 2
	for len(b) > 0 {
		var tok []byte
		tok, b = nextToken(b, ' ')
		if len(tok) == 0 {
			continue
		}
		if field++; field == 39 {
			v, ok := parseDecimal(tok)
			if !ok || v >= numa.MaxCPU {
				return 0, fmt.Errorf("stat: processor field %q is not a CPU number", tok)
			}
			return int(v), nil
		}
	}
	return 0, fmt.Errorf("stat: %d fields, want at least 39", field)
}

var allowedListKey = []byte("Cpus_allowed_list:")

// parseStatusCPUs finds Cpus_allowed_list in a status file. found is
// false when the kernel does not print it. procfs's ProcStatus has it
// too, but turns a malformed list into CPU 0 and expands ranges without
// a bound; ParseCPUList does neither.
func parseStatusCPUs(b []byte) (cpus numa.CPUSet, found bool, err error) {
	for len(b) > 0 {
		var line []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		if v, ok := bytes.CutPrefix(line, allowedListKey); ok {
			cpus, err = numa.ParseCPUList(string(v))
			return cpus, err == nil, err
		}
	}
	return numa.CPUSet{}, false, nil
}

// nextToken splits b at the first sep: the token before it and the rest
// after it, or all of b and nothing when there is none. It allocates
// nothing, which matters in the numa_maps and stat loops.
func nextToken(b []byte, sep byte) (tok, rest []byte) {
	if i := bytes.IndexByte(b, sep); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

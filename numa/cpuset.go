package numa

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// MaxCPU bounds CPU numbers read from the machine, so a corrupt list cannot
// make a set allocate without limit. Linux's NR_CPUS tops out at 8192.
const MaxCPU = 1 << 13

// CPUSet is a set of logical CPU numbers.
type CPUSet struct {
	words []uint64
}

// ParseCPUList parses the kernel's list format ("0-55,112-167"; empty for
// no CPUs), as in cpulist, local_cpulist and Cpus_allowed_list.
func ParseCPUList(s string) (CPUSet, error) {
	var set CPUSet
	s = strings.TrimSpace(s)
	if s == "" {
		return set, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseCPU(lo)
		if err != nil {
			return CPUSet{}, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = parseCPU(hi); err != nil {
				return CPUSet{}, fmt.Errorf("cpu list %q: %w", s, err)
			}
			if b < a {
				return CPUSet{}, fmt.Errorf("cpu list %q: range %d-%d runs backwards", s, a, b)
			}
		}
		for c := a; c <= b; c++ {
			set.Add(c)
		}
	}
	return set, nil
}

func parseCPU(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	if n < 0 || n >= MaxCPU {
		return 0, fmt.Errorf("cpu %d out of range", n)
	}
	return n, nil
}

// Add puts cpu in the set; out-of-range CPUs are ignored.
func (s *CPUSet) Add(cpu int) {
	if cpu < 0 || cpu >= MaxCPU {
		return
	}
	w := cpu / 64
	for len(s.words) <= w {
		s.words = append(s.words, 0)
	}
	s.words[w] |= 1 << (cpu % 64)
}

// Contains reports whether cpu is in the set.
func (s CPUSet) Contains(cpu int) bool {
	w := cpu / 64
	return cpu >= 0 && w < len(s.words) && s.words[w]&(1<<(cpu%64)) != 0
}

// Count is the number of CPUs in the set.
func (s CPUSet) Count() int {
	n := 0
	for _, w := range s.words {
		n += bits.OnesCount64(w)
	}
	return n
}

// Intersect returns the CPUs in both sets.
func (s CPUSet) Intersect(o CPUSet) CPUSet {
	n := min(len(s.words), len(o.words))
	out := CPUSet{words: make([]uint64, n)}
	for i := range n {
		out.words[i] = s.words[i] & o.words[i]
	}
	return out
}

// Equal reports whether both sets hold the same CPUs.
func (s CPUSet) Equal(o CPUSet) bool {
	for i := range max(len(s.words), len(o.words)) {
		var a, b uint64
		if i < len(s.words) {
			a = s.words[i]
		}
		if i < len(o.words) {
			b = o.words[i]
		}
		if a != b {
			return false
		}
	}
	return true
}

// CPUs lists the set's CPUs in ascending order.
func (s CPUSet) CPUs() []int {
	var out []int
	for i, w := range s.words {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			out = append(out, i*64+b)
			w &^= 1 << b
		}
	}
	return out
}

// String returns the kernel's list format, as nvidia-smi topo -m prints
// CPU affinity.
func (s CPUSet) String() string {
	var b strings.Builder
	cpus := s.CPUs()
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

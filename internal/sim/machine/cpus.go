package machine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The numa package has its own CPU set; it is not used here because numa's
// tests import this package.

// parseList parses the kernel's list form, "0-55,112-167", into ascending
// numbers.
func parseList(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("list %q: %w", s, err)
			}
		}
		if a < 0 || b < a {
			return nil, fmt.Errorf("list %q: bad range %q", s, part)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// mustList parses a list written in this package's own profiles.
func mustList(s string) []int {
	l, err := parseList(s)
	if err != nil {
		panic(err)
	}
	return l
}

// FormatList prints ascending numbers in the kernel's list form.
func FormatList(ns []int) string {
	var b strings.Builder
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ns[i]))
		if j > i {
			fmt.Fprintf(&b, "-%d", ns[j])
		}
		i = j + 1
	}
	return b.String()
}

// formatMask prints a set as the kernel's "%*pb" does for a bitmap of
// nbits bits (local_cpus, cpumap, Cpus_allowed, Mems_allowed): 32-bit hex
// groups, most significant first, separated by commas, the first group
// only as wide as the bits it holds.
func formatMask(set []int, nbits int) string {
	var b strings.Builder
	chunk := nbits % 32
	if chunk == 0 {
		chunk = 32
	}
	for lo := (nbits+31)/32*32 - 32; lo >= 0; lo -= 32 {
		var v uint32
		for _, n := range set {
			if n >= lo && n < lo+chunk {
				v |= 1 << (n - lo)
			}
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%0*x", (chunk+3)/4, v)
		chunk = 32
	}
	return b.String()
}

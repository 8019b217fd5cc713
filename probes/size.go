package probes

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/alecthomas/units"
)

// ParseSize takes plain bytes or a size with a unit for flag; the
// options' Validate checks the range.
func ParseSize(flag, s string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		b, uerr := units.ParseBase2Bytes(strings.TrimSpace(s))
		if uerr != nil {
			return 0, fmt.Errorf("%s=%s: want bytes or a size such as 64MiB", flag, s)
		}
		n = int64(b)
	}
	return n, nil
}

// SizeString is n bytes as a table shows it.
func SizeString(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

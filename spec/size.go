package spec

import (
	"fmt"
	"strconv"
	"strings"
)

// Size is a byte count such as "512MiB", "1G" or "65536". It stays a string in the spec so that a bad value is
// reported by validation with its field path.
type Size string

// Bounds of a log cap.
const (
	MinLogCap = 64 << 10
	MaxLogCap = 1 << 50
)

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseSize reads a byte count: a whole number with an optional unit, KiB/MiB/GiB/TiB (or K/M/G/T) in powers
// of 1024, KB/MB/GB/TB in powers of 1000, B or none for bytes.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok && rest != "" {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size: use a whole number of bytes with an optional unit, e.g. 512MiB, 1GiB, 100MB", short(s))
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is too large", short(s))
	}
	return n * mult, nil
}

// FormatSize writes a byte count in the largest binary unit that keeps it whole, or one decimal.
func FormatSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d %s", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// logCap checks a log cap at path; an empty one is left out.
func (v *validator) logCap(path string, s Size) {
	if s == "" {
		return
	}
	n, err := ParseSize(string(s))
	switch {
	case err != nil:
		v.add(path, "%v", err)
	case n < MinLogCap || n > MaxLogCap:
		v.add(path, "%s is outside %s..%s; leave it out to keep the host worker's --log-cap", FormatSize(n), FormatSize(MinLogCap), FormatSize(MaxLogCap))
	}
}

// mustSize reads a size validation has accepted; "" is fallback.
func mustSize(s Size, fallback int64) int64 {
	if s == "" {
		return fallback
	}
	n, _ := ParseSize(string(s))
	return n
}

package spec

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseDays reads a duration that may be given in whole days ("30d"), as retention periods are, or as Go writes
// durations ("12h", "90m").
func ParseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 || days > 100*365 {
			return 0, fmt.Errorf("%q is not a number of days from 0 to 36500 (as 30d)", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: give days (30d) or hours, minutes or seconds (12h, 90m)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	return d, nil
}

// FormatDays writes a duration as ParseDays reads it: in days when it is whole days, else without Go's zero
// minutes and seconds ("10h", "1h30m", not "10h0m0s").
func FormatDays(d time.Duration) string {
	if day := 24 * time.Hour; d > 0 && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

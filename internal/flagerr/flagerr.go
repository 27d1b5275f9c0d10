// Package flagerr says a flag.FlagSet's parse errors as the clusterrun commands' help spells their flags.
package flagerr

import (
	"flag"
	"fmt"
	"strings"
	"time"
)

// Problem turns an error of fs.Parse into one line that names the flag as the help spells it (--name) and says
// what would be right: the nearest flag for one that does not exist, the kind of value for one that does not
// parse. hint ends the line (" (see CMD --help)"). The flag package's own message (-name, "parse error") comes
// with the whole usage, which buries it: parse with fs's output discarded.
func Problem(fs *flag.FlagSet, err error, hint string) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		name = strings.TrimPrefix(name, "-")
		if near := nearestFlag(fs, name); near != "" {
			return fmt.Sprintf("unknown flag --%s; did you mean --%s?%s", name, near, hint)
		}
		return fmt.Sprintf("unknown flag --%s%s", name, hint)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		name = strings.TrimPrefix(name, "-")
		return fmt.Sprintf("--%s needs a value: %s%s", name, valueKind(fs.Lookup(name)), hint)
	}
	var value, name string
	if _, e := fmt.Sscanf(msg, "invalid value %q for flag -%s", &value, &name); e == nil {
		name = strings.TrimSuffix(name, ":")
		return fmt.Sprintf("--%s %q: want %s%s", name, value, valueKind(fs.Lookup(name)), hint)
	}
	if _, e := fmt.Sscanf(msg, "invalid boolean value %q for -%s", &value, &name); e == nil {
		name = strings.TrimSuffix(name, ":")
		return fmt.Sprintf("--%s=%s: want true or false%s", name, value, hint)
	}
	return strings.ReplaceAll(msg, " -", " --") + hint
}

// valueKind says what a flag takes, for a value that did not parse.
func valueKind(f *flag.Flag) string {
	if f == nil {
		return "a value"
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return "a value"
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a duration such as 30s, 5m or 1h"
	case int, int64, uint, uint64:
		return "a whole number"
	case float64:
		return "a number"
	case bool:
		return "true or false"
	}
	return "a value"
}

// nearestFlag is the flag of fs whose name is closest to name: one that starts with it, or that it starts
// with, or within two edits of it; "" when none is.
func nearestFlag(fs *flag.FlagSet, name string) string {
	best, bestDist := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if len(name) >= 3 && (strings.HasPrefix(f.Name, name) || strings.HasPrefix(name, f.Name)) {
			d = min(d, 1)
		}
		if d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

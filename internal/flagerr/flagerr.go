// Package flagerr says a flag.FlagSet's parse errors as the clusterrun commands' help spells their flags, and
// finds the name a mistyped one was meant to be.
package flagerr

import (
	"flag"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Problem turns an error of fs.Parse into one line that names the flag as the help spells it (--name, and -n
// for a one-letter flag) and says what would be right: the nearest flag for a mistyped name (not for one letter,
// which every other letter is as near to), the kind of value for one that does not parse. hint ends the line (" (see CMD --help)"). The flag package's own message (-name, "parse error") comes
// with the whole usage, which buries it: parse with fs's output discarded.
func Problem(fs *flag.FlagSet, err error, hint string) string {
	msg := err.Error()
	if name, near, ok := UnknownFlag(fs, err); ok {
		if near != "" {
			return fmt.Sprintf("unknown flag %s; did you mean %s?%s", spell(name), spell(near), hint)
		}
		return fmt.Sprintf("unknown flag %s%s", spell(name), hint)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		name = strings.TrimPrefix(name, "-")
		return fmt.Sprintf("%s needs a value: %s%s", spell(name), valueKind(fs.Lookup(name)), hint)
	}
	var value, name string
	if _, e := fmt.Sscanf(msg, "invalid value %q for flag -%s", &value, &name); e == nil {
		name = strings.TrimSuffix(name, ":")
		// A flag's own Set says what is wrong in its words; the number and duration parsers only say that it
		// did not parse.
		if _, reason, ok := strings.Cut(msg, "for flag -"+name+": "); ok && reason != "parse error" && reason != "value out of range" &&
			!strings.HasPrefix(reason, "time: ") {
			if strings.HasSuffix(name, "key") || strings.Contains(name, "token") || strings.Contains(name, "password") {
				return fmt.Sprintf("%s (value not shown): %s%s", spell(name), reason, hint) // a secret stays off the terminal and the logs
			}
			return fmt.Sprintf("%s %q: %s%s", spell(name), value, reason, hint)
		}
		return fmt.Sprintf("%s %q: want %s%s", spell(name), value, valueKind(fs.Lookup(name)), hint)
	}
	if _, e := fmt.Sscanf(msg, "invalid boolean value %q for -%s", &value, &name); e == nil {
		name = strings.TrimSuffix(name, ":")
		return fmt.Sprintf("%s=%s: want true or false%s", spell(name), value, hint)
	}
	return strings.ReplaceAll(msg, " -", " --") + hint
}

// spell writes a flag's name as the help does: -n for one letter, --name for more.
func spell(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// valueKind says what a flag takes, for a value that did not parse.
func valueKind(f *flag.Flag) string {
	if f == nil {
		return "a value"
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return usageOr(f)
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
	return usageOr(f)
}

// usageOr is what a flag of text is, as its help says ("the error that makes the run fail"), or "a value".
func usageOr(f *flag.Flag) string {
	if f.Usage == "" {
		return "a value"
	}
	return f.Usage
}

// UnknownFlag says whether err, from fs.Parse, is a flag fs does not have: its name, and the flag of fs it is
// close to ("" when none is).
func UnknownFlag(fs *flag.FlagSet, err error) (name, near string, ok bool) {
	name, ok = strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return "", "", false
	}
	name = strings.TrimPrefix(name, "-")
	if len(name) > 1 {
		near = nearestFlag(fs, name)
	}
	return name, near, true
}

// nearestFlag is the flag of fs whose name is closest to name (Nearest), or "".
func nearestFlag(fs *flag.FlagSet, name string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return Nearest(name, names)
}

// Nearest is the one of names closest to word: one that starts with it, or that it starts with, or within an
// edit per three letters of it (a letter mistyped, left out, added, or two swapped); "" when none is.
func Nearest(word string, names []string) string { return nearest(word, names, true) }

// Closest is Nearest without the prefixes: a name within an edit per three letters of word, the first of the
// closest. For names among thousands (the programs on a PATH), where many start alike.
func Closest(word string, names []string) string { return nearest(word, names, false) }

func nearest(word string, names []string, prefixes bool) string {
	best, bestDist := "", max(1, len(word)/3)+1
	for _, n := range names {
		d := editDistance(word, n)
		if prefixes && len(word) >= 3 && (strings.HasPrefix(n, word) || strings.HasPrefix(word, n)) {
			d = min(d, 1)
		}
		if d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// Within is the first of names at most edits edits from word (as editDistance counts them), or "".
func Within(word string, names []string, edits int) string {
	best, bestDist := "", edits+1
	for _, n := range names {
		if d := editDistance(word, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the edit distance between a and b, where swapping two neighbouring letters is one edit
// (optimal string alignment).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// PrintDefaults lists fs's flags as the commands' usage lines and messages spell them, --name (a one-letter
// flag -n), each with the kind of value it takes, its usage and a default that is not the zero value; the flag
// package's own list says -name.
func PrintDefaults(fs *flag.FlagSet) {
	out := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		kind, usage := flag.UnquoteUsage(f)
		line := "  " + dash + f.Name
		if kind != "" {
			line += " " + kind
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		if !isZeroValue(f) {
			if g, ok := f.Value.(flag.Getter); ok {
				if _, isString := g.Get().(string); isString {
					line += fmt.Sprintf(" (default %q)", f.DefValue)
					fmt.Fprintln(out, line)
					return
				}
			}
			line += fmt.Sprintf(" (default %v)", f.DefValue)
		}
		fmt.Fprintln(out, line)
	})
}

// isZeroValue says whether a flag's default is its type's zero value, which the list leaves unsaid (as the
// flag package does).
func isZeroValue(f *flag.Flag) (zero bool) {
	defer func() {
		if recover() != nil {
			zero = f.DefValue == "" // a value type whose zero cannot say itself
		}
	}()
	typ := reflect.TypeOf(f.Value)
	var z reflect.Value
	if typ.Kind() == reflect.Pointer {
		z = reflect.New(typ.Elem())
	} else {
		z = reflect.Zero(typ)
	}
	return f.DefValue == z.Interface().(flag.Value).String()
}

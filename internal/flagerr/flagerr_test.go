package flagerr

import (
	"errors"
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestEditDistance(t *testing.T) {
	assert.Equal(t, 0, editDistance("tasks", "tasks"))
	assert.Equal(t, 1, editDistance("task", "tasks"))
	assert.Equal(t, 2, editDistance("wach", "watchx"))
	assert.Equal(t, 3, editDistance("", "abc"))
	assert.Equal(t, 1, editDistance("lgos", "logs"), "a swap is one edit")
	assert.Equal(t, "run-a1b2c3", Within("run-a1b2x3", []string{"run-zzzzzz", "run-a1b2c3"}, 2))
	assert.Equal(t, "", Within("run-a1bxyz", []string{"run-a1b2c3"}, 2), "three edits are not a typo")
}

func TestNearest(t *testing.T) {
	commands := []string{"run", "status", "logs", "list", "terminate-task", "cancel", "hosts", "task"}
	for word, want := range map[string]string{
		"stauts": "status", "lgos": "logs", "canel": "cancel", "terminate": "terminate-task", "tasks": "task",
		"bogus": "", "x": "", "ru": "run",
	} {
		assert.Equal(t, want, Nearest(word, commands), word)
	}
}

// A flag's own Set error is said in its words, and a secret's value is not echoed.
func TestProblem_SaysTheFlagsOwnReasonAndHidesSecrets(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Func("mode", "", func(string) error { return errors.New("use fast or slow") })
	fs.Func("api-key", "", func(string) error { return errors.New("not taken here") })
	fs.Int("n", 0, "")
	err := fs.Parse([]string{"--mode", "warp"})
	assert.Equal(t, `--mode "warp": use fast or slow`, Problem(fs, err, ""))
	err = fs.Parse([]string{"--api-key", "hush"})
	assert.Equal(t, "--api-key (value not shown): not taken here", Problem(fs, err, ""))
	err = fs.Parse([]string{"-n", "many"})
	assert.Equal(t, `-n "many": want a whole number`, Problem(fs, err, ""))
}

// A one-letter flag is named as it was typed and as the help spells it, -f; it gets no guess, since every other
// one letter is as near; a longer name gets the nearest.
func TestProblem_NamesAOneLetterFlagWithOneDash(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("n", "", "")
	fs.Bool("follow", false, "")
	err := fs.Parse([]string{"-f"})
	assert.Equal(t, "unknown flag -f (see x --help)", Problem(fs, err, " (see x --help)"))
	err = fs.Parse([]string{"--folow"})
	assert.Equal(t, "unknown flag --folow; did you mean --follow?", Problem(fs, err, ""))
	err = fs.Parse([]string{"-n"})
	assert.Equal(t, "-n needs a value: a value", Problem(fs, err, ""))
	// A text flag with help says what it wants in the help's words, where it said "a value: a value".
	fs.String("error", "", "the error that makes the run fail")
	err = fs.Parse([]string{"--error"})
	assert.Equal(t, "--error needs a value: the error that makes the run fail", Problem(fs, err, ""))
}

// The list of flags says what the flag package's does, each name as the usage lines spell it: --name, and -n for
// a one-letter flag.
func TestPrintDefaults_SpellsFlagsWithTwoDashes(t *testing.T) {
	fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
	fs.String("id", "", "run ID")
	fs.String("o", "table", "short for --output")
	fs.Bool("detach", false, "return at once")
	fs.Bool("quiet", true, "say less")
	fs.Duration("grace", 15*time.Second, "time between `SIGTERM` and SIGKILL\nper task")
	fs.Int("slots", 0, "most tasks")
	fs.Var(&listValue{}, "allow-dir", "allowed folders")
	var ours, theirs strings.Builder
	fs.SetOutput(&ours)
	PrintDefaults(fs)
	fs.SetOutput(&theirs)
	fs.PrintDefaults()
	want := regexp.MustCompile(`(?m)^  -(\w\w)`).ReplaceAllString(theirs.String(), "  --$1")
	assert.Equal(t, want, ours.String())
	assert.Contains(t, ours.String(), "  --grace SIGTERM\n    \ttime between SIGTERM and SIGKILL\n    \tper task (default 15s)\n")
	assert.Contains(t, ours.String(), "  -o string\n    \tshort for --output (default \"table\")\n")
}

type listValue []string

func (l *listValue) String() string     { return strings.Join(*l, ",") }
func (l *listValue) Set(v string) error { *l = append(*l, v); return nil }

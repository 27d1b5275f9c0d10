package flagerr

import (
	"errors"
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEditDistance(t *testing.T) {
	assert.Equal(t, 0, editDistance("tasks", "tasks"))
	assert.Equal(t, 1, editDistance("task", "tasks"))
	assert.Equal(t, 2, editDistance("wach", "watchx"))
	assert.Equal(t, 3, editDistance("", "abc"))
	assert.Equal(t, 1, editDistance("lgos", "logs"), "a swap is one edit")
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
	assert.Equal(t, `--n "many": want a whole number`, Problem(fs, err, ""))
}

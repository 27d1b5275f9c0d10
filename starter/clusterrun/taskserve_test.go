package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What an item's command prints is its result: JSON as written, other text as a string, nothing as null; a
// failure names the exit and the last line of stderr; over 16 KiB is refused.
func TestItemCommand(t *testing.T) {
	run := func(script string, args string) (any, error) {
		return itemCommand("fn", []string{"sh", "-c", script}, io.Discard)(context.Background(), json.RawMessage(args))
	}
	v, err := run(`read a; echo "{\"got\": $a}"`, `[3]`)
	require.NoError(t, err)
	assert.JSONEq(t, `{"got": [3]}`, string(v.(json.RawMessage)))
	v, err = run(`echo "  a line  "`, `[]`)
	require.NoError(t, err)
	assert.Equal(t, "a line", v)
	v, err = run(`true`, ``)
	require.NoError(t, err)
	assert.Nil(t, v)
	v, err = run(`echo "$CLUSTERRUN_ITEM_FN $CLUSTERRUN_ITEM_ARGS"`, `{"n": 1}`)
	require.NoError(t, err)
	assert.Equal(t, `fn {"n": 1}`, v)
	_, err = run(`echo first >&2; printf '\033[31mlast\033[0m\n' >&2; exit 4`, `[]`)
	assert.EqualError(t, err, "sh exited with code 4: last")
	_, err = run(`kill -KILL $$`, `[]`)
	assert.EqualError(t, err, "sh was killed by SIGKILL")
	_, err = run(`head -c 20000 /dev/zero | tr '\0' x`, `[]`)
	assert.ErrorContains(t, err, "printed over 16 KiB")
}

// A stop while an item runs (serve's context ends) sends its command SIGTERM, which it may handle, not SIGKILL.
func TestItemCommand_AStopIsSIGTERM(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := itemCommand("fn", []string{"sh", "-c", `trap 'echo got TERM >&2; exit 7' TERM; while :; do sleep 0.1; done`}, io.Discard)
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	_, err := h(ctx, json.RawMessage(`[]`))
	assert.EqualError(t, err, "sh exited with code 7: got TERM")

	// One that does not end on it is killed commandLinger later.
	ctx, cancel = context.WithCancel(context.Background())
	h = itemCommand("fn", []string{"sh", "-c", `trap 'echo ignored >&2' TERM; while :; do sleep 0.1; done`}, io.Discard)
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	began := time.Now()
	_, err = h(ctx, json.RawMessage(`[]`))
	assert.ErrorContains(t, err, "sh was killed by SIGKILL")
	assert.Less(t, time.Since(began), commandLinger+5*time.Second)
}

func TestCapped_KeepsItsStartOrItsEnd(t *testing.T) {
	start, end := &capped{max: 4}, &capped{max: 4, keepEnd: true}
	for _, c := range []*capped{start, end} {
		_, _ = c.Write([]byte("abc"))
		_, _ = c.Write([]byte("defg"))
	}
	assert.Equal(t, "abcd", start.String())
	assert.Equal(t, "defg", end.String())
	assert.True(t, start.over)
	assert.False(t, strings.Contains(end.String(), "abc"))
}

// A command serve cannot run is refused before it takes an item, in words that name the command once.
func TestTaskServe_RefusesACommandItCannotRun(t *testing.T) {
	for args, want := range map[string]string{
		"x":                  "no command: give the one each item runs after --",
		"x python3 step.py":  "no command: give the one each item runs after --",
		"x -- nosuchcmd":     `cannot run "nosuchcmd": executable file not found in $PATH`,
		"x -- ./nosuch-file": `cannot run "./nosuch-file": stat ./nosuch-file: no such file or directory`,
	} {
		var out, errb strings.Builder
		assert.Equal(t, exitUsage, mainWithCode(append([]string{"task", "serve"}, strings.Fields(args)...), &out, &errb), args)
		assert.Contains(t, errb.String(), want, args)
	}
}

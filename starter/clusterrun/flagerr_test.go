package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A flag that does not exist, or whose value does not parse, is said in one line that names the flag as the
// help spells it and says what would be right, with the command's usage code; --help still prints the usage.
func TestMainWithCode_FlagProblemsAreSaidInOneLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "--task", "chief-0", "r"}, "clusterrun logs: unknown flag --task; did you mean --tasks? (see clusterrun logs --help)\n"},
		{[]string{"status", "r", "--wach", "2s"}, "clusterrun status: unknown flag --wach; did you mean --watch? (see clusterrun status --help)\n"},
		{[]string{"run", "--detatch", "x.yaml"}, "clusterrun run: unknown flag --detatch; did you mean --detach? (see clusterrun run --help)\n"},
		{[]string{"logs", "r", "--zzzzzz"}, "clusterrun logs: unknown flag --zzzzzz; usage: clusterrun logs RUN [TASK...] [--tasks GLOBS] [--state STATES] [--attempt N] [--stdout|--stderr] [--tail N] [--since T] [--timestamps] [-f|--follow] (see clusterrun logs --help)\n"},
		{[]string{"task", "progress", "--step", "3", "--total", "6"}, "clusterrun task progress: unknown flag --step; usage: clusterrun task progress CUR [TOTAL] [--message M] (see clusterrun task progress --help)\n"},
		{[]string{"status", "--watch=abc", "r"}, `clusterrun status: --watch "abc": want a duration such as 30s, 5m or 1h (see clusterrun status --help)` + "\n"},
		{[]string{"logs", "r", "--tail=x"}, `clusterrun logs: --tail "x": want a whole number (see clusterrun logs --help)` + "\n"},
		{[]string{"logs", "r", "--tail"}, "clusterrun logs: --tail needs a value: a whole number (see clusterrun logs --help)\n"},
		{[]string{"status", "--json=maybe", "r"}, "clusterrun status: --json=maybe: want true or false (see clusterrun status --help)\n"},
		{[]string{"logs", "r", "-x"}, "clusterrun logs: unknown flag -x; usage: clusterrun logs RUN [TASK...] [--tasks GLOBS] [--state STATES] [--attempt N] [--stdout|--stderr] [--tail N] [--since T] [--timestamps] [-f|--follow] (see clusterrun logs --help)\n"},
		{[]string{"logs", "r", "--tail", "-2"}, "clusterrun logs: --tail -2: give a number of lines, 0 or more (-1: all of them)\n"},
		{[]string{"attach", "r", "--tail", "-3"}, "clusterrun attach: --tail -3: give how many lines of each task's earlier output to show (0: none; -1: all of it)\n"},
		{[]string{"logs", "r", "--attempt", "-2"}, "clusterrun logs: --attempt -2: an attempt is numbered from 1\n"},
		// A timeout given as 0 waited as long as it takes (no timeout at all); Python's timeout=0 gives up at once.
		{[]string{"task", "join", "--timeout", "0s"}, "clusterrun task join: --timeout 0s: give a positive duration (e.g. 30s), or leave --timeout out to wait as long as it takes\n"},
		{[]string{"task", "fetch", "1", "--timeout", "-1s"}, "clusterrun task fetch: --timeout -1s: give a positive duration (e.g. 30s), or leave --timeout out to wait as long as it takes\n"},
		{[]string{"task", "barrier", "x", "--timeout", "0"}, "clusterrun task barrier: --timeout 0s: give a positive duration (e.g. 30s), or leave --timeout out to wait as long as it takes\n"},
		{[]string{"task", "wait-for-stop", "--timeout", "0s"}, "clusterrun task wait-for-stop: --timeout 0s: give a positive duration (e.g. 30s), or leave --timeout out to wait as long as it takes\n"},
	} {
		var out, errb bytes.Buffer
		assert.Equal(t, exitUsage, mainWithCode(c.args, &out, &errb), "%v", c.args)
		assert.Equal(t, c.want, errb.String(), "%v", c.args)
		assert.Empty(t, out.String())
	}
	var out, errb bytes.Buffer
	assert.Equal(t, exitUsage, mainWithCode([]string{"task", "barier", "ready"}, &out, &errb))
	assert.Equal(t, "clusterrun task: unknown subcommand \"barier\"; did you mean \"barrier\"? (see clusterrun task --help)\n", errb.String())
	errb.Reset()
	assert.Equal(t, 0, mainWithCode([]string{"logs", "--help"}, &out, &errb))
	assert.Contains(t, errb.String(), "Usage: clusterrun logs RUN")
	assert.Contains(t, errb.String(), "-tasks")
}

// A missing positional argument is named, with where to find one.
func TestMainWithCode_AMissingArgumentIsNamed(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status"}, "clusterrun status: missing RUN (a run's ID: clusterrun list shows the runs, newest first); usage: clusterrun status RUN [TASK...] [--tasks GLOBS] [--state STATES] [-o table|json|jsonl] [--watch 2s] (see clusterrun status --help)\n"},
		{[]string{"terminate-task", "r"}, "clusterrun terminate-task: missing TASK (a task's name, such as worker-0: clusterrun status RUN lists them); usage: clusterrun terminate-task RUN TASK (see clusterrun terminate-task --help)\n"},
		{[]string{"run"}, "clusterrun run: missing SPEC (a YAML or JSON spec file; docs/spec.md); usage: clusterrun run SPEC [--id ID] [--env NAME=VALUE]... [--detach] [-o table|json|jsonl] (see clusterrun run --help)\n"},
		{[]string{"drain"}, "clusterrun drain: missing HOST (a host worker's --host: clusterrun hosts lists them); usage: clusterrun drain HOST [--now | --undo] [-o table|json|jsonl] (see clusterrun drain --help)\n"},
		{[]string{"start-task", "r"}, "clusterrun start-task: missing TYPE (a task type of the run's spec, such as worker, or a task's name, such as worker-3); usage: clusterrun start-task RUN TYPE [--index N] or clusterrun start-task RUN TASK (see clusterrun start-task --help)\n"},
		{[]string{"start-task", "r", "worker", "3"}, "clusterrun start-task: unexpected argument \"3\"; usage: clusterrun start-task RUN TYPE [--index N] or clusterrun start-task RUN TASK (see clusterrun start-task --help)\n"},
		{[]string{"task", "fetch"}, "clusterrun task fetch: missing ID; usage: clusterrun task fetch ID... [--timeout D] (see clusterrun task fetch --help)\n"},
		{[]string{"task", "progress", "3", "a"}, "clusterrun task progress: TOTAL \"a\" is not a number of 0 or more; usage: clusterrun task progress CUR [TOTAL] [--message M]\n"},
		{[]string{"task", "progress", "-1"}, "clusterrun task progress: \"-1\" is not a number of 0 or more; usage: clusterrun task progress CUR [TOTAL] [--message M]\n"},
		{[]string{"task", "progress", "3", "-2.5", "--message", "x"}, "clusterrun task progress: \"-2.5\" is not a number of 0 or more; usage: clusterrun task progress CUR [TOTAL] [--message M]\n"},
		{[]string{"task", "progress", "nan"}, "clusterrun task progress: CUR \"nan\" is not a number of 0 or more; usage: clusterrun task progress CUR [TOTAL] [--message M]\n"},
		{[]string{"task", "progress", "3", "1e400"}, "clusterrun task progress: TOTAL \"1e400\" is not a number of 0 or more; usage: clusterrun task progress CUR [TOTAL] [--message M]\n"},
	} {
		var out, errb bytes.Buffer
		assert.Equal(t, exitUsage, mainWithCode(c.args, &out, &errb), "%v", c.args)
		assert.Equal(t, c.want, errb.String(), "%v", c.args)
	}
}

// Each task subcommand's --help says what it does, as task --help lists it, and lists flags only when it has
// some.
func TestTaskSubcommandHelp(t *testing.T) {
	for _, sub := range taskSubcommands {
		var out, errb bytes.Buffer
		require.Equal(t, 0, mainWithCode([]string{"task", sub, "--help"}, &out, &errb), sub)
		help := errb.String()
		assert.True(t, strings.HasPrefix(help, "Usage: clusterrun task "+sub), help)
		lines := strings.Split(help, "\n")
		require.Greater(t, len(lines), 3, help)
		assert.NotEmpty(t, lines[2], "%s: what it does, after its usage line", sub)
		assert.NotContains(t, help, "Flags:\n\n", sub)
		assert.False(t, strings.HasSuffix(help, "Flags:\n"), "%s: a Flags heading with none under it", sub)
	}
	var out, errb bytes.Buffer
	require.Equal(t, 0, mainWithCode([]string{"task", "stop", "--help"}, &out, &errb))
	assert.Equal(t, "Usage: clusterrun task stop [--error MSG] [--keep-run]\n\n"+
		"Ask the whole run to stop; with --error the run fails; with\n--keep-run only ask the tasks to stop (the run goes on).\n\nFlags:\n",
		errb.String()[:strings.Index(errb.String(), "Flags:\n")+len("Flags:\n")])
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/internal/codec"
	"github.com/clusterrun/clusterrun/internal/silence"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

func TestParse_FlagsBeforeAndAfterArguments(t *testing.T) {
	for _, args := range [][]string{
		{"--id", "x", "spec.yaml", "--detach"},
		{"spec.yaml", "--id", "x", "--detach"},
		{"--detach", "--id=x", "spec.yaml"},
	} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		id := fs.String("id", "", "")
		detach := fs.Bool("detach", false, "")
		pos, err := parse(fs, runUsage, args, 1, 1, io.Discard)
		require.NoError(t, err, "%v", args)
		assert.Equal(t, []string{"spec.yaml"}, pos)
		assert.Equal(t, "x", *id)
		assert.True(t, *detach)
	}
}

func TestMainWithCode_Usage(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, exitUsage, mainWithCode([]string{"bogus"}, &out, &errb))
	assert.Contains(t, errb.String(), `unknown command "bogus"; commands are run, attach, status,`)
	errb.Reset()
	assert.Equal(t, exitUsage, mainWithCode([]string{"stauts", "r"}, &out, &errb))
	assert.Equal(t, "clusterrun: unknown command \"stauts\"; did you mean \"status\"? (see clusterrun --help)\n", errb.String())
	errb.Reset()
	// Another tool's word for a command (Slurm's, kubectl's, or the opposite of one) is answered with it.
	assert.Equal(t, exitUsage, mainWithCode([]string{"undrain", "gpu-a"}, &out, &errb))
	assert.Equal(t, "clusterrun: unknown command \"undrain\"; `clusterrun drain HOST --undo` takes a drain back (see clusterrun --help)\n", errb.String())
	errb.Reset()
	for name, meant := range peerCommands {
		assert.NotContains(t, commandNames(), name, "a command of its own")
		for _, cmd := range regexp.MustCompile("`clusterrun ([a-z-]+)").FindAllStringSubmatch(meant, -1) {
			assert.Contains(t, commandNames(), cmd[1], "%s's hint names a command that exists", name)
		}
	}
	assert.Equal(t, exitUsage, mainWithCode([]string{"run", "a.yaml", "b.yaml"}, &out, &errb))
	assert.Contains(t, errb.String(), `unexpected argument "b.yaml"; usage: clusterrun run SPEC`)
	errb.Reset()
	assert.Equal(t, 0, mainWithCode([]string{"cancel", "--help"}, &out, &errb))
	assert.Contains(t, errb.String(), "Example:")
	// cobra's own commands and flags are usage errors too, said by what was wrong.
	errb.Reset()
	assert.Equal(t, exitUsage, mainWithCode([]string{"version", "extra"}, &out, &errb))
	assert.Equal(t, "clusterrun version: unexpected argument \"extra\"; usage: clusterrun version\n", errb.String())
	errb.Reset()
	assert.Equal(t, exitUsage, mainWithCode([]string{"drain", "gpu a"}, &out, &errb), "no worker can have that --host")
	assert.Contains(t, errb.String(), `clusterrun drain: "gpu a" is not a valid host name`)
	errb.Reset()
	assert.Equal(t, exitUsage, mainWithCode([]string{"--bogus", "list"}, &out, &errb))
	assert.Equal(t, "clusterrun: unknown flag: --bogus (see clusterrun --help)\n", errb.String())
}

func TestRun_RefusesARunIDThatCannotNameAFolder(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "s.yaml")
	require.NoError(t, os.WriteFile(spec, []byte("{name: x, command: [sleep, '1'], tasks: {w: {replicas: 1}}}"), 0o644))
	var out, errb bytes.Buffer
	assert.Equal(t, exitUsage, mainWithCode([]string{"run", spec, "--id", "../../etc"}, &out, &errb))
	assert.Contains(t, errb.String(), `--id: run ID "../../etc" is not usable as a folder name`)
}

func TestExitCodeFor(t *testing.T) {
	code := func(c int) *int { return &c }
	st := workflows.RunStatus{Status: workflows.StatusFailed, Tasks: []workflows.TaskStatus{
		{Name: "chief-0", State: workflows.TaskStopped},
		{Name: "worker-0", State: workflows.TaskFailed, ExitCode: code(3)},
	}}
	assert.Equal(t, 3, exitCodeFor(st), "the first failed task's code when the chief did not fail")
	st.Tasks[0] = workflows.TaskStatus{Name: "chief-0", State: workflows.TaskFailed, ExitCode: code(7)}
	assert.Equal(t, 7, exitCodeFor(st), "the chief's code first")
	st.Tasks = []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskFailed, ExitCode: code(-1)}}
	assert.Equal(t, 1, exitCodeFor(st), "a lost task has no code")
	assert.Equal(t, 0, exitCodeFor(workflows.RunStatus{Status: workflows.StatusSucceeded}))
	assert.Equal(t, 124, exitCodeFor(workflows.RunStatus{Status: workflows.StatusTimedOut}))
	assert.Equal(t, 130, exitCodeFor(workflows.RunStatus{Status: workflows.StatusCanceled}))
}

// A finished stream is read to its end once and never opened again by a later status.
func TestFollower_FinishedStreamsStayClosed(t *testing.T) {
	f := newFollower(nil, "run", io.Discard)
	running := workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskRunning, Host: "h", Attempt: 1}}}
	f.update(running)
	require.Len(t, f.order, 2)
	for _, s := range f.streams {
		assert.False(t, s.done)
		s.offset = 100
	}
	ended := workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskSucceeded, Host: "h", Attempt: 1}}}
	f.update(ended)
	for _, s := range f.streams {
		assert.True(t, s.done)
		s.closed = true
	}
	f.update(ended)
	assert.Len(t, f.order, 2, "no stream re-created")
	for _, s := range f.streams {
		assert.Equal(t, int64(100), s.offset)
	}
	assert.False(t, f.pending())

	// A restart opens the new attempt's streams and finishes the old ones.
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskRunning, Host: "h", Attempt: 2}}})
	assert.Len(t, f.order, 4)
	assert.True(t, f.pending())
}

// An ended attempt whose host reported its log sizes has nothing left to read once the follower has read that
// far: its streams close without a read (this follower has no client, so a read would fail). One with more
// output than was read, or with no sizes (an older worker), is still read.
func TestFollower_ReadToTheReportedSizes(t *testing.T) {
	f := newFollower(nil, "run", io.Discard)
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "quiet-0", State: workflows.TaskRunning, Host: "h", Attempt: 1},
		{Name: "talk-0", State: workflows.TaskRunning, Host: "h", Attempt: 1},
		{Name: "old-0", State: workflows.TaskRunning, Host: "h", Attempt: 1},
	}})
	f.streams["talk-0/1/stdout"].offset = 40
	now := time.Now()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "quiet-0", State: workflows.TaskSucceeded, Host: "h", Attempt: 1, StartTime: &now, Logs: &workflows.LogSizes{}},
		{Name: "talk-0", State: workflows.TaskSucceeded, Host: "h", Attempt: 1, StartTime: &now, Logs: &workflows.LogSizes{Stdout: 40, Stderr: 7}},
		{Name: "old-0", State: workflows.TaskSucceeded, Host: "h", Attempt: 1, StartTime: &now},
	}})
	open := map[string]bool{}
	for k, s := range f.streams {
		if !s.closed {
			open[k] = true
		}
	}
	assert.Equal(t, map[string]bool{"talk-0/1/stderr": true, "old-0/1/stdout": true, "old-0/1/stderr": true}, open)

	quiet := newFollower(nil, "run", io.Discard)
	quiet.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "quiet-0", State: workflows.TaskSucceeded, Host: "h", Attempt: 1, StartTime: &now, Logs: &workflows.LogSizes{}}}})
	assert.False(t, quiet.pending())
	require.NoError(t, quiet.drain(context.Background(), nil), "nothing to read: no read at all")
	assert.Nil(t, quiet.logs, "no log session")
}

// Shell completion comes from cobra; each command's flags complete from its own flag set.
func TestCompletion(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, mainWithCode([]string{"__complete", "logs", "--ti"}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "--timestamps\t")
	assert.NotContains(t, out.String(), "--tail", "only flags with the prefix")
	out.Reset()
	require.Equal(t, 0, mainWithCode([]string{"__complete", "task", ""}, &out, &errb))
	assert.Contains(t, out.String(), "should-stop")
	assert.Contains(t, out.String(), "wait-for-stop", "every subcommand")
	out.Reset()
	for line, want := range map[string]string{
		"status -o |":               "jsonl\n",
		"logs --output=js":          "json\n",
		"list --state Failed,Ti":    "Failed,TimedOut\n",
		"list --limit 3 --state |":  "Waiting\n",
		"items r1 --state done,f":   "done,failed\n",
		"status --codec-key-file |": ":0\n", // a file
		"run |":                     ":0\n", // the spec file
		"drain --now |":             ":4\n", // no server at this address: nothing, and no file either
	} {
		words := strings.Fields(strings.TrimSuffix(line, "|")) // "|" is the cursor after a space
		args := append([]string{"__complete", words[0], "--address", "127.0.0.1:1"}, words[1:]...)
		if strings.HasSuffix(line, "|") {
			args = append(args, "")
		}
		out.Reset()
		require.Equal(t, 0, mainWithCode(args, &out, &errb), line)
		assert.Contains(t, out.String(), want, line)
	}
	out.Reset()
	require.Equal(t, 0, mainWithCode([]string{"completion", "bash"}, &out, &errb))
	assert.Contains(t, out.String(), "__start_clusterrun")
	for shell, mark := range map[string]string{"zsh": "#compdef clusterrun", "fish": "complete -c clusterrun", "powershell": "Register-ArgumentCompleter"} {
		out.Reset()
		require.Equal(t, 0, mainWithCode([]string{"completion", shell}, &out, &errb), shell)
		assert.Contains(t, out.String(), mark, shell)
	}
	out.Reset()
	require.Equal(t, 0, mainWithCode([]string{"__complete", "completion", ""}, &out, &errb))
	assert.Contains(t, out.String(), "powershell")
	out.Reset()
}

// A shell clusterrun has no script for is a usage error that names the ones it has, not the whole help.
func TestCompletion_AnUnknownShellSaysWhichThereAre(t *testing.T) {
	for _, args := range [][]string{{"completion", "tcsh"}, {"completion"}, {"completion", "bash", "zsh"}} {
		var out, errb bytes.Buffer
		assert.Equal(t, exitUsage, mainWithCode(args, &out, &errb), args)
		assert.Empty(t, out.String(), args)
		assert.Contains(t, errb.String(), "clusterrun completion: ", args)
		assert.Contains(t, errb.String(), "bash, zsh, fish or powershell", args)
	}
	var out, errb bytes.Buffer
	require.Equal(t, 0, mainWithCode([]string{"completion", "--help"}, &out, &errb))
	assert.Contains(t, out.String(), "Usage: clusterrun completion SHELL")
}

func TestVersionFlag(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, mainWithCode([]string{"--version"}, &out, &errb))
	assert.Contains(t, out.String(), "clusterrun ")
}

func TestSplitTaskName(t *testing.T) {
	for word, want := range map[string]struct {
		typ   string
		index int
		ok    bool
	}{
		"worker-3":    {"worker", 3, true},
		"my_type2-10": {"my_type2", 10, true},
		"worker":      {},
		"worker-":     {},
		"worker-x":    {},
		"worker--1":   {},
		"worker-+1":   {},
		"-3":          {},
	} {
		typ, index, ok := splitTaskName(word)
		assert.Equal(t, want.ok, ok, word)
		if want.ok {
			assert.Equal(t, want.typ, typ, word)
			assert.Equal(t, want.index, index, word)
		}
	}
}

func TestFollower_TellsEachGangRestartOnce(t *testing.T) {
	var notes bytes.Buffer
	f := &follower{notes: &notes, width: 8}
	f.tellGangRestart(workflows.RunStatus{Reason: "gang restart 1 of 2 after: worker-1 failed with exit code 3", RestartCount: 1})
	f.tellGangRestart(workflows.RunStatus{Reason: "gang restart 1 of 2 after: worker-1 failed with exit code 3", RestartCount: 1})
	f.tellGangRestart(workflows.RunStatus{Reason: "chief-0 exited 0", RestartCount: 2}) // seen only once the run ended
	f.release(false)
	assert.Equal(t, "[clusterrun] ── gang restart 1 of 2 after: worker-1 failed with exit code 3\n"+
		"[clusterrun] ── gang restart 2\n", notes.String())
	quiet := &follower{notes: &notes, quiet: true}
	notes.Reset()
	quiet.tellGangRestart(workflows.RunStatus{Reason: "gang restart 1 of 2 after: x", RestartCount: 1})
	quiet.release(false)
	assert.Empty(t, notes.String(), "clusterrun logs prints no state lines")
}

// A gang restart is said after the output of the attempts it ended, and the new attempts' lines after it.
func TestFollower_GangRestartWaitsForTheOutputItEnds(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "worker-0", State: workflows.TaskRunning, Host: "h", Attempt: 1},
		{Name: "worker-1", State: workflows.TaskRunning, Host: "g", Attempt: 1}}})
	out.Reset()
	f.update(workflows.RunStatus{RestartCount: 1, Reason: "gang restart 1 of 2 after: worker-1 exited with code 3", Tasks: []workflows.TaskStatus{
		{Name: "worker-0", State: workflows.TaskRunning, Host: "h", Attempt: 2},
		{Name: "worker-1", State: workflows.TaskRunning, Host: "g", Attempt: 2}}})
	assert.Empty(t, out.String(), "attempt 1's output first")
	for _, s := range f.streams {
		if s.task == "worker-0" && s.attempt == 1 {
			s.closed = true
		}
	}
	f.release(false)
	assert.Empty(t, out.String(), "worker-1's attempt 1 has output left: worker-0's new attempt waits too")
	for _, s := range f.streams {
		if s.attempt == 1 {
			s.closed = true
		}
	}
	f.release(false)
	assert.Equal(t, "[clusterrun] ── gang restart 1 of 2 after: worker-1 exited with code 3\n"+
		"[worker-0] ── running on h (attempt 2)\n[worker-1] ── running on g (attempt 2)\n", out.String())
}

func TestLastRan(t *testing.T) {
	now := time.Now()
	earlier := []workflows.AttemptPlace{{Attempt: 1, Host: "host-a"}}
	for _, tc := range []struct {
		what    string
		st      workflows.TaskStatus
		attempt int
		host    string
		ran     bool
	}{
		{"running", workflows.TaskStatus{State: workflows.TaskRunning, Attempt: 2, Host: "host-b", StartTime: &now, Earlier: earlier}, 2, "host-b", true},
		{"waiting out a restart's backoff", workflows.TaskStatus{State: workflows.TaskPending, Attempt: 1, Host: "host-a", StartTime: &now}, 1, "host-a", true},
		{"its next attempt placed", workflows.TaskStatus{State: workflows.TaskPlaced, Attempt: 2, Host: "host-b", Earlier: earlier}, 1, "host-a", true},
		{"pinned, never started", workflows.TaskStatus{State: workflows.TaskPending, Attempt: 1, Host: "host-b"}, 1, "host-b", false},
		{"placed, never started", workflows.TaskStatus{State: workflows.TaskPlaced, Attempt: 1, Host: "host-b"}, 1, "host-b", false},
		{"a large run's task, details left out", workflows.TaskStatus{State: workflows.TaskPending, Attempt: 1, Host: "host-b", DetailsOmitted: true}, 1, "host-b", true},
	} {
		got, ran := lastRan(tc.st)
		assert.Equal(t, tc.ran, ran, tc.what)
		assert.Equal(t, tc.attempt, got.Attempt, tc.what)
		assert.Equal(t, tc.host, got.Host, tc.what)
	}
}

func TestFollower_TellsAnUnansweredHostOnce(t *testing.T) {
	var notes bytes.Buffer
	f := &follower{notes: &notes, out: io.Discard, width: 8, silent: silence.Hosts{}}
	silent := workflows.LogChunk{Unreachable: true, Error: "host host-b did not pick up the read within 5s"}
	streams := []*stream{{host: "host-b", task: "worker-1", name: "stdout"}, {host: "host-b", task: "worker-1", name: "stderr"},
		{host: "host-b", task: "worker-3", name: "stdout"}}
	for _, s := range streams {
		assert.False(t, f.take(s, silent))
	}
	assert.Equal(t, "[clusterrun] ── host host-b did not pick up the read within 5s; still following its tasks\n", notes.String(),
		"once for the host, not for each of its tasks' streams")
	f.take(streams[0], workflows.LogChunk{}) // it answers again
	f.take(streams[1], silent)
	assert.Equal(t, 2, strings.Count(notes.String(), "still following"), "told again after it answered")
}

// A follower of a live run prints the lines of one read in the order their hosts dated them, whatever the order
// of the streams in the read: the chief's last words before the SIGTERM notice of the parameter server its exit
// stopped. Each stream's own lines keep their order, and the lines are written all at once.
func TestFollower_PrintsAReadInTheOrderItWasWritten(t *testing.T) {
	at := func(ms int64) int64 {
		return time.Date(2026, 11, 25, 19, 36, 30, 0, time.UTC).UnixNano() + ms*int64(time.Millisecond)
	}
	chunk := func(data string, next int64, marks ...workflows.LogMark) workflows.LogChunk {
		return workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Times: true}, Data: []byte(data), Next: next, Marks: marks, ModTime: at(900)}
	}
	ps := chunk("serving\nSIGTERM received\n", 24, workflows.LogMark{Size: 8, At: at(40)}, workflows.LogMark{Size: 24, At: at(821)})
	chief := chunk("step 4\nresult written, exiting\n", 31, workflows.LogMark{Size: 7, At: at(29)}, workflows.LogMark{Size: 31, At: at(797)})
	worker := chunk("worker done\n", 12) // written after the host's last sample: dated by the file's last write

	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.inOrder, f.width = true, len("worker-0")
	f.take(&stream{task: "ps-0", name: "stdout"}, ps)
	f.take(&stream{task: "chief-0", name: "stdout"}, chief)
	f.take(&stream{task: "worker-0", name: "stderr"}, worker)
	assert.Empty(t, out.String(), "nothing is printed before the read is whole")
	f.flush()
	assert.Equal(t, "[chief-0]  step 4\n[ps-0]     serving\n[chief-0]  result written, exiting\n"+
		"[ps-0]     SIGTERM received\n[worker-0] worker done\n", out.String())

	// A host that sends no marks (a worker from before them): the read's order stands.
	out.Reset()
	f.take(&stream{task: "ps-0", name: "stdout"}, ps)
	f.take(&stream{task: "chief-0", name: "stdout"}, workflows.LogChunk{Data: []byte("old host\n"), Next: 9})
	f.flush()
	assert.Equal(t, "[ps-0]     serving\n[ps-0]     SIGTERM received\n[chief-0]  old host\n", out.String())

	// A listing (clusterrun logs without --follow) keeps each stream's chunk together, as read.
	out.Reset()
	list := newFollower(nil, "run", &out)
	list.prefix, list.width = true, len("chief-0")
	list.take(&stream{task: "ps-0", name: "stdout"}, ps)
	list.take(&stream{task: "chief-0", name: "stdout"}, chief)
	assert.Equal(t, "[ps-0]    serving\n[ps-0]    SIGTERM received\n[chief-0] step 4\n[chief-0] result written, exiting\n", out.String())
}

// BenchmarkFollower_PrintARead is the follower's work on one full read: 8 MiB of 64-byte lines from 8 tasks,
// printed stream by stream (a listing) or in the order written (a live follower).
func BenchmarkFollower_PrintARead(b *testing.B) {
	const lines = 1 << 14 // per task
	var data bytes.Buffer
	for i := 0; i < lines; i++ {
		fmt.Fprintf(&data, "%063d\n", i)
	}
	var chunks []workflows.LogChunk
	for task := 0; task < 8; task++ {
		c := workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Times: true}, Data: data.Bytes(), Next: int64(data.Len())}
		for i := 0; i < lines; i += 40 {
			c.Marks = append(c.Marks, workflows.LogMark{Size: int64(i+40) * 64, At: int64(i*1000 + task)})
		}
		chunks = append(chunks, c)
	}
	for _, inOrder := range []bool{false, true} {
		b.Run(fmt.Sprintf("inOrder=%v", inOrder), func(b *testing.B) {
			for b.Loop() {
				f := newFollower(nil, "run", io.Discard)
				f.inOrder, f.width = inOrder, len("worker-7")
				for task, c := range chunks {
					f.take(&stream{task: fmt.Sprintf("worker-%d", task), name: "stdout"}, c)
				}
				f.flush()
			}
		})
	}
}

// Every command is in the top help (items was missing).
func TestHelp_ListsEveryCommand(t *testing.T) {
	for _, c := range commands() {
		assert.Regexp(t, "\n  "+regexp.QuoteMeta(c.name)+" ", topUsage, "clusterrun --help lists %s", c.name)
	}
}

func TestList_StatesInAnyCase(t *testing.T) {
	q, keep, err := listQuery("failed, TIMEDOUT", "", "")
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{workflows.StatusFailed: true, workflows.StatusTimedOut: true}, keep)
	assert.Contains(t, q, "ExecutionStatus IN ('Failed', ")
}

func TestStateFlags_AMisspeltStateIsNamedWithTheOneMeant(t *testing.T) {
	_, _, err := listQuery("Runing", "", "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--state "Runing": did you mean Running? (a run's state is one of Canceled, Failed, Running, `)
	_, _, err = listQuery("gone", "", "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--state "gone": a run's state is one of Canceled, `)
	_, err = taskStates("running,Stoped")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--state "Stoped": did you mean Stopped? (a task's state is one of Pending, `)
}

// A run waiting for room is Temporal's Running with ClusterRunState Waiting: --state Waiting (and --running, which
// takes both) asks Temporal for running runs once, and keeps the states asked for.
func TestList_WaitingIsARunningRunWaitingForRoom(t *testing.T) {
	q, keep, err := listQuery("Running,waiting", "", "")
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{workflows.StatusRunning: true, workflows.StatusWaiting: true}, keep)
	assert.Contains(t, q, "ExecutionStatus IN ('Running')")
	assert.Equal(t, workflows.StatusWaiting, runState(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusWaiting))
	assert.Equal(t, workflows.StatusRunning, runState(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, workflows.StatusRunning))
	assert.Equal(t, "Terminated", runState(enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, workflows.StatusWaiting),
		"a run terminated while it waited is not waiting")
}

func TestOutputFlag_AnyCase(t *testing.T) {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	format, check := addOutputFlag(fs)
	require.NoError(t, fs.Parse([]string{"-o", "JSON"}))
	require.NoError(t, check())
	assert.Equal(t, "json", *format)
	require.NoError(t, fs.Parse([]string{"-o", "Text"}))
	require.NoError(t, check())
	assert.Equal(t, "table", *format, "the temporal CLI's name for its default")
	require.NoError(t, fs.Parse([]string{"-o", "jsonl"}))
	require.NoError(t, check())
	require.NoError(t, fs.Parse([]string{"-o", "yaml"}))
	assert.ErrorContains(t, check(), `-o "yaml": use table (or text), json or jsonl`)
}

// JSON lines put each row of a list on a line of its own, and anything else on one line.
func TestPrintJSON_Lines(t *testing.T) {
	rows := []struct {
		A int    `json:"a"`
		B string `json:"b"`
	}{{1, "x"}, {2, "y"}}
	var out bytes.Buffer
	require.NoError(t, printJSON(&out, outJSONL, rows))
	assert.Equal(t, "{\"a\":1,\"b\":\"x\"}\n{\"a\":2,\"b\":\"y\"}\n", out.String())
	out.Reset()
	require.NoError(t, printJSON(&out, outJSONL, rows[0]))
	assert.Equal(t, "{\"a\":1,\"b\":\"x\"}\n", out.String())
	out.Reset()
	require.NoError(t, printJSON(&out, outJSON, rows[0]))
	assert.Equal(t, "{\n  \"a\": 1,\n  \"b\": \"x\"\n}\n", out.String())
}

// validate --env prints each task type's env with the spec's own values read in, as a spec writes a value:
// what a reference to BASE reads, a type's own BASE over the run's, and what is left for the host.
func TestValidate_EnvShowsEachTypesEnvWithTheSpecsValuesReadIn(t *testing.T) {
	defer func(r io.Reader) { stdin = r }(stdin)
	var out, errb bytes.Buffer
	stdin = strings.NewReader(`name: envs
command: [pwd]
env: {BASE: /data, CKPT: "${BASE}/ckpt/${CLUSTERRUN_TASK}", PRICE: "$$5"}
tasks: {worker: {replicas: 2}, ps: {replicas: 1, env: {BASE: /ps}}, evaluator: {replicas: 1, command: [ls]}}
`)
	assert.Equal(t, 0, mainWithCode([]string{"validate", "-", "--env"}, &out, &errb), errb.String())
	assert.Equal(t, `standard input: valid run spec "envs" with 4 task(s): worker-0 (pool default), worker-1 (pool default), ps-0 (pool default), evaluator-0 (pool default)
env of worker:
  BASE=/data
  CKPT=/data/ckpt/${CLUSTERRUN_TASK}
  PRICE=$$5
env of ps:
  BASE=/ps
  CKPT=/ps/ckpt/${CLUSTERRUN_TASK}
  PRICE=$$5
env of evaluator:
  BASE=/data
  CKPT=/data/ckpt/${CLUSTERRUN_TASK}
  PRICE=$$5
`, out.String())

	out.Reset()
	stdin = strings.NewReader("name: plain\ncommand: [pwd]\ntasks: {w: {replicas: 1}}\n")
	assert.Equal(t, 0, mainWithCode([]string{"validate", "-", "--env"}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "\nenv of w: none from the spec\n")
}

func TestValidate_ReadsASpecFromStandardInputForADash(t *testing.T) {
	defer func(r io.Reader) { stdin = r }(stdin)
	var out, errb bytes.Buffer
	stdin = strings.NewReader("name: piped\ncommand: [sleep, '1']\ntasks: {w: {replicas: 2}}\n")
	assert.Equal(t, 0, mainWithCode([]string{"validate", "-"}, &out, &errb), errb.String())
	assert.Equal(t, "standard input: valid run spec \"piped\" with 2 task(s): w-0 (pool default), w-1 (pool default)\n", out.String())

	out.Reset()
	stdin = strings.NewReader("name: piped\ntasks: {w: {replicas: 2}}\n")
	assert.Equal(t, exitUsage, mainWithCode([]string{"validate", "-"}, &out, &errb))
	assert.Contains(t, errb.String(), "standard input is not a valid run spec (1 problem(s)):")

	errb.Reset()
	stdin = strings.NewReader(" \n")
	assert.Equal(t, exitUsage, mainWithCode([]string{"run", "-", "--detach"}, &out, &errb))
	assert.Contains(t, errb.String(), "standard input is empty; pipe a YAML or JSON spec in, as in: clusterrun run - < train.yaml")
}

func TestValidate_ASyntaxErrorIsNamedByFileLineAndColumn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "train.yaml")
	doc := "name: x\ncommand: [sleep, '1']\ntasks:\n  chief: {replicas: 1}\n   worker: {replicas: 2}\n"
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
	var out, errb bytes.Buffer
	assert.Equal(t, exitUsage, mainWithCode([]string{"validate", path}, &out, &errb))
	assert.Equal(t, "clusterrun validate: "+path+":5:4: run spec is not valid YAML or JSON: this line does not line up "+
		"with the keys of the mapping that starts at line 4: indent it as far as that mapping's keys, or further "+
		"under one of them\n"+
		"  4 |   chief: {replicas: 1}\n"+
		"    |   ^\n"+
		"  5 |    worker: {replicas: 2}\n"+
		"    |    ^\n", errb.String())
}

// A spec's problems are listed top to bottom as file:line:column, as a compiler lists them; those with no place
// come after.
func TestValidate_ProblemsAreListedByWhereTheyAreWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "train.yaml")
	doc := "tasks:\n  ps: {replicas: 1, comand: [x]}\n  chief: {replicas: 2}\ncommand: [sleep, 10]\n"
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
	var out, errb bytes.Buffer
	assert.Equal(t, exitUsage, mainWithCode([]string{"validate", path}, &out, &errb))
	assert.Equal(t, "clusterrun validate: "+path+" is not a valid run spec (4 problem(s)):\n"+
		"  "+path+":2:21: tasks.ps.comand: unknown field (did you mean \"command\"?)\n"+
		"  "+path+":3:11: tasks.chief.replicas: a run has at most one chief (got 2); use worker for more replicas\n"+
		"  "+path+":4:18: command[1]: must be a string, not the number 10; quote the value in YAML (unquoted, yes, no, "+
		"true and numbers are not strings)\n"+
		"  name: required: name the run, e.g. name: mnist\n", errb.String())
}

// With -o json, validate prints what a CI job can read: a spec's problems with their places (a syntax error is
// one), or its tasks; exit codes as without it, and nothing on stderr.
func TestValidate_JSON(t *testing.T) {
	defer func(r io.Reader) { stdin = r }(stdin)
	var out, errb bytes.Buffer
	stdin = strings.NewReader("name: piped\ncommand: [sleep, '1']\nenv: {A: b}\ntasks: {worker: {replicas: 1}, ps: {replicas: 1, hosts: [h1]}}\n")
	assert.Equal(t, 0, mainWithCode([]string{"validate", "-", "-o", "json"}, &out, &errb), errb.String())
	assert.JSONEq(t, `{"spec": "standard input", "valid": true, "name": "piped", "tasks": [
		{"name": "worker-0", "type": "worker", "index": 0, "rank": 0, "pool": "default", "command": ["sleep", "1"], "env": {"A": "b"}},
		{"name": "ps-0", "type": "ps", "index": 0, "rank": 1, "host": "h1", "command": ["sleep", "1"], "env": {"A": "b"}}]}`, out.String())

	out.Reset()
	stdin = strings.NewReader("tasks: {w: {replicas: -1}}\n")
	assert.Equal(t, exitUsage, mainWithCode([]string{"validate", "-", "-o", "json"}, &out, &errb))
	assert.Empty(t, errb.String())
	var v validation
	require.NoError(t, json.Unmarshal(out.Bytes(), &v), out.String())
	assert.False(t, v.Valid)
	assert.Contains(t, v.Problems, spec.Problem{Path: "tasks.w.replicas", Message: "must be at least 1 (got -1)", Line: 1, Column: 13})
	assert.Contains(t, v.Problems, spec.Problem{Path: "name", Message: "required: name the run, e.g. name: mnist"})

	out.Reset()
	stdin = strings.NewReader("name: [\n")
	assert.Equal(t, exitUsage, mainWithCode([]string{"validate", "-", "-o", "jsonl"}, &out, &errb))
	assert.Equal(t, `{"spec":"standard input","valid":false,"problems":[{"path":"(document)","message":"not valid YAML or JSON: `+
		`did not find expected node content","line":2,"column":1}]}`+"\n", out.String())
}

// A spec file that cannot be read names the one meant: a close name in its folder (.yml for .yaml, a name with
// no extension, a typo), or the specs of a folder named instead.
func TestValidate_ASpecFileNotFoundNamesTheOneMeant(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"train.yaml", "eval.json", "notes.txt"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("{}"), 0o600))
	}
	for given, want := range map[string]string{
		"train.yml":  "(did you mean " + filepath.Join(dir, "train.yaml") + "?)",
		"train":      "(did you mean " + filepath.Join(dir, "train.yaml") + "?)",
		"trian.yaml": "(did you mean " + filepath.Join(dir, "train.yaml") + "?)",
		"eval.yaml":  "(did you mean " + filepath.Join(dir, "eval.json") + "?)",
		"":           "is a directory: name a spec file, not a folder, such as " + filepath.Join(dir, "eval.json") + ", " + filepath.Join(dir, "train.yaml"),
	} {
		var out, errb bytes.Buffer
		assert.Equal(t, exitUsage, mainWithCode([]string{"validate", filepath.Join(dir, given)}, &out, &errb))
		assert.Contains(t, errb.String(), want, given)
	}
	var out, errb bytes.Buffer
	assert.Equal(t, exitUsage, mainWithCode([]string{"validate", filepath.Join(dir, "unlike-anything.yaml")}, &out, &errb))
	assert.NotContains(t, errb.String(), "did you mean")
}

func TestFollower_AListingMergesATasksStreamsInTheOrderWritten(t *testing.T) {
	at := func(ms int64) int64 {
		return time.Date(2026, 11, 27, 2, 40, 0, 0, time.UTC).UnixNano() + ms*int64(time.Millisecond)
	}
	chunk := func(data string, marks ...workflows.LogMark) workflows.LogChunk {
		return workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Times: true}, Data: []byte(data),
			Next: int64(len(data)), Marks: marks, EOF: true}
	}
	listing := func(tail int) (*follower, *bytes.Buffer, *stream, *stream) {
		var out bytes.Buffer
		f := newFollower(nil, "run", &out)
		f.prefix, f.merge = false, &merger{tail: tail}
		f.open(workflows.TaskStatus{Name: "worker-0", Host: "a"}, 1, true)
		return f, &out, f.streams["worker-0/1/stdout"], f.streams["worker-0/1/stderr"]
	}
	stdout := chunk("epoch 1\nepoch 2\nsaving\n", workflows.LogMark{Size: 8, At: at(0)}, workflows.LogMark{Size: 16, At: at(500)},
		workflows.LogMark{Size: 23, At: at(1000)})
	stderr := chunk("warning: slow disk\nTraceback: boom\n", workflows.LogMark{Size: 19, At: at(250)}, workflows.LogMark{Size: 35, At: at(1000)})

	f, out, so, se := listing(0)
	f.take(so, stdout)
	f.flush()
	assert.Empty(t, out.String(), "stdout waits: stderr, not read yet, may hold earlier lines")
	f.take(se, stderr)
	f.flush()
	assert.Equal(t, "epoch 1\nwarning: slow disk\nepoch 2\nsaving\nTraceback: boom\n", out.String(),
		"in the order written; lines dated alike put stdout first")

	// With --tail, the last lines of the two streams together.
	f, out, so, se = listing(2)
	f.take(so, stdout)
	f.take(se, stderr)
	f.flush()
	assert.Equal(t, "saving\nTraceback: boom\n", out.String())

	// A stream whose host stopped answering holds nothing back at the end.
	f, out, so, _ = listing(0)
	f.take(so, stdout)
	f.flush()
	f.emitMerged(true)
	assert.Equal(t, "epoch 1\nepoch 2\nsaving\n", out.String())

	// Once the other stream is read to its end and nothing is held, one task's output is its file, byte for byte.
	f, out, so, se = listing(0)
	f.take(se, chunk(""))
	f.take(so, chunk("no newline at the end"))
	f.flush()
	assert.Equal(t, "no newline at the end", out.String())

	// A stream that has queued a lot is not read further until the other catches up.
	f, _, so, se = listing(0)
	big := strings.Repeat("x", 1023) + "\n"
	f.take(so, chunk(strings.Repeat(big, mergeHold/1024), workflows.LogMark{Size: mergeHold, At: at(0)}))
	so.closed = false
	assert.Equal(t, []string{"worker-0/1/stderr"}, f.readable())
	f.take(se, stderr)
	f.flush()
	assert.Len(t, f.readable(), 1, "stdout, drained, is read again")
}

func TestStartTask_RefusesANegativeIndex(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, exitUsage, mainWithCode([]string{"start-task", "run-1", "worker", "--index", "-1"}, &out, &errb))
	assert.Contains(t, errb.String(), "--index -1 is negative: give a task's index (0 or more), or leave --index out to start the next new worker")
}

func TestFollower_FollowingBothStreamsTailKeepsTheTasksLastLines(t *testing.T) {
	at := func(ms int64) int64 {
		return time.Date(2026, 11, 27, 2, 50, 0, 0, time.UTC).UnixNano() + ms*int64(time.Millisecond)
	}
	chunk := func(data string, marks ...workflows.LogMark) workflows.LogChunk {
		return workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Times: true}, Data: []byte(data), Next: int64(len(data)), Marks: marks}
	}
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.prefix, f.inOrder, f.tail = false, true, 2
	f.open(workflows.TaskStatus{Name: "worker-0", Host: "a"}, 1, false)
	f.take(f.streams["worker-0/1/stdout"], chunk("step 1\nstep 2\nstep 3\n", workflows.LogMark{Size: 7, At: at(0)},
		workflows.LogMark{Size: 14, At: at(500)}, workflows.LogMark{Size: 21, At: at(1000)}))
	f.take(f.streams["worker-0/1/stderr"], chunk("warn a\nwarn b\n", workflows.LogMark{Size: 7, At: at(250)}, workflows.LogMark{Size: 14, At: at(750)}))
	f.flush()
	assert.Equal(t, "warn b\nstep 3\n", out.String(), "the last 2 lines of the task, not of each stream")

	out.Reset()
	f.take(f.streams["worker-0/1/stdout"], workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Times: true, Offset: 21},
		Data: []byte("step 4\nstep 5\nstep 6\n"), Next: 42, Marks: []workflows.LogMark{{Size: 42, At: at(2000)}}})
	f.flush()
	assert.Equal(t, "step 4\nstep 5\nstep 6\n", out.String(), "later reads are whole")
}

// A host dates the lines past its last mark by the file's modification time, which the kernel keeps on a
// coarse clock: it can read a few milliseconds before the mark that came first. A stream's lines still come
// in the order it has them, within a read and from one read to the next. (Seen in CI: logs --follow printed a
// task's lines 10502 onwards before lines 0 to 10501.)
func TestFollower_AStreamKeepsItsOrderWhenItsFileIsDatedBeforeItsLastMark(t *testing.T) {
	at := func(ms int64) int64 {
		return time.Date(2026, 11, 27, 4, 40, 0, 0, time.UTC).UnixNano() + ms*int64(time.Millisecond)
	}
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.prefix, f.inOrder = false, true
	f.open(workflows.TaskStatus{Name: "worker-0", Host: "a"}, 1, false)
	f.take(f.streams["worker-0/1/stdout"], workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Times: true},
		Data: []byte("line 0\nline 1\n"), Next: 14, Marks: []workflows.LogMark{{Size: 7, At: at(10)}}, ModTime: at(6)})
	f.take(f.streams["worker-0/1/stderr"], workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Times: true},
		Data: []byte("warn\n"), Next: 5, Marks: []workflows.LogMark{{Size: 5, At: at(8)}}})
	f.flush()
	assert.Equal(t, "warn\nline 0\nline 1\n", out.String(), "line 1 was written after line 0, whatever the file's time says")

	out.Reset()
	f.take(f.streams["worker-0/1/stdout"], workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Times: true, Offset: 14},
		Data: []byte("line 2\n"), Next: 21, ModTime: at(7)})
	f.take(f.streams["worker-0/1/stderr"], workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Times: true, Offset: 5},
		Data: []byte("later warn\n"), Next: 16, Marks: []workflows.LogMark{{Size: 16, At: at(9)}}})
	f.flush()
	assert.Equal(t, "later warn\nline 2\n", out.String(), "a read is never dated before the stream's last line")
}

// A drain whose host, or every host, did not answer says which, in words, not as a timeout's type.
func TestNoAnswer_SaysWhoDidNotAnswer(t *testing.T) {
	pickUp := fmt.Errorf("host d2 did not answer (is its clusterrun-worker running?): %w",
		temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil))
	assert.Equal(t, "host d2 did not take the request up within 10s: is a clusterrun-worker with --host d2 running? "+
		"(clusterrun hosts says when each host was last seen)", noAnswer("d2", pickUp))
	assert.Equal(t, "no clusterrun-worker took the request for host d2 within 1m0s: is any host worker running? "+
		"(clusterrun hosts says when each host was last seen)", noAnswer("d2", context.DeadlineExceeded))
}

// A default attach shows 10 lines of each task's earlier output up to 100 tasks, fewer past that so that 1,000
// lines at most come before the first new one, and none past 1,000 tasks.
func TestEarlierLines_BoundsWhatADefaultAttachShowsFirst(t *testing.T) {
	for n, want := range map[int]int{1: 10, 100: 10, 101: 9, 250: 4, 1000: 1, 1001: 0, 10000: 0} {
		assert.Equal(t, want, earlierLines(n), "%d tasks", n)
	}
}

// The codec server dials no Temporal server: it takes the codec key file, and no connection flag it would ignore.
func TestCodecServer_TakesNoConnectionFlags(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, exitUsage, mainWithCode([]string{"codec-server", "--address", "temporal.example:7233"}, &out, &errb))
	assert.Contains(t, errb.String(), "unknown flag --address")
	out.Reset()
	errb.Reset()
	require.Equal(t, 0, mainWithCode([]string{"codec-server", "--help"}, &out, &errb))
	assert.Contains(t, out.String()+errb.String(), "--codec-key-file")
	assert.NotContains(t, out.String()+errb.String(), "--namespace")
}

// The codec server refuses an origin no browser sends (it would never match, and the Web UI would fail with no
// word why) and a --listen that is not HOST:PORT, as usage errors, before it serves.
func TestCodecServer_RefusesAnOriginOrAddressItCouldNotServe(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	line, err := codec.NewKeyLine("k1")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(keys, []byte(line+"\n"), 0o600))
	for flag, want := range map[string]string{
		"--cors-origin=localhost:8233":                   "is not a browser origin",
		"--cors-origin=*":                                "any web page",
		"--cors-origin=http://localhost:8233/namespaces": "use http://localhost:8233",
		"--listen=127.0.0.1:99999":                       "is not HOST:PORT",
		"--listen=8081":                                  "is not HOST:PORT",
	} {
		var out, errb bytes.Buffer
		assert.Equal(t, exitUsage, mainWithCode([]string{"codec-server", "--codec-key-file", keys, flag}, &out, &errb), flag)
		assert.Contains(t, errb.String(), want, flag)
	}
}

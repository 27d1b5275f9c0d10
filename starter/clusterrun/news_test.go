package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/internal/silence"
	"github.com/clusterrun/clusterrun/workflows"
)

// A small run's changes are said a line each; in a large one, alike changes seen together share a line, and a
// change of its own (a failure with its error) keeps its line.
func TestFollower_TellsABurstOnce(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	tasks := func(n int, state string) []workflows.TaskStatus {
		ts := make([]workflows.TaskStatus, n)
		for i := range ts {
			ts[i] = workflows.TaskStatus{Name: fmt.Sprintf("worker-%d", i), State: state, Host: fmt.Sprintf("host-%c", 'a'+i%2), Attempt: 1}
		}
		return ts
	}

	f.update(workflows.RunStatus{Tasks: tasks(newsBurst, workflows.TaskRunning)})
	assert.Equal(t, newsBurst, strings.Count(out.String(), "\n"))
	assert.Contains(t, out.String(), "[worker-15] ── running on host-b (attempt 1)")

	out.Reset()
	f = newFollower(nil, "run", &out)
	f.update(workflows.RunStatus{Tasks: tasks(1000, workflows.TaskRunning)})
	assert.Equal(t, "[1000 tasks] ── running on host-a, host-b (attempt 1): worker-0, worker-1, worker-2 and 997 more\n", out.String())

	out.Reset()
	ended := tasks(1000, workflows.TaskStopped)
	for i := range ended {
		ended[i].Signal = "SIGTERM"
	}
	ended[7].State, ended[7].Error = workflows.TaskFailed, "worker-7 exited with code 3 on host-b (attempt 1): boom"
	f.update(workflows.RunStatus{Tasks: ended})
	f.release(true)
	assert.Equal(t, "[worker-7]   ── failed: worker-7 exited with code 3 on host-b (attempt 1): boom\n"+
		"[999 tasks]  ── stopped (SIGTERM): worker-0, worker-1, worker-2 and 996 more\n", out.String(), "the cause before the stops")

	out.Reset()
	f.tell([]workflows.TaskStatus{ended[63], ended[96], ended[108]})
	assert.Equal(t, "[3 tasks]    ── stopped (SIGTERM): worker-63, worker-96, worker-108\n", out.String(), "a large run's few changes")

	// The restarts of the tasks a lost host took with it share a line: each names its own task.
	out.Reset()
	var waits []workflows.TaskStatus
	for _, i := range []int{2, 6, 10, 14, 18} {
		name := fmt.Sprintf("worker-%d", i)
		waits = append(waits, workflows.TaskStatus{Name: name, State: workflows.TaskPending, Attempt: 1,
			Error: "restart 1 of 1 in 1s after: " + name + " lost: host c did not take it up again within hostLossGrace 5s"})
	}
	f.tell(waits)
	assert.Equal(t, "[5 tasks]    ── waiting: restart 1 of 1 in 1s after: lost: host c did not take it up again within hostLossGrace 5s: "+
		"worker-2, worker-6, worker-10 and 2 more\n", out.String())

	// So do failures whose errors differ only in their task's name: 44 tasks of a launch larger than its pool
	// printed 44 lines (seen as a user).
	out.Reset()
	var noSlot []workflows.TaskStatus
	for i := 256; i < 300; i += 4 {
		name := fmt.Sprintf("worker-%d", i)
		noSlot = append(noSlot, workflows.TaskStatus{Name: name, State: workflows.TaskFailed, Attempt: 1,
			Error: name + " found no free slot on u-a within startTimeout 20s: add hosts to the pool"})
	}
	noSlot = append(noSlot, workflows.TaskStatus{Name: "worker-7", State: workflows.TaskFailed, Attempt: 1, Error: "worker-7 exited with code 3 on host-b (attempt 1): boom"})
	f.tell(noSlot)
	assert.Equal(t, "[11 tasks]   ── failed: found no free slot on u-a within startTimeout 20s: add hosts to the pool: "+
		"worker-256, worker-260, worker-264 and 8 more\n"+
		"[worker-7]   ── failed: worker-7 exited with code 3 on host-b (attempt 1): boom\n", out.String(), "a failure of its own keeps its line and its name")

	// And stops that differ only so: 19 tasks a host had no record of printed 19 lines (seen as a user).
	out.Reset()
	var unknown []workflows.TaskStatus
	for _, i := range []int{0, 96, 100} {
		name := fmt.Sprintf("worker-%d", i)
		unknown = append(unknown, workflows.TaskStatus{Name: name, State: workflows.TaskStopped, Host: "u-b", Attempt: 1,
			Error: "not running: host u-b has no record of " + name + " attempt 1"})
	}
	f.tell(unknown)
	assert.Equal(t, "[3 tasks]    ── stopped: not running: host u-b has no record of attempt 1: worker-0, worker-96, worker-100\n", out.String())
}

// A task that moved off a host that was gone before it started says so when it runs, alone or in a large run,
// where it does not share the line of the tasks that did not move.
func TestFollower_SaysWhereATaskMovedFrom(t *testing.T) {
	const moved = "moved off host-c, which has not reported for 31s before it started the task"
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskRunning, Host: "host-a", Attempt: 1, Moved: moved}}})
	assert.Equal(t, "[worker-0] ── running on host-a (attempt 1; "+moved+")\n", out.String())

	out.Reset()
	f = newFollower(nil, "run", &out)
	ts := make([]workflows.TaskStatus, 100)
	for i := range ts {
		ts[i] = workflows.TaskStatus{Name: fmt.Sprintf("worker-%d", i), State: workflows.TaskRunning, Host: "host-a", Attempt: 1}
	}
	ts[40].Moved, ts[41].Moved = moved, moved
	f.update(workflows.RunStatus{Tasks: ts})
	assert.Equal(t, "[98 tasks]  ── running on host-a (attempt 1): worker-0, worker-1, worker-2 and 95 more\n"+
		"[2 tasks]   ── running on host-a (attempt 1; "+moved+"): worker-40, worker-41\n", out.String())
}

// A task that ended having written nothing leaves no stream to read at the end, and its end is still said.
func TestFollower_DrainSaysTheEnds(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out) // no client: a read would fail
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskRunning, Host: "h", Attempt: 1}}})
	out.Reset()
	started := time.Now()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskSucceeded, Host: "h", Attempt: 1,
		StartTime: &started, Logs: &workflows.LogSizes{}}}})
	require.NoError(t, f.drain(context.Background(), nil))
	assert.Equal(t, "[worker-0] ── exited 0\n", out.String())
}

// A task's end waits for the output of its own attempt, not for a later attempt's.
func TestFollower_EndWaitsForItsOwnAttempt(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.open(workflows.TaskStatus{Name: "worker-0", Host: "h"}, 1, true) // attempt 1: read to its end
	f.open(workflows.TaskStatus{Name: "worker-0", Host: "h"}, 2, false)
	f.hold(workflows.TaskStatus{Name: "worker-0", State: workflows.TaskStopped, Attempt: 1, Signal: "SIGTERM"})
	f.release(false)
	assert.Empty(t, out.String(), "attempt 1 still has output to read")
	for _, s := range f.streams {
		if s.attempt == 1 {
			s.closed = true
		}
	}
	f.release(false)
	assert.Equal(t, "[worker-0] ── stopped (SIGTERM)\n", out.String(), "said once attempt 1 is read, while attempt 2 runs")
}

// Attempts that started and ended between two looks at the run are told in order, each after its output: its
// start, its output, why it restarted, then the next attempt's start. Only the earliest attempt with output
// left is read.
func TestFollower_FastRestartsKeepTheirOrder(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "chief-0", State: workflows.TaskRunning, Host: "h", Attempt: 1}}})
	assert.Equal(t, "[chief-0] ── running on h (attempt 1)\n", out.String())
	out.Reset()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "chief-0", State: workflows.TaskRunning, Host: "h", Attempt: 3,
		Earlier: []workflows.AttemptPlace{{Attempt: 1, Host: "h", Restart: "restart 1 of 5 in 1s after: boom 1"},
			{Attempt: 2, Host: "g", Restart: "restart 2 of 5 in 1s after: boom 2"}}}}})
	assert.Empty(t, out.String(), "attempt 1's output comes first")
	assert.Equal(t, []string{"chief-0/1/stdout", "chief-0/1/stderr"}, f.readable(), "attempt 1 is read, not 2 or 3")

	readAll := func(attempt int) {
		for _, s := range f.streams {
			if s.attempt == attempt {
				s.closed = true
			}
		}
		f.release(false)
	}
	readAll(1)
	assert.Equal(t, "[chief-0] ── waiting: restart 1 of 5 in 1s after: boom 1\n[chief-0] ── running on g (attempt 2)\n", out.String())
	assert.Equal(t, []string{"chief-0/2/stdout", "chief-0/2/stderr"}, f.readable())
	out.Reset()
	readAll(2)
	assert.Equal(t, "[chief-0] ── waiting: restart 2 of 5 in 1s after: boom 2\n[chief-0] ── running on h (attempt 3)\n", out.String())
	out.Reset()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "chief-0", State: workflows.TaskRunning, Host: "h", Attempt: 3,
		Earlier: []workflows.AttemptPlace{{Attempt: 1, Host: "h", Restart: "restart 1 of 5 in 1s after: boom 1"},
			{Attempt: 2, Host: "g", Restart: "restart 2 of 5 in 1s after: boom 2"}}}}})
	assert.Empty(t, out.String(), "nothing said twice")

	// Attempt 4 starts and ends between two looks: its start, its output, its end.
	started := time.Now()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "chief-0", State: workflows.TaskSucceeded, Host: "h", Attempt: 4,
		StartTime: &started, Earlier: []workflows.AttemptPlace{{Attempt: 3, Host: "h", Restart: "restart 3 of 5 in 1s after: boom 3"}}}}})
	assert.Empty(t, out.String(), "attempt 3's output first")
	readAll(3)
	assert.Equal(t, "[chief-0] ── waiting: restart 3 of 5 in 1s after: boom 3\n[chief-0] ── running on h (attempt 4)\n", out.String())
	out.Reset()
	readAll(4)
	assert.Equal(t, "[chief-0] ── exited 0\n", out.String())
}

// A placed task's line says what it waits for: its peers' places at a rendezvous, its host in a pre-placed
// launch (Starting). Seen as a user: a pre-placed task waiting on its host for a free slot said it "starts when
// every task is placed" while its peers ran.
func TestFollower_SaysWhatAPlacedTaskWaitsFor(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "worker-0", State: workflows.TaskPlaced, Host: "host-b", Attempt: 1},
		{Name: "worker-1", State: workflows.TaskPlaced, Host: "host-a", Attempt: 1, Starting: true},
	}})
	assert.Equal(t, "[worker-0] ── placed on host-b (attempt 1), starts when every task is placed\n"+
		"[worker-1] ── placed on host-a (attempt 1); its host has not started it yet\n", out.String())
}

// A pre-placed task that its host holds for a free slot says so once its host's heartbeat does, after its
// place was said; then that it runs. The same wait, later told by the run in other words (its check after
// 15 s), is not said again.
func TestFollower_SaysATaskWaitsOnItsHostForASlot(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	placed := workflows.TaskStatus{Name: "worker-0", State: workflows.TaskPlaced, Host: "u-a", Attempt: 1, Starting: true}
	st := workflows.RunStatus{Tasks: []workflows.TaskStatus{placed}}
	f.update(withHostNotes(st, nil))
	note := "waiting for a free slot on u-a: its 4 slots of pool default (--slots) are taken by other tasks; it starts there as one of them ends"
	hb := map[string]heartbeat{"worker-0": {HeartbeatDetails: workflows.HeartbeatDetails{Task: "worker-0", Attempt: 1, Phase: "slot", Note: note}}}
	f.update(withHostNotes(st, hb))
	assert.Empty(t, st.Tasks[0].Error, "the run's status is left as it was")
	f.update(withHostNotes(st, hb))
	byRun := placed
	byRun.Error = "waiting for a free slot on u-a: its 4 slots of pool default are taken (clusterrun hosts); it starts there as a task ends, or moves"
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{byRun}})
	running := placed
	running.State, running.Starting = workflows.TaskRunning, false
	f.update(withHostNotes(workflows.RunStatus{Tasks: []workflows.TaskStatus{running}}, hb))
	assert.Equal(t, "[worker-0] ── placed on u-a (attempt 1); its host has not started it yet\n"+
		"[worker-0] ── "+note+"\n"+
		"[worker-0] ── running on u-a (attempt 1)\n", out.String())

	// A note of the host's for another attempt, or for a task the run says something of, is not taken.
	stale := hb["worker-0"]
	stale.Attempt = 2
	assert.Empty(t, hostNote(placed, map[string]heartbeat{"worker-0": stale}))
	assert.Equal(t, byRun.Error, withHostNotes(workflows.RunStatus{Tasks: []workflows.TaskStatus{byRun}}, hb).Tasks[0].Error)
}

// In a large run, placed tasks waiting for slots share a line per host.
func TestFollower_TasksWaitingForSlotsShareALinePerHost(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.size = 100
	var ts []workflows.TaskStatus
	for i := range 6 {
		h := fmt.Sprintf("u-%c", 'a'+i%2)
		ts = append(ts, workflows.TaskStatus{Name: fmt.Sprintf("worker-%d", i), State: workflows.TaskPlaced, Host: h, Attempt: 1, Starting: true,
			Error: "waiting for a free slot on " + h + ": its 4 slots of pool default (--slots) are taken by other tasks; it starts there as one of them ends"})
	}
	f.tell(ts)
	assert.Equal(t, "[3 tasks] ── waiting for a free slot on u-a: its 4 slots of pool default (--slots) are taken by other tasks; "+
		"it starts there as one of them ends: worker-0, worker-2, worker-4\n"+
		"[3 tasks] ── waiting for a free slot on u-b: its 4 slots of pool default (--slots) are taken by other tasks; "+
		"it starts there as one of them ends: worker-1, worker-3, worker-5\n", out.String())
}

// A failure that stopped the rest is said before the stops, also when its output is still being read as the
// stops are seen: the stops wait for it.
func TestFollower_StopsWaitForTheFailureThatMadeThem(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.open(workflows.TaskStatus{Name: "worker-1", Host: "h"}, 1, false)
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "chief-0", State: workflows.TaskStopped, Signal: "SIGTERM", Host: "h", Attempt: 1},
		{Name: "worker-0", State: workflows.TaskStopped, Signal: "SIGTERM", Host: "h", Attempt: 1},
		{Name: "worker-1", State: workflows.TaskFailed, Error: "worker-1 exited with code 3", Host: "h", Attempt: 1},
	}})
	assert.Empty(t, out.String(), "worker-1's output is not read yet, and the stops wait for its failure")
	for _, s := range f.streams {
		s.closed = true
	}
	f.release(false)
	assert.Equal(t, "[worker-1] ── failed: worker-1 exited with code 3\n"+
		"[chief-0]  ── stopped (SIGTERM)\n"+
		"[worker-0] ── stopped (SIGTERM)\n", out.String())
}

func TestDescribeState_AStoppedTaskSaysWhyItWasKilled(t *testing.T) {
	killed := workflows.TaskStatus{State: workflows.TaskStopped, Signal: "SIGKILL", Error: "it did not exit within its 3s grace period (stopGracePeriod) after SIGTERM"}
	assert.Equal(t, "stopped (SIGKILL): it did not exit within its 3s grace period (stopGracePeriod) after SIGTERM", describeState(killed))
	waited := workflows.TaskStatus{State: workflows.TaskStopped, Error: "stopped before it started: it was waiting for host a: no worker"}
	assert.Equal(t, "stopped before it started: it was waiting for host a: no worker", describeState(waited))
	assert.Equal(t, "stopped (SIGTERM)", describeState(workflows.TaskStatus{State: workflows.TaskStopped, Signal: "SIGTERM"}))
	assert.Equal(t, "stopped before it started", describeState(workflows.TaskStatus{State: workflows.TaskStopped}))
	assert.Equal(t, "terminated by the user", describeState(workflows.TaskStatus{State: workflows.TaskTerminated, Error: "terminated by the user"}))
	assert.Equal(t, "stopped (SIGKILL): a straggler, still running when the stop request's grace period (stopGracePeriod) ended; "+
		"a task that checks should-stop (clusterrun task should-stop), or is sent a stopRequestSignal it handles, ends in time",
		describeState(workflows.TaskStatus{State: workflows.TaskStopped, Signal: "SIGKILL", Straggler: true}))
}

func TestDescribeState_APlacedTaskSaysWhatItWaitsFor(t *testing.T) {
	placed := workflows.TaskStatus{State: workflows.TaskPlaced, Host: "u-a", Attempt: 1}
	assert.Equal(t, "placed on u-a (attempt 1), starts when every task is placed", describeState(placed))
	placed.Error = "waiting for host u-a: it is drained and takes no new tasks (clusterrun drain u-a --undo takes them again)"
	assert.Equal(t, placed.Error, describeState(placed))
}

// A task waiting out its restart backoff says so as soon as its attempt's output is read, not when the restart
// comes: its attempt has ended, so its streams close at the sizes its host reported. (Seen as a user: with a
// 6 s backoff, "waiting: restart 1 of 2 in 6s" came 6 s late, just before "running (attempt 2)".)
func TestFollower_ARestartWaitIsSaidBeforeTheRestart(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out) // no client: a read would fail
	started := time.Now()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskRunning, Host: "h", Attempt: 1, StartTime: &started}}})
	f.take(f.streams["worker-0/1/stdout"], workflows.LogChunk{Data: []byte("out\n"), Next: 4})
	f.take(f.streams["worker-0/1/stderr"], workflows.LogChunk{Data: []byte("e\n"), Next: 2})
	f.flush()
	out.Reset()
	code := 3
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskPending, Host: "h", Attempt: 1,
		StartTime: &started, EndTime: &started, ExitCode: &code, Error: "restart 1 of 2 in 6s after: worker-0 exited with code 3",
		Logs: &workflows.LogSizes{Stdout: 4, Stderr: 2}}}})
	assert.Equal(t, "[worker-0] ── waiting: restart 1 of 2 in 6s after: worker-0 exited with code 3\n", out.String())
	assert.False(t, f.pending(), "attempt 1's streams were read to their ends")
}

// A restarted task seen between its placement and its host's confirmation, its cluster map already sent, is
// starting: it is said running once its host confirms, not running and then placed. (Seen as a user: "running
// on u-a (attempt 2)" and then "placed on u-a (attempt 2), starts when every task is placed".)
func TestFollower_ATaskWhoseMapWentOutIsSaidRunningOnceItRuns(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out) // no client: a read would fail
	sent := time.Now()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskPlaced, Host: "h", Attempt: 2, StartTime: &sent}}})
	assert.Empty(t, out.String(), "its host has not said that it runs")
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskRunning, Host: "h", Attempt: 2, StartTime: &sent}}})
	assert.Equal(t, "[worker-0] ── running on h (attempt 2)\n", out.String())
}

// A gang restart is said as its backoff begins, once the ended generation's output is read, not when the new
// generation starts. (Seen as a user: with an 8 s backoff, "gang restart 1 of 1 after: ..." came 8 s late.)
func TestFollower_AGangRestartIsSaidAsItsBackoffBegins(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out) // no client: a read would fail
	started := time.Now()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskRunning, Host: "h", Attempt: 1, StartTime: &started}}})
	f.take(f.streams["worker-0/1/stdout"], workflows.LogChunk{Data: []byte("hello\n"), Next: 6})
	f.flush()
	out.Reset()
	// In the backoff, the row is the attempt as it ended: its stop is said, then the restart.
	ended, code := time.Now(), 143
	f.update(workflows.RunStatus{RestartCount: 1, Reason: "gang restart 1 of 1 after: worker-1 exited with code 7",
		Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskStopped, Host: "h", Attempt: 1, StartTime: &started,
			EndTime: &ended, ExitCode: &code, Signal: "SIGTERM", GangWait: 1}}})
	for _, name := range []string{"stdout", "stderr"} {
		s := f.streams["worker-0/1/"+name]
		f.take(s, workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Offset: s.offset}, Next: s.offset, EOF: true})
	}
	f.release(false)
	assert.Equal(t, "[worker-0] ── stopped (SIGTERM)\n[clusterrun] ── gang restart 1 of 1 after: worker-1 exited with code 7\n", out.String())
}

// A generation that started and ended between two looks at the run shows in the backoff as rows of attempts
// that ended: each attempt's start, output and end come before the gang restart's line.
func TestFollower_AGenerationSeenOnlyInItsBackoffIsSaidBeforeItsRestart(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out) // no client: a read would fail
	started, ended, code := time.Now(), time.Now(), 1
	f.update(workflows.RunStatus{RestartCount: 1, Reason: "gang restart 1 of 1 in 1s after: worker-0 exited with code 1",
		Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskFailed, Host: "h", Attempt: 1, StartTime: &started,
			EndTime: &ended, ExitCode: &code, Error: "worker-0 exited with code 1", GangWait: 1}}})
	s := f.streams["worker-0/1/stdout"]
	require.NotNil(t, s, "the ended attempt's output is read")
	f.take(s, workflows.LogChunk{Data: []byte("boom\n"), Next: 5, EOF: true})
	e := f.streams["worker-0/1/stderr"]
	f.take(e, workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Offset: e.offset}, Next: e.offset, EOF: true})
	f.release(false)
	assert.Equal(t, "[worker-0] ── running on h (attempt 1)\n[worker-0] boom\n[worker-0] ── failed: worker-0 exited with code 1\n"+
		"[clusterrun] ── gang restart 1 of 1 in 1s after: worker-0 exited with code 1\n", out.String())
}

// An attempt followed while its host was out of contact, that then ends never started (its host has no record
// of it), has no log to miss: its streams close without a word. Before, each said its stdout.log and stderr.log
// "was deleted from host" (seen as a user: 70 such lines for 35 tasks of a worker SIGKILLed during a launch).
// A started attempt's missing log is still said.
func TestFollower_AnAttemptThatNeverStartedMissesNoLog(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out) // no client: a read would fail
	started := time.Now()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "worker-0", State: workflows.TaskUnreachable, Host: "h", Attempt: 1, Error: "no heartbeat from host h for 10s"},
		{Name: "worker-1", State: workflows.TaskRunning, Host: "h", Attempt: 1, StartTime: &started}}})
	require.NotNil(t, f.streams["worker-0/1/stdout"], "an unreachable task's output is followed")
	ended := time.Now()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "worker-0", State: workflows.TaskStopped, Host: "h", Attempt: 1, EndTime: &ended, Error: "not running: host h has no record of worker-0 attempt 1"},
		{Name: "worker-1", State: workflows.TaskStopped, Host: "h", Attempt: 1, StartTime: &started, EndTime: &ended}}})
	f.release(true)
	out.Reset()
	for _, k := range []string{"worker-0/1/stdout", "worker-0/1/stderr", "worker-1/1/stdout"} {
		s := f.streams[k]
		f.take(s, workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Offset: s.offset}, Missing: true})
		assert.True(t, s.closed, k)
	}
	assert.Equal(t, "[worker-1] ── stdout.log of attempt 1 was deleted from host h (its log folder was cleaned up?)\n", out.String())
}

// A restart's lines come before the new attempt's output, when the attempt before ended unread on a host that
// is gone: the new attempt's first output was printed before "waiting: restart ..." and "running on ...
// (attempt 2)", which waited for the end of that read (seen as a user, with a host's worker and supervisor
// SIGKILLed).
func TestFollower_ARestartIsSaidBeforeTheNewAttemptsOutput(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out) // no client: a read would fail
	started := time.Now()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-2", State: workflows.TaskRunning, Host: "c", Attempt: 1, StartTime: &started}}})
	f.release(false)
	out.Reset()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-2", State: workflows.TaskRunning, Host: "d", Attempt: 2, StartTime: &started,
		Earlier: []workflows.AttemptPlace{{Attempt: 1, Host: "c", Restart: "restart 1 of 2 in 2s after: worker-2 lost: host c did not take it up again within hostLossGrace 15s"}}}}})
	for _, name := range []string{"stdout", "stderr"} {
		f.take(f.streams["worker-2/1/"+name], workflows.LogChunk{Unreachable: true, Error: "host c does not answer"})
	}
	s := f.streams["worker-2/2/stdout"]
	require.NotNil(t, s)
	f.take(s, workflows.LogChunk{Data: []byte("attempt 2 on d\n"), Next: 15})
	f.release(false)
	assert.Equal(t, "[worker-2] ── cannot read the output of attempt 1: host c does not answer (clusterrun logs run worker-2 --attempt 1 reads it once its worker is back)\n"+
		"[worker-2] ── waiting: restart 1 of 2 in 2s after: worker-2 lost: host c did not take it up again within hostLossGrace 15s\n"+
		"[worker-2] ── running on d (attempt 2)\n"+
		"[worker-2] attempt 2 on d\n", out.String())
}

// A large gang restart's ends come before its line: the failure that caused it, then the stops it made, then
// the restart. The stops waited for the failure's output and were queued after the restart's line, which
// waited too (seen as a user: "[99 tasks] ── stopped (SIGTERM)" after "gang restart 1 of 1").
func TestFollower_AGangRestartsStopsComeBeforeIt(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out) // no client: a read would fail
	started := time.Now()
	var running []workflows.TaskStatus
	for i := range 20 {
		running = append(running, workflows.TaskStatus{Name: fmt.Sprintf("worker-%d", i), State: workflows.TaskRunning, Host: "h", Attempt: 1, StartTime: &started})
	}
	f.update(workflows.RunStatus{Tasks: running})
	out.Reset()
	ended, code, one := time.Now(), 143, 1
	var backoff []workflows.TaskStatus
	for _, x := range running {
		x.State, x.EndTime, x.ExitCode, x.Signal, x.GangWait = workflows.TaskStopped, &ended, &code, "SIGTERM", 1
		if x.Name == "worker-7" {
			x.State, x.ExitCode, x.Signal, x.Error = workflows.TaskFailed, &one, "", "worker-7 exited with code 1"
		}
		backoff = append(backoff, x)
	}
	f.update(workflows.RunStatus{RestartCount: 1, Reason: "gang restart 1 of 1 in 5s after: worker-7 exited with code 1", Tasks: backoff})
	eof := func(k string, data string) {
		s := f.streams[k]
		f.take(s, workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Offset: s.offset}, Data: []byte(data), Next: s.offset + int64(len(data)), EOF: true})
	}
	for _, k := range f.order {
		if k != "worker-7/1/stderr" {
			eof(k, "")
		}
	}
	f.release(false) // the failure waits for its output, and the rest for it
	eof("worker-7/1/stderr", "boom\n")
	f.release(false)
	assert.Equal(t, "[worker-7]  boom\n"+
		"[worker-7]  ── failed: worker-7 exited with code 1\n"+
		"[19 tasks]  ── stopped (SIGTERM): worker-0, worker-1, worker-2 and 16 more\n"+
		"[clusterrun] ── gang restart 1 of 1 in 5s after: worker-7 exited with code 1\n", out.String())
}

// A host that let a read go unanswered is left out of the next reads, so that the other hosts' output is not
// held back by its 5 s each time; it is asked again after a wait, or at once when the run shows its task
// running again after it was unreachable. A stream of an ended attempt there is closed without a read, saying
// how to read it later. (Seen as a user: with one of two hosts SIGKILLed, the other's task printed its lines in
// bursts 5 s apart.)
func TestFollower_ASilentHostDoesNotHoldTheOthersBack(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	started := time.Now()
	running := func(name, host string, state string) workflows.TaskStatus {
		return workflows.TaskStatus{Name: name, State: state, Host: host, Attempt: 1, StartTime: &started}
	}
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{running("worker-0", "a", workflows.TaskRunning), running("worker-1", "b", workflows.TaskRunning)}})
	gone := workflows.LogChunk{Unreachable: true, Error: "host a did not pick up the read within 5s"}
	f.take(f.streams["worker-0/1/stdout"], gone)
	f.take(f.streams["worker-0/1/stderr"], gone)
	assert.Equal(t, []string{"worker-1/1/stdout", "worker-1/1/stderr"}, f.readable(), "host a is left out")
	assert.Equal(t, silence.FirstWait, f.silent["a"].Wait, "once per read, not once per stream")

	f.silent["a"].Until = time.Now().Add(-time.Second)
	assert.Len(t, f.readable(), 4, "asked again after its wait")
	f.take(f.streams["worker-0/1/stdout"], gone)
	assert.Equal(t, 2*silence.FirstWait, f.silent["a"].Wait, "a longer wait after another unanswered read")
	assert.Len(t, f.readable(), 2)

	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{running("worker-0", "a", workflows.TaskUnreachable), running("worker-1", "b", workflows.TaskRunning)}})
	assert.Len(t, f.readable(), 2, "still unreachable")
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{running("worker-0", "a", workflows.TaskRunning), running("worker-1", "b", workflows.TaskRunning)}})
	assert.Len(t, f.readable(), 4, "its worker took it up again: asked at once")

	f.take(f.streams["worker-0/1/stdout"], gone)
	out.Reset()
	ended := running("worker-0", "a", workflows.TaskFailed)
	ended.EndTime = &started
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{ended, running("worker-1", "b", workflows.TaskRunning)}})
	f.unreadNow()
	assert.Equal(t, []string{"worker-1/1/stdout", "worker-1/1/stderr"}, f.readable(), "an ended attempt's streams on a silent host are not asked for")
	assert.Equal(t, "[worker-0] ── cannot read the output of attempt 1: host a does not answer (clusterrun logs run worker-0 --attempt 1 reads it once its worker is back)\n", out.String())
	assert.Equal(t, 2, f.unreadable, "both its streams")
}

// A task that ends with an exit its host reported tells that its host's worker is back: the host is asked at
// once, and the ended attempt's output is read, not given up. (Seen as a lost log in the SIGKILL test: a
// logs --follow that did not look while the task was unreachable closed its streams unread.)
func TestFollower_AnExitItsHostReportedAsksTheSilentHostAgain(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	started := time.Now()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskRunning, Host: "a", Attempt: 1, StartTime: &started}}})
	f.take(f.streams["worker-0/1/stdout"], workflows.LogChunk{Unreachable: true, Error: "host a took the read up but did not answer within 10s"})
	require.NotNil(t, f.silent["a"])
	zero := 0
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskSucceeded, Host: "a", Attempt: 1,
		StartTime: &started, EndTime: &started, ExitCode: &zero}}})
	f.unreadNow()
	assert.Equal(t, []string{"worker-0/1/stdout", "worker-0/1/stderr"}, f.readable(), "its output is read")
	assert.Zero(t, f.unreadable)
}

// A silent host with several ended attempts says so in one line, not one per stream.
func TestFollower_ASilentHostsEndedAttemptsShareALine(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "big", &out)
	for i := 0; i < 6; i++ {
		f.open(workflows.TaskStatus{Name: fmt.Sprintf("worker-%d", i), Host: "c"}, 1, true)
	}
	f.open(workflows.TaskStatus{Name: "worker-9", Host: "d"}, 1, true)
	f.silent.Hush("c")
	f.unreadNow()
	assert.Equal(t, "[clusterrun] ── cannot read the output of 6 ended attempts on host c, which does not answer: worker-0, worker-1, worker-2 "+
		"and 3 more (clusterrun logs big TASK --attempt N reads each once the host's worker is back)\n", out.String())
	assert.Equal(t, 12, f.unreadable)
	assert.Equal(t, []string{"worker-9/1/stdout", "worker-9/1/stderr"}, f.readable(), "another host's streams are read")
}

// Logs of tasks that never started say why when their status does, and nothing empty when it does not (seen
// as a user: "no started task matches (worker-0 never started: )").
func TestSelectTasks_NeverStarted(t *testing.T) {
	ended := time.Now()
	st := workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "worker-0", State: workflows.TaskStopped, Host: "u-a", Attempt: 1, EndTime: &ended},
		{Name: "worker-1", State: workflows.TaskFailed, Host: "u-z", Attempt: 1, EndTime: &ended, Error: "no host worker picked up worker-1"},
	}}
	_, err := selectTasks("h2", st, taskChoice{}, 0, false)
	assert.EqualError(t, err, "no started task matches (worker-1 never started: no host worker picked up worker-1); see the tasks with: clusterrun status h2")
	_, err = selectTasks("h2", st, taskChoice{names: []string{"worker-0"}}, 0, false)
	assert.EqualError(t, err, "worker-0 never started, so it has no logs")
	_, err = selectTasks("h2", st, taskChoice{names: []string{"worker-1"}}, 0, false)
	assert.EqualError(t, err, "worker-1 never started (no host worker picked up worker-1), so it has no logs")
}

// --attempt N reads that attempt of each task that has one, unless a task is named; none having it is said
// with the most any has run (seen as a user: "--attempt 3" on a run said only "chief-0 has no attempt 3").
func TestSelectTasks_AnAttemptOfEveryTask(t *testing.T) {
	started := time.Now()
	st := workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "chief-0", State: workflows.TaskRunning, Host: "u-a", Attempt: 1, StartTime: &started},
		{Name: "worker-0", State: workflows.TaskRunning, Host: "u-b", Attempt: 1, StartTime: &started},
		{Name: "worker-1", State: workflows.TaskRunning, Host: "u-a", Attempt: 2, StartTime: &started},
	}}
	names := func(ts []workflows.TaskStatus) (out []string) {
		for _, t := range ts {
			out = append(out, t.Name)
		}
		return out
	}
	got, err := selectTasks("r", st, taskChoice{}, 2, false)
	require.NoError(t, err)
	assert.Equal(t, []string{"worker-1"}, names(got))
	got, err = selectTasks("r", st, taskChoice{patterns: []string{"worker-*"}}, 2, false)
	require.NoError(t, err)
	assert.Equal(t, []string{"worker-1"}, names(got))
	_, err = selectTasks("r", st, taskChoice{}, 3, false)
	assert.EqualError(t, err, "no task of run r has an attempt 3: the most any has run is 2 (worker-1)")
	_, err = selectTasks("r", st, taskChoice{names: []string{"worker-0"}}, 2, false)
	assert.EqualError(t, err, "worker-0 has no attempt 2: it has run 1 attempt(s)")
}

// --tasks patterns that match no task of the run say so, with the run's tasks (seen as a user: "--tasks
// nope-3" said "no started task matches", as if the task existed and had not started). Following a run, they
// may match a task started later (start-task --index), so they are no error then.
func TestSelectTasks_PatternsThatMatchNoTask(t *testing.T) {
	started := time.Now()
	st := workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "chief-0", State: workflows.TaskRunning, Host: "u-a", Attempt: 1, StartTime: &started},
		{Name: "worker-0", State: workflows.TaskRunning, Host: "u-b", Attempt: 1, StartTime: &started},
	}}
	_, err := selectTasks("r", st, taskChoice{patterns: []string{"nope-3", "ps-*"}}, 0, false)
	assert.EqualError(t, err, "--tasks nope-3,ps-* matches no task of run r; its tasks are chief-0, worker-0")
	_, err = selectTasks("r", st, taskChoice{patterns: []string{"workr-0"}}, 0, false)
	assert.EqualError(t, err, "--tasks workr-0 matches no task of run r; did you mean worker-0? (its tasks are chief-0, worker-0)")
	_, err = selectTasks("r", st, taskChoice{patterns: []string{"workr-*"}}, 0, false)
	assert.EqualError(t, err, "--tasks workr-* matches no task of run r; its tasks are chief-0, worker-0", "a pattern is no typo of one name")
	got, err := selectTasks("r", st, taskChoice{patterns: []string{"ps-*"}}, 0, true)
	require.NoError(t, err)
	assert.Empty(t, got)
}

// A task whose host could not be reached (its worker restarting) and that its host's worker took up again is
// said to run on, each time; the unreachable line was the last word on it. In a large run, the tasks back
// together share a line.
func TestFollower_SaysATaskIsBackAfterItWasUnreachable(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	task := func(state string) []workflows.TaskStatus {
		return []workflows.TaskStatus{{Name: "worker-0", State: state, Host: "u-a", Attempt: 1,
			Error: map[string]string{workflows.TaskUnreachable: "host worker u-a is shutting down"}[state]}}
	}
	for _, state := range []string{workflows.TaskRunning, workflows.TaskUnreachable, workflows.TaskRunning, workflows.TaskUnreachable, workflows.TaskRunning} {
		f.update(workflows.RunStatus{Tasks: task(state)})
	}
	assert.Equal(t, "[worker-0] ── running on u-a (attempt 1)\n"+
		"[worker-0] ── unreachable: host worker u-a is shutting down\n"+
		"[worker-0] ── running on u-a again (attempt 1): its host worker took it up again\n"+
		"[worker-0] ── unreachable: host worker u-a is shutting down\n"+
		"[worker-0] ── running on u-a again (attempt 1): its host worker took it up again\n", out.String())

	out.Reset()
	f = newFollower(nil, "run", &out)
	many := func(state string) []workflows.TaskStatus {
		ts := make([]workflows.TaskStatus, 20)
		for i := range ts {
			ts[i] = workflows.TaskStatus{Name: fmt.Sprintf("worker-%d", i), State: state, Host: "u-a", Attempt: 1}
			if state == workflows.TaskUnreachable {
				ts[i].Error = "host worker u-a is shutting down"
			}
		}
		return ts
	}
	f.update(workflows.RunStatus{Tasks: many(workflows.TaskUnreachable)})
	f.update(workflows.RunStatus{Tasks: many(workflows.TaskRunning)})
	assert.Equal(t, "[20 tasks]  ── unreachable: host worker u-a is shutting down: worker-0, worker-1, worker-2 and 17 more\n"+
		"[20 tasks]  ── running on u-a (attempt 1): worker-0, worker-1, worker-2 and 17 more\n", out.String(),
		"a follower that started during the loss says them running, not running again")
	out.Reset()
	f.update(workflows.RunStatus{Tasks: many(workflows.TaskUnreachable)})
	out.Reset()
	f.update(workflows.RunStatus{Tasks: many(workflows.TaskRunning)})
	assert.Equal(t, "[20 tasks]  ── running on u-a again (attempt 1): its host worker took it up again: worker-0, worker-1, worker-2 and 17 more\n", out.String())
}

// In a small run too, the tasks of a launch held for room share one line, as do their stops before they
// started; the others keep a line each.
func TestFollower_TasksWaitingForRoomShareALine(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.size = 5
	why := "waiting for room in pool default: this launch's 4 tasks of the pool start together, and the hosts it would start " +
		"on have too few of their 8 slots free: their last reports count 8 tasks of other runs (clusterrun hosts); the run asks again at 20:33:10 UTC"
	var ts []workflows.TaskStatus
	for i := range 4 {
		ts = append(ts, workflows.TaskStatus{Name: fmt.Sprintf("worker-%d", i), State: workflows.TaskPending, Error: why})
	}
	ts = append(ts, workflows.TaskStatus{Name: "chief-0", State: workflows.TaskPending, Error: "waiting for host h9: the host registry has no live clusterrun-worker --host h9"})
	f.tell(ts)
	assert.Equal(t, "[4 tasks] ── "+why+": worker-0, worker-1, worker-2, worker-3\n"+
		"[chief-0] ── waiting for host h9: the host registry has no live clusterrun-worker --host h9\n", out.String())

	out.Reset()
	for i := range ts[:4] {
		ts[i].State, ts[i].Error = workflows.TaskStopped, "stopped before it started: it was "+why
	}
	f.tell(ts[:4])
	assert.Equal(t, "[4 tasks] ── stopped before it started: it was "+why+": worker-0, worker-1, worker-2, worker-3\n", out.String())
}

// An ended attempt's output is not given up on one unanswered read while the host registry counts its host live
// (a worker that just restarted, a loaded machine): the host is asked again, at most doneRereads times, even
// when another of its streams made it silent. A host that is not live is not asked again. (Seen in the suite:
// logs --follow lost a restarted host's last lines on one read the loaded machine did not pick up.)
func TestFollower_ALiveHostIsAskedAgainForAnEndedAttempt(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	reads := 0
	f.liveHosts = func(context.Context) map[string]bool { reads++; return map[string]bool{"a": true, "b": false} }
	started := time.Now()
	zero := 0
	ended := func(name, host string) workflows.TaskStatus {
		return workflows.TaskStatus{Name: name, State: workflows.TaskSucceeded, Host: host, Attempt: 1, StartTime: &started, EndTime: &started, ExitCode: &zero}
	}
	running := workflows.TaskStatus{Name: "worker-2", State: workflows.TaskRunning, Host: "a", Attempt: 1, StartTime: &started}
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{ended("worker-0", "a"), ended("worker-1", "b"), running}})
	keys := []string{"worker-0/1/stdout", "worker-0/1/stderr", "worker-1/1/stdout", "worker-1/1/stderr", "worker-2/1/stdout"}
	unanswered := func() []workflows.LogChunk {
		var cs []workflows.LogChunk
		for _, k := range keys {
			host := f.streams[k].host
			cs = append(cs, workflows.LogChunk{Unreachable: true, Error: "host " + host + " did not pick up the read within 5s"})
		}
		return cs
	}
	out.Reset()
	f.takeAll(context.Background(), keys, unanswered())
	assert.Equal(t, 1, reads, "the registry is read once per read")
	assert.False(t, f.streams["worker-0/1/stdout"].closed, "host a is live: asked again")
	assert.True(t, f.streams["worker-1/1/stdout"].closed, "host b is not live: given up at once")
	f.unreadNow()
	assert.Contains(t, f.readable(), "worker-0/1/stdout", "asked again although worker-2's stream made host a silent")
	assert.Contains(t, f.readable(), "worker-0/1/stderr")
	assert.Equal(t, 1, strings.Count(out.String(), "asking again"), "said once for the host, not per stream:\n%s", out.String())
	assert.Contains(t, out.String(), "[worker-0] ── host a did not pick up the read within 5s; it reported to the host registry lately: asking again for the rest of attempt 1's output\n")

	out.Reset()
	f.takeAll(context.Background(), keys[:2], unanswered()[:2])
	assert.False(t, f.streams["worker-0/1/stdout"].closed, "a second try")
	assert.Equal(t, "[worker-0] ── host a still does not answer: asking again for the rest of attempt 1's output (2 of 2)\n", out.String())
	f.takeAll(context.Background(), keys[:2], unanswered()[:2])
	assert.True(t, f.streams["worker-0/1/stdout"].closed, "given up after doneRereads more reads")
	assert.Equal(t, 2+2, f.unreadable, "worker-1's streams, then worker-0's")

	// A host that answers the second read gives the output.
	g := newFollower(nil, "run", io.Discard)
	g.liveHosts = func(context.Context) map[string]bool { return map[string]bool{"a": true} }
	g.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{ended("worker-0", "a")}})
	g.takeAll(context.Background(), keys[:1], unanswered()[:1])
	var got bytes.Buffer
	g.out = &got
	assert.True(t, g.takeAll(context.Background(), keys[:1], []workflows.LogChunk{{Data: []byte("last words\n"), Next: 11, EOF: true}}))
	g.flush()
	assert.Contains(t, got.String(), "last words")
	assert.Zero(t, g.unreadable)
}

// A Late chunk (its host had not answered within the read's patience) reads nothing and says nothing: the
// stream stays where it was, to be asked again, its host is not taken for silent, and nothing counts as lost.
func TestFollower_ALateChunkIsAskedAgain(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.liveHosts = func(context.Context) map[string]bool {
		t.Fatal("the registry is not read for a late chunk")
		return nil
	}
	started := time.Now()
	zero := 0
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "worker-0", State: workflows.TaskSucceeded, Host: "b", Attempt: 1, StartTime: &started, EndTime: &started, ExitCode: &zero},
		{Name: "worker-1", State: workflows.TaskRunning, Host: "b", Attempt: 1, StartTime: &started}}})
	keys := []string{"worker-0/1/stdout", "worker-1/1/stdout"}
	f.streams[keys[0]].offset = 5
	out.Reset()
	late := []workflows.LogChunk{{ReadLogsRequest: workflows.ReadLogsRequest{Offset: 5}, Next: 5, Late: true}, {Late: true}}
	assert.False(t, f.takeAll(context.Background(), keys, late))
	f.unreadNow()
	for _, k := range keys {
		assert.False(t, f.streams[k].closed, k)
		assert.Contains(t, f.readable(), k, "asked again by the next read")
	}
	assert.Equal(t, int64(5), f.streams[keys[0]].offset)
	assert.Empty(t, f.silent)
	assert.Zero(t, f.unreadable)
	assert.Empty(t, out.String())

	for _, s := range f.streams {
		s.closed = true // nothing left to read
	}
	f.patience = livePatience
	require.NoError(t, f.drain(context.Background(), nil))
	assert.Zero(t, f.patience, "an ended run's last reads wait for every host")
}

// A stop request is said once, as the run begins its grace period, before the ends it brings: until the grace
// ran out and the stragglers were killed, a follower showed nothing of it (seen as a user, with a 90 s grace).
func TestFollower_AStopRequestIsSaidOnceWithItsGrace(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	started := time.Now()
	running := []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskRunning, Host: "h", Attempt: 1, StartTime: &started}}
	f.update(workflows.RunStatus{Tasks: running})
	out.Reset()
	deadline := time.Now().Add(90 * time.Second)
	req := &workflows.StopRequest{Task: "chief-0", Attempt: 1, Error: "shard 7 is corrupt"}
	f.update(workflows.RunStatus{Tasks: running, StopRequest: req, StopDeadline: &deadline})
	f.update(workflows.RunStatus{Tasks: running, StopRequest: req, StopDeadline: &deadline})
	assert.Regexp(t, `^\[clusterrun\] ── stop requested by chief-0: shard 7 is corrupt; what still runs in 1m(30|29)s is killed \(stopGracePeriod\)\n$`, out.String())

	out.Reset()
	g := newFollower(nil, "run", &out)
	g.update(workflows.RunStatus{Tasks: running, StopRequest: &workflows.StopRequest{}, StopDeadline: &deadline})
	assert.Regexp(t, `\[clusterrun\] ── stop requested from outside the run; what still runs in 1m(30|29)s is killed`, out.String())
	out.Reset()
	h := newFollower(nil, "run", &out)
	h.update(workflows.RunStatus{Tasks: running, StopRequest: req}) // its grace is over: the run is stopping the rest
	assert.NotContains(t, out.String(), "stop requested")
}

// A request that only asks the tasks to stop (keepRun) is said when it comes and when it is taken back.
func TestFollower_AnAskToStopIsSaidAndSoIsItsClear(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	started := time.Now()
	running := []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskRunning, Host: "h", Attempt: 1, StartTime: &started}}
	f.update(workflows.RunStatus{Tasks: running})
	out.Reset()
	asked := &workflows.StopRequest{Task: "worker-0", Attempt: 1, KeepRun: true}
	f.update(workflows.RunStatus{Tasks: running, StopAsked: asked})
	f.update(workflows.RunStatus{Tasks: running, StopAsked: asked})
	f.update(workflows.RunStatus{Tasks: running})
	assert.Equal(t, "[clusterrun] ── every task is asked to stop by worker-0 (should-stop is true); the run goes on\n"+
		"[clusterrun] ── the request to stop is taken back (should-stop is false again)\n", out.String())
}

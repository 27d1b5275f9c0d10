package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

// leaseOn is a RunTasks lease on the given tasks as a run sends it: attempt 1, lease 1, ends reported.
func leaseOn(tasks ...spec.Task) workflows.RunTasksInput {
	run := workflows.RunRef{WorkflowID: testWorkflowID, RunID: testRunID}
	in := workflows.RunTasksInput{Run: run, ReportTo: run, ReportExit: true, StopGracePeriod: time.Second}
	for _, t := range tasks {
		in.Members = append(in.Members, workflows.LeaseMember{Task: t, Attempt: 1, Lease: 1})
	}
	return in
}

func named(name string, cmd ...string) spec.Task {
	t := taskSpec(cmd...)
	t.Name = name
	return t
}

// runBatch executes RunTasks in the background and returns a function that waits for its result.
func (a *harness) runBatch(in workflows.RunTasksInput) func() (workflows.RunTasksResult, error) {
	return inBackground[workflows.RunTasksResult](func() (converter.EncodedValue, error) { return a.env.ExecuteActivity(a.host.RunTasks, in) })
}

// reported lists the ends the host signaled, by task.
func (c *fakeServer) reported() map[string]workflows.TaskExitReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]workflows.TaskExitReport{}
	for _, s := range c.signals {
		if x, ok := s.(workflows.TaskExits); ok {
			for _, e := range x.Exits {
				out[e.Result.Task] = e
			}
		}
	}
	return out
}

func endOf(t *testing.T, res workflows.RunTasksResult, task string) workflows.TaskExitReport {
	t.Helper()
	for _, e := range res.Ends {
		if e.Result.Task == task {
			return e
		}
	}
	t.Fatalf("no end of %s in %+v", task, res)
	return workflows.TaskExitReport{}
}

// Each member of a batch runs as its own task, and its end goes to the run as it comes, while the others run
// on; the lease completes with every end once the last has ended.
func TestRunTasks_EachMemberEndIsReportedAsItComes(t *testing.T) {
	a := newHarness(t)
	gate := filepath.Join(t.TempDir(), "go")
	wait := a.runBatch(leaseOn(
		named("worker-0", "true"),
		named("worker-1", "sh", "-c", "echo bad >&2; exit 3"),
		named("worker-2", "sh", "-c", `while [ ! -e "`+gate+`" ]; do sleep 0.02; done`),
	))
	waitFor(t, "the first two ends reported", func() bool { return len(a.server.reported()) == 2 })
	ends := a.server.reported()
	assert.True(t, ends["worker-0"].Member)
	assert.Nil(t, ends["worker-0"].Error, "exit 0 is no error")
	require.NotNil(t, ends["worker-1"].Error)
	assert.Equal(t, workflows.ErrTaskFailed, ends["worker-1"].Error.Type)
	assert.Contains(t, ends["worker-1"].Error.Message, "worker-1 exited with code 3 on "+testHost+" (attempt 1): bad")
	waitFor(t, "worker-2 to run on", func() bool { return a.host.Running() == 1 })
	_, reported := a.server.reported()["worker-2"]
	assert.False(t, reported)

	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	res, err := wait()
	require.NoError(t, err)
	require.Len(t, res.Ends, 3)
	assert.Equal(t, 0, endOf(t, res, "worker-2").Result.ExitCode)
	assert.Equal(t, 3, endOf(t, res, "worker-1").Result.ExitCode)
	assert.Contains(t, a.server.reported(), "worker-2")
}

// One heartbeat carries every member: its pid and phase, for clusterrun status.
func TestRunTasks_OneHeartbeatListsEveryMember(t *testing.T) {
	a := newHarness(t)
	wait := a.runBatch(leaseOn(named("worker-0", "sleep", "300"), named("worker-1", "sleep", "300")))
	waitFor(t, "both tasks to run", func() bool { return a.host.Running() == 2 })
	var beat []workflows.HeartbeatDetails
	waitFor(t, "a heartbeat with both running", func() bool {
		a.server.mu.Lock()
		beat, _ = a.server.lastBeat.([]workflows.HeartbeatDetails)
		a.server.mu.Unlock()
		return len(beat) == 2 && beat[0].PID != 0 && beat[1].PID != 0
	})
	assert.Equal(t, "worker-0", beat[0].Task)
	assert.Equal(t, "running", beat[1].Phase)
	_, err := a.host.StopTasks(t.Context(), workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, Reason: "test"})
	require.NoError(t, err)
	res, err := wait()
	require.NoError(t, err)
	assert.True(t, endOf(t, res, "worker-0").Result.Stopped)
}

// A batch's members start in a burst, and their pids go out in one heartbeat once the burst settles, not in
// one heartbeat per start (each a write of the run's mutable state with every member's details).
func TestRunTasks_StartsInABurstShareOneHeartbeat(t *testing.T) {
	a := newHarness(t)
	var tasks []spec.Task
	for i := range 20 {
		tasks = append(tasks, named(fmt.Sprintf("worker-%d", i), "sleep", "300"))
	}
	began := time.Now()
	wait := a.runBatch(leaseOn(tasks...))
	waitFor(t, "a heartbeat with every member running", func() bool {
		a.server.mu.Lock()
		defer a.server.mu.Unlock()
		beat, _ := a.server.lastBeat.([]workflows.HeartbeatDetails)
		for _, d := range beat {
			if d.PID == 0 {
				return false
			}
		}
		return len(beat) == len(tasks)
	})
	a.server.mu.Lock()
	beats := a.server.beats
	a.server.mu.Unlock()
	// One beat once the starts settle, one more for each startsAtMost they took (a slow machine), and one
	// should it stall mid-burst; a beat per start would be 20.
	limit := 2 + int(time.Since(began)/startsAtMost)
	assert.LessOrEqual(t, beats, limit, "heartbeats for 20 starts")
	_, err := a.host.StopTasks(t.Context(), workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, Reason: "test"})
	require.NoError(t, err)
	_, err = wait()
	require.NoError(t, err)
}

// A burst that goes on past atMost still beats every atMost, and once it pauses for quiet; no beat comes early.
// (The check holds on a loaded machine too: a stall only makes a pause, after which a beat is due.)
func TestBurst_BeatsWhenQuietAndAtMostEveryAtMost(t *testing.T) {
	const quiet, atMost = 40 * time.Millisecond, 200 * time.Millisecond
	s := newBurst(quiet, atMost)
	defer s.stop()
	start := time.Now()
	var first, last time.Time // the first event since the last beat, and the newest
	beats := 0
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < 700*time.Millisecond {
		select {
		case <-tick.C:
			s.add()
			last = time.Now()
			if first.IsZero() {
				first = last
			}
		case <-s.settled():
			now := time.Now()
			require.False(t, first.IsZero(), "a beat with no event")
			assert.True(t, now.Sub(last) >= quiet-time.Millisecond || now.Sub(first) >= atMost-time.Millisecond,
				"a beat %s after the newest event and %s after the first unbeaten one", now.Sub(last), now.Sub(first))
			s.beaten()
			first = time.Time{}
			beats++
		}
	}
	// Events every 10 ms leave no 40 ms of quiet: without atMost there would be no beat at all.
	assert.GreaterOrEqual(t, beats, 2, "beats in 700 ms of events")
	tick.Stop()
	s.add()
	select {
	case <-s.settled():
	case <-time.After(5 * time.Second):
		t.Fatal("no beat after the events stopped")
	}
}

// A canceled batch stops every member, and reports nothing by signal: its completion says how each ended.
func TestRunTasks_CancelStopsEveryMember(t *testing.T) {
	a := newHarness(t)
	wait := a.runBatch(leaseOn(named("worker-0", "sleep", "300"), named("worker-1", "sleep", "300")))
	waitFor(t, "both tasks to run", func() bool { return a.host.Running() == 2 })
	a.server.mu.Lock()
	a.server.heartbeatErr = temporal.NewCanceledError()
	a.server.mu.Unlock()
	res, err := wait()
	require.NoError(t, err)
	for _, task := range []string{"worker-0", "worker-1"} {
		e := endOf(t, res, task)
		require.NotNil(t, e.Error, task)
		assert.Equal(t, "canceled", e.Error.Kind)
		assert.True(t, e.Result.Stopped)
	}
	assert.Empty(t, a.server.reported())
	assert.Equal(t, 0, a.host.Running())
}

// A batch whose members' ends all went by signal, and which its run then cancels (the run is stopping, to end on
// those ends), holds its completion back a moment: a run that has ended by then has no use for it (the server
// no longer knows the lease), and one that goes on gets it.
func TestRunTasks_ACanceledBatchWhoseEndsWentBySignalWaitsForTheRunToEnd(t *testing.T) {
	// The cancellation comes with the batch's next heartbeat, which under load (make check's race-enabled
	// packages side by side) once came after exitHoldBack: the batch then asked the server itself, took the
	// cancellation as its answer and completed. Here it waits for the heartbeat, as it does when the run stops.
	saved := exitHoldBack
	exitHoldBack = time.Hour
	defer func() { exitHoldBack = saved }()
	for _, c := range []struct {
		name  string
		after error // the heartbeat's answer after the cancellation
	}{
		{"the run ends", serviceerror.NewNotFound("workflow execution already completed")},
		{"the run goes on", temporal.NewCanceledError()},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newHarness(t)
			wait := a.runBatch(leaseOn(named("worker-0", "true"), named("worker-1", "true")))
			waitFor(t, "both ends reported", func() bool { return len(a.server.reported()) == 2 })
			a.server.mu.Lock()
			a.server.heartbeatErrs = []error{temporal.NewCanceledError()}
			a.server.heartbeatErr = c.after
			a.server.mu.Unlock()
			res, err := wait()
			if _, gone := c.after.(*serviceerror.NotFound); gone {
				require.ErrorIs(t, err, activity.ErrResultPending, "no completion for a run that is over")
				return
			}
			require.NoError(t, err)
			assert.Nil(t, endOf(t, res, "worker-0").Error)
			assert.Nil(t, endOf(t, res, "worker-1").Error)
		})
	}
}

// A canceled batch whose members the run stopped (StopTasks answered for them) does not complete at once
// either: the run has their ends from the answers, and a run that ends there needs no completion.
func TestRunTasks_ACanceledBatchWhoseMembersTheRunStoppedWaitsForTheRunToEnd(t *testing.T) {
	for _, c := range []struct {
		name  string
		after error // the heartbeat's answer after the cancellation
	}{
		{"the run ends", serviceerror.NewNotFound("workflow execution already completed")},
		{"the run goes on", temporal.NewCanceledError()},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newHarness(t)
			wait := a.runBatch(leaseOn(named("worker-0", "sleep", "300"), named("worker-1", "sleep", "300")))
			waitFor(t, "both tasks to run", func() bool { return a.host.Running() == 2 })
			a.server.mu.Lock()
			a.server.heartbeatErrs = []error{temporal.NewCanceledError()}
			a.server.heartbeatErr = c.after
			a.server.mu.Unlock()
			stopped, err := a.host.StopTasks(t.Context(), workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID,
				Tasks: []string{"worker-0", "worker-1"}, Reason: "bad-0 exited 1"})
			require.NoError(t, err)
			assert.Equal(t, []string{"worker-0", "worker-1"}, stopped.Stopped)
			res, err := wait()
			if _, gone := c.after.(*serviceerror.NotFound); gone {
				require.ErrorIs(t, err, activity.ErrResultPending, "no completion for a run that is over")
				return
			}
			require.NoError(t, err)
			assert.True(t, endOf(t, res, "worker-0").Result.Stopped)
			assert.True(t, endOf(t, res, "worker-1").Result.Stopped)
		})
	}
}

// Unpinned members take the host's slots: past them a member waits for one to be freed, and one that finds
// none within startTimeout ends as not started, saying why.
func TestRunTasks_UnpinnedMembersWaitForASlot(t *testing.T) {
	a := newHarness(t)
	a.host.slots.max = 1
	dir := t.TempDir()
	holder := a.runBatch(leaseOn(named("worker-0", "sh", "-c", `while [ ! -e "`+dir+`/go" ]; do sleep 0.02; done`)))
	waitFor(t, "the first task to run", func() bool { return a.host.Running() == 1 })
	waiter := a.runBatch(leaseOn(named("worker-1", "sh", "-c", "echo second > "+dir+"/ran")))
	time.Sleep(200 * time.Millisecond) // time enough to start, had it a slot
	_, err := os.Stat(filepath.Join(dir, "ran"))
	assert.True(t, errors.Is(err, os.ErrNotExist), "the second task waits for the slot")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o600))
	_, err = holder()
	require.NoError(t, err)
	res, err := waiter()
	require.NoError(t, err)
	assert.Nil(t, endOf(t, res, "worker-1").Error)
	assert.FileExists(t, filepath.Join(dir, "ran"))
	assert.Equal(t, 0, a.host.slots.inUse(""), "every slot is free again")

	// With no slot freed within startTimeout, the waiting member ends as not started.
	holder = a.runBatch(leaseOn(named("worker-2", "sleep", "300")))
	waitFor(t, "the slot to be taken", func() bool { return a.host.Running() == 1 })
	in := leaseOn(named("worker-3", "true"))
	in.StartTimeout = 300 * time.Millisecond
	res, err = a.runBatch(in)()
	require.NoError(t, err)
	x := endOf(t, res, "worker-3")
	require.NotNil(t, x.Error)
	assert.Equal(t, "timeout", x.Error.Kind)
	assert.Equal(t, enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, x.Error.Timeout)
	assert.Contains(t, x.Error.Cause.Message, "host "+testHost+" had no free slot for it: its one slot of pool  (--slots) was taken by another task")
	assert.Contains(t, a.server.reported(), "worker-3", "reported as it came")
	_, err = a.host.StopTasks(t.Context(), workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, Reason: "test"})
	require.NoError(t, err)
	_, err = holder()
	require.NoError(t, err)
}

// A member that waits on its host for a free slot says so in its batch's heartbeat (clusterrun status and run
// show it: the run placed it on a report of free slots that other tasks took since), and no longer once it
// runs.
func TestRunTasks_AMemberWaitingForASlotSaysSoInItsHeartbeat(t *testing.T) {
	a := newHarness(t)
	a.host.slots.max = 1
	dir := t.TempDir()
	holder := a.runBatch(leaseOn(named("worker-0", "sh", "-c", `while [ ! -e "`+dir+`/go" ]; do sleep 0.02; done`)))
	waitFor(t, "the first task to run", func() bool { return a.host.Running() == 1 })
	waiter := a.runBatch(leaseOn(named("worker-1", "sleep", "300")))
	lastOf := func(task string) (last workflows.HeartbeatDetails) {
		a.server.mu.Lock()
		defer a.server.mu.Unlock()
		for _, b := range a.server.beatLog {
			list, _ := b.([]workflows.HeartbeatDetails)
			for _, d := range list {
				if d.Task == task {
					last = d
				}
			}
		}
		return last
	}
	waitFor(t, "worker-1's heartbeat to say it waits for a slot", func() bool { return lastOf("worker-1").Phase == "slot" })
	assert.Equal(t, "waiting for a free slot on "+testHost+": its one slot of pool  (--slots) is taken by another task; "+
		"it starts there once that task ends", lastOf("worker-1").Note)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o600))
	_, err := holder()
	require.NoError(t, err)
	waitFor(t, "worker-1's heartbeat to say it runs", func() bool { return lastOf("worker-1").PID != 0 })
	assert.Equal(t, "running", lastOf("worker-1").Phase)
	assert.Empty(t, lastOf("worker-1").Note)
	_, err = a.host.StopTasks(t.Context(), workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, Reason: "test"})
	require.NoError(t, err)
	_, err = waiter()
	require.NoError(t, err)
}

// An end whose report cannot be sent (the server is down) is sent again while the lease holds: its batch's
// completion may be far off, as another member runs on.
func TestRunTasks_AReportThatFailsIsSentAgain(t *testing.T) {
	a := newHarness(t)
	a.server.failExits = 2
	wait := a.runBatch(leaseOn(named("chief-0", "true"), named("ps-0", "sleep", "300")))
	waitFor(t, "the chief's end reported", func() bool { _, ok := a.server.reported()["chief-0"]; return ok })
	waitFor(t, "the ps to run on", func() bool { return a.host.Running() == 1 })
	_, err := a.host.StopTasks(t.Context(), workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, Reason: "test"})
	require.NoError(t, err)
	_, err = wait()
	require.NoError(t, err)
}

// A batch whose worker shuts down completes at once with its members let go of (their processes run on for
// the next worker): the hold-back for runs that may be ending is not for it.
func TestRunTasks_ShutdownCompletesWithoutHoldingBack(t *testing.T) {
	saved := exitHoldBack
	exitHoldBack = time.Hour
	defer func() { exitHoldBack = saved }()
	a := newHarness(t)
	wait := a.runBatch(leaseOn(named("worker-0", "sleep", "300"), named("worker-1", "sleep", "300")))
	waitFor(t, "both tasks to run", func() bool { return a.host.Running() == 2 })
	a.shutdown(false)
	res, err := wait()
	require.NoError(t, err, "it completed, within the wait's 30 s")
	for _, task := range []string{"worker-0", "worker-1"} {
		e := endOf(t, res, task)
		require.NotNil(t, e.Error, task)
		assert.Equal(t, workflows.ErrTaskDetached, e.Error.Type)
	}
	assert.Equal(t, 2, a.host.Running(), "the processes run on")
}

// A lease a shutting-down host lets go reports its end only once its worker polls no more: the run launches the
// take-up lease on hearing of it, and one that reached the stopping worker's last polls was dropped there (the
// tasks stayed Unreachable until their heartbeatTimeout).
func TestRunTasks_AShutdownReportsEndsOnlyOnceTheWorkerPollsNoMore(t *testing.T) {
	a := newHarness(t)
	wait := a.runBatch(leaseOn(named("worker-0", "sleep", "300")))
	waitFor(t, "the task to run", func() bool { return a.host.Running() == 1 })
	polling := a.polling
	a.polling = nil // this test stops the polls itself
	shut := make(chan struct{})
	go func() { defer close(shut); a.host.Shutdown(false, time.Second, 10*time.Second) }()
	waitFor(t, "the host to shut down", a.host.reg.closed)
	time.Sleep(300 * time.Millisecond) // the end must not come meanwhile
	assert.Empty(t, a.server.reported(), "the end was reported while the worker still polled")
	close(polling)
	waitFor(t, "the end to be reported", func() bool { return len(a.server.reported()) == 1 })
	assert.Equal(t, workflows.ErrTaskDetached, a.server.reported()["worker-0"].Error.Type)
	_, err := wait()
	require.NoError(t, err)
	<-shut
}

// A member waiting for a slot when its worker shuts down gives its lease up unstarted, for its run to launch
// again: the worker's stop waits for its batches, and waited for the slot or the startTimeout (up.sh, which
// restarts workers, hung so behind a task that waited for a slot).
func TestRunTasks_ShutdownGivesUpAMemberWaitingForASlot(t *testing.T) {
	a := newHarness(t)
	a.host.slots.max = 1
	holder := a.runBatch(leaseOn(named("worker-0", "sleep", "300")))
	waitFor(t, "the slot to be taken", func() bool { return a.host.Running() == 1 })
	in := leaseOn(named("worker-1", "true"))
	in.StartTimeout = 5 * time.Minute // beyond the wait's 30 s
	waiter := a.runBatch(in)
	waitFor(t, "the second member to wait for the slot", func() bool { return a.host.slots.waiting() == 1 })
	a.shutdown(false)
	res, err := waiter()
	require.NoError(t, err, "it completed, within the wait's 30 s")
	x := endOf(t, res, "worker-1")
	require.NotNil(t, x.Error)
	assert.Equal(t, workflows.ErrTaskDetached, x.Error.Type)
	assert.Equal(t, "host worker "+testHost+" is shutting down; worker-1 was not started", x.Error.Message)
	_, err = holder()
	require.NoError(t, err)
}

// A member waiting for a slot that its run takes back (WithdrawTasks) ends unstarted, saying why, and its run
// launches it elsewhere; a member that runs is not given up, nor one already given up.
func TestRunTasks_WithdrawGivesUpOnlyAWaitingMember(t *testing.T) {
	a := newHarness(t)
	a.host.slots.max = 1
	holder := a.runBatch(leaseOn(named("worker-0", "sleep", "300")))
	waitFor(t, "the slot to be taken", func() bool { return a.host.Running() == 1 })
	in := leaseOn(named("worker-1", "true"))
	in.StartTimeout = 5 * time.Minute
	waiter := a.runBatch(in)
	waitFor(t, "the second member to wait for the slot", func() bool { return a.host.slots.waiting() == 1 })
	ask := workflows.WithdrawTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, Reason: "other hosts have room",
		Members: []workflows.LeaseAttempt{{Task: "worker-0", Attempt: 1, Lease: 1}, {Task: "worker-1", Attempt: 1, Lease: 2},
			{Task: "worker-9", Attempt: 1, Lease: 1}}}
	got, err := a.host.WithdrawTasks(context.Background(), ask)
	require.NoError(t, err)
	assert.Empty(t, got.Withdrawn, "worker-0 runs, and worker-1 waits under lease 1, not 2")
	assert.Equal(t, []string{"worker-1", "worker-9"}, got.Unknown, "no lease of worker-9 reached this host, nor lease 2 of worker-1")
	ask.Members[1].Lease = 1
	got, err = a.host.WithdrawTasks(context.Background(), ask)
	require.NoError(t, err)
	assert.Equal(t, []string{"worker-1"}, got.Withdrawn)
	assert.Equal(t, []string{"worker-9"}, got.Unknown)
	res, err := waiter()
	require.NoError(t, err)
	x := endOf(t, res, "worker-1")
	require.NotNil(t, x.Error)
	assert.Equal(t, workflows.ErrTaskDetached, x.Error.Type)
	assert.Equal(t, "host "+testHost+" gave worker-1 back before it started: other hosts have room", x.Error.Message)
	assert.Zero(t, x.Result.PID)
	assert.Equal(t, x, a.server.reported()["worker-1"], "its end went to the run by signal")
	got, err = a.host.WithdrawTasks(context.Background(), ask)
	require.NoError(t, err)
	assert.Empty(t, got.Withdrawn, "nothing waits any more")
	assert.Equal(t, 1, a.host.Running(), "worker-0 runs on")
	a.shutdown(true)
	_, err = holder()
	require.NoError(t, err)
}

// A member asked back before its lease reached the host (the run then cancels the lease) is refused when the
// lease comes after all, in the moment before the cancel: it never starts there, even with a slot free. Other
// leases of the task, and other tasks, start as ever.
func TestRunTasks_AMemberAskedBackBeforeItsLeaseCameNeverStarts(t *testing.T) {
	a := newHarness(t)
	a.host.slots.max = 2
	ask := workflows.WithdrawTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, Reason: "other hosts have room",
		Members: []workflows.LeaseAttempt{{Task: "worker-1", Attempt: 1, Lease: 1}}}
	got, err := a.host.WithdrawTasks(context.Background(), ask)
	require.NoError(t, err)
	assert.Equal(t, []string{"worker-1"}, got.Unknown)
	marker := filepath.Join(t.TempDir(), "started")
	res, err := a.runBatch(leaseOn(named("worker-1", "touch", marker), named("worker-2", "true")))()
	require.NoError(t, err)
	x := endOf(t, res, "worker-1")
	require.NotNil(t, x.Error)
	assert.Equal(t, workflows.ErrTaskDetached, x.Error.Type)
	assert.Equal(t, "host "+testHost+" gave worker-1 back before it started: other hosts have room", x.Error.Message)
	assert.Zero(t, x.Result.PID)
	assert.NoFileExists(t, marker, "worker-1 was refused, not started")
	assert.Nil(t, endOf(t, res, "worker-2").Error, "worker-2 was not asked back")

	in := leaseOn(named("worker-1", "touch", marker))
	in.Members[0].Lease = 2
	res, err = a.runBatch(in)()
	require.NoError(t, err)
	assert.Nil(t, endOf(t, res, "worker-1").Error, "its next lease, wherever the run sends it, is not refused")
	assert.FileExists(t, marker)
}

// A member that got its slot is kept from then on, also in the moment before its process is registered.
func TestWaitingMembers_OneThatGotItsSlotIsKept(t *testing.T) {
	var w waitingMembers
	k := memberKey{workflowID: "wf", runID: "r", task: "worker-0", attempt: 1, lease: 1}
	notHeld := func() bool { return false }
	_, wm, refused := w.enter(context.Background(), k)
	require.Empty(t, refused)
	assert.Empty(t, w.leave(k, wm, true))
	assert.Equal(t, memberKept, w.withdraw(k, "asked", notHeld, time.Now()))
	w.done(k, wm)
	assert.Equal(t, memberRefused, w.withdraw(k, "asked", notHeld, time.Now()), "served and gone: a lease of it that comes now is refused")
	_, _, refused = w.enter(context.Background(), k)
	assert.Equal(t, "asked", refused)
	_, wm, refused = w.enter(context.Background(), k)
	assert.Empty(t, refused, "a refusal is used once")
	w.done(k, wm)

	old := memberKey{workflowID: "wf", runID: "r", task: "worker-9", attempt: 1, lease: 1}
	assert.Equal(t, memberRefused, w.withdraw(old, "asked", notHeld, time.Now().Add(-2*refusalKept)))
	w.withdraw(k, "asked", notHeld, time.Now())
	assert.NotContains(t, w.refused, old, "refusals are forgotten after refusalKept")
}

// A lease beats with its members' first output soon after they start, not only at the next periodic beat
// (every 5 s here, as with the default heartbeatTimeout).
func TestRunTasks_TheFirstOutputShowsSoonAfterTheStart(t *testing.T) {
	was := firstLinesAfter
	firstLinesAfter = 200 * time.Millisecond
	t.Cleanup(func() { firstLinesAfter = was })
	a := newHarness(t)
	began := time.Now()
	wait := a.runBatch(leaseOn(named("worker-0", "sh", "-c", "echo hello; exec sleep 300"), named("worker-1", "sleep", "300")))
	deadline := began.Add(4 * time.Second) // before the first periodic beat, 5 s after the lease began
	var beat []workflows.HeartbeatDetails
	for time.Now().Before(deadline) && (len(beat) != 2 || beat[0].Last != "hello") {
		time.Sleep(20 * time.Millisecond)
		a.server.mu.Lock()
		beat, _ = a.server.lastBeat.([]workflows.HeartbeatDetails)
		a.server.mu.Unlock()
	}
	require.Len(t, beat, 2)
	assert.Equal(t, "hello", beat[0].Last, "worker-0's first line, %s after the lease began", time.Since(began))
	_, err := a.host.StopTasks(t.Context(), workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, Reason: "test"})
	require.NoError(t, err)
	_, err = wait()
	require.NoError(t, err)
}

// The start of a pre-placed member that ends before its host sent it is not sent: its end carries the start
// (the result's pid and start time). The starts of members still running go out first, as before.
func TestRunTasks_AnEndCarriesAStartNotYetSent(t *testing.T) {
	a := newHarness(t)
	assert.Equal(t, []string{"start of worker-1", "end of worker-0"}, endBeforeItsStartWentOut(t, a))
	end := a.server.reported()["worker-0"]
	assert.NotZero(t, end.Result.PID, "the end says which process it was")
	assert.False(t, end.Result.StartTime.IsZero(), "and when it started")
}

// When the end cannot go out, the start it carried goes out on its own, ahead of the end's next try.
func TestRunTasks_AStartAnEndCouldNotCarryGoesOutAlone(t *testing.T) {
	a := newHarness(t)
	a.server.failExits = 1
	assert.Equal(t, []string{"start of worker-1", "start of worker-0", "end of worker-0"}, endBeforeItsStartWentOut(t, a))
}

// endBeforeItsStartWentOut runs a pre-placed batch of two members whose starts are gathered for a minute, ends
// the first once both starts are gathered, and returns the starts and ends the host signaled, in order, once
// the first's end went out.
func endBeforeItsStartWentOut(t *testing.T, a *harness) []string {
	a.host.starts.window, a.host.starts.maxWindow = time.Minute, time.Minute // gathered until an end sends them
	gate := filepath.Join(t.TempDir(), "go")
	in := leaseOn(
		named("worker-0", "sh", "-c", `while [ ! -e "`+gate+`" ]; do sleep 0.02; done`),
		named("worker-1", "sleep", "300"),
	)
	var eps []workflows.Endpoint
	for i, m := range in.Members {
		eps = append(eps, workflows.Endpoint{Task: m.Task.Name, Type: "worker", Host: testHost, Addr: "127.0.0.1", Port: lowPort(t)})
		in.Members[i].Port = eps[i].Port
	}
	m := clusterOf(eps...)
	in.Cluster = &m
	wait := a.runBatch(in)
	t.Cleanup(func() {
		_, err := a.host.StopTasks(context.Background(), workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, Reason: "test"})
		assert.NoError(t, err)
		_, err = wait()
		assert.NoError(t, err)
	})
	waitFor(t, "both starts gathered", func() bool {
		a.host.starts.mu.Lock()
		defer a.host.starts.mu.Unlock()
		bt := a.host.starts.runs[testWorkflowID+"\x00"+testRunID]
		return bt != nil && len(bt.items) == 2
	})
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	waitFor(t, "worker-0's end reported", func() bool { _, ok := a.server.reported()["worker-0"]; return ok })

	var order []string
	a.server.mu.Lock()
	defer a.server.mu.Unlock()
	for _, s := range a.server.signals {
		switch s := s.(type) {
		case workflows.PlacedSignal:
			for _, p := range s.Placements {
				order = append(order, "start of "+p.Task)
			}
		case workflows.TaskExits:
			for _, x := range s.Exits {
				order = append(order, "end of "+x.Result.Task)
			}
		}
	}
	return order
}

// A member's clean end waits for the batch's last end and goes with it, in one signal; a failure goes at once.
func TestRunTasks_CleanEndsGoWithTheBatchsLast(t *testing.T) {
	a := newHarness(t)
	a.host.exits.laterWindow, a.host.exits.laterMaxWindow = time.Minute, time.Minute
	gate := filepath.Join(t.TempDir(), "go")
	wait := a.runBatch(leaseOn(
		named("worker-0", "true"),
		named("worker-1", "sh", "-c", `while [ ! -e "`+gate+`" ]; do sleep 0.02; done; exit 3`),
		named("worker-2", "sh", "-c", `while [ ! -e "`+gate+`.2" ]; do sleep 0.02; done`),
	))
	waitFor(t, "worker-0 to end", func() bool { return a.host.Running() == 2 })
	time.Sleep(200 * time.Millisecond) // what a sooner pace would have taken (3 ms here) and more
	assert.Empty(t, a.server.reported(), "a clean end went out before the batch's last")

	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	waitFor(t, "worker-1's failure reported", func() bool { _, ok := a.server.reported()["worker-1"]; return ok })
	assert.Contains(t, a.server.reported(), "worker-0", "the clean end went with the failure")
	assert.Equal(t, 1, a.server.exitSignals(), "in one signal")

	require.NoError(t, os.WriteFile(gate+".2", nil, 0o600))
	_, err := wait()
	require.NoError(t, err)
	assert.Contains(t, a.server.reported(), "worker-2")
}

// A stop of the run sends the ends this host gathered for it first: its answer repeats them, and a signal sent
// after the answer could reach the run as it completes.
func TestRunTasks_AStopSendsTheGatheredEndsFirst(t *testing.T) {
	a := newHarness(t)
	a.host.exits.laterWindow, a.host.exits.laterMaxWindow = time.Minute, time.Minute
	wait := a.runBatch(leaseOn(named("worker-0", "true"), named("worker-1", "sleep", "300")))
	waitFor(t, "worker-0 to end", func() bool { return a.host.Running() == 1 })
	waitFor(t, "worker-0's end gathered", func() bool {
		a.host.exits.mu.Lock()
		defer a.host.exits.mu.Unlock()
		bt := a.host.exits.runs[testWorkflowID+"\x00"+testRunID]
		return bt != nil && len(bt.items) == 1
	})
	assert.Empty(t, a.server.reported())
	_, err := a.host.StopTasks(t.Context(), workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, Reason: "test"})
	require.NoError(t, err)
	assert.Contains(t, a.server.reported(), "worker-0", "sent before the stop's answer")
	_, err = wait()
	require.NoError(t, err)
}

// exitSignals counts the task-exits signals sent.
func (c *fakeServer) exitSignals() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.signals {
		if _, ok := s.(workflows.TaskExits); ok {
			n++
		}
	}
	return n
}

func TestEndPace(t *testing.T) {
	run := workflows.RunRef{WorkflowID: "r", RunID: "1"}
	in := workflows.RunTasksInput{Run: run, ReportTo: run}
	sharded := workflows.RunTasksInput{Run: run, ReportTo: workflows.RunRef{WorkflowID: "r/shard-0", RunID: "2"}}
	worker := spec.Task{Name: "worker-0", Type: "worker"}
	always := worker
	always.Restart.Policy = spec.PolicyAlways
	clean := workflows.TaskExitReport{Member: true}
	failed := workflows.TaskExitReport{Member: true, Error: &workflows.LeaseError{Type: workflows.ErrTaskFailed}}
	stopped := workflows.TaskExitReport{Member: true, Result: workflows.TaskResult{Stopped: true}}
	for _, c := range []struct {
		name string
		in   workflows.RunTasksInput
		task spec.Task
		end  workflows.TaskExitReport
		last bool
		want pace
	}{
		{"a clean end", in, worker, clean, false, later},
		{"the batch's last end", in, worker, clean, true, now},
		{"a failure", in, worker, failed, false, soon},
		{"a stop's end", in, worker, stopped, false, soon},
		{"the chief's clean end", in, spec.Task{Name: "chief-0", Type: spec.TypeChief}, clean, false, soon},
		{"a clean end restart policy Always restarts", in, always, clean, false, soon},
		{"a sharded run's clean end", sharded, worker, clean, false, soon},
	} {
		assert.Equal(t, c.want, endPace(c.in, c.task, c.end, c.last), c.name)
	}
}

package workflows

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
)

const leaseSpec = `
name: leases
command: [x]
hostLossGrace: 1m
tasks:
  chief: {replicas: 1, hosts: [host-a]}
  worker: {replicas: 1}
`

// leasesOf lists the leases the fake hosts saw for a task: "a1.l1 launch", "a1.l2 attach host-a", ...
func leasesOf(h *harness, task string) []string {
	h.hosts.mu.Lock()
	defer h.hosts.mu.Unlock()
	var out []string
	for _, in := range h.hosts.inputs {
		if in.Task.Name != task {
			continue
		}
		s := fmt.Sprintf("a%d.l%d", in.Attempt, in.Lease)
		if in.Attach {
			s += " attach " + in.Host
		} else {
			s += " launch"
		}
		out = append(out, s)
	}
	return out
}

func heartbeatTimeout() error { return temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil) }

// A host that goes silent is asked to take the task up again: the same attempt, on the same host, through its
// control queue, and no restart is used.
func TestLeases_LostContactReattachesOnTheSameHost(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "chief-0" {
			return behavior{exit: 0}
		}
		return blocks
	})
	var during RunStatus
	var queryErr error
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		switch {
		case in.Task.Name == "chief-0" && in.Lease == 1:
			return res, heartbeatTimeout(), true // the host went silent
		case in.Task.Name == "chief-0" && in.Attach:
			// The query runs in the environment's own loop: from this goroutine it raced the workflow's
			// ("getState: illegal access from outside of workflow context", about one run in 100).
			asked := make(chan struct{})
			h.env.RegisterDelayedCallback(func() {
				defer close(asked)
				v, err := h.env.QueryWorkflow(QueryStatus)
				if err == nil {
					err = v.Get(&during)
				}
				queryErr = err
			}, 0)
			<-asked
		}
		return res, nil, false
	}
	st, err := h.run(t, mustSpec(t, leaseSpec))
	require.NoError(t, err)
	require.NoError(t, queryErr)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, []string{"a1.l1 launch", "a1.l2 attach host-a"}, leasesOf(h, "chief-0"))
	assert.Equal(t, ControlQueue("host-a"), h.hosts.queues["chief-0"], "the re-attach goes to the host that holds the process")
	assert.Contains(t, h.hosts.ids, "chief-0.a1.l2")
	assert.Equal(t, 1, st.Task("chief-0").Attempt, "a re-attach is no new attempt")
	assert.Equal(t, TaskUnreachable, during.Task("chief-0").State)
	assert.Contains(t, during.Task("chief-0").Error, "no heartbeat from host host-a")
	assert.Contains(t, during.Task("chief-0").Error, "hostLossGrace 1m0s")
}

// Once its host takes it up again, the task shows as running again.
func TestLeases_ReattachShowsTheTaskRunning(t *testing.T) {
	h := newHarness(t, nil)
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		if in.Task.Name == "chief-0" && in.Lease == 1 {
			return res, heartbeatTimeout(), true
		}
		return res, nil, false
	}
	var after RunStatus
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&after))
	}, 500*time.Millisecond)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Second)
	_, _ = h.run(t, mustSpec(t, leaseSpec))
	assert.Equal(t, TaskRunning, after.Task("chief-0").State)
	assert.Empty(t, after.Task("chief-0").Error)
	assert.Equal(t, []string{"a1.l1 launch", "a1.l2 attach host-a"}, leasesOf(h, "chief-0"))
}

// A pool task re-attaches to the host it landed on, not to its pool.
func TestLeases_PoolTaskReattachesToItsHost(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior { return exits(0) })
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		if in.Task.Name == "worker-0" && in.Lease == 1 {
			return res, temporal.NewNonRetryableApplicationError("host pooled-host is restarting", ErrTaskDetached, nil, res), true
		}
		return res, nil, false
	}
	_, err := h.run(t, mustSpec(t, `{name: pool, command: [x], chiefExit: wait, tasks: {chief: {replicas: 1}, worker: {replicas: 1}}}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"a1.l1 launch", "a1.l2 attach pooled-host"}, leasesOf(h, "worker-0"))
}

// A task whose end comes before its host's word that it took the task up again succeeds with no error: the
// note of the lost contact ("no heartbeat ...; waiting up to hostLossGrace") was left in its final status.
func TestLeases_AnEndBeforeTheReattachClearsTheContactNote(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior { return exits(0) })
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		switch {
		case in.Task.Name == "worker-0" && in.Lease == 1:
			return res, temporal.NewNonRetryableApplicationError("host pooled-host is restarting", ErrTaskDetached, nil, res), true
		case in.Task.Name == "worker-0":
			return res, nil, true // ended: no placement saying it was taken up comes first
		}
		return res, nil, false
	}
	st, err := h.run(t, mustSpec(t, `{name: pool, command: [x], chiefExit: wait, tasks: {chief: {replicas: 1}, worker: {replicas: 1}}}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"a1.l1 launch", "a1.l2 attach pooled-host"}, leasesOf(h, "worker-0"))
	assert.Equal(t, TaskSucceeded, st.Task("worker-0").State)
	assert.Empty(t, st.Task("worker-0").Error)
}

// A host that does not come back within hostLossGrace loses the task: it fails with exit code -1 and its
// restart policy starts a new attempt, as a launch (wherever it lands), not a re-attach.
func TestLeases_HostThatNeverReturnsLosesTheTask(t *testing.T) {
	h := newHarness(t, func(task string, attempt, _ int) behavior { return exits(0) })
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		switch {
		case in.Task.Name == "worker-0" && in.Attempt == 1 && !in.Attach:
			return res, heartbeatTimeout(), true
		case in.Task.Name == "worker-0" && in.Attach:
			return res, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil), true
		}
		return res, nil, false
	}
	st, err := h.run(t, mustSpec(t, `
name: lost
command: [x]
chiefExit: wait
hostLossGrace: 30s
tasks: {worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 1, backoff: 10ms}}}
`))
	require.NoError(t, err)
	assert.Equal(t, []string{"a1.l1 launch", "a1.l2 attach pooled-host", "a2.l1 launch"}, leasesOf(h, "worker-0"))
	assert.Equal(t, 2, st.Task("worker-0").Attempt)
	assert.Equal(t, TaskSucceeded, st.Task("worker-0").State)

	// Without a restart policy, the loss fails the run and says what happened.
	h = newHarness(t, func(string, int, int) behavior { return exits(0) })
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		if in.Attach {
			return res, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil), true
		}
		return res, heartbeatTimeout(), true
	}
	st, err = h.run(t, mustSpec(t, `{name: lost, command: [x], hostLossGrace: 30s, tasks: {worker: {replicas: 1}}}`))
	require.Error(t, err)
	assert.Equal(t, TaskFailed, st.Task("worker-0").State)
	assert.Equal(t, -1, *st.Task("worker-0").ExitCode)
	assert.Contains(t, st.Reason, "worker-0 lost: host pooled-host did not take it up again within hostLossGrace 30s")
}

// The Release's answer and the lease's end race. When the lease's end comes first, the attempt is still known
// to have got its map (its process may run), so when its host then stays away the attempt is lost, never
// launched a second time as if it had not started (found as a flaky run of the test above).
func TestLeases_ReleaseAnsweredAfterTheLeaseEndedStillCounts(t *testing.T) {
	h := newHarness(t, func(task string, attempt, _ int) behavior { return exits(0) })
	leaseEnded := make(chan struct{})
	h.hosts.releaseAnswered = func() {
		select {
		case <-leaseEnded:
			time.Sleep(100 * time.Millisecond) // the workflow takes the lease's end first
		case <-time.After(10 * time.Second):
		}
	}
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		switch {
		case in.Task.Name == "worker-0" && in.Attempt == 1 && !in.Attach:
			close(leaseEnded)
			return res, heartbeatTimeout(), true
		case in.Task.Name == "worker-0" && in.Attach:
			return res, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil), true
		}
		return res, nil, false
	}
	st, err := h.run(t, mustSpec(t, `
name: lost
command: [x]
chiefExit: wait
hostLossGrace: 30s
tasks: {worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 1, backoff: 10ms}}}
`))
	require.NoError(t, err)
	assert.Equal(t, []string{"a1.l1 launch", "a1.l2 attach pooled-host", "a2.l1 launch"}, leasesOf(h, "worker-0"))
	assert.Equal(t, 2, st.Task("worker-0").Attempt)
}

// A host that answers but no longer knows the attempt (its state is gone) loses it at once.
func TestLeases_HostWithoutRecordLosesTheTask(t *testing.T) {
	h := newHarness(t, nil)
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		if in.Attach {
			return res, temporal.NewNonRetryableApplicationError("host-a has no record of chief-0 attempt 1", ErrTaskLost, nil, res), true
		}
		return res, heartbeatTimeout(), true
	}
	st, err := h.run(t, mustSpec(t, `{name: norecord, command: [x], tasks: {chief: {replicas: 1, hosts: [host-a]}}}`))
	require.Error(t, err)
	assert.Contains(t, st.Reason, "chief-0 lost: host-a has no record of chief-0 attempt 1")
}

// A host that gives a lease up before the process started: the same attempt starts again, no restart used.
func TestLeases_DetachedBeforeTheStartRelaunchesTheSameAttempt(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		if in.Task.Name == "chief-0" && in.Lease == 1 {
			res.PID = 0
			return res, temporal.NewNonRetryableApplicationError("host-a shut down before chief-0 started", ErrTaskDetached, nil, res), true
		}
		return res, nil, false
	}
	st, err := h.run(t, mustSpec(t, leaseSpec))
	require.NoError(t, err)
	assert.Equal(t, []string{"a1.l1 launch", "a1.l2 launch"}, leasesOf(h, "chief-0"))
	assert.Equal(t, 1, st.Task("chief-0").Attempt)
}

// After a loss, a copy the cut-off host kept running cannot pass a barrier for the new attempt, nor stop the run.
func TestLeases_SupersededAttemptCannotTouchTheNewOne(t *testing.T) {
	h := newHarness(t, func(task string, attempt, _ int) behavior {
		if task == "worker-0" && attempt == 2 {
			return behavior{barriers: []barrierCall{{name: "sync"}}, exit: 0}
		}
		if task == "chief-0" {
			return behavior{barriers: []barrierCall{{name: "sync"}}, exit: 0}
		}
		return blocks
	})
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		switch {
		case in.Task.Name == "worker-0" && in.Attempt == 1 && !in.Attach:
			return res, heartbeatTimeout(), true
		case in.Task.Name == "worker-0" && in.Attach:
			return res, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil), true
		case in.Task.Name == "worker-0" && in.Attempt == 2:
			// The old copy, still running on the cut-off host, tries its luck once attempt 2 runs.
			h.env.SignalWorkflow(SignalStop, StopRequest{Task: "worker-0", Attempt: 1, Error: "ghost"})
			h.env.SignalWorkflow(SignalBarrierArrivals, BarrierArrivals{Barrier: "sync", Tasks: []TaskAttempt{{Task: "worker-0", Attempt: 1}}})
		}
		return res, nil, false
	}
	st, err := h.run(t, mustSpec(t, `
name: ghost
command: [x]
chiefExit: wait
tasks:
  chief: {replicas: 1}
  worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 1, backoff: 10ms}}
`))
	require.NoError(t, err, "the ghost's stop request must not end the run")
	assert.Nil(t, st.StopRequest)
	assert.Equal(t, 2, st.Task("worker-0").Attempt)
	var refused *BarrierOutcome
	for i, o := range h.hosts.outcomes {
		if o.Error != "" {
			refused = &h.hosts.outcomes[i]
		}
	}
	require.NotNil(t, refused)
	assert.Equal(t, []TaskAttempt{{Task: "worker-0", Attempt: 1}}, refused.Tasks, "the refusal names the old attempt only")
	assert.Contains(t, refused.Error, "worker-0 attempt 1 was superseded by attempt 2")
	assert.Equal(t, []string{"sync: ok"}, h.hosts.passed["worker-0"], "attempt 2 passed the barrier with the chief")
}

// Terminating a task while it waits out a restart's backoff ends it at once.
func TestLeases_TerminateDuringRestartBackoff(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "worker-0" {
			return exits(1)
		}
		return blocks
	})
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(SignalTerminateTask, TaskControl{Task: "worker-0"})
	}, 300*time.Millisecond)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 600*time.Millisecond)
	st, _ := h.run(t, mustSpec(t, `
name: backoff
command: [x]
tasks:
  chief: {replicas: 1}
  worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 3, backoff: 1h}}
`))
	assert.Equal(t, TaskTerminated, st.Task("worker-0").State)
	assert.Equal(t, 1, st.Task("worker-0").Attempt, "no new attempt started")
	assert.Equal(t, []string{"a1.l1 launch"}, leasesOf(h, "worker-0"))
}

// A stop that finds a task waiting out its backoff ends it Stopped, without waiting for the timer.
func TestLeases_StopDuringRestartBackoff(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "worker-0" {
			return exits(1)
		}
		return blocks
	})
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 300*time.Millisecond)
	st, _ := h.run(t, mustSpec(t, `
name: backoff
command: [x]
tasks:
  chief: {replicas: 1}
  worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 3, backoff: 1h}}
`))
	assert.Equal(t, StatusCanceled, st.Status)
	assert.Equal(t, TaskStopped, st.Task("worker-0").State)
}

func TestLeaseID(t *testing.T) {
	assert.Equal(t, "worker-3", LeaseID("worker-3", 1, 1))
	assert.Equal(t, "worker-3.a2", LeaseID("worker-3", 2, 1))
	assert.Equal(t, "worker-3.a2.l3", LeaseID("worker-3", 2, 3))
	assert.Equal(t, "worker-3.a1.l2", LeaseID("worker-3", 1, 2))
}

// A Release that never reaches its host (the server went down first) is sent again; until a host confirms it, a
// task does not count as running: its process has not started.
func TestLeases_LostReleaseIsSentAgain(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	h.hosts.failReleases = 1
	st, err := h.run(t, mustSpec(t, `{name: lost-release, command: [x], tasks: {worker: {replicas: 1}}}`))
	require.NoError(t, err)
	assert.Equal(t, TaskSucceeded, st.Task("worker-0").State)
	assert.Len(t, h.hosts.releases, 2, "the lost Release was sent again")
	assert.Equal(t, []string{"a1.l1 launch"}, leasesOf(h, "worker-0"), "no new lease was needed")
}

// A host that is asked to take up an attempt still waiting for its rendezvous says it has not started; the
// same attempt starts again, without using a restart.
func TestLeases_ReattachBeforeTheStartRelaunches(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		switch {
		case in.Task.Name == "chief-0" && in.Lease == 1:
			return res, heartbeatTimeout(), true
		case in.Task.Name == "chief-0" && in.Attach:
			res.PID = 0
			return res, temporal.NewNonRetryableApplicationError("chief-0 attempt 1 has not started on host host-a", ErrTaskDetached, nil, res), true
		}
		return res, nil, false
	}
	st, err := h.run(t, mustSpec(t, leaseSpec))
	require.NoError(t, err)
	assert.Equal(t, []string{"a1.l1 launch", "a1.l2 attach host-a", "a1.l3 launch"}, leasesOf(h, "chief-0"))
	assert.Equal(t, 1, st.Task("chief-0").Attempt)
}

// A host that reports its task's end by signal (ReportExit) ends the lease then: the run does not wait for the
// RunTask's completion, which here never comes. A report for another lease is ignored. Runs in shards ask for
// reports too (to the shard, which passes them on).
func TestLeases_ExitReportedBySignalEndsTheLease(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "worker-0" {
			return exits(3)
		}
		return blocks
	})
	reported := false
	h.hosts.lease = func(ctx context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		if !in.ReportExit || in.Task.Name != "worker-0" {
			return res, nil, false
		}
		reported = true
		res.ExitCode, res.Error, res.Logs = 3, "boom", &LogSizes{Stderr: 5}
		h.env.SignalWorkflow(SignalTaskExits, TaskExits{Exits: []TaskExitReport{
			{Generation: in.Generation, Lease: in.Lease + 1, Result: TaskResult{Task: "worker-0", Attempt: in.Attempt, ExitCode: 0}},
			{Generation: in.Generation, Lease: in.Lease, Result: res},
		}})
		<-ctx.Done()
		return res, temporal.NewCanceledError(res), true
	}
	st, err := h.run(t, mustSpec(t, leaseSpec))
	require.Error(t, err)
	assert.Equal(t, StatusFailed, st.Status)
	w := st.Task("worker-0")
	assert.Equal(t, TaskFailed, w.State)
	require.NotNil(t, w.ExitCode)
	assert.Equal(t, 3, *w.ExitCode)
	assert.Contains(t, w.Error, "worker-0 exited with code 3 on pooled-host (attempt 1): boom")
	assert.Equal(t, TaskStopped, st.Task("chief-0").State)
	assert.True(t, reported, "the run asks for exit reports")
	require.NotNil(t, w.Logs)
	assert.Equal(t, LogSizes{Stderr: 5}, *w.Logs)
}

// Restarts queued together, with the same backoff, wait on one timer: the server makes a workflow's next
// timer only when its earliest fires, and puts one due within a second off to a second ahead, so a timer of
// each would restart the second task a second late.
func TestLeases_RestartsQueuedTogetherShareOneBackoffTimer(t *testing.T) {
	h := newHarness(t, func(_ string, attempt, _ int) behavior {
		if attempt == 1 {
			return exits(1)
		}
		return exits(0)
	})
	var timers []time.Duration
	h.env.SetOnTimerScheduledListener(func(_ string, d time.Duration) { timers = append(timers, d) })
	st, err := h.run(t, mustSpec(t, `
name: backoff
command: [x]
tasks:
  worker: {replicas: 3, restart: {policy: OnFailure, maxRestarts: 1, backoff: 10s}}
`))
	require.NoError(t, err)
	for _, w := range st.Tasks {
		assert.Equal(t, 2, w.Attempt, w.Name)
		assert.Equal(t, TaskSucceeded, w.State, w.Name)
	}
	backoffs := slices.DeleteFunc(timers, func(d time.Duration) bool { return d != 10*time.Second })
	assert.Len(t, backoffs, 1, "one backoff timer for the three")
}

// A task terminated while it shares a backoff timer leaves it; the others still restart when it fires.
func TestLeases_TerminateOneOfTheTasksSharingABackoff(t *testing.T) {
	h := newHarness(t, func(_ string, attempt, _ int) behavior {
		if attempt == 1 {
			return exits(1)
		}
		return exits(0)
	})
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(SignalTerminateTask, TaskControl{Task: "worker-0"})
	}, 5*time.Second)
	st, err := h.run(t, mustSpec(t, `
name: backoff
command: [x]
tasks:
  worker: {replicas: 2, restart: {policy: OnFailure, maxRestarts: 1, backoff: 10s}}
`))
	require.NoError(t, err)
	assert.Equal(t, TaskTerminated, st.Task("worker-0").State)
	assert.Equal(t, 1, st.Task("worker-0").Attempt, "no new attempt started")
	assert.Equal(t, TaskSucceeded, st.Task("worker-1").State)
	assert.Equal(t, 2, st.Task("worker-1").Attempt)
}

// A task its host takes up again during a stop request's grace period (its host worker restarted) is running
// again: when the grace runs out it is a straggler, as any task still running is. It stayed Unreachable, so a
// run with stragglers: fail succeeded although it had to kill it.
func TestLeases_ATaskTakenUpAgainDuringAStopIsAStraggler(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return blocks }) // ignore should-stop
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		if in.Task.Name == "chief-0" && in.Lease == 1 {
			<-h.hosts.notified // its host worker restarts once the stop request reached it
			return res, temporal.NewNonRetryableApplicationError("host worker host-a is shutting down", ErrTaskDetached, nil, res), true
		}
		return res, nil, false
	}
	var during RunStatus
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(SignalStop, StopRequest{}) }, 100*time.Millisecond)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&during))
	}, 1500*time.Millisecond)
	st, err := h.run(t, mustSpec(t, `{name: s, command: [x], stopGracePeriod: 2s, stragglers: fail, tasks: {chief: {replicas: 1, hosts: [host-a]}, worker: {replicas: 1}}}`))
	require.Error(t, err)
	assert.Equal(t, []string{"a1.l1 launch", "a1.l2 attach host-a"}, leasesOf(h, "chief-0"))
	assert.Equal(t, TaskRunning, during.Task("chief-0").State, "taken up again")
	assert.Empty(t, during.Task("chief-0").Error)
	assert.Equal(t, StatusFailed, st.Status)
	assert.True(t, st.Task("chief-0").Straggler)
	assert.Contains(t, st.Reason, "killed 2 straggler(s) still running after 2s: chief-0, worker-0")
	toA := slices.DeleteFunc(slices.Clone(h.hosts.notifyQueues), func(q string) bool { return q != ControlQueue("host-a") })
	assert.Len(t, toA, 2,
		"its host is told of the stop again when it takes the task up, in case its worker missed it")
}

// A host that takes a task up again in a run that has had a keepRun request is told where it stands now: its
// worker may have been down when the run asked, or cleared, and so never have heard (or kept, from the task's
// record, an ask that was cleared). A run that never asked tells it nothing.
func TestLeases_ATaskTakenUpAgainHearsWhereAnAskStands(t *testing.T) {
	for _, c := range []struct {
		name   string
		sent   []StopRequest // signalled before the chief's host worker restarts
		toA    int           // NotifyStops host-a is sent before the restart
		again  *NotifyStopInput
		signal []string
	}{
		{name: "asked", sent: []StopRequest{{KeepRun: true, Error: "drain"}}, toA: 1, again: &NotifyStopInput{KeepRun: true, By: StopByOutside, Error: "drain"}},
		{name: "cleared", sent: []StopRequest{{KeepRun: true}, {}}, toA: 2, again: &NotifyStopInput{Clear: true}},
		{name: "never asked", toA: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, func(string, int, int) behavior { return blocks })
			toA := func() []NotifyStopInput {
				h.hosts.mu.Lock()
				defer h.hosts.mu.Unlock()
				var out []NotifyStopInput
				for i, q := range h.hosts.notifyQueues {
					if q == ControlQueue("host-a") {
						out = append(out, h.hosts.notices[i])
					}
				}
				return out
			}
			waitFor := func(n int) bool {
				for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
					if len(toA()) >= n {
						return true
					}
				}
				return false
			}
			h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
				switch {
				case in.Task.Name != "chief-0":
					return res, nil, false
				case in.Lease == 1:
					waitFor(c.toA) // its host worker restarts once the ask (and clear) reached it
					return res, temporal.NewNonRetryableApplicationError("host worker host-a is shutting down", ErrTaskDetached, nil, res), true
				default:
					h.env.SignalWorkflow(SignalTasksPlaced, PlacedSignal{Placements: []Placement{{Task: in.Task.Name, Generation: in.Generation,
						Attempt: in.Attempt, Lease: in.Lease, Host: in.Host, Reattached: true}}})
					waitFor(c.toA + 1)
					return res, nil, true // the chief's exit ends the run
				}
			}
			for i, req := range c.sent {
				name := SignalStop
				if !req.KeepRun {
					name = SignalClearStop
				}
				h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(name, req) }, time.Duration(i+1)*100*time.Millisecond)
			}
			st, err := h.run(t, mustSpec(t, `{name: s, command: [x], tasks: {chief: {replicas: 1, hosts: [host-a]}, worker: {replicas: 1, hosts: [host-b]}}}`))
			require.NoError(t, err)
			assert.Equal(t, StatusSucceeded, st.Status, st.Reason)
			assert.Equal(t, []string{"a1.l1 launch", "a1.l2 attach host-a"}, leasesOf(h, "chief-0"))
			got := toA()
			if c.again == nil {
				assert.Empty(t, got, "a run that never asked tells the host nothing")
				return
			}
			require.Len(t, got, c.toA+1, "host-a is told again when it takes the chief up")
			again := got[c.toA]
			again.WorkflowID, again.RunID = "", ""
			assert.Equal(t, *c.again, again)
		})
	}
}

package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// A host that does not take its StopTasks up in time (it is still reconnecting after a server outage) gets
// hostLossGrace to come back and confirm the stop; the run waits for it, and its task ends confirmed.
func TestStop_WaitsForAHostThatAnswersLate(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "chief-0" {
			return exits(0)
		}
		return blocks
	})
	late := ControlQueue("host-b")
	calls := 0
	var during RunStatus
	h.hosts.stopFails = func(queue string, _ StopTasksInput) error {
		if queue != late {
			return nil
		}
		if calls++; calls == 1 {
			return temporal.NewNonRetryableApplicationError("not taken up in time", "Timeout", nil)
		}
		// What the status says while the run waits for host-b. The query runs in the environment's own loop.
		asked := make(chan struct{})
		h.env.RegisterDelayedCallback(func() {
			defer close(asked)
			if v, err := h.env.QueryWorkflow(QueryStatus); err == nil {
				_ = v.Get(&during)
			}
		}, 0)
		<-asked
		return nil
	}
	st, err := h.run(t, mustSpec(t, demo))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, 2, calls, "StopTasks to host-b is asked again")
	assert.Equal(t, StatusStopping, during.Status)
	assert.Equal(t, TaskUnreachable, during.Task("ps-0").State)
	assert.Contains(t, during.Task("ps-0").Error, "host-b has not confirmed the stop; waiting up to 2m0s (hostLossGrace)")
	ps := st.Task("ps-0")
	assert.Equal(t, TaskStopped, ps.State)
	assert.Empty(t, ps.Error, "the stop was confirmed")
	assert.Equal(t, "SIGTERM", ps.Signal)
}

// A host that stays silent through hostLossGrace, and whose lease the server gave up meanwhile (a heartbeat
// timeout), leaves its task stopped but not confirmed: not failed, with no exit code, and the reason.
func TestStop_AHostThatStaysSilentLeavesItsTaskUnconfirmed(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "chief-0" {
			return exits(0)
		}
		return blocks
	})
	silent := ControlQueue("host-b")
	calls := 0
	h.hosts.stopFails = func(queue string, _ StopTasksInput) error {
		if queue != silent {
			return nil
		}
		calls++
		return temporal.NewNonRetryableApplicationError("not taken up in time", "Timeout", nil)
	}
	h.hosts.lease = func(ctx context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		if in.Task.Name != "ps-0" {
			return res, nil, false
		}
		<-ctx.Done() // the run's cancellation, which the host never hears: the server times the lease out
		return res, heartbeatTimeout(), true
	}
	st, err := h.run(t, mustSpec(t, demo))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, 2, calls, "StopTasks to host-b is asked again before the run gives up on it")
	ps := st.Task("ps-0")
	assert.Equal(t, TaskStopped, ps.State)
	assert.Nil(t, ps.ExitCode)
	assert.Contains(t, ps.Error, "not confirmed: host host-b was unreachable")
	assert.Equal(t, TaskStopped, st.Task("worker-0").State)
}

// A task that ended on its own while its host was cut off, in a run that then stops, ends as its host's answer
// to the stop says: the server timed its lease out, and a stopping run starts no other lease to report it.
// Before, it ended "Stopped" with "not confirmed", or "Failed" as lost with exit -1, whatever it had done.
func TestStop_TakesTheEndsItsStopsAnswerGives(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "chief-0" {
			return exits(0)
		}
		return blocks
	})
	h.hosts.lease = func(ctx context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		if in.Task.Name != "ps-0" {
			return res, nil, false
		}
		<-ctx.Done() // the run's cancellation, which the host never hears: the server times the lease out
		return res, heartbeatTimeout(), true
	}
	h.hosts.stopEnds = func(in StopTasksInput) []TaskExitReport {
		if !slices.Contains(in.Tasks, "ps-0") {
			return nil
		}
		delete(h.hosts.stop, "ps-0") // it had ended: not this stop's to confirm
		return []TaskExitReport{
			{Lease: 1, Result: TaskResult{Task: "ps-0", Host: "host-b", Attempt: 1, PID: 4321, Result: json.RawMessage(`{"saved": 7}`)}},
			{Lease: 1, Result: TaskResult{Task: "worker-0", Host: "host-b", Attempt: 2, PID: 4322, ExitCode: 3}}, // not its attempt
		}
	}
	st, err := h.run(t, mustSpec(t, demo))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	ps := st.Task("ps-0")
	assert.Equal(t, TaskSucceeded, ps.State, "%+v", ps)
	assert.Empty(t, ps.Error)
	require.NotNil(t, ps.ExitCode)
	assert.Equal(t, 0, *ps.ExitCode)
	assert.JSONEq(t, `{"saved": 7}`, string(ps.Result))
	assert.Equal(t, TaskStopped, st.Task("worker-0").State, "an end of an attempt that is not the task's is not taken")
}

// A task whose host has no record of its attempt as the run decides to end has nothing running: it ends
// Stopped, saying so. Its host's worker died before starting it, and the next worker answered the re-attach
// with "no record" just before the chief's exit: the run queued the attempt to start again, the decision
// dropped that launch, and the stop then ended the task Failed, with the host's "no record" as its error, in a
// run that succeeded (seen as a user: a host worker SIGKILLed during a 200-task launch, restarted after the
// chief had exited).
func TestStop_ATaskItsHostHasNoRecordOfEndsStopped(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run waits for its placements: a task it released and its host lost is lost")
	}
	h := newHarness(t, func(string, int, int) behavior { return blocks })
	h.hosts.registry = registryOf(true)
	h.hosts.silentStart = func(in RunTaskInput) bool { return in.Task.Name == "worker-0" }
	sent := false
	h.hosts.lease = func(ctx context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		switch {
		case in.Task.Name != "worker-0":
			return res, nil, false
		case !in.Attach:
			return res, heartbeatTimeout(), true // the worker died before it started the task
		case !sent:
			sent = true
			// The next worker's answer, and the chief's end, reach the run in one workflow task.
			lost := temporal.NewNonRetryableApplicationError("host host-b has no record of worker-0 attempt 1", ErrTaskLost, nil,
				TaskResult{Task: "worker-0", Host: "host-b", Attempt: 1})
			h.env.RegisterDelayedCallback(func() {
				h.env.SignalWorkflow(SignalTaskExits, TaskExits{Exits: []TaskExitReport{
					{Lease: 2, Member: true, Result: TaskResult{Task: "worker-0", Host: "host-b", Attempt: 1}, Error: LeaseErrorOf(lost)},
					{Lease: 1, Member: true, Result: TaskResult{Task: "chief-0", Host: "host-a", Attempt: 1, PID: 4321}},
				}})
			}, 0)
		}
		<-ctx.Done()
		return res, temporal.NewCanceledError(), true
	}
	h.hosts.stopEnds = func(StopTasksInput) []TaskExitReport {
		delete(h.hosts.stop, "worker-0") // the host has no entry for it: not this stop's to confirm
		return nil
	}
	st, err := h.run(t, mustSpec(t, `
name: norecord
command: [x]
hostLossGrace: 1m
tasks: {chief: {replicas: 1, hosts: [host-a]}, worker: {replicas: 1, hosts: [host-b]}}
`))
	require.NoError(t, err)
	require.True(t, sent, "the re-attach was asked")
	assert.Equal(t, StatusSucceeded, st.Status, st.Reason)
	w := st.Task("worker-0")
	assert.Equal(t, TaskStopped, w.State, "%+v", w)
	assert.Nil(t, w.ExitCode)
	assert.Equal(t, "not running: host host-b has no record of worker-0 attempt 1 (its worker stopped before starting it, or "+
		"the host lost its runtime folder)", w.Error)
}

// As above, with the host's worker still down when the run stops: the host answers the stop only once its next
// worker is up, with no record of the task. The task ends Stopped, not running; it ended with the note of the
// wait ("host-b has not confirmed the stop; waiting up to 2m0s") as its final word (seen as a user).
func TestStop_AHostBackWithNoRecordOfATaskEndsItNotRunning(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run waits for its placements: a task it released and its host lost is lost")
	}
	h := newHarness(t, func(string, int, int) behavior { return blocks })
	h.hosts.registry = registryOf(true)
	h.hosts.silentStart = func(in RunTaskInput) bool { return in.Task.Name == "worker-0" }
	sent := false
	h.hosts.lease = func(ctx context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		switch {
		case in.Task.Name != "worker-0":
			return res, nil, false
		case !in.Attach:
			return res, heartbeatTimeout(), true // the worker died before it started the task
		case !sent:
			sent = true
			h.env.RegisterDelayedCallback(func() {
				h.env.SignalWorkflow(SignalTaskExits, TaskExits{Exits: []TaskExitReport{
					{Lease: 1, Member: true, Result: TaskResult{Task: "chief-0", Host: "host-a", Attempt: 1, PID: 4321}}}})
			}, 0)
		}
		<-ctx.Done() // no worker takes the re-attach up: the stop cancels it, as the server does one no host took
		return res, temporal.NewCanceledError("ACTIVITY_ID_NOT_STARTED"), true
	}
	calls := 0
	h.hosts.stopFails = func(queue string, _ StopTasksInput) error {
		if queue != ControlQueue("host-b") {
			return nil
		}
		if calls++; calls == 1 {
			return temporal.NewNonRetryableApplicationError("not taken up in time", "Timeout", nil)
		}
		return nil
	}
	h.hosts.stopUnknown = func(in StopTasksInput) []string {
		if !slices.Contains(in.Tasks, "worker-0") || calls < 2 {
			return nil
		}
		delete(h.hosts.stop, "worker-0") // the next worker has no record of it
		return []string{"worker-0"}
	}
	st, err := h.run(t, mustSpec(t, `
name: norecord
command: [x]
hostLossGrace: 1m
tasks: {chief: {replicas: 1, hosts: [host-a]}, worker: {replicas: 1, hosts: [host-b]}}
`))
	require.NoError(t, err)
	require.Equal(t, 2, calls, "host-b was asked again")
	assert.Equal(t, StatusSucceeded, st.Status, st.Reason)
	w := st.Task("worker-0")
	assert.Equal(t, TaskStopped, w.State, "%+v", w)
	assert.Nil(t, w.ExitCode)
	assert.Equal(t, "not running: host host-b has no record of worker-0 attempt 1 (its worker stopped before starting it, or "+
		"the host lost its runtime folder)", w.Error)
}

// A task whose host gives its lease up while the run stops it (the host worker restarts: the process runs on)
// says the run waits for that host to confirm the stop; the run takes no lease up again then. It said the run
// waited for the host to take the task up again (seen as a user, with a worker SIGTERMed during a stop).
func TestStop_ALeaseGivenUpDuringTheStopSaysTheRunWaitsForTheStop(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "chief-0" {
			return exits(0)
		}
		return blocks
	})
	var during RunStatus
	asked := false
	h.hosts.stopHold = func(in StopTasksInput) {
		if !slices.Contains(in.Tasks, "ps-0") || asked {
			return
		}
		asked = true
		gaveUp := temporal.NewNonRetryableApplicationError("host worker host-b is shutting down; ps-0 goes on running for its next worker",
			ErrTaskDetached, nil, TaskResult{Task: "ps-0", Host: "host-b", Attempt: 1, PID: 4321})
		done := make(chan struct{})
		h.env.RegisterDelayedCallback(func() {
			h.env.SignalWorkflow(SignalTaskExits, TaskExits{Exits: []TaskExitReport{{Lease: 1, Member: true,
				Result: TaskResult{Task: "ps-0", Host: "host-b", Attempt: 1, PID: 4321}, Error: LeaseErrorOf(gaveUp)}}})
		}, 0)
		h.env.RegisterDelayedCallback(func() {
			defer close(done)
			if v, err := h.env.QueryWorkflow(QueryStatus); err == nil {
				_ = v.Get(&during)
			}
		}, time.Millisecond)
		<-done
	}
	st, err := h.run(t, mustSpec(t, demo))
	require.NoError(t, err)
	require.True(t, asked)
	assert.Equal(t, StatusStopping, during.Status)
	ps := during.Task("ps-0")
	assert.Equal(t, TaskUnreachable, ps.State, "%+v", ps)
	assert.Equal(t, "host worker host-b is shutting down; ps-0 goes on running for its next worker; the run is stopping and waits for host host-b to confirm the stop", ps.Error)
	assert.Equal(t, TaskStopped, st.Task("ps-0").State, "its host confirmed the stop")
}

// A run's reason names its first stragglers and counts the rest.
func TestFirstNames_NamesTenAndCountsTheRest(t *testing.T) {
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("worker-%d", i)
	}
	assert.Equal(t, "worker-0, worker-1", FirstNames(names[:2]))
	assert.Equal(t, strings.Join(names[:10], ", "), FirstNames(names[:10]))
	assert.Equal(t, strings.Join(names[:10], ", ")+" and 990 more", FirstNames(names))
}

// A task that ended on its own just as the run decided to stop (its host's StopTasks leaves it to its lease)
// ends by the report its host sent, not by its lease's completion, which comes only once the lease's
// cancellation reaches its host on a heartbeat: the run does not wait for that. (The test environment resolves
// a canceled activity at once; lateCancels makes the leases' cancellation arrive as late as a server's does.)
func TestStop_TakesTheReportOfATaskThatEndedOnItsOwn(t *testing.T) {
	if shardedRuns() {
		t.Skip("a shard passes reports on at its flush timer, which the test environment fires only once the lease returns")
	}
	ended := make(chan struct{})
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "chief-0" {
			return exits(0)
		}
		return blocks
	})
	h.env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&lateCancels{}}})
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		if in.Task.Name != "worker-0" {
			return res, nil, false
		}
		<-ended // it exits 0 as the stop comes
		return res, nil, true
	}
	h.hosts.stopFails = func(_ string, in StopTasksInput) error {
		if slices.Contains(in.Tasks, "worker-0") {
			delete(h.hosts.stop, "worker-0") // it had ended: not this stop's to confirm
			close(ended)
		}
		return nil
	}
	mayEnd := make(chan struct{})
	late := false
	h.hosts.batchEnds = func(_ context.Context, in RunTasksInput) {
		if !slices.ContainsFunc(in.Members, func(m LeaseMember) bool { return m.Task.Name == "worker-0" }) {
			return
		}
		select {
		case <-mayEnd:
		case <-time.After(3 * time.Second):
			late = true
		}
	}
	st, err := h.run(t, mustSpec(t, batchSpec))
	close(mayEnd)
	require.NoError(t, err)
	assert.False(t, late, "the run waited for the lease of a task whose end its host had reported")
	assert.Equal(t, map[string]string{"chief-0": TaskSucceeded, "worker-0": TaskSucceeded, "worker-1": TaskStopped, "ps-0": TaskStopped}, states(st))
	require.NotNil(t, st.Task("worker-0").ExitCode)
	assert.Equal(t, 0, *st.Task("worker-0").ExitCode)
}

// A run that ends while its tasks end on their own (a chief and workers that all exit at once) does not wait for
// the answers of hosts whose every task reported its end meanwhile: those StopTasks would confirm nothing.
func TestStop_DoesNotWaitForHostsWhoseTasksReportedTheirEnds(t *testing.T) {
	if shardedRuns() {
		t.Skip("a shard passes reports on at its flush timer, which the test environment fires only once the lease returns")
	}
	ended, release := make(chan struct{}), make(chan struct{})
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "chief-0" {
			return exits(0)
		}
		return blocks
	})
	h.env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&lateCancels{}}})
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		if in.Task.Name == "chief-0" {
			return res, nil, false
		}
		<-ended // each exits 0 on its own as the stop comes
		return res, nil, true
	}
	var once sync.Once
	var held atomic.Int32
	h.hosts.stopHold = func(StopTasksInput) {
		once.Do(func() { close(ended) })
		select {
		case <-release:
		case <-time.After(3 * time.Second):
			held.Add(1)
		}
	}
	st, err := h.run(t, mustSpec(t, batchSpec))
	close(release)
	require.NoError(t, err)
	assert.Zero(t, held.Load(), "the run waited for the StopTasks of hosts whose tasks had all reported their ends")
	assert.Equal(t, map[string]string{"chief-0": TaskSucceeded, "worker-0": TaskSucceeded, "worker-1": TaskSucceeded, "ps-0": TaskSucceeded}, states(st))
	assert.Equal(t, StatusSucceeded, st.Status)
}

// A host whose StopTasks does not come back (a loaded server handed it to a poll that never got it) but whose
// tasks' leases all end, stopped on the host as the run canceled them, is not waited for: every process of it
// is gone. At 10,000 tasks the run waited 37 s after the last process was gone for that StopTasks to time out
// and be asked again.
func TestStop_DoesNotWaitForAHostWhoseLeasesAllEnded(t *testing.T) {
	if shardedRuns() {
		t.Skip("a shard passes lease ends on at its flush timer, which the test environment fires only once the StopTasks returns")
	}
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "chief-0" {
			return exits(0)
		}
		return blocks
	})
	h.env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&lateCancels{}}})
	h.hosts.quietEnds = true // no report by signal: the leases' completions carry the ends
	stopped, release := make(chan struct{}), make(chan struct{})
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		if in.Task.Name == "chief-0" {
			return res, nil, false
		}
		<-stopped // the host stops it as the run stops (its lease's cancellation, the run's history)
		res.ExitCode, res.Signal, res.Stopped = 143, "SIGTERM", true
		return res, nil, true
	}
	var once sync.Once
	var held atomic.Int32
	h.hosts.stopHold = func(StopTasksInput) {
		once.Do(func() { close(stopped) })
		select {
		case <-release:
		case <-time.After(3 * time.Second):
			held.Add(1)
		}
	}
	// The chief's lease is its own, on a host of its own: its end comes with its completion.
	st, err := h.run(t, mustSpec(t, `
name: leases
command: [x]
tasks:
  chief: {replicas: 1, hosts: [host-a]}
  worker: {replicas: 2, hosts: [host-b]}
  ps: {replicas: 1, hosts: [host-c]}
`))
	close(release)
	require.NoError(t, err)
	assert.Zero(t, held.Load(), "the run waited for the StopTasks of hosts whose leases had all ended")
	assert.Equal(t, StatusSucceeded, st.Status)
	for _, name := range []string{"worker-0", "worker-1", "ps-0"} {
		assert.Equal(t, TaskStopped, st.Task(name).State, name)
		assert.Equal(t, "SIGTERM", st.Task(name).Signal, name)
		assert.Empty(t, st.Task(name).Error, name)
	}
}

// A pre-placed task stopped before its host reported its start (a host drops the starts of attempts the run
// stops) has its start time from the stop's answer.
func TestStop_TheAnswerGivesAStartNotReported(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run waits for its placements")
	}
	h := newHarness(t, chiefEnds)
	h.hosts.registry = registryOf(true)
	h.hosts.silentStart = func(in RunTaskInput) bool { return in.Task.Name == "worker-0" }
	started := time.Date(2026, 11, 26, 4, 5, 6, 0, time.UTC)
	h.hosts.startedAt = &started
	st, err := h.run(t, mustSpec(t, batchSpec))
	require.NoError(t, err)
	w := st.Task("worker-0")
	assert.Equal(t, TaskStopped, w.State)
	if assert.NotNil(t, w.StartTime) {
		assert.True(t, started.Equal(*w.StartTime), "start time %v, the stop's answer said %v", *w.StartTime, started)
	}
}

// lateCancels keeps the run's RunTasks leases from being canceled, as a lease's cancellation reaches its host
// only on its next heartbeat: each completes when its host completes it.
type lateCancels struct {
	interceptor.WorkerInterceptorBase
}

func (*lateCancels) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &lateCancelsInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

type lateCancelsInbound struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (i *lateCancelsInbound) Init(out interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&lateCancelsOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: out}})
}

type lateCancelsOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
}

func (o *lateCancelsOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...interface{}) workflow.Future {
	if activityType == ActivityRunTasks {
		ctx, _ = workflow.NewDisconnectedContext(ctx)
	}
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

// A stop request that finds a task waiting out its restart's backoff ends it at once: its backoff used to run
// out during the stop's grace period and start it again, a new process during a stop that the run then
// waited for until the grace period's end.
func TestStop_EndsATaskWaitingToRestart(t *testing.T) {
	h := newHarness(t, func(task string, attempt, _ int) behavior {
		if task == "worker-1" && attempt == 1 {
			return exits(1)
		}
		return behavior{block: true, obey: true}
	})
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(SignalStop, StopRequest{}) }, 500*time.Millisecond)
	st, err := h.run(t, mustSpec(t, `{name: o, command: [x], stopGracePeriod: 10s,
tasks: {worker: {replicas: 2, restart: {policy: OnFailure, maxRestarts: 2, backoff: 2s}}}}`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	for _, in := range h.hosts.inputs {
		assert.Equal(t, 1, in.Attempt, "%s: no attempt starts after the stop request", in.Task.Name)
	}
	w := st.Task("worker-1")
	assert.Equal(t, TaskStopped, w.State)
	assert.Equal(t, "stopped before its restart: the run was asked to stop during the backoff", w.Error)
	assert.Less(t, st.EndTime.Sub(st.StartTime), 2*time.Second, "the run ended as the other task obeyed, not at the backoff's or the grace period's end")
}

// A task whose host gives its lease up before the process started, while the run is stopping, ends stopped:
// the run starts nothing while it stops. It used to launch the task again, and that lease then held the run
// until the grace period's end.
func TestStop_ATaskLostBeforeItStartedIsNotLaunchedAgain(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return behavior{block: true, obey: true} })
	h.hosts.loseBeforePlacing = func(in RunTaskInput) bool {
		if in.Task.Name != "worker-1" || in.Lease != 1 {
			return false
		}
		<-h.hosts.notified // the stop reached the hosts
		return true
	}
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(SignalStop, StopRequest{}) }, 200*time.Millisecond)
	st, err := h.run(t, mustSpec(t, `{name: o, command: [x], stopGracePeriod: 1s, tasks: {worker: {replicas: 2}}}`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	for _, in := range h.hosts.inputs {
		assert.False(t, in.Task.Name == "worker-1" && in.Lease > 1, "worker-1 was launched again during the stop")
	}
	w := st.Task("worker-1")
	assert.Equal(t, TaskStopped, w.State)
	assert.Equal(t, "worker-1 lost its host before its process started; the run is stopping, so it is not started again", w.Error)
}

// The server's cancellation of a lease no host took up carries "ACTIVITY_ID_NOT_STARTED" as its details: that is
// no host's answer. It was taken for one, and a task whose host came back with no record of it ended with the
// note of the wait ("u-b has not confirmed the stop; waiting up to 2m0s") as its last word (seen as a user).
func TestHostSawTheEnd(t *testing.T) {
	// As the run reads them: from the history's failures, their details encoded.
	fc := temporal.GetDefaultFailureConverter()
	read := func(err error) error { return fc.FailureToError(fc.ErrorToFailure(err)) }
	assert.True(t, hostSawTheEnd(nil))
	assert.True(t, hostSawTheEnd(read(temporal.NewCanceledError(TaskResult{Task: "worker-0", Host: "host-b", Attempt: 1, PID: 4321}))), "the host stopped it")
	assert.False(t, hostSawTheEnd(read(temporal.NewCanceledError("ACTIVITY_ID_NOT_STARTED"))), "the server canceled a lease no host took")
	assert.False(t, hostSawTheEnd(read(temporal.NewCanceledError())))
	assert.False(t, hostSawTheEnd(heartbeatTimeout()))
	assert.False(t, hostSawTheEnd(temporal.NewNonRetryableApplicationError("no record", ErrTaskLost, nil)))
}

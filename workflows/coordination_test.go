package workflows

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func passes(names ...string) []barrierCall {
	var calls []barrierCall
	for _, n := range names {
		calls = append(calls, barrierCall{name: n})
	}
	return calls
}

func TestBarrier_AllTasks(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return behavior{barriers: passes("ready", "done")} })
	st, err := h.run(t, mustSpec(t, `{name: b, command: [x], tasks: {chief: {replicas: 1}, worker: {replicas: 3}}}`))
	require.NoError(t, err)
	for _, task := range []string{"chief-0", "worker-0", "worker-1", "worker-2"} {
		assert.Equal(t, []string{"ready: ok", "done: ok"}, h.hosts.passed[task], task)
	}
	require.Len(t, st.Barriers, 2)
	assert.True(t, st.Barriers[0].Released)
	// One published outcome per barrier, for every waiter on every host.
	require.Len(t, h.hosts.outcomes, 2)
	assert.Empty(t, h.hosts.outcomes[0].Tasks)
	assert.Equal(t, []int{1, 2}, []int{h.hosts.outcomes[0].Seq, h.hosts.outcomes[1].Seq})
	assert.Equal(t, 4, st.Barriers[0].ArrivedCount)
	assert.Equal(t, 4, st.Barriers[0].Participants)
	assert.Empty(t, st.Barriers[0].Waiting)
	assert.Equal(t, &BarrierCounts{Total: 2, Released: 2}, st.BarrierCounts)
}

func TestBarrier_Subset(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if strings.HasPrefix(task, "ps") {
			return behavior{barriers: []barrierCall{{name: "ps-sync", types: []string{"ps"}}}}
		}
		return exits(0)
	})
	st, err := h.run(t, mustSpec(t, `{name: b, command: [x], chiefExit: wait, tasks: {chief: {replicas: 1}, ps: {replicas: 2}}}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"ps-sync: ok"}, h.hosts.passed["ps-1"])
	assert.Equal(t, []string{"ps"}, st.Barriers[0].Types)
	assert.Equal(t, 2, st.Barriers[0].Participants)
	assert.Equal(t, 2, st.Barriers[0].ArrivedCount)
}

func TestBarrier_BrokenByFailure(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "worker-0" {
			return exits(3)
		}
		return behavior{barriers: passes("ready")}
	})
	st, _ := h.run(t, mustSpec(t, `{name: b, command: [x], onFailure: continue, tasks: {worker: {replicas: 3}}}`))
	for _, task := range []string{"worker-1", "worker-2"} {
		require.Len(t, h.hosts.passed[task], 1, task)
		assert.Contains(t, h.hosts.passed[task][0], `barrier "ready" is broken: worker-0`, task)
	}
	assert.Contains(t, st.Barriers[0].Broken, "worker-0")
}

func TestBarrier_BadArrivals(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		switch task {
		case "worker-0":
			return behavior{barriers: []barrierCall{{name: "x", types: []string{"gpu"}}}}
		case "worker-1":
			return behavior{barriers: []barrierCall{{name: "only-ps", types: []string{"ps"}}}}
		}
		return exits(0)
	})
	_, _ = h.run(t, mustSpec(t, `{name: b, command: [x], onFailure: continue, tasks: {worker: {replicas: 2}, ps: {replicas: 1}}}`))
	assert.Contains(t, h.hosts.passed["worker-0"][0], `names task type "gpu", which this run does not have (it has worker, ps)`)
	assert.Contains(t, h.hosts.passed["worker-1"][0], `worker-1 is not a participant of barrier "only-ps", which is for task types ps`)
}

func TestBarrier_ConflictingSubsets(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "worker-0" {
			return behavior{barriers: []barrierCall{{name: "sync", types: []string{"worker"}}}}
		}
		time.Sleep(100 * time.Millisecond) // arrive second
		return behavior{barriers: []barrierCall{{name: "sync"}}}
	})
	_, _ = h.run(t, mustSpec(t, `{name: b, command: [x], onFailure: continue, tasks: {worker: {replicas: 2}}}`))
	assert.Contains(t, h.hosts.passed["worker-1"][0], `barrier "sync" is for task types worker (as worker-0 declared it), not every task`)
}

func TestBarrier_RestartedTaskPassesAgain(t *testing.T) {
	h := newHarness(t, func(task string, attempt, _ int) behavior {
		if task == "worker-0" && attempt == 1 {
			return behavior{barriers: passes("ready"), exit: 1}
		}
		return behavior{barriers: passes("ready")}
	})
	st, err := h.run(t, mustSpec(t, `{name: b, command: [x], tasks: {worker: {replicas: 2, restart: {policy: OnFailure, maxRestarts: 1, backoff: 1ms}}}}`))
	require.NoError(t, err)
	assert.Equal(t, 2, st.Task("worker-0").Attempt)
	assert.Equal(t, []string{"ready: ok", "ready: ok"}, h.hosts.passed["worker-0"], "passed once per attempt")
}

func TestBarrier_NewGenerationAfterGangRestart(t *testing.T) {
	h := newHarness(t, func(task string, _, generation int) behavior {
		if generation == 0 && task == "worker-1" {
			return behavior{barriers: passes("ready"), exit: 1}
		}
		return behavior{barriers: passes("ready")}
	})
	st, err := h.run(t, mustSpec(t, `{name: b, command: [x], restart: {policy: OnFailure, maxRestarts: 1, backoff: 1ms, scope: all}, tasks: {worker: {replicas: 2}}}`))
	require.NoError(t, err)
	require.Len(t, st.Barriers, 1)
	assert.Equal(t, 1, st.Barriers[0].Generation)
	assert.True(t, st.Barriers[0].Released)
	assert.Equal(t, []string{"ready: ok", "ready: ok"}, h.hosts.passed["worker-0"], "once per generation")
}

func TestStop_FirstErrorWinsAndTasksObey(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		switch task {
		case "worker-1":
			return behavior{stop: &StopRequest{Task: "worker-1", Error: "corrupt shard 7"}, block: true, obey: true}
		case "worker-2":
			time.Sleep(100 * time.Millisecond)
			return behavior{stop: &StopRequest{Task: "worker-2", Error: "second error"}, block: true, obey: true}
		}
		return behavior{block: true, obey: true}
	})
	st, err := h.run(t, mustSpec(t, `{name: s, command: [x], stopGracePeriod: 5s, tasks: {chief: {replicas: 1}, worker: {replicas: 3}}}`))
	require.Error(t, err)
	assert.Equal(t, ErrRunFailed, errType(err))
	assert.Equal(t, "stop requested by worker-1: corrupt shard 7", st.Reason)
	require.NotNil(t, st.StopRequest)
	assert.Equal(t, "worker-1", st.StopRequest.Task)
	for _, task := range st.Tasks {
		assert.Equal(t, TaskSucceeded, task.State, "%s exited on its own", task.Name)
		assert.False(t, task.Straggler)
	}
	require.NotEmpty(t, h.hosts.notices)
	assert.Equal(t, "corrupt shard 7", h.hosts.notices[0].Error)
}

// A task that asks the run to stop with an error and exits 0 at once (the README's in-task commands) fails the
// run with its error when its end comes in the same workflow task as its request, whether the end comes by the
// host's report or by the lease's completion.
func TestStop_ARequestInTheSameWorkflowTaskAsTheEndDecides(t *testing.T) {
	for _, quiet := range []bool{false, true} {
		t.Run(fmt.Sprintf("quietEnds=%v", quiet), func(t *testing.T) {
			h := newHarness(t, func(string, int, int) behavior {
				return behavior{stop: &StopRequest{Task: "worker-0", Error: "shard 7 is corrupt"}, atOnce: true}
			})
			h.hosts.quietEnds = quiet
			st, err := h.run(t, mustSpec(t, `{name: s, command: [x], tasks: {worker: {replicas: 1}}}`))
			require.Error(t, err)
			assert.Equal(t, StatusFailed, st.Status)
			assert.Equal(t, "stop requested by worker-0: shard 7 is corrupt", st.Reason)
		})
	}
}

func TestStop_CleanRequestFromOutsideKillsStragglers(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "ps-0" {
			return blocks // ignores should-stop
		}
		return behavior{block: true, obey: true}
	})
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(SignalStop, StopRequest{}) }, 300*time.Millisecond)
	st, err := h.run(t, mustSpec(t, `{name: s, command: [x], stopGracePeriod: 300ms, tasks: {worker: {replicas: 2}, ps: {replicas: 1}}}`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, "stop requested from outside the run; killed 1 straggler(s) still running after 300ms: ps-0", st.Reason)
	assert.True(t, st.Task("ps-0").Straggler)
	assert.Equal(t, TaskStopped, st.Task("ps-0").State)
	assert.Equal(t, TaskSucceeded, st.Task("worker-0").State)
	require.Len(t, h.hosts.stops, 1)
	assert.Zero(t, h.hosts.stops[0].GracePeriod, "stragglers are killed at once")
}

func TestDeadlineWarning(t *testing.T) {
	h := newHarness(t, nil)
	st, err := h.run(t, mustSpec(t, `{name: d, command: [x], maxRunTime: 1s, deadlineWarning: {signal: SIGUSR1, before: 700ms}, tasks: {worker: {replicas: 2, hosts: [a, b]}}}`))
	require.Error(t, err)
	assert.Equal(t, StatusTimedOut, st.Status)
	require.Len(t, h.hosts.signals, 2, "one SignalTasks per host")
	assert.Equal(t, "SIGUSR1", h.hosts.signals[0].Signal)
}

func TestBarrier_RefusedPastTheSignalBudget(t *testing.T) {
	defer func(old int) { BarrierSignalBudget = old }(BarrierSignalBudget)
	BarrierSignalBudget = 5
	h := newHarness(t, func(task string, _, _ int) behavior { return behavior{barriers: passes("late")} })
	h.env.RegisterDelayedCallback(func() {
		// Spend the budget with harmless signals (empty placements).
		for i := 0; i <= BarrierSignalBudget; i++ {
			h.env.SignalWorkflow(SignalTasksPlaced, PlacedSignal{})
		}
	}, 0)
	_, _ = h.run(t, mustSpec(t, `{name: b, command: [x], onFailure: continue, tasks: {worker: {replicas: 1}}}`))
	require.Len(t, h.hosts.passed["worker-0"], 1)
	assert.Contains(t, h.hosts.passed["worker-0"][0], `barrier "late" refused: this run has used up its barrier budget`)
}

func TestBarrier_StatusStaysSmall(t *testing.T) {
	var names []string
	for i := 0; i < 30; i++ {
		names = append(names, fmt.Sprintf("b%d", i))
	}
	h := newHarness(t, func(string, int, int) behavior { return behavior{barriers: passes(names...)} })
	st, err := h.run(t, mustSpec(t, `{name: b, command: [x], tasks: {worker: {replicas: 2}}}`))
	require.NoError(t, err)
	assert.Len(t, st.Barriers, recentBarriers, "only the most recent barriers are listed")
	assert.Equal(t, "b29", st.Barriers[len(st.Barriers)-1].Name)
	assert.Equal(t, &BarrierCounts{Total: 30, Released: 30}, st.BarrierCounts)
	assert.Nil(t, st.Barriers[0].Arrived, "a released barrier keeps counts, not names")
}

// A keepRun request only asks the tasks to stop: the run goes on, clear-stop takes it back, and a later
// request that ends the run still counts. With stragglers: fail, tasks killed after the grace fail the run.
func TestStop_AskClearThenEndWithStragglersFailing(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior { return blocks }) // ignores should-stop
	var asked RunStatus
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(SignalStop, StopRequest{Task: "worker-0", Attempt: 1, KeepRun: true})
	}, 200*time.Millisecond)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&asked))
		h.env.SignalWorkflow(SignalClearStop, StopRequest{})
	}, 400*time.Millisecond)
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(SignalStop, StopRequest{}) }, 600*time.Millisecond)
	st, err := h.run(t, mustSpec(t, `{name: s, command: [x], stopGracePeriod: 300ms, stragglers: fail, tasks: {worker: {replicas: 2}}}`))
	require.Error(t, err)
	assert.Equal(t, StatusRunning, asked.Status, "asking does not end the run")
	require.NotNil(t, asked.StopAsked)
	assert.Equal(t, "worker-0", asked.StopAsked.Task)
	assert.Nil(t, st.StopAsked, "cleared")
	assert.Equal(t, StatusFailed, st.Status)
	assert.Equal(t, "stop requested from outside the run; killed 2 straggler(s) still running after 300ms: worker-0, worker-1", st.Reason)

	require.Len(t, h.hosts.notices, 3, "asked, cleared, ended: one host each")
	assert.Equal(t, NotifyStopInput{WorkflowID: h.hosts.notices[0].WorkflowID, RunID: h.hosts.notices[0].RunID, By: "worker-0", KeepRun: true}, h.hosts.notices[0])
	assert.True(t, h.hosts.notices[1].Clear)
	assert.False(t, h.hosts.notices[2].KeepRun || h.hosts.notices[2].Clear)
}

// A task's keepRun request and its clear-stop right after it leave the tasks no longer asked to stop when both
// reach the run in one workflow task behind a third input (here a start-task for no task), where the
// run's selector takes the clear first. Its host numbers them (Seq), and the request the clear overtook is
// dropped.
func TestStop_AClearRightAfterItsRequestInOneWorkflowTaskClears(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior { return blocks })
	var after RunStatus
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflowSkippingWorkflowTask(SignalStartTask, TaskControl{Task: "nobody"})
		h.env.SignalWorkflowSkippingWorkflowTask(SignalStop, StopRequest{Task: "worker-0", Attempt: 1, KeepRun: true, Seq: 10})
		h.env.SignalWorkflow(SignalClearStop, StopRequest{Task: "worker-0", Attempt: 1, Seq: 11})
	}, 200*time.Millisecond)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&after))
		h.env.SignalWorkflow(SignalStop, StopRequest{})
	}, 400*time.Millisecond)
	st, err := h.run(t, mustSpec(t, `{name: s, command: [x], stopGracePeriod: 300ms, tasks: {worker: {replicas: 2}}}`))
	require.NoError(t, err)
	assert.Equal(t, StatusRunning, after.Status)
	assert.Nil(t, after.StopAsked, "the clear came after the request")
	assert.Equal(t, StatusSucceeded, st.Status)
	for _, n := range h.hosts.notices {
		assert.False(t, n.KeepRun, "no host was asked to stop by the overtaken request: %+v", n)
	}

	// A request sent after a clear still asks, whichever the run takes first.
	h = newHarness(t, func(task string, _, _ int) behavior { return blocks })
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflowSkippingWorkflowTask(SignalStartTask, TaskControl{Task: "nobody"})
		h.env.SignalWorkflowSkippingWorkflowTask(SignalStop, StopRequest{Task: "worker-0", Attempt: 1, KeepRun: true, Seq: 12})
		h.env.SignalWorkflow(SignalClearStop, StopRequest{Task: "worker-0", Attempt: 1, Seq: 11})
	}, 200*time.Millisecond)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&after))
		h.env.SignalWorkflow(SignalStop, StopRequest{})
	}, 400*time.Millisecond)
	_, err = h.run(t, mustSpec(t, `{name: s, command: [x], stopGracePeriod: 300ms, tasks: {worker: {replicas: 2}}}`))
	require.NoError(t, err)
	require.NotNil(t, after.StopAsked)
	assert.Equal(t, "worker-0", after.StopAsked.Task)
}

// A cancel during a stop request's grace period does not start a grace period of its own: what still runs gets
// SIGTERM at once and SIGKILL when the stop request's grace period ends.
func TestStop_ACancelDuringTheGracePeriodKeepsItsEnd(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return blocks }) // ignore should-stop
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(SignalStop, StopRequest{}) }, 100*time.Millisecond)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 900*time.Millisecond)
	st, err := h.run(t, mustSpec(t, `{name: s, command: [x], stopGracePeriod: 2s, tasks: {worker: {replicas: 2}}}`))
	require.Error(t, err)
	assert.Equal(t, StatusCanceled, st.Status)
	require.NotEmpty(t, h.hosts.stops)
	for _, in := range h.hosts.stops {
		assert.Equal(t, 1200*time.Millisecond, in.GracePeriod.Round(100*time.Millisecond), "the 2s that began 0.8s before the cancel")
	}
}

// While a stop request's grace period runs, the status says when it ends; once the run decided, it says none.
func TestStop_TheStatusSaysWhenTheGraceEnds(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return blocks }) // ignore should-stop
	var asked time.Time
	var during RunStatus
	h.env.RegisterDelayedCallback(func() {
		asked = h.env.Now()
		h.env.SignalWorkflow(SignalStop, StopRequest{})
	}, 100*time.Millisecond)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&during))
	}, time.Second)
	st, err := h.run(t, mustSpec(t, `{name: s, command: [x], stopGracePeriod: 2s, tasks: {worker: {replicas: 1}}}`))
	require.NoError(t, err)
	require.NotNil(t, during.StopDeadline)
	assert.WithinDuration(t, asked.Add(2*time.Second), *during.StopDeadline, 100*time.Millisecond)
	assert.Nil(t, st.StopDeadline, "over once the run decided")
}

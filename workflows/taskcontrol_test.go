package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func index(i int) *int { return &i }

func TestTaskControl_TerminateThenStartAgain(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "chief-0" {
			return blocks
		}
		return blocks
	})
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(SignalTerminateTask, TaskControl{Task: "worker-1"})
	}, 200*time.Millisecond)
	var mid RunStatus
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&mid))
		h.env.SignalWorkflow(SignalStartTask, TaskControl{Type: "worker", Index: index(1)})
	}, 400*time.Millisecond)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 700*time.Millisecond)
	st, _ := h.run(t, mustSpec(t, `{name: tc, command: [x], tasks: {chief: {replicas: 1}, worker: {replicas: 2}}}`))

	assert.Equal(t, TaskTerminated, mid.Task("worker-1").State, "terminated, not failed")
	assert.Equal(t, "terminated by the user", mid.Task("worker-1").Error)
	assert.Equal(t, StatusRunning, mid.Status, "the run goes on")
	assert.Contains(t, h.hosts.ids, "worker-1.a2", "started again as its next attempt, with its own activity ID")
	assert.Equal(t, 2, st.Task("worker-1").Attempt, "attempts go on counting")
}

func TestTaskControl_StartNewIndex(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "worker-2" {
			return exits(0)
		}
		return blocks
	})
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(SignalStartTask, TaskControl{Type: "worker"})
		h.env.SignalWorkflow(SignalStartTask, TaskControl{Type: "gpu"})                     // no such type: ignored
		h.env.SignalWorkflow(SignalStartTask, TaskControl{Type: "worker", Index: index(0)}) // running: ignored
		h.env.SignalWorkflow(SignalTerminateTask, TaskControl{Task: "nope-0"})              // ignored
	}, 200*time.Millisecond)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 600*time.Millisecond)
	st, _ := h.run(t, mustSpec(t, `{name: tc, command: [x], chiefExit: wait, tasks: {worker: {replicas: 2}}}`))
	require.Len(t, st.Tasks, 3)
	w2 := st.Task("worker-2")
	require.NotNil(t, w2)
	assert.Equal(t, TaskSucceeded, w2.State)
	assert.Len(t, h.hosts.mapsNow()["worker-2"].Endpoints, 3, "released with the current map, itself included")
	assert.Equal(t, 1, countID(h.hosts.ids, "worker-0"), "the running task was not started twice")
}

func countID(ids []string, id string) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

func TestTaskControl_TerminatedChiefEndsTheRun(t *testing.T) {
	h := newHarness(t, nil)
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(SignalTerminateTask, TaskControl{Task: "chief-0"}) }, 200*time.Millisecond)
	st, err := h.run(t, mustSpec(t, `{name: tc, command: [x], tasks: {chief: {replicas: 1}, worker: {replicas: 1}}}`))
	require.Error(t, err)
	assert.Equal(t, StatusCanceled, st.Status)
	assert.Equal(t, "chief-0 terminated by the user", st.Reason)
	assert.Equal(t, TaskTerminated, st.Task("chief-0").State)
	assert.Equal(t, TaskStopped, st.Task("worker-0").State)
}

// start-task cannot grow a run past the task limit, which a spec's replicas are held to.
func TestTaskControl_StartTaskKeepsTheTaskLimit(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return blocks })
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(SignalStartTask, TaskControl{Type: "worker"})
		h.env.SignalWorkflow(SignalStartTask, TaskControl{Type: "worker", Index: index(5000)})
	}, 2*time.Second)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 3*time.Second)
	st, _ := h.run(t, mustSpec(t, `{name: tc, command: [x], chiefExit: wait, tasks: {worker: {replicas: 1000}}}`))
	assert.Len(t, st.Tasks, 1000, "no task past the limit")
	assert.Nil(t, st.Task("worker-1000"))
	assert.Nil(t, st.Task("worker-5000"))
}

// A new index must be the next of its type: TF_CONFIG lists a type's addresses by index, so a worker-5 beside
// worker-0 and worker-1 would be index 5 of a list of three. A request with a gap (the temporal CLI's signal;
// clusterrun refuses it before it is sent) is ignored; the next index is started.
func TestTaskControl_StartTaskLeavesNoGap(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return blocks })
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(SignalStartTask, TaskControl{Type: "worker", Index: index(5)})
		h.env.SignalWorkflow(SignalStartTask, TaskControl{Type: "worker", Index: index(2)})
	}, 2*time.Second)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 3*time.Second)
	st, _ := h.run(t, mustSpec(t, `{name: tc, command: [x], chiefExit: wait, tasks: {worker: {replicas: 2}}}`))
	assert.Nil(t, st.Task("worker-5"))
	require.NotNil(t, st.Task("worker-2"))
	assert.Equal(t, TaskStopped, st.Task("worker-2").State, "it ran until the cancel")
}

// A task started again by hand comes back like a restart: to the host and port of its last attempt, when that
// host is live, and its status keeps where its earlier attempts ran (their logs are there).
func TestTaskControl_StartedAgainComesBackToItsHost(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run waits for its placements")
	}
	h := newHarness(t, func(string, int, int) behavior { return blocks })
	h.hosts.registry = registryOf(true) // the fakes run a task where the map they are given puts it
	h.hosts.portFor = func(in RunTaskInput) int {
		if in.Port != 0 {
			return in.Port // the host had it free
		}
		return 7000 + in.Attempt
	}
	var first TaskStatus
	h.env.RegisterDelayedCallback(func() {
		var st RunStatus
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&st))
		first = *st.Task("worker-1")
		h.env.SignalWorkflow(SignalTerminateTask, TaskControl{Task: "worker-1"})
	}, 200*time.Millisecond)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(SignalStartTask, TaskControl{Type: "worker", Index: index(1)})
	}, 400*time.Millisecond)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 800*time.Millisecond)
	st, _ := h.run(t, mustSpec(t, `{name: tc, command: [x], tasks: {worker: {replicas: 2}}}`))

	require.Equal(t, "host-b", first.Host, "the test needs worker-1 where a fresh placement would not put it")
	w := st.Task("worker-1")
	assert.Equal(t, 2, w.Attempt)
	h.hosts.mu.Lock()
	assert.Equal(t, PlacedQueue("default", first.Host), h.hosts.queues["worker-1"], "back on its host")
	h.hosts.mu.Unlock()
	assert.Equal(t, first.Port, w.Port, "at its port")
	require.Len(t, w.Earlier, 1)
	assert.Equal(t, AttemptPlace{Attempt: 1, Host: "host-b", Restart: "started again with start-task"}, w.Earlier[0])
}

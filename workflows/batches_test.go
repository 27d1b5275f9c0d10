package workflows

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/spec"
)

const batchSpec = `
name: batch
command: [x]
hostLossGrace: 1m
tasks:
  chief: {replicas: 1, hosts: [host-a]}
  worker: {replicas: 2, hosts: [host-a]}
  ps: {replicas: 1, hosts: [host-b]}
`

func batchesOn(h *harness) []RunTasksInput {
	h.hosts.mu.Lock()
	defer h.hosts.mu.Unlock()
	return append([]RunTasksInput(nil), h.hosts.batches...)
}

func memberNames(in RunTasksInput) []string {
	var out []string
	for _, m := range in.Members {
		out = append(out, m.Task.Name)
	}
	return out
}

// The tasks that launch on one host together share one lease: one RunTasks per host, whose tasks keep their
// own attempts and leases. The chief's end comes by its report, while the lease that holds it still runs the
// workers, and ends the run.
func TestBatches_TasksOfAHostShareOneLease(t *testing.T) {
	if shardedRuns() {
		t.Skip("a run with a shard per task holds a lease per task")
	}
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "chief-0" {
			return exits(0)
		}
		return blocks
	})
	st, err := h.run(t, mustSpec(t, batchSpec))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, map[string]string{"chief-0": TaskSucceeded, "worker-0": TaskStopped, "worker-1": TaskStopped, "ps-0": TaskStopped}, states(st))
	b := batchesOn(h)
	require.Len(t, b, 2)
	if len(b[0].Members) == 1 {
		b[0], b[1] = b[1], b[0]
	}
	assert.Equal(t, []string{"chief-0", "worker-0", "worker-1"}, memberNames(b[0]))
	assert.Equal(t, []string{"ps-0"}, memberNames(b[1]))
	for _, m := range b[0].Members {
		assert.Equal(t, 1, m.Attempt)
		assert.Equal(t, 1, m.Lease)
	}
	assert.True(t, b[0].ReportExit)
	assert.Equal(t, HostQueue("host-a"), h.hosts.queues["worker-1"])
	assert.Contains(t, h.hosts.ids, "ps-0", "a lease of one task is named by it")
	assert.Equal(t, []string{"chief-0 a1.l1 launch", "ps-0 a1.l1 launch", "worker-0 a1.l1 launch", "worker-1 a1.l1 launch"}, leasesOfAll(h))
}

// A member that fails restarts on its own, without waiting for its batch to end: here the other members wait
// at a barrier for the restarted attempt, which a restart after the batch's end would never reach.
func TestBatches_AMemberRestartsWhileItsBatchRuns(t *testing.T) {
	h := newHarness(t, func(task string, attempt, _ int) behavior {
		if task == "worker-1" && attempt == 1 {
			return exits(1)
		}
		return behavior{barriers: []barrierCall{{name: "sync"}}}
	})
	st, err := h.run(t, mustSpec(t, `
name: restart
command: [x]
tasks:
  worker: {replicas: 3, hosts: [host-a], restart: {policy: OnFailure, maxRestarts: 1, backoff: 1s}}
`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, 2, st.Task("worker-1").Attempt)
	assert.Equal(t, []string{"sync: ok"}, h.hosts.passed["worker-0"])
	assert.Equal(t, []string{"a1.l1 launch", "a2.l1 launch"}, leasesOf(h, "worker-1"))
	assert.Contains(t, h.hosts.ids, "worker-1.a2", "the restart is a lease of its own, named by its attempt")
}

// When the members' reports are lost, the batch's completion says how each ended.
func TestBatches_TheCompletionCarriesEndsWhoseReportsWereLost(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "worker-1" {
			return exits(2)
		}
		return exits(0)
	})
	h.hosts.quietEnds = true
	st, err := h.run(t, mustSpec(t, `
name: quiet
command: [x]
onFailure: continue
tasks:
  worker: {replicas: 3, hosts: [host-a]}
`))
	require.Error(t, err)
	assert.Equal(t, map[string]string{"worker-0": TaskSucceeded, "worker-1": TaskFailed, "worker-2": TaskSucceeded}, states(st))
	assert.Equal(t, 2, *st.Task("worker-1").ExitCode)
	assert.Contains(t, st.Reason, "1 of 3 tasks failed; first: worker-1 exited with code 2")
}

// A batch that goes silent (its host's heartbeats stop) leaves each task unreachable, and its host is asked
// to take them all up again with one lease, on its control queue.
func TestBatches_ASilentBatchReattachesAsOne(t *testing.T) {
	if shardedRuns() {
		t.Skip("a run with a shard per task holds a lease per task")
	}
	h := newHarness(t, nil)
	h.hosts.batchFails = func(in RunTasksInput) error {
		if len(in.Members) > 1 && !in.Attach {
			return heartbeatTimeout()
		}
		return nil
	}
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		return res, nil, in.Attach && in.Task.Name == "chief-0" // taken up again, the chief exits 0
	}
	st, err := h.run(t, mustSpec(t, batchSpec))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	b := batchesOn(h)
	require.Len(t, b, 3)
	assert.True(t, b[2].Attach)
	assert.Equal(t, "host-a", b[2].Host)
	assert.Equal(t, []string{"chief-0", "worker-0", "worker-1"}, memberNames(b[2]))
	for _, task := range []string{"chief-0", "worker-0", "worker-1"} {
		assert.Equal(t, []string{"a1.l1 launch", "a1.l2 attach host-a"}, leasesOf(h, task), task)
		assert.Equal(t, ControlQueue("host-a"), h.hosts.queues[task], task)
	}
	assert.Equal(t, []string{"a1.l1 launch"}, leasesOf(h, "ps-0"), "host-b's lease held")
}

// A task that shares its lease cannot be canceled alone: terminated before its placement came, it is stopped
// by its host once placed, and never released.
func TestBatches_TerminateBeforeThePlacementStopsItOnItsHost(t *testing.T) {
	h := newHarness(t, nil)
	h.hosts.beforePlacing = func(in RunTaskInput) {
		if in.Task.Name == "worker-1" {
			h.env.SignalWorkflow(SignalTerminateTask, TaskControl{Task: "worker-1"})
		}
	}
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 2*time.Second)
	st, _ := h.run(t, mustSpec(t, `
name: term
command: [x]
chiefExit: wait
tasks:
  worker: {replicas: 2, hosts: [host-a]}
`))
	assert.Equal(t, TaskTerminated, st.Task("worker-1").State)
	assert.Equal(t, TaskStopped, st.Task("worker-0").State)
	h.hosts.mu.Lock()
	defer h.hosts.mu.Unlock()
	_, released := h.hosts.maps["worker-1"]
	assert.False(t, released, "a terminated task never gets the map")
	assert.Contains(t, h.hosts.maps, "worker-0")
}

// A member whose host had no free slot for it within startTimeout says so, in the host's words.
func TestBatches_NoFreeSlotOnTheHostIsSaid(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		if in.Task.Name == "worker-1" {
			why := temporal.NewApplicationError("host host-a had no free slot for it: its one slot of pool default (--slots) was taken by another task", ErrTaskFailed)
			return res, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, why), true
		}
		return res, nil, false
	}
	st, err := h.run(t, mustSpec(t, `{name: slot, command: [x], startTimeout: 30s, tasks: {worker: {replicas: 2, hosts: [host-a]}}}`))
	require.Error(t, err)
	assert.Equal(t, "worker-1 found no free slot within startTimeout 30s: host host-a had no free slot for it: its one slot of pool default (--slots) was taken by another task",
		st.Task("worker-1").Error)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr))
}

// leasesOfAll lists every lease the fakes saw: "chief-0 a1.l1 launch", sorted.
func leasesOfAll(h *harness) []string {
	var out []string
	for _, name := range []string{"chief-0", "ps-0", "worker-0", "worker-1"} {
		for _, l := range leasesOf(h, name) {
			out = append(out, name+" "+l)
		}
	}
	return out
}

func shardedRuns() bool {
	return shardedIfAsked(spec.RunSpec{Tasks: map[string]spec.TaskSpec{"x": {Replicas: 1}}}).TasksPerShard == 1
}

// In a sharded run the tasks of a host share a lease per shard, their hosts report their ends to the shard,
// and the shard passes them on: a member restarts while its batch runs, as in a run of one execution.
func TestBatches_ShardsBatchTheirTasksAndPassTheirEndsOn(t *testing.T) {
	h := newHarness(t, func(task string, attempt, _ int) behavior {
		if task == "worker-1" && attempt == 1 {
			return exits(1)
		}
		return behavior{barriers: []barrierCall{{name: "sync"}}}
	})
	st, err := h.run(t, mustSpec(t, `
name: sharded
command: [x]
tasksPerShard: 2
tasks:
  worker: {replicas: 4, hosts: [host-a], restart: {policy: OnFailure, maxRestarts: 1, backoff: 1s}}
`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.True(t, st.Sharded)
	assert.Equal(t, 2, st.Task("worker-1").Attempt)
	var launches []RunTasksInput
	for _, b := range batchesOn(h) {
		if len(b.Members) > 1 {
			launches = append(launches, b)
		}
	}
	require.Len(t, launches, 2, "a batch per shard")
	for _, b := range launches {
		assert.True(t, b.ReportExit)
		assert.Contains(t, b.ReportTo.WorkflowID, "/shard-", "ends go to the shard")
	}
	assert.Equal(t, []string{"sync: ok"}, h.hosts.passed["worker-3"])
}

// A workflow task sends its shards at most maxLeaseBytesPerTask of leases (its completion must stay under
// gRPC's 4 MB); the rest go out in the next ones, which a short timer brings, and every task runs.
func TestBatches_ShardLeasesSpreadOverWorkflowTasks(t *testing.T) {
	saved := maxLeaseBytesPerTask
	maxLeaseBytesPerTask = 1 // one shard's leases per workflow task
	defer func() { maxLeaseBytesPerTask = saved }()
	began := time.Now()
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	// No placement comes before every shard has its lease: only the timer can bring the workflow tasks that
	// send the rest.
	h.hosts.beforePlacing = func(RunTaskInput) {
		for deadline := time.Now().Add(5 * time.Second); len(batchesOn(h)) < 4 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	st, err := h.run(t, mustSpec(t, `
name: spread
command: [x]
tasksPerShard: 2
tasks:
  worker: {replicas: 8, hosts: [host-a]}
`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Len(t, batchesOn(h), 4, "each shard got its lease")
	assert.Less(t, time.Since(began), 5*time.Second, "before the placements that would have brought them")
}

// A task terminated while it shared a lease and had not started, whose host then gave it up unstarted (a worker
// stopping, a withdrawal), ends terminated: it is not launched again only to be stopped once placed.
func TestBatches_ATerminatedTaskItsHostGaveUpUnstartedEnds(t *testing.T) {
	if shardedRuns() {
		t.Skip("a run with a shard per task holds a lease per task")
	}
	h := newHarness(t, nil)
	h.hosts.loseBeforePlacing = func(in RunTaskInput) bool {
		if in.Task.Name != "worker-1" || in.Lease != 1 {
			return false
		}
		h.env.SignalWorkflow(SignalTerminateTask, TaskControl{Task: "worker-1"})
		return true // its end, detached before it started, is reported after the terminate
	}
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 2*time.Second)
	st, _ := h.run(t, mustSpec(t, `
name: term
command: [x]
chiefExit: wait
tasks:
  worker: {replicas: 2, hosts: [host-a]}
`))
	assert.Equal(t, TaskTerminated, st.Task("worker-1").State)
	assert.Equal(t, []string{"a1.l1 launch"}, leasesOf(h, "worker-1"), "never launched again")
	assert.Equal(t, TaskStopped, st.Task("worker-0").State)
}

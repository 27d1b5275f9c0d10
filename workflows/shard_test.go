package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/spec"
)

// A lease's error crosses from its shard to its run as JSON and must read the same there: how the lease
// ended, the task's state and message, and the result in the details.
func TestShard_LeaseErrorsReadTheSameInTheRun(t *testing.T) {
	res := TaskResult{Task: "worker-0", Host: "h1", PID: 42, ExitCode: 3, Error: "boom"}
	cases := map[string]error{
		"failed":   temporal.NewNonRetryableApplicationError("worker-0 exited 3", ErrTaskFailed, nil, res),
		"detached": temporal.NewNonRetryableApplicationError("host h1 lost the server", ErrTaskDetached, nil, res),
		"lost":     temporal.NewNonRetryableApplicationError("no record", ErrTaskLost, nil),
		"start":    temporal.NewNonRetryableApplicationError("no such command", ErrTaskStartFailed, nil),
		"heartbeat": temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT,
			temporal.NewApplicationError("last heartbeat", "Beat")),
		"schedule": temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil),
		"canceled": temporal.NewCanceledError(res),
		"bare":     temporal.NewCanceledError(),
		"other":    errors.New("something else"),
	}
	for name, orig := range cases {
		t.Run(name, func(t *testing.T) {
			data, err := json.Marshal(LeaseErrorOf(orig))
			require.NoError(t, err)
			var le LeaseError
			require.NoError(t, json.Unmarshal(data, &le))
			back := le.Err()

			for _, attached := range []bool{false, true} {
				assert.Equal(t, leaseEndOf(orig, attached), leaseEndOf(back, attached))
			}
			r := &run{plan: &spec.Plan{StartTimeout: time.Minute, HeartbeatTimeout: time.Second}}
			a, b := &task{Task: spec.Task{Name: "worker-0"}}, &task{Task: spec.Task{Name: "worker-0"}}
			now := time.Unix(0, 0)
			r.settle(a, TaskResult{}, orig, now)
			r.settle(b, TaskResult{}, back, now)
			assert.Equal(t, a.status, b.status)
			assert.Equal(t, a.startFailed, b.startFailed)
		})
	}
	assert.Nil(t, LeaseErrorOf(nil))
	assert.NoError(t, (*LeaseError)(nil).Err())
}

// Only an attempt that ran has an exit code: one stopped before it started (at its rendezvous, or waiting for a
// slot) comes back from its host as exit 0 with no pid, and shows none.
func TestRun_ExitCodeOnlyForAProcessThatRan(t *testing.T) {
	r := &run{plan: &spec.Plan{StartTimeout: time.Minute, HeartbeatTimeout: time.Second}}
	now := time.Unix(0, 0)
	cases := map[string]struct {
		res  TaskResult
		want *int
	}{
		"stopped before it started": {TaskResult{Task: "worker-0", Host: "h1", Attempt: 1, Stopped: true}, nil},
		"ran and exited 0":          {TaskResult{Task: "worker-0", Host: "h1", Attempt: 1, PID: 42}, ptr(0)},
		"stopped while it ran":      {TaskResult{Task: "worker-0", Host: "h1", Attempt: 1, PID: 42, ExitCode: 143, Signal: "SIGTERM", Stopped: true}, ptr(143)},
		"could not start":           {TaskResult{Task: "worker-0", Host: "h1", Attempt: 1, ExitCode: 127}, ptr(127)},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			tk := &task{Task: spec.Task{Name: "worker-0"}}
			before := 9
			tk.status.ExitCode = &before // an earlier attempt's
			r.settle(tk, c.res, nil, now)
			assert.Equal(t, c.want, tk.status.ExitCode)
		})
	}
}

func ptr(i int) *int { return &i }

func TestShard_BatchesStayUnderThePayloadLimit(t *testing.T) {
	big := make([]LeaseEnd, 12)
	for i := range big {
		big[i] = LeaseEnd{ID: "t", Result: &TaskResult{StderrTail: strings.Repeat("x", 200<<10)}}
	}
	bs := batches(big)
	total := 0
	for _, b := range bs {
		data, _ := json.Marshal(b)
		assert.LessOrEqual(t, len(data), maxBatchBytes+1024)
		total += len(b)
	}
	assert.Equal(t, len(big), total, "nothing dropped")
	assert.Greater(t, len(bs), 1)
	assert.Len(t, batches([]LeaseEnd{}), 0)
}

func TestShard_IDs(t *testing.T) {
	assert.Equal(t, "r/shard-0", ShardWorkflowID("r", 0, 0))
	assert.Equal(t, "r/shard-3.r2", ShardWorkflowID("r", 2, 3))
	assert.Equal(t, spec.MaxTasksPerShard, MaxTasksOf(false))
	assert.Equal(t, spec.MaxTasks, MaxTasksOf(true))
}

// A 10,000-task run's status lists every task and stays within MaxStatusBytes (in full it would pass
// Temporal's 2 MB payload limit), losing only as many details as it must; a 1,000-task run's keeps them all.
func TestShard_LargeStatusFitsThePayloadLimit(t *testing.T) {
	statuses := func(n int, host, errText string) []TaskStatus {
		tasks := make([]TaskStatus, n)
		now := time.Now()
		code := 0
		for i := range tasks {
			tasks[i] = TaskStatus{Name: fmt.Sprintf("worker-%d", i), Type: "worker", Index: i, State: TaskFailed,
				Host: host, Addr: "10.1.2.3", Port: 40000 + i, Attempt: 2, ExitCode: &code,
				StartTime: &now, EndTime: &now, Error: errText, Result: json.RawMessage(`{"loss": 0.25}`),
				Earlier: []AttemptPlace{{Attempt: 1, Host: host, Restart: "restart 1 of 3 in 1s after: boom"}}}
		}
		return tasks
	}
	omitted := func(tasks []TaskStatus) (n int) {
		for _, st := range tasks {
			if st.DetailsOmitted {
				n++
			}
		}
		return n
	}
	for name, tasks := range map[string][]TaskStatus{
		"1,000 failed":          statuses(1000, "gpu-host-17.example.com", strings.Repeat("e", 300)),
		"10,000 failed, long":   statuses(10000, "gpu-host-17.example.com", strings.Repeat("e", 300)),
		"10,000 running, short": statuses(10000, "h1", ""),
	} {
		fitStatuses(tasks)
		data, err := json.Marshal(RunStatus{Tasks: tasks})
		require.NoError(t, err)
		assert.LessOrEqual(t, len(data), MaxStatusBytes, name)
		assert.Less(t, len(data), 2_000_000-64<<10, name)
		switch name {
		case "1,000 failed":
			assert.Zero(t, omitted(tasks), name)
			assert.False(t, tasks[999].ResultOmitted)
		case "10,000 running, short":
			assert.Positive(t, omitted(tasks), name)
			assert.False(t, tasks[9999].DetailsOmitted, "only as many as needed")
		}
		assert.Equal(t, "worker-9", tasks[9].Name)
	}
}

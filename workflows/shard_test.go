package workflows

import (
	"encoding/json"
	"errors"
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
			data, err := json.Marshal(leaseErrorOf(orig))
			require.NoError(t, err)
			var le LeaseError
			require.NoError(t, json.Unmarshal(data, &le))
			back := le.err()

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
	assert.Nil(t, leaseErrorOf(nil))
	assert.NoError(t, (*LeaseError)(nil).err())
}

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

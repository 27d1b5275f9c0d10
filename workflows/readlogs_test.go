package workflows

import (
	"context"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// updateCallback collects an update's outcome in the test environment.
type updateCallback struct {
	accepted, rejected bool
	err                error
	result             *ReadLogsResult
}

func (u *updateCallback) Accept()          { u.accepted = true }
func (u *updateCallback) Reject(err error) { u.rejected, u.err = true, err }
func (u *updateCallback) Complete(r any, err error) {
	u.err = err
	if res, ok := r.(*ReadLogsResult); ok {
		u.result = res
	}
}

// A session serves many reads, each asking every host named for its chunks, refuses reads that ask too much,
// and ends when its reader closes it.
func TestLogSession_ServesReadsUntilClosed(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(LogSession, workflow.RegisterOptions{Name: LogSessionWorkflowType})
	var calls atomic.Int32 // the hosts' activities run at once
	env.RegisterActivityWithOptions(func(_ context.Context, in ReadLogsInput) (ReadLogsResult, error) {
		calls.Add(1)
		var out ReadLogsResult
		for _, r := range in.Requests {
			out.Chunks = append(out.Chunks, LogChunk{ReadLogsRequest: r, Data: []byte(r.Host + "/" + r.Task + "\n"), Next: r.Offset + 1})
		}
		return out, nil
	}, activity.RegisterOptions{Name: ActivityReadLogs})

	var first, second, tooMuch updateCallback
	read := ReadLogsInput{Requests: []ReadLogsRequest{{Host: "a", Task: "worker-0"}, {Host: "b", Task: "worker-1"}, {Host: "a", Task: "worker-2"}}}
	env.RegisterDelayedCallback(func() { env.UpdateWorkflow(UpdateReadLogs, "1", &first, read) }, time.Second)
	env.RegisterDelayedCallback(func() { env.UpdateWorkflow(UpdateReadLogs, "2", &second, read) }, 30*time.Second)
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateReadLogs, "3", &tooMuch, ReadLogsInput{Requests: []ReadLogsRequest{
			{Host: "a", Max: MaxLogRead}, {Host: "b", Max: MaxLogRead}}})
	}, 40*time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalCloseLogs, nil) }, 50*time.Second)
	env.ExecuteWorkflow(LogSession, LogSessionInput{RunID: "run-1"})

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, first.err)
	require.NotNil(t, first.result)
	got := []string{}
	for _, c := range first.result.Chunks {
		got = append(got, string(c.Data))
	}
	assert.Equal(t, []string{"a/worker-0\n", "b/worker-1\n", "a/worker-2\n"}, got, "chunks come back in request order")
	require.NotNil(t, second.result)
	assert.Equal(t, int32(4), calls.Load(), "one activity per host per read")
	assert.True(t, tooMuch.rejected)
	assert.ErrorContains(t, tooMuch.err, "at most")
}

// A session whose reader went away ends by itself.
func TestLogSession_EndsWhenIdle(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(LogSession, workflow.RegisterOptions{Name: LogSessionWorkflowType})
	env.ExecuteWorkflow(LogSession, LogSessionInput{RunID: "run-1", Idle: time.Minute})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
}

// A host's unanswered part of a read says which way it went unanswered.
func TestUnansweredRead(t *testing.T) {
	assert.Equal(t, "host a did not pick up the read within 5s: no clusterrun-worker --host a is running, or it is overloaded",
		unansweredRead("a", temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)))
	assert.Equal(t, "host a took the read up but did not answer within 10s: its clusterrun-worker stopped, or it is overloaded",
		unansweredRead("a", temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil)))
}

package workflows

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
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
	completed          func() // when set, called as the update completes
}

func (u *updateCallback) Accept()          { u.accepted = true }
func (u *updateCallback) Reject(err error) { u.rejected, u.err = true, err }
func (u *updateCallback) Complete(r any, err error) {
	if u.completed != nil {
		u.completed()
	}
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

// readsOf registers a ReadLogs activity that answers each request with its host and offset, host "b" after
// bDelay (on the workflow's clock) or with bErr, and counts the activities each host ran.
func readsOf(env *testsuite.TestWorkflowEnvironment, bDelay time.Duration, bErr error) map[string]*atomic.Int32 {
	calls := map[string]*atomic.Int32{"a": {}, "b": {}}
	answer := func(_ context.Context, in ReadLogsInput) (ReadLogsResult, error) {
		calls[in.Requests[0].Host].Add(1)
		if in.Requests[0].Host == "b" && bErr != nil {
			return ReadLogsResult{}, bErr
		}
		var out ReadLogsResult
		for _, r := range in.Requests {
			out.Chunks = append(out.Chunks, LogChunk{ReadLogsRequest: r, Data: fmt.Appendf(nil, "%s@%d\n", r.Host, r.Offset), Next: r.Offset + 1})
		}
		return out, nil
	}
	env.RegisterActivityWithOptions(answer, activity.RegisterOptions{Name: ActivityReadLogs})
	onHost := func(h string) any {
		return mock.MatchedBy(func(in ReadLogsInput) bool { return len(in.Requests) > 0 && in.Requests[0].Host == h })
	}
	env.OnActivity(ActivityReadLogs, mock.Anything, onHost("a")).Return(answer)
	env.OnActivity(ActivityReadLogs, mock.Anything, onHost("b")).Return(answer).After(bDelay)
	return calls
}

// data lists a read's chunks as text, a Late one as "late".
func data(res *ReadLogsResult) []string {
	var out []string
	for _, c := range res.Chunks {
		switch {
		case c.Late:
			out = append(out, "late")
		case c.Unreachable:
			out = append(out, "unreachable")
		default:
			out = append(out, string(c.Data))
		}
	}
	return out
}

// A read with patience is answered without a host that has not answered within it; the host's answer, when it
// comes, serves the next read that asks it the same, without asking the host again. A read without patience
// waits for every host, as before.
func TestLogSession_APatientReadDoesNotWaitForASlowHost(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(LogSession, workflow.RegisterOptions{Name: LogSessionWorkflowType})
	calls := readsOf(env, 3*time.Second, nil)
	read := func(offset int64, patience time.Duration) ReadLogsInput {
		return ReadLogsInput{Patience: patience, Requests: []ReadLogsRequest{
			{Host: "a", Task: "worker-0", Offset: offset}, {Host: "b", Task: "worker-1", Offset: 7, Max: 1 << 10}}}
	}
	var first, second, third, patient updateCallback
	var firstAt, secondAt, thirdAt time.Time
	first.completed = func() { firstAt = env.Now() }
	second.completed = func() { secondAt = env.Now() }
	third.completed = func() { thirdAt = env.Now() }
	env.RegisterDelayedCallback(func() { env.UpdateWorkflow(UpdateReadLogs, "1", &first, read(0, time.Second)) }, time.Second)
	env.RegisterDelayedCallback(func() { env.UpdateWorkflow(UpdateReadLogs, "2", &second, read(1, time.Second)) }, 2500*time.Millisecond)
	env.RegisterDelayedCallback(func() { env.UpdateWorkflow(UpdateReadLogs, "3", &third, read(2, time.Second)) }, 5*time.Second)
	env.RegisterDelayedCallback(func() { env.UpdateWorkflow(UpdateReadLogs, "4", &patient, read(3, 0)) }, 10*time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalCloseLogs, nil) }, 30*time.Second)
	start := env.Now()
	env.ExecuteWorkflow(LogSession, LogSessionInput{RunID: "run-1"})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	require.NotNil(t, first.result)
	assert.Equal(t, []string{"a@0\n", "late"}, data(first.result), "b had not answered within the read's patience")
	assert.Equal(t, start.Add(2*time.Second), firstAt, "the read waited its patience, no longer")
	require.NotNil(t, second.result)
	assert.Equal(t, []string{"a@1\n", "late"}, data(second.result), "b's part is still on its way")
	assert.Equal(t, start.Add(2500*time.Millisecond), secondAt, "a part an earlier read left is not waited for")
	require.NotNil(t, third.result)
	assert.Equal(t, []string{"a@2\n", "b@7\n"}, data(third.result), "b's answer to the first read serves the third")
	assert.Equal(t, start.Add(5*time.Second), thirdAt)
	assert.Equal(t, int32(1+1), calls["b"].Load(), "b was asked by the first read and the fourth only")
	require.NotNil(t, patient.result)
	assert.Equal(t, []string{"a@3\n", "b@7\n"}, data(patient.result), "a read without patience waits for b")
}

// A slow host's answer serves only a read that asks it the same, within its share; its failure to answer is
// the next read's answer for it.
func TestLogSession_ALateAnswerServesOnlyTheSameRead(t *testing.T) {
	read := func(b ReadLogsRequest) ReadLogsInput {
		b.Host, b.Task = "b", "worker-1"
		return ReadLogsInput{Patience: time.Second, Requests: []ReadLogsRequest{{Host: "a", Task: "worker-0"}, b}}
	}
	for _, tc := range []struct {
		name  string
		then  ReadLogsRequest
		bErr  error
		want  []string
		calls int32
	}{
		{"the same read", ReadLogsRequest{Offset: 7}, nil, []string{"a@0\n", "b@7\n"}, 1},
		{"a larger share", ReadLogsRequest{Offset: 7, Max: 1 << 20}, nil, []string{"a@0\n", "b@7\n"}, 1},
		{"another offset", ReadLogsRequest{Offset: 8}, nil, []string{"a@0\n", "late"}, 2},
		{"a smaller share", ReadLogsRequest{Offset: 7, Max: 2}, nil, []string{"a@0\n", "late"}, 2},
		{"another stream", ReadLogsRequest{Offset: 7, Stream: "stderr"}, nil, []string{"a@0\n", "late"}, 2},
		{"no answer", ReadLogsRequest{Offset: 7}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil),
			[]string{"a@0\n", "unreachable"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestWorkflowEnvironment()
			env.RegisterWorkflowWithOptions(LogSession, workflow.RegisterOptions{Name: LogSessionWorkflowType})
			calls := readsOf(env, 3*time.Second, tc.bErr)
			var first, then updateCallback
			env.RegisterDelayedCallback(func() { env.UpdateWorkflow(UpdateReadLogs, "1", &first, read(ReadLogsRequest{Offset: 7, Max: 16})) }, time.Second)
			env.RegisterDelayedCallback(func() { env.UpdateWorkflow(UpdateReadLogs, "2", &then, read(tc.then)) }, 10*time.Second)
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalCloseLogs, nil) }, 30*time.Second)
			env.ExecuteWorkflow(LogSession, LogSessionInput{RunID: "run-1"})
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			require.NotNil(t, first.result)
			assert.Equal(t, []string{"a@0\n", "late"}, data(first.result))
			require.NotNil(t, then.result)
			assert.Equal(t, tc.want, data(then.result))
			assert.Equal(t, tc.calls, calls["b"].Load(), "reads of b")
			if tc.bErr != nil {
				assert.Contains(t, then.result.Chunks[1].Error, "host b did not pick up the read within 5s")
			}
		})
	}
}

// A read's patience is bounded.
func TestCheckReadLogs_Patience(t *testing.T) {
	reqs := []ReadLogsRequest{{Host: "a"}}
	assert.NoError(t, checkReadLogs("r", ReadLogsInput{Requests: reqs, Patience: MaxLogPatience}))
	assert.ErrorContains(t, checkReadLogs("r", ReadLogsInput{Requests: reqs, Patience: time.Minute}), "patience is 0 to 5s, not 1m0s")
	assert.ErrorContains(t, checkReadLogs("r", ReadLogsInput{Requests: reqs, Patience: -time.Second}), "patience")
}

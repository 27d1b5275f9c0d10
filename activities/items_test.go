package activities

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/task"
	"github.com/clusterrun/clusterrun/workflows"
)

// A work-item call's update id is the calling attempt's, with the request id its client sent; a malformed
// request id is refused with what to send instead, and without one the host draws an id for the call.
func TestItemsUpdateID(t *testing.T) {
	c := &controlServer{e: &entry{ref: attemptRef{WorkflowID: "w", RunID: "r", Task: "chief-0", Type: "chief", Attempt: 2}}}
	for _, tc := range []struct{ header, want, err string }{
		{"", `^chief-0/2/w-[0-9a-f]{16}$`, ""},
		{"0f3a9c", `^chief-0/2/0f3a9c$`, ""},
		{"a b", "", "write 1 to 64 letters, digits, - or _"},
		{strings.Repeat("x", 65), "", "write 1 to 64 letters"},
	} {
		r := httptest.NewRequest("POST", task.PathItemsWait, nil)
		if tc.header != "" {
			r.Header.Set(task.HeaderRequestID, tc.header)
		}
		got, err := c.itemsUpdateID(r)
		if tc.err != "" {
			require.Error(t, err, tc.header)
			assert.Contains(t, err.Error(), tc.err)
			assert.Contains(t, err.Error(), task.HeaderRequestID)
			continue
		}
		require.NoError(t, err)
		assert.Regexp(t, tc.want, got)
	}
	a, _ := c.itemsUpdateID(httptest.NewRequest("POST", task.PathItemsWait, nil))
	b, _ := c.itemsUpdateID(httptest.NewRequest("POST", task.PathItemsWait, nil))
	assert.NotEqual(t, a, b, "a call without an id gets one of its own")
}

// The clients' bound on acknowledgements per call is the run's.
func TestItemsAckBound(t *testing.T) {
	assert.Equal(t, workflows.MaxAcksPerCall, task.MaxAcks)
}

// An update's error is sorted into the answer's status, whether the host sends it again, and what to say.
func TestItemsError(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		retry  bool
		says   string
	}{
		{serviceerror.NewNotFound("workflow not found"), http.StatusNotFound, true, "not found"},
		{temporal.NewApplicationError("moving", workflows.ErrItemsMoving), http.StatusServiceUnavailable, true, "moving"},
		{temporal.NewApplicationError("busy", workflows.ErrItemsBusy, workflows.ItemCounts{Queued: 1}), http.StatusTooManyRequests, true, "busy"},
		{temporal.NewApplicationError("schedule takes 1..1000 items", "bad"), http.StatusBadRequest, false, "1..1000"},
		{client.NewWorkflowUpdateServiceTimeoutOrCanceledError(context.DeadlineExceeded), http.StatusServiceUnavailable, false, "it takes 10 at a time"},
		// The server's answer to an update whose workflow task failed: sent again by the host, under its id.
		{serviceerror.NewWorkflowNotReady("Unable to perform workflow execution update due to unexpected workflow task failure."),
			http.StatusServiceUnavailable, true, "failed the task that held this call"},
	} {
		status, retry, says := itemsError(tc.err)
		assert.Equal(t, tc.status, status, tc.err.Error())
		assert.Equal(t, tc.retry, retry, tc.err.Error())
		assert.Contains(t, says, tc.says)
	}
	var saw workflows.ItemCounts
	require.NoError(t, appErrDetails(temporal.NewApplicationError("busy", workflows.ErrItemsBusy, workflows.ItemCounts{Queued: 3}), &saw))
	assert.Equal(t, int64(3), saw.Queued, "a refusal carries the counts it saw")
}

// An update the server answers with "unexpected workflow task failure" (the workflow task it was in failed, as
// one that continues as new does when an event comes in meanwhile) applied nothing: the host sends it again
// under its own id and answers the call. Before, the call failed back to its task, whose client sent the whole
// call again, and a report it had already applied went again to a new history (64 duplicate results).
func TestItemsUpdate_AnUpdateInAFailedWorkflowTaskGoesAgain(t *testing.T) {
	t.Parallel()
	srv := &updateServer{fail: 2}
	c := &controlServer{h: &Host{Client: srv}, e: &entry{ref: attemptRef{WorkflowID: "run", Task: "worker-0", Attempt: 1}}}
	r := httptest.NewRequest("POST", task.PathItemsTake, nil)
	r.Header.Set(task.HeaderRequestID, "call-1")
	var out workflows.TakeItemsResult
	status, err := c.itemsUpdateAs(r, "", workflows.UpdateItemsTake, time.Second,
		func(w time.Duration) any { return workflows.TakeItemsRequest{Wait: w} }, &out)
	require.NoError(t, err)
	assert.Equal(t, 0, status)
	assert.Equal(t, []string{"worker-0/1/call-1", "worker-0/1/call-1", "worker-0/1/call-1"}, srv.ids, "the same update, three times")
}

// A workflow whose tasks fail every time (a broken deployment) does not hold the call past notReadyWait: it
// fails with the reason.
func TestItemsUpdate_AWorkflowWhoseTasksAlwaysFailFailsTheCall(t *testing.T) {
	t.Parallel()
	srv := &updateServer{fail: 1 << 30}
	c := &controlServer{h: &Host{Client: srv}, e: &entry{ref: attemptRef{WorkflowID: "run", Task: "worker-0", Attempt: 1}}}
	r := httptest.NewRequest("POST", task.PathItemsTake, nil)
	r.Header.Set(task.HeaderRequestID, "call-1")
	began := time.Now()
	status, err := c.itemsUpdateAs(r, "", workflows.UpdateItemsTake, time.Second,
		func(w time.Duration) any { return workflows.TakeItemsRequest{Wait: w} }, &workflows.TakeItemsResult{})
	require.Error(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, err.Error(), "failed the task that held this call, every time for 30s (Unable to perform")
	assert.GreaterOrEqual(t, time.Since(began), notReadyWait)
}

// updateServer answers a host's updates: the first fail of them with the server's answer to an update whose
// workflow task failed, the rest with success. It records each update's id.
type updateServer struct {
	client.Client
	mu   sync.Mutex
	fail int
	ids  []string
}

func (s *updateServer) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, o.UpdateID)
	if s.fail > 0 {
		s.fail--
		return nil, serviceerror.NewWorkflowNotReady("Unable to perform workflow execution update due to unexpected workflow task failure.")
	}
	return answered{o}, nil
}

// answered is the handle of an update that succeeded with nothing to say.
type answered struct{ o client.UpdateWorkflowOptions }

func (a answered) WorkflowID() string             { return a.o.WorkflowID }
func (a answered) RunID() string                  { return "" }
func (a answered) UpdateID() string               { return a.o.UpdateID }
func (a answered) Get(context.Context, any) error { return nil }

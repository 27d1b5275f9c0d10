package starter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/spec"
)

// A status query that no worker took in time says so in one sentence, whichever of gRPC's words for it came;
// a server that does not answer, a caller that gave up, or a worker's own refusal keep the error as it came.
func TestQueryError_SaysNoWorkerAnswered(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("query: %w", context.DeadlineExceeded),
		serviceerror.NewDeadlineExceeded("query timed out before a worker could process it"),
		serviceerror.NewCanceled("stream terminated by RST_STREAM with error code: CANCEL"),
	} {
		u := queryError("query run r1", "r1", err, false, false)
		assert.Equal(t, "query run r1: no clusterrun-worker answered it in time (is one running?)", u.Error(), "%v", err)
		assert.False(t, u.ServerSilent)
	}
	silent := queryError("query run r1", "r1", fmt.Errorf("query: %w", context.DeadlineExceeded), true, false)
	assert.Equal(t, "query run r1 (is a clusterrun-worker running?): query: context deadline exceeded", silent.Error())
	assert.True(t, silent.ServerSilent)
	assert.Contains(t, queryError("query run r1", "r1", context.Canceled, false, true).Error(), "context canceled")
	failed := queryError("query run r1", "r1", serviceerror.NewQueryFailed("status: panic"), false, false)
	assert.Equal(t, "query run r1 (is a clusterrun-worker running?): status: panic", failed.Error())
}

// Wait waits on through what is no answer from the server, and only that: a run that timed out or failed, or
// no such run, is an answer.
func TestServerGone(t *testing.T) {
	for _, err := range []error{
		serviceerror.NewUnavailable("connection refused"),
		serviceerror.NewDeadlineExceeded("no answer"),
		fmt.Errorf("get history: %w", context.DeadlineExceeded),
	} {
		assert.True(t, serverGone(err), "%v", err)
	}
	for _, err := range []error{
		nil,
		serviceerror.NewNotFound("no run"),
		errors.New("r1 is a Foo workflow"),
		temporal.NewTimeoutError(0, nil),
		&temporal.WorkflowExecutionError{},
	} {
		assert.False(t, serverGone(err), "%v", err)
	}
}

// Several tasks' lines get their task's prefix; a line redrawn with carriage returns (a progress bar) is
// written as its last drawing, which would otherwise draw over the prefix. One task's output stays as written.
func TestWrite_ARedrawnLineBehindAPrefixIsItsLastDrawing(t *testing.T) {
	var b strings.Builder
	data := []byte("epoch 1\n\r 10%\r100%|###|\nwin\r\n")
	require.NoError(t, write(&b, &logStream{task: "worker-0"}, data, true))
	assert.Equal(t, "[worker-0] epoch 1\n[worker-0] 100%|###|\n[worker-0] win\n", b.String())
	b.Reset()
	require.NoError(t, write(&b, &logStream{task: "worker-0"}, data, false))
	assert.Equal(t, string(data), b.String())
}

// An item state Items does not know ("bogus", "Done") is an error naming the states, where it listed no item
// and said nothing; a Run with no ID says so before it asks the server.
func TestItems_AnUnknownStateIsNamed(t *testing.T) {
	_, err := (&Run{ID: "r1"}).Items(context.Background(), 10, "done", "Done")
	assert.EqualError(t, err, `items in state "Done": an item is queued, running, done, failed`)
	_, err = (&Run{}).Items(context.Background(), 10)
	assert.EqualError(t, err, "no run ID given: name a run (clusterrun list lists them)")
}

// A start's ID that is no folder name is named by the option that gave it, once ("run ID: run ID ..." before).
func TestStart_AnUnusableIDIsNamedByItsOption(t *testing.T) {
	s, err := spec.Parse([]byte(`{name: x, command: ["true"], tasks: {worker: {replicas: 1}}}`))
	require.NoError(t, err)
	_, err = (&Client{}).Start(context.Background(), s, StartOptions{ID: "Bad ID!"})
	assert.EqualError(t, err, `StartOptions.ID: run ID "Bad ID!" is not usable as a folder name: use letters, digits, '.', '_' and '-', `+
		`starting with a letter or digit, at most 200 characters`)
}

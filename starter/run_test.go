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
)

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

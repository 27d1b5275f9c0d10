package starter

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
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

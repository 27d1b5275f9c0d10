package starter

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// A read that no worker answered in time says so, and what to look at, whichever words gRPC gave for it.
func TestLogReader_AnUnansweredReadNamesTheWorkers(t *testing.T) {
	s := &LogReader{runID: "r1"}
	for _, cause := range []error{
		context.DeadlineExceeded,
		client.NewWorkflowUpdateServiceTimeoutOrCanceledError(serviceerror.NewDeadlineExceeded("context deadline exceeded")),
		client.NewWorkflowUpdateServiceTimeoutOrCanceledError(serviceerror.NewCanceled("stream terminated by RST_STREAM with error code: CANCEL")),
	} {
		err := s.readError(cause)
		var unreadable *UnreadableError
		assert.True(t, errors.As(err, &unreadable), "%v: a read that may be answered later", cause)
		assert.Contains(t, err.Error(), "read logs: no answer within a minute (is a clusterrun-worker polling the clusterrun task queue?)", cause)
	}
}

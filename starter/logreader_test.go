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

// sessionServer stands in for the Temporal server's side of a log session: it records the IDs of the starts
// it is asked for, fails the first start after taking it (a loaded server's answer that came too late), and
// says the session ended when asked to (a session that idled out).
type sessionServer struct {
	client.Client
	starts      []string
	lateAnswers int  // starts to take and then answer with a deadline exceeded
	ended       bool // the next update finds the session ended
}

func (s *sessionServer) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	s.starts = append(s.starts, o.ID)
	if s.lateAnswers > 0 {
		s.lateAnswers--
		return nil, serviceerror.NewDeadlineExceeded("context deadline exceeded")
	}
	return nil, nil
}

func (s *sessionServer) UpdateWorkflow(context.Context, client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	if s.ended {
		s.ended = false
		return nil, serviceerror.NewNotFound("workflow execution already completed")
	}
	return answered{}, nil
}

type answered struct{ client.WorkflowUpdateHandle }

func (answered) Get(context.Context, any) error { return nil }

// A reader keeps one session ID for its life: a start whose answer was lost is tried again under the same ID
// (which the SDK answers with the run the server took), and a session that idled out starts again under it.
// Before, each took a new ID, and CI saw a second helper workflow beside the first, left to idle out.
func TestLogReader_KeepsOneSessionIDThroughALostStartAndAnIdledOutSession(t *testing.T) {
	server := &sessionServer{lateAnswers: 1}
	s := &LogReader{c: server, runID: "r1"}
	_, err := s.Read(context.Background(), nil)
	var unreadable *UnreadableError
	assert.True(t, errors.As(err, &unreadable), "a start without an answer is a read to try again: %v", err)
	_, err = s.Read(context.Background(), nil)
	assert.NoError(t, err)
	server.ended = true
	_, err = s.Read(context.Background(), nil)
	assert.NoError(t, err)
	if assert.Len(t, server.starts, 3) {
		assert.Regexp(t, `^r1-logs-\d+$`, server.starts[0])
		assert.Equal(t, []string{server.starts[0], server.starts[0], server.starts[0]}, server.starts)
	}
}

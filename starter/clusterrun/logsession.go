package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/workflows"
)

// logSession reads log chunks through one LogSession workflow, started on the first read and closed at the
// end: a command costs one helper execution however many reads it makes.
type logSession struct {
	c     client.Client
	runID string
	id    string // the session's workflow ID, once started
	// starts counts sessions started (a session that ended on its own while its reader slept is started again).
	starts int
}

// read asks the hosts for the requested chunks.
func (s *logSession) read(ctx context.Context, reqs []workflows.ReadLogsRequest) (*workflows.ReadLogsResult, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for try := 0; ; try++ {
		if s.id == "" {
			if err := s.start(ctx); err != nil {
				return nil, err
			}
		}
		h, err := s.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID:   s.id,
			UpdateName:   workflows.UpdateReadLogs,
			Args:         []any{workflows.ReadLogsInput{RunID: s.runID, Requests: reqs}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		var res workflows.ReadLogsResult
		if err == nil {
			err = h.Get(ctx, &res)
		}
		if err == nil {
			return &res, nil
		}
		if try == 0 && sessionGone(err) {
			s.id = "" // it ended after its idle time (this reader was paused, say): start another
			continue
		}
		return nil, readError(err)
	}
}

func (s *logSession) start(ctx context.Context) error {
	id := fmt.Sprintf("%s-logs-%d", s.runID, time.Now().UnixNano())
	_, err := s.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:            id,
		TaskQueue:     workflows.TaskQueue,
		StaticSummary: "read logs of " + s.runID,
		// A session ends when its reader closes it or stops reading; the run timeout is a backstop for a
		// session that no worker runs.
		WorkflowRunTimeout: 24 * time.Hour,
	}, workflows.LogSessionWorkflowType, workflows.LogSessionInput{RunID: s.runID})
	if err != nil {
		return fmt.Errorf("start reading logs: %w", err)
	}
	s.id = id
	s.starts++
	return nil
}

// close ends the session (it would end by itself after its idle time).
func (s *logSession) close() {
	if s.id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.c.SignalWorkflow(ctx, s.id, "", workflows.SignalCloseLogs, nil)
	s.id = ""
}

// sessionGone says the session's workflow has ended.
func sessionGone(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf) || strings.Contains(err.Error(), "workflow execution already completed")
}

// tooLarge says an answer did not fit in Temporal's payload limit.
func tooLarge(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "size limit") || strings.Contains(s, "too large") || strings.Contains(s, "larger than max")
}

func readError(err error) error {
	if tooLarge(err) {
		return fmt.Errorf("read logs: the hosts' answer was too large for the Temporal server's payload limit: %w", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("read logs: no answer within a minute (is a clusterrun-worker polling the %s task queue?): %w", workflows.TaskQueue, err)
	}
	return fmt.Errorf("read logs: %w", err)
}

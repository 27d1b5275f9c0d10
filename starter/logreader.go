package starter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/workflows"
)

// LogReader reads chunks of a run's log files from the hosts that hold them, through one LogSession workflow,
// started on the first read and closed by Close: a reader costs one helper workflow execution however many
// reads it makes. A read asks for at most workflows.MaxLogRead bytes in all (each request's Max); the answer's
// chunks say where to read on (Next), what the log cap dropped, and whether a host did not answer.
type LogReader struct {
	// Patience, when set, answers each read once this long has passed even if some host has not answered yet:
	// its chunks come back Late (nothing read; ask again), and a host that died no longer holds the other
	// hosts' output back for its 5 s (workflows.ReadLogsInput.Patience). Zero waits for every host.
	Patience time.Duration

	c     client.Client
	runID string
	// id is the session's workflow ID, chosen at the first start and kept for the reader's life: a start the
	// server took but did not confirm in time (a loaded server, seen in CI) is then found again by the next try
	// rather than left running beside a second session, and a session that ended on its own while its reader
	// slept (two minutes without a read) starts again as a new run of the same ID.
	id      string
	started bool // the session at id has been started and not seen to end
}

// LogReader returns a reader of the run's logs. Close it when done.
func (r *Run) LogReader() *LogReader { return &LogReader{c: r.c.c, runID: r.ID} }

func (s *LogReader) setPatience(d time.Duration) { s.Patience = d }

// Read asks the hosts for the requested chunks, in one round trip.
func (s *LogReader) Read(ctx context.Context, reqs []workflows.ReadLogsRequest) (*workflows.ReadLogsResult, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for try := 0; ; try++ {
		if !s.started {
			if err := s.start(ctx); err != nil {
				return nil, err
			}
		}
		h, err := s.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID:   s.id,
			UpdateName:   workflows.UpdateReadLogs,
			Args:         []any{workflows.ReadLogsInput{RunID: s.runID, Requests: reqs, Patience: s.Patience}},
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
			s.started = false // it ended after its idle time (this reader was paused, say): start it again
			continue
		}
		return nil, s.readError(err)
	}
}

// start starts the session, or finds it running: the SDK answers a start of an ID that runs with that run.
func (s *LogReader) start(ctx context.Context) error {
	if s.id == "" {
		s.id = fmt.Sprintf("%s-logs-%d", s.runID, time.Now().UnixNano())
	}
	_, err := s.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:            s.id,
		TaskQueue:     workflows.TaskQueue,
		StaticSummary: "read logs of " + s.runID,
		// A session ends when its reader closes it or stops reading; the run timeout is a backstop for a
		// session that no worker runs.
		WorkflowRunTimeout:  24 * time.Hour,
		WorkflowTaskTimeout: sessionTaskTimeout,
	}, workflows.LogSessionWorkflowType, workflows.LogSessionInput{RunID: s.runID})
	if err != nil && !refused(err) {
		return &UnreadableError{ID: s.runID, Msg: "start reading logs", Err: err}
	}
	if err != nil {
		return fmt.Errorf("start reading logs: %w", err)
	}
	s.started = true
	return nil
}

// sessionTaskTimeout bounds a session's workflow task, which takes milliseconds: a worker that died while it
// held one (SIGKILLed, say) held every read of the session back for the SDK's 10 s, until the task timed out
// and another worker took it (seen in the suite: no read answered for 10 s after a host's worker was killed).
const sessionTaskTimeout = 5 * time.Second

// Close ends the reader's session (it would end by itself two minutes after the last read).
// A session whose start was not confirmed is closed too: it may run.
func (s *LogReader) Close() {
	if s.id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.c.SignalWorkflow(ctx, s.id, "", workflows.SignalCloseLogs, nil)
	s.started = false
}

// LiveHosts reads which hosts the host registry counts live (reported within workflows.LiveFor, not shutting
// down); none if it cannot be read within registryPatience.
func (s *LogReader) LiveHosts(ctx context.Context) map[string]bool {
	live := map[string]bool{}
	ctx, cancel := context.WithTimeout(ctx, registryPatience)
	defer cancel()
	v, err := s.c.QueryWorkflow(ctx, workflows.HostRegistryID, "", workflows.QueryHosts)
	if err != nil {
		return live
	}
	var hosts []workflows.HostEntry
	if err := v.Get(&hosts); err != nil {
		return live
	}
	for _, h := range hosts {
		live[h.Host] = h.Live
	}
	return live
}

// registryPatience bounds LiveHosts' read of the registry: a registry no worker answers for is no live host.
const registryPatience = 10 * time.Second

// sessionGone says the session's workflow has ended.
func sessionGone(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf) || strings.Contains(err.Error(), "workflow execution already completed")
}

// TooLarge says a read's answer did not fit in the server's payload limit: ask for less (smaller Max).
func TooLarge(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "size limit") || strings.Contains(s, "too large") || strings.Contains(s, "larger than max")
}

func (s *LogReader) readError(err error) error {
	// The SDK says an update that got no answer by the deadline in words of its own, around gRPC's: "Timeout or
	// cancellation waiting for update: stream terminated by RST_STREAM with error code: CANCEL", say.
	var unanswered *client.WorkflowUpdateServiceTimeoutOrCanceledError
	switch {
	case TooLarge(err):
		return fmt.Errorf("read logs: the hosts' answer was too large for the Temporal server's payload limit: %w", err)
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &unanswered):
		return &UnreadableError{ID: s.runID, Msg: fmt.Sprintf("read logs: no answer within a minute (is a clusterrun-worker polling the %s task queue?)", workflows.TaskQueue), Err: err}
	case refused(err):
		return fmt.Errorf("read logs: %w", err)
	}
	return &UnreadableError{ID: s.runID, Msg: "read logs", Err: err}
}

// refused says the server or the log session answered and said no (a bad request, no permission), as
// opposed to not answering for now (an outage, no worker polling).
func refused(err error) bool {
	var app *temporal.ApplicationError
	var invalid *serviceerror.InvalidArgument
	var denied *serviceerror.PermissionDenied
	var nf *serviceerror.NotFound
	return errors.As(err, &app) || errors.As(err, &invalid) || errors.As(err, &denied) || errors.As(err, &nf)
}

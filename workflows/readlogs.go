package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// LogSessionInput starts a LogSession.
type LogSessionInput struct {
	RunID string `json:"runId"`
	// Idle ends the session once no read has come for this long (its reader is gone). Default DefaultLogIdle.
	Idle time.Duration `json:"idle,omitempty"`
}

// DefaultLogIdle is how long a LogSession waits for its next read before it ends by itself.
const DefaultLogIdle = 2 * time.Minute

// MaxLogRequests bounds the requests of one read.
const MaxLogRequests = 256

// LogSession is the one helper workflow a `clusterrun logs` or `clusterrun run` command starts: each read is an
// update (UpdateReadLogs) that asks the hosts holding the files for their chunks, one ReadLogs activity per
// host on its downlink, and returns them. The reader closes it (SignalCloseLogs) or it ends after Idle without a
// read. Each read's bytes land in the history twice (activity result, update result), so it continues as new
// whenever the server suggests, and the reader's next update lands on the new run.
func LogSession(ctx workflow.Context, in LogSessionInput) error {
	idle := in.Idle
	if idle <= 0 {
		idle = DefaultLogIdle
	}
	last := workflow.Now(ctx)
	closed := false
	late := lateReads{}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateReadLogs,
		func(ctx workflow.Context, req ReadLogsInput) (*ReadLogsResult, error) {
			last = workflow.Now(ctx)
			req.RunID = in.RunID
			if req.Patience > 0 && workflow.GetVersion(ctx, "clusterrun-logs-answer-late", workflow.DefaultVersion, 1) >= 1 {
				return late.read(ctx, req), nil
			}
			return readFromHosts(ctx, req), nil
		},
		workflow.UpdateHandlerOptions{Validator: func(req ReadLogsInput) error { return checkReadLogs(in.RunID, req) }})
	if err != nil {
		return err
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		workflow.GetSignalChannel(ctx, SignalCloseLogs).Receive(ctx, nil)
		closed = true
	})
	for !closed {
		wait := idle - workflow.Now(ctx).Sub(last)
		if wait <= 0 && workflow.AllHandlersFinished(ctx) {
			break
		}
		_, _ = workflow.AwaitWithTimeout(ctx, max(wait, time.Second), func() bool {
			return closed || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
		})
		if !closed && workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
			return workflow.NewContinueAsNewError(ctx, LogSessionWorkflowType, in)
		}
	}
	return workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
}

// checkReadLogs refuses a read that is not for the session's run or asks for more than one read may carry.
func checkReadLogs(runID string, req ReadLogsInput) error {
	if req.RunID != "" && req.RunID != runID {
		return fmt.Errorf("this log session reads run %s, not %s", runID, req.RunID)
	}
	if req.Patience < 0 || req.Patience > MaxLogPatience {
		return fmt.Errorf("a read's patience is 0 to %s, not %s", MaxLogPatience, req.Patience)
	}
	if len(req.Requests) == 0 || len(req.Requests) > MaxLogRequests {
		return fmt.Errorf("a read asks for 1 to %d chunks, not %d", MaxLogRequests, len(req.Requests))
	}
	var total int64
	for _, r := range req.Requests {
		if r.Host == "" {
			return errors.New("a read request names no host")
		}
		total += min(max(r.Max, 0), MaxLogChunk)
	}
	if total > MaxLogRead {
		return fmt.Errorf("a read asks for %d bytes; at most %d fit in one answer: ask for less per chunk (max)", total, MaxLogRead)
	}
	return nil
}

// ReadLogs is the one-shot helper workflow that CLIs before LogSession start for each read. Kept so they work
// against newer workers.
func ReadLogs(ctx workflow.Context, in ReadLogsInput) (*ReadLogsResult, error) {
	return readFromHosts(ctx, in), nil
}

// readFromHosts asks each host named in the requests for its log chunks (one ReadLogs activity on each host's
// downlink, in parallel) and returns them in request order. It is how the CLI reads files that live on other
// machines without opening a port there.
func readFromHosts(ctx workflow.Context, in ReadLogsInput) *ReadLogsResult {
	hosts, byHost := byHostOf(in.Requests)
	out := &ReadLogsResult{Chunks: make([]LogChunk, len(in.Requests))}
	futures := make([]workflow.Future, len(hosts))
	for i, h := range hosts {
		futures[i] = askHost(ctx, in.RunID, h, pick(in.Requests, byHost[h]))
	}
	for i, h := range hosts {
		var res ReadLogsResult
		err := futures[i].Get(ctx, &res)
		for k, j := range byHost[h] {
			switch {
			case err != nil:
				out.Chunks[j] = unanswered(in.Requests[j], h, err)
			case k < len(res.Chunks):
				out.Chunks[j] = res.Chunks[k]
			}
		}
	}
	return out
}

// byHostOf groups requests by host: the hosts in the order first named, and each one's request indexes.
func byHostOf(reqs []ReadLogsRequest) ([]string, map[string][]int) {
	var hosts []string
	byHost := map[string][]int{}
	for i, r := range reqs {
		if _, ok := byHost[r.Host]; !ok {
			hosts = append(hosts, r.Host)
		}
		byHost[r.Host] = append(byHost[r.Host], i)
	}
	return hosts, byHost
}

func pick(reqs []ReadLogsRequest, idx []int) []ReadLogsRequest {
	out := make([]ReadLogsRequest, len(idx))
	for k, j := range idx {
		out[k] = reqs[j]
	}
	return out
}

// askHost runs one ReadLogs activity on host's downlink for reqs.
func askHost(ctx workflow.Context, runID, host string, reqs []ReadLogsRequest) workflow.Future {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: ControlQueue(host),
		// A host that does not answer soon is gone; say so rather than hold up the other hosts' logs. A read
		// is a few file reads (no waiting for output), well under a second even at MaxLogRead: one that a
		// host took and then died holding holds every other host's output back for this long.
		ScheduleToStartTimeout: 5 * time.Second,
		StartToCloseTimeout:    readLogsTimeout,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:                "read logs on " + host,
	})
	return workflow.ExecuteActivity(actx, ActivityReadLogs, ReadLogsInput{RunID: runID, Requests: reqs})
}

// unanswered is the chunk of a request whose host's read failed.
func unanswered(req ReadLogsRequest, host string, err error) LogChunk {
	return LogChunk{ReadLogsRequest: req, Next: req.Offset, Unreachable: true, Error: unansweredRead(host, err)}
}

// readLogsTimeout bounds one host's part of a read once the host took it up. It was 30 s, and a host whose
// worker was SIGKILLed holding a read held the output of a 100-task run on four hosts back for those 30 s.
const readLogsTimeout = 10 * time.Second

// unansweredRead says why a host's read failed.
func unansweredRead(host string, err error) string {
	var timeout *temporal.TimeoutError
	switch {
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
		return fmt.Sprintf("host %s did not pick up the read within 5s: no clusterrun-worker --host %s is running, or it is overloaded", host, host)
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_START_TO_CLOSE:
		return fmt.Sprintf("host %s took the read up but did not answer within %s: its clusterrun-worker stopped, or it is overloaded", host, readLogsTimeout)
	}
	return fmt.Sprintf("host %s could not answer: %v", host, err)
}

package activities

import (
	"context"
	"errors"
	"math"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"

	"github.com/clusterrun/clusterrun/workflows"
)

// followRun makes sure this host follows a run's history, for two kinds of event that every host of the run
// waits for: barrier outcomes (the workflow publishes each one as a memo upsert: one history event, however
// many hosts wait) and the stops the run decides for this host's tasks (a StopTasks for this host is in the
// history as soon as the workflow task that decided it completes, where every host reads its own at once; the
// server hands the activities out one after another, a few milliseconds apart). A host follows a run from its
// first lease (or, in a sharded run, its first barrier) until it has no task of the run left or the run is
// over; the long poll costs nothing while the history is quiet.
func (h *Host) followRun(workflowID, runID string) {
	k := workflowID + "\x00" + runID
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.followers == nil {
		h.followers = map[string]context.CancelFunc{}
	}
	if _, ok := h.followers[k]; ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.followers[k] = cancel
	go h.follow(ctx, workflowID, runID)
}

// unfollowIfIdle stops following a run once no task of it is left on this host.
func (h *Host) unfollowIfIdle(workflowID, runID string) {
	if h.reg.hasRun(workflowID, runID) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := workflowID + "\x00" + runID
	if cancel, ok := h.followers[k]; ok {
		cancel()
		delete(h.followers, k)
	}
}

// unfollowAll stops following every run, at a worker's shutdown.
func (h *Host) unfollowAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, cancel := range h.followers {
		cancel()
		delete(h.followers, k)
	}
}

// dataConverter is the client's, to decode payloads read by hand.
func (h *Host) dataConverter() converter.DataConverter {
	if h.DataConverter == nil {
		return converter.GetDefaultDataConverter()
	}
	return h.DataConverter
}

// follow reads a run's history as it grows until the run is over (or ctx ends), and acts on the barrier
// outcomes and this host's stops in it. A stop scheduled before the host began to follow is left to its
// StopTasks: only the history's new events are the run's decisions now.
func (h *Host) follow(ctx context.Context, workflowID, runID string) {
	dc := h.dataConverter()
	stopsAfter := h.historyLength(ctx, workflowID, runID)
	seen := 0      // outcomes are numbered
	var read int64 // a restarted iterator reads the history again from the start
	for ctx.Err() == nil {
		it := h.Client.GetWorkflowHistory(ctx, workflowID, runID, true, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		over := true
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				if ctx.Err() == nil {
					h.Logger.Warn("following the run's history failed; retrying", "run", workflowID, "error", err)
				}
				over = false
				break
			}
			if ev.GetEventId() <= read {
				continue
			}
			read = ev.GetEventId()
			if o, ok := barrierOutcome(dc, ev); ok && o.Seq > seen {
				seen = o.Seq
				h.applyOutcome(workflowID, runID, o)
			}
			if ev.GetEventId() <= stopsAfter {
				continue
			}
			if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED {
				h.cancelAhead(workflowID, runID)
			}
			if in, ok := h.stopFor(dc, ev); ok && in.WorkflowID == workflowID && in.RunID == runID {
				h.stopAhead(in)
			}
		}
		if over {
			return // the run is over: its history ends here
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// historyLength is how many events a run's history holds now, asked again every second while the server
// cannot answer (a worker that starts during an outage follows its runs once it is over). For a run the server
// does not know, or once ctx ends, it is as many as a history can ever hold: nothing read is taken for new.
func (h *Host) historyLength(ctx context.Context, workflowID, runID string) int64 {
	for {
		d, err := h.Client.DescribeWorkflowExecution(ctx, workflowID, runID)
		var notFound *serviceerror.NotFound
		switch {
		case err == nil:
			return d.GetWorkflowExecutionInfo().GetHistoryLength()
		case errors.As(err, &notFound):
			return math.MaxInt64
		}
		select {
		case <-ctx.Done():
			return math.MaxInt64
		case <-time.After(time.Second):
		}
	}
}

// barrierOutcome reads a barrier outcome the workflow published, if ev is one.
func barrierOutcome(dc converter.DataConverter, ev *historypb.HistoryEvent) (workflows.BarrierOutcome, bool) {
	var o workflows.BarrierOutcome
	p, ok := ev.GetWorkflowPropertiesModifiedEventAttributes().GetUpsertedMemo().GetFields()[workflows.MemoBarrier]
	if !ok || dc.FromPayload(p, &o) != nil {
		return o, false
	}
	return o, true
}

// stopFor reads the input of a StopTasks the run scheduled for this host, if ev is one.
func (h *Host) stopFor(dc converter.DataConverter, ev *historypb.HistoryEvent) (workflows.StopTasksInput, bool) {
	var in workflows.StopTasksInput
	a := ev.GetActivityTaskScheduledEventAttributes()
	if a.GetActivityType().GetName() != workflows.ActivityStopTasks || a.GetTaskQueue().GetName() != workflows.ControlQueue(h.Name) {
		return in, false
	}
	if dc.FromPayloads(a.GetInput(), &in) != nil {
		return in, false
	}
	return in, true
}

// stopAhead starts a stop the run decided for tasks of this host, as its StopTasks will (which then finds
// them stopping or stopped, waits for them and reports their ends). Only the attempts the stop names, and
// earlier ones, are stopped: a host that reads the stop late may already run the task's next attempt, which
// the run started once this stop was over. A stop that names no attempts (from a run started before they
// were sent, or one task's terminate) is left to its StopTasks.
func (h *Host) stopAhead(in workflows.StopTasksInput) {
	stop := namedAttempts(running(h.reg.find(in.WorkflowID, in.RunID, in.Tasks)), in.Attempts)
	if len(stop) == 0 {
		return
	}
	h.Logger.Info("stopping tasks, as the run's history says", "run", in.WorkflowID, "tasks", len(stop), "reason", in.Reason, "on", "StopTasks")
	h.stopEntries(stop, stopByRun, in.Reason, in.GracePeriod)
}

// cancelAhead starts the stop a cancel request means for a run's tasks on this host: every one, with its
// stopGracePeriod, as the StopTasks that the run schedules once its workflow task has seen the request will
// ask. A run that had decided to end already is stopping every task too (the first decision stands; the
// reason each task records may then be this one).
func (h *Host) cancelAhead(workflowID, runID string) {
	stop := running(h.reg.find(workflowID, runID, nil))
	if len(stop) == 0 {
		return
	}
	h.Logger.Info("stopping tasks, as the run's history says", "run", workflowID, "tasks", len(stop), "reason", workflows.ReasonCanceled, "on", "cancel request")
	byGrace := map[time.Duration][]*entry{}
	for _, e := range stop {
		byGrace[e.grace] = append(byGrace[e.grace], e)
	}
	for grace, es := range byGrace {
		h.stopEntries(es, stopByRun, workflows.ReasonCanceled, grace)
	}
}

// namedAttempts keeps the entries whose attempt is the one attempts names for their task, or an earlier one.
func namedAttempts(entries []*entry, attempts map[string]int) []*entry {
	var out []*entry
	for _, e := range entries {
		if a, ok := attempts[e.ref.Task]; ok && e.ref.Attempt <= a {
			out = append(out, e)
		}
	}
	return out
}

// running keeps the entries whose attempt has not ended.
func running(entries []*entry) []*entry {
	var out []*entry
	for _, e := range entries {
		if e.exited() == nil {
			out = append(out, e)
		}
	}
	return out
}

// applyOutcome hands a barrier outcome to the matching waiters on this host.
func (h *Host) applyOutcome(workflowID, runID string, o workflows.BarrierOutcome) {
	for _, e := range h.reg.find(workflowID, runID, nil) {
		if e.ref.Generation != o.Generation {
			continue
		}
		hit := len(o.Tasks) == 0
		for _, t := range o.Tasks {
			hit = hit || (t.Task == e.ref.Task && t.Attempt == e.ref.Attempt)
		}
		if hit {
			e.releaseBarrier(o.Barrier, o.Error)
		}
	}
}

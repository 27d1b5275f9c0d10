package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

// RunTasks holds one lease on a batch of task attempts on this host (the tasks of one run that launch here
// together, or re-attach here together): each member is served as its own RunTask would serve it, beside the
// others, under one heartbeat. Each member's end goes to the run by signal as it comes (batched with this
// host's other ends of that run), so that the run can judge or restart a task without waiting for the batch;
// the lease completes with every member's end once all have ended. An unpinned member first waits for a free
// slot of its pool (--slots), at most until its lease's startTimeout.
func (h *Host) RunTasks(ctx context.Context, in workflows.RunTasksInput) (workflows.RunTasksResult, error) {
	hb := h.startHeartbeats(ctx, true)
	defer hb.stop()
	if activity.GetInfo(ctx).WorkflowExecution.ID == in.Run.WorkflowID {
		// The run holds its leases itself (it is not sharded), so its history is small enough for every host
		// to read: its stops reach this host from there first (follow.go).
		h.followRun(in.Run.WorkflowID, in.Run.RunID)
	}
	var deadline time.Time
	if in.StartTimeout > 0 {
		deadline = activity.GetInfo(ctx).ScheduledTime.Add(in.StartTimeout)
	}
	rank := slotRank{queued: in.Queued, run: in.Run.WorkflowID}
	ends := make([]workflows.TaskExitReport, len(in.Members))
	delivered := make([]bool, len(in.Members))
	over := make(chan struct{})
	defer close(over)
	go h.stopOnCancel(in, hb, over)
	var wg sync.WaitGroup
	var running atomic.Int32 // members whose end has not come yet
	running.Store(int32(len(in.Members)))
	h.wantPorts(in)
	for i, m := range in.Members {
		mi := in.MemberInput(m)
		ml := h.memberOf(hb, mi, false)
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.serveMember(ctx, mi, ml, rank, deadline)
			h.holdUntilPollsStop(ctx)
			ends[i] = workflows.TaskExitReport{Generation: in.Generation, Lease: m.Lease, Result: res, Member: true,
				Error: workflows.LeaseErrorOf(err)}
			delivered[i] = h.reportEnd(ctx, in, ends[i], hb, endPace(in, m.Task, ends[i], running.Add(-1) == 0))
		}()
	}
	wg.Wait()
	if hb.verdictNow() == leaseGone {
		return workflows.RunTasksResult{}, activity.ErrResultPending // the server no longer knows the lease
	}
	if in.ReportExit && ctx.Err() == nil && runHasEnds(delivered, ends) && processesEnded(ends) && h.runEnded(ctx, hb) {
		return workflows.RunTasksResult{}, activity.ErrResultPending
	}
	return workflows.RunTasksResult{Ends: ends}, nil
}

// processesEnded says every member ended with its process (not let go of: a worker shutting down, a lease
// taken over), so that the run may be ending on their reports and a completion may not be needed.
func processesEnded(ends []workflows.TaskExitReport) bool {
	for _, x := range ends {
		if x.Error != nil && x.Error.Type == workflows.ErrTaskDetached {
			return false
		}
	}
	return true
}

// stopOnCancel stops every running member of a batch the server canceled, with one request to their supervisor
// (a stop request per member, each over its own socket, took a host's supervisor seconds at 2,500 members).
func (h *Host) stopOnCancel(in workflows.RunTasksInput, hb *heartbeater, over <-chan struct{}) {
	select {
	case <-hb.verdicts():
	case <-over:
		return
	}
	if hb.verdictNow() != leaseCanceled {
		return
	}
	var entries []*entry
	for _, m := range in.Members {
		if e := h.reg.lookup(in.Run.WorkflowID, in.Run.RunID, m.Task.Name, m.Attempt); e != nil {
			entries = append(entries, e)
		}
	}
	h.stopEntries(entries, stopByRun, "canceled", in.StopGracePeriod)
}

// serveMember serves one member of a batch, after a free slot for an unpinned task (members of runs started
// earlier, by rank, take the slots first).
func (h *Host) serveMember(ctx context.Context, in workflows.RunTaskInput, ml memberLease, rank slotRank, deadline time.Time) (workflows.TaskResult, error) {
	if in.Attach || in.Task.Host != "" || h.slots.max <= 0 {
		return h.serve(ctx, in, ml)
	}
	res := workflows.TaskResult{Task: in.Task.Name, Host: h.Name, Attempt: in.Attempt}
	k := memberKey{task: in.Task.Name, attempt: in.Attempt, lease: in.Lease}
	if in.Run != nil {
		k.workflowID, k.runID = in.Run.WorkflowID, in.Run.RunID
	}
	wctx, wm, refused := h.waiting.enter(ctx, k)
	if refused != "" {
		// Its run took it back before its lease came here: it starts where the run launched it instead.
		ml.hb.drop(ml.beat)
		return res, detachedError(refused, res)
	}
	defer h.waiting.done(k, wm)
	waited := false
	release, ok := h.slots.acquire(wctx, ml.hb.verdicts(), in.Task.Pool, rank, deadline, func() {
		// The run placed it here on a report of free slots that other tasks took since: its status says so.
		waited = true
		ml.hb.update(ml.beat, func(d *workflows.HeartbeatDetails) { d.Phase, d.Note = phaseSlot, h.slotWait(in.Task.Pool) }, nil)
	})
	if waited && ok {
		ml.hb.update(ml.beat, func(d *workflows.HeartbeatDetails) { d.Phase, d.Note = phaseRendezvous, "" }, nil)
	}
	if why := h.waiting.leave(k, wm, ok); why != "" {
		// Its run took it back for a host with room: a slot that came meanwhile goes to the next waiter.
		if ok {
			release()
		}
		ml.hb.drop(ml.beat)
		return res, detachedError(why, res)
	}
	if !ok {
		ml.hb.drop(ml.beat)
		switch {
		case ml.hb.verdictNow() == leaseCanceled:
			res.Stopped = true
			return res, temporal.NewCanceledError(res)
		case ml.hb.verdictNow() == leaseGone:
			return res, detachedError("the server no longer knows this lease; "+in.Task.Name+" was not started", res)
		case h.reg.closed():
			return res, detachedError(fmt.Sprintf("host worker %s is shutting down; %s was not started", h.Name, in.Task.Name), res)
		case ctx.Err() != nil:
			return res, detachedError(leaseEnded(ctx)+"; "+in.Task.Name+" was not started", res)
		}
		why := fmt.Sprintf("host %s had no free slot for it: its %d slots of pool %s (--slots) were taken by other tasks",
			h.Name, h.slots.max, in.Task.Pool)
		if h.slots.max == 1 {
			why = fmt.Sprintf("host %s had no free slot for it: its one slot of pool %s (--slots) was taken by another task", h.Name, in.Task.Pool)
		}
		return res, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, temporal.NewApplicationError(why, workflows.ErrTaskFailed))
	}
	ml.slot = release
	return h.serve(ctx, in, ml)
}

// slotWait is a member's heartbeat note while it waits on this host for a free slot of pool.
func (h *Host) slotWait(pool string) string {
	if h.slots.max == 1 {
		return fmt.Sprintf("waiting for a free slot on %s: its one slot of pool %s (--slots) is taken by another task; "+
			"it starts there once that task ends", h.Name, pool)
	}
	return fmt.Sprintf("waiting for a free slot on %s: its %d slots of pool %s (--slots) are taken by other tasks; "+
		"it starts there as one of them ends", h.Name, h.slots.max, pool)
}

// endPace is how soon a member's end goes to its run: at once when it is the batch's last (nothing more of
// the batch will come to wait for); soon when the run may act on it at once (a failure, whatever the run's
// onFailure; a clean exit that restart policy Always starts again; the chief's end, which may end the run; a
// stop's end, which a run that goes on after the stop waits for; any end of a sharded run's, which its shard
// passes on); later otherwise: a clean exit that changes nothing in the run until its last end.
func endPace(in workflows.RunTasksInput, t spec.Task, end workflows.TaskExitReport, last bool) pace {
	switch {
	case last:
		return now
	case end.Error != nil || end.Result.Stopped || t.Type == spec.TypeChief || t.Restart.Policy == spec.PolicyAlways ||
		in.ReportTo != in.Run:
		return soon
	}
	return later
}

// reportEnd sends one member's end to the run (or the shard that holds the lease) by signal, and says whether
// the run has it, or needs it no more. A lease the server canceled or gave up reports nothing: the completion
// (or the run's end) says it. An attempt the run stopped (StopTasks) has its end in the run already, from
// StopTasks' answer; if the run ends there, a report would only queue before its final workflow task, so the
// member waits a moment and asks the server first, as a lone lease does. A report that cannot be sent (the
// server is down) is tried again while the lease holds: the batch completes only when its last member ends,
// which may be much later. The end goes at pace p (endPace).
func (h *Host) reportEnd(ctx context.Context, in workflows.RunTasksInput, end workflows.TaskExitReport, hb *heartbeater, p pace) bool {
	if !in.ReportExit || hb.verdictNow() != 0 {
		return false
	}
	if end.Result.Stopped {
		select {
		case <-hb.verdicts():
			return false
		case <-time.After(reportHoldBack):
		}
		if hb.ask() != 0 {
			return false
		}
	}
	for wait := time.Second; ; wait = min(2*wait, 10*time.Second) {
		// Not the activity's context: the end of a member whose worker is stopping is worth sending still.
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := h.exits.put(sctx, in.ReportTo.WorkflowID, in.ReportTo.RunID, end, p)
		cancel()
		var notFound *serviceerror.NotFound
		switch {
		case err == nil:
			return true
		case errors.As(err, &notFound):
			return false // the run is over
		}
		h.Logger.Info("cannot report a task's end by signal yet; trying again while its lease holds", "task", end.Result.Task,
			"error", err, "retryIn", wait)
		select {
		case <-hb.verdicts():
			return false
		case <-ctx.Done():
			return false // the lease ends here: its completion, or the next lease, reports it
		case <-time.After(wait):
		}
	}
}

// runEnded waits for the run to end without this lease's completion, and says whether it did: a run that ends
// on its hosts' reports (its last tasks ended, or the chief's end stopped the rest) has no use for it. It waits
// exitHoldBack, then asks the server. A lease the run canceled meanwhile (the run is stopping: the chief ended,
// a task failed) waits reportHoldBack more, then asks afresh: a run that stops to end does so within moments,
// and a completion sent at once would only queue before its final workflow task, a write to the same history
// (on PostgreSQL, the final workflow task waited behind two such completions and then failed on the second,
// UnhandledCommand: 40 ms of a 64-task run of 0.45 s). A run that goes on after the stop gets the completion
// then; it has the ends already (the reports), so it does not wait for it.
func (h *Host) runEnded(ctx context.Context, hb *heartbeater) bool {
	select {
	case <-hb.verdicts():
		if hb.verdictNow() != leaseCanceled {
			return hb.verdictNow() == leaseGone
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(reportHoldBack):
		}
		return hb.beat(false) == leaseGone // the verdict stands (canceled): this asks afresh
	case <-ctx.Done():
		return false
	case <-time.After(exitHoldBack):
	}
	return hb.ask() == leaseGone
}

// runHasEnds says the run has every member's end without this lease's completion: its report went by signal,
// or the run stopped it, and StopTasks' answer carried its end. In a fail-fast of 64 on PostgreSQL, the four
// batches whose members the run had stopped completed while it was ending, and its final workflow task waited
// behind those writes and failed on one (UnhandledCommand). Should the answer have been lost, the run waits
// for the completion, which comes reportHoldBack later (runEnded).
func runHasEnds(delivered []bool, ends []workflows.TaskExitReport) bool {
	for i, d := range delivered {
		if !d && !ends[i].Result.Stopped {
			return false
		}
	}
	return true
}

package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/clusterrun/clusterrun/spec"
)

// ClusterRun runs one cluster: it validates the spec, launches one RunTask activity per task, holds the
// rendezvous, watches the tasks end, applies the restart, chief-exit and failure policies, and stops every
// remaining process (waiting until each is confirmed gone) before it returns.
//
// It returns the RunStatus on success. A failed or timed-out run fails the workflow with an ApplicationError of
// type RunFailed or RunTimedOut whose details hold the RunStatus; a canceled run ends canceled with the RunStatus
// as details; an invalid spec fails it with InvalidSpec and the list of problems.
func ClusterRun(ctx workflow.Context, in spec.RunSpec) (*RunStatus, error) {
	// Runs started before leases have no marker here and replay as they were written.
	leased := workflow.GetVersion(ctx, ChangeLeases, workflow.DefaultVersion, 1) == 1
	batched := leased && workflow.GetVersion(ctx, ChangeBatchLeases, workflow.DefaultVersion, 1) == 1
	envRules := workflow.GetVersion(ctx, ChangeEnvReferences, workflow.DefaultVersion, 4)
	rules := spec.Rules{EnvReferences: envRules >= 1, ContractReferences: envRules >= 2, SpecReferences: envRules >= 3,
		NullValues: envRules >= 4}
	plan, err := planRun(&in, rules)
	if err != nil {
		nameRejectedRun(ctx, in.Name)
		return nil, err
	}
	r := newRun(plan, workflow.Now(ctx))
	r.leased, r.batched = leased, batched
	info := workflow.GetInfo(ctx)
	r.ref = &RunRef{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID}
	r.queued = info.WorkflowStartTime
	if r.sharded = leased && sharded(len(r.tasks), plan.TasksPerShard); r.sharded {
		r.receiveEnds(ctx)
	}
	r.searchable = startedSearchable(ctx)
	if !r.searchable && leased {
		r.searchable = adoptSearchAttributes(ctx, plan.Name)
	}
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (RunStatus, error) { return r.snapshot(), nil }); err != nil {
		return nil, err
	}
	if plan.Items != nil {
		startItems(ctx, plan.Items)
	}
	ch := channels{
		placed:   workflow.GetSignalChannel(ctx, SignalTasksPlaced),
		exits:    workflow.GetSignalChannel(ctx, SignalTaskExits),
		arrivals: workflow.GetSignalChannel(ctx, SignalBarrierArrivals),
		stop:     workflow.GetSignalChannel(ctx, SignalStop),
	}
	if plan.MaxRunTime > 0 {
		ch.deadline = workflow.NewTimerWithOptions(ctx, plan.MaxRunTime, workflow.TimerOptions{Summary: "maxRunTime"})
		if plan.DeadlineSignal != "" {
			ch.warning = workflow.NewTimerWithOptions(ctx, plan.MaxRunTime-plan.DeadlineBefore,
				workflow.TimerOptions{Summary: "deadline warning: " + plan.DeadlineSignal})
		}
	}

	for {
		d := r.runGeneration(ctx, &ch)
		if !d.restart {
			break
		}
		backoff := plan.Gang.Backoff
		workflow.GetLogger(ctx).Info("gang restart", "reason", d.reason, "restartCount", r.restartCount+1, "backoff", backoff)
		r.resetForGeneration()
		r.reason = fmt.Sprintf("gang restart %d of %d in %s after: %s", r.restartCount, plan.Gang.MaxRestarts, backoff, d.reason)
		at := workflow.Now(ctx).Add(backoff)
		r.restartAt = &at
		r.keepSlots(ctx, backoff)
		if end := r.wait(ctx, backoff, &ch); end != nil {
			r.decision = end
			break
		}
		// The restart is no longer to come. Only the status says so: no command changes.
		r.reason = fmt.Sprintf("gang restart %d of %d after: %s", r.restartCount, plan.Gang.MaxRestarts, d.reason)
		r.forgetEnded()
	}
	ch.dropLate()
	return r.finish(ctx)
}

// startItems starts the run's ClusterItems child. The run's end terminates it; nothing waits for it.
func startItems(ctx workflow.Context, cfg *spec.Items) {
	info := workflow.GetInfo(ctx)
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:        ItemsWorkflowID(info.WorkflowExecution.ID),
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_TERMINATE,
		StaticSummary:     "work items of " + info.WorkflowExecution.ID,
	})
	workflow.ExecuteChildWorkflow(cctx, ItemsWorkflowType, ItemsInput{RunID: info.WorkflowExecution.ID, Config: *cfg})
}

// ChangeEnvReferences refuses a spec whose env value has $NAME with no braces (version 1), or a
// ${CLUSTERRUN_...} that names no variable of the process contract (version 2), and has a ${NAME} of a
// variable the spec sets read the spec's value, refusing values that refer back to themselves (version 3), and
// refuses a list element or a mapping's string value left empty, null (version 4; spec.Rules): a run started
// before any may hold one, and replays as it ran.
const ChangeEnvReferences = "clusterrun-env-references"

// planRun validates and plans the run's input, or returns the InvalidSpec failure that ends the run. The input
// is untrusted and every host worker plans it: validation bounds every size, and a panic that slipped past the
// fuzzers would still fail this one run, never retry its workflow task forever.
func planRun(in *spec.RunSpec, rules spec.Rules) (plan *spec.Plan, err error) {
	defer func() {
		if p := recover(); p != nil {
			plan, err = nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("the run spec could not be planned: %v", p), ErrInvalidSpec, nil)
		}
	}()
	plan, err = spec.NewPlanBy(in, rules)
	var invalid *spec.InvalidSpecError
	switch {
	case errors.As(err, &invalid):
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidSpec, nil, invalid.Problems)
	case err != nil:
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidSpec, nil)
	}
	return plan, nil
}

// channels are the run's inputs that outlive a generation.
type channels struct {
	placed, exits, arrivals, stop workflow.ReceiveChannel
	deadline                      workflow.Future // maxRunTime, or nil
	warning                       workflow.Future // the deadline warning, or nil
	warned                        bool
}

// dropLate takes the signals that came after the run's last decision, which nothing will read: mostly the
// starts of tasks that have ended since (a host gathers its starts for up to a second). Left in their
// channels, they made the host worker that completed the run log "Workflow has unhandled signals" (WARN),
// after 6 of 46 runs of a chief and 63 workers on PostgreSQL. Taking a signal writes nothing to the
// history, so runs from before replay as they were.
func (c *channels) dropLate() {
	for _, ch := range []workflow.ReceiveChannel{c.placed, c.exits, c.arrivals, c.stop} {
		for ch.ReceiveAsync(nil) {
		}
	}
}

// ChangeStopInBackoff marks runs whose gang-restart backoff takes stop requests: one that ends the run ends it
// there, with nothing running, where it used to wait for the next generation, which started (its tasks, never
// told of the stop, were killed when the grace ran out: tried 2026-11-29, a stop 17 s into a 20 s backoff
// took 22 s and started three processes). Asked as each backoff begins.
const ChangeStopInBackoff = "clusterrun-stop-in-backoff"

// wait sleeps through a gang-restart backoff unless the run is canceled, times out or is asked to stop
// meanwhile.
func (r *run) wait(ctx workflow.Context, d time.Duration, ch *channels) *decision {
	var end *decision
	over := false
	deadline := ch.deadline
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(workflow.NewTimerWithOptions(timerCtx, d, workflow.TimerOptions{Summary: "restart backoff"}), func(f workflow.Future) {
		over = fired(ctx, f) // canceled with the run: its Done says so next
	})
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {
		end = &decision{status: StatusCanceled, reason: ReasonCanceled}
	})
	if deadline != nil {
		sel.AddFuture(deadline, func(f workflow.Future) {
			if fired(ctx, f) {
				end = &decision{status: StatusTimedOut, reason: fmt.Sprintf("maxRunTime %s reached", r.plan.MaxRunTime)}
			}
		})
	}
	if workflow.GetVersion(ctx, ChangeStopInBackoff, workflow.DefaultVersion, 1) == 1 {
		sel.AddReceive(ch.stop, func(c workflow.ReceiveChannel, _ bool) {
			var req StopRequest
			c.Receive(ctx, &req)
			r.onStop(ctx, req)
			if r.stopReq != nil {
				d := r.stopDecision(false) // nothing runs in a backoff
				end = &d
			}
		})
	}
	for end == nil && !over {
		sel.Select(ctx)
	}
	return end
}

// fired says a timer's time came. A timer canceled with its context (the run canceled: the maxRunTime and
// deadline-warning timers are the run's own) resolves too, with an error, and on a worker it does so within the
// cancellation, ahead of the context's Done: a handler that took any resolution for the time passing ended a
// canceled run TimedOut ("maxRunTime reached"), sent its tasks the deadline warning as they were stopped, and
// took a gang restart's canceled backoff for its end, launching the next generation of a canceled run.
// Runs from before (no ChangeCanceledTimers marker, asked only when such a timer resolves canceled) keep
// that reading, so that their histories replay.
func fired(ctx workflow.Context, f workflow.Future) bool {
	if f.Get(ctx, nil) == nil {
		return true
	}
	return workflow.GetVersion(ctx, ChangeCanceledTimers, workflow.DefaultVersion, 1) == workflow.DefaultVersion
}

// ChangeCanceledTimers marks runs in which a canceled maxRunTime, deadline-warning or grace timer is not taken
// for its time passing.
const ChangeCanceledTimers = "clusterrun-canceled-timers"

// finish turns the final decision into the workflow's outcome.
func (r *run) finish(ctx workflow.Context) (*RunStatus, error) {
	d := r.decision
	now := workflow.Now(ctx)
	r.status, r.reason, r.endTime = d.status, d.reason, &now
	if r.searchable {
		// Failed and timed-out runs both end the workflow failed; the attribute keeps them apart for list.
		if err := workflow.UpsertTypedSearchAttributes(ctx, temporal.NewSearchAttributeKeyKeyword(SearchAttrState).ValueSet(d.status)); err != nil {
			workflow.GetLogger(ctx).Warn("cannot record the run's state as a search attribute", "error", err)
		}
	}
	result := r.snapshot()
	switch d.status {
	case StatusSucceeded:
		return &result, nil
	case StatusCanceled:
		return nil, temporal.NewCanceledError(result)
	case StatusTimedOut:
		return nil, temporal.NewNonRetryableApplicationError(d.reason, ErrRunTimedOut, nil, result)
	default:
		return nil, temporal.NewNonRetryableApplicationError(d.reason, ErrRunFailed, nil, result)
	}
}

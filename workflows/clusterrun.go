package workflows

import (
	"errors"
	"fmt"
	"strings"
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
	plan, err := planRun(&in)
	if err != nil {
		return nil, err
	}
	r := newRun(plan, workflow.Now(ctx))
	r.leased, r.batched = leased, batched
	info := workflow.GetInfo(ctx)
	r.ref = &RunRef{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID}
	if r.sharded = leased && sharded(len(r.tasks), plan.TasksPerShard); r.sharded {
		r.receiveEnds(ctx)
	}
	r.searchable = workflow.GetTypedSearchAttributes(ctx).ContainsKey(temporal.NewSearchAttributeKeyKeyword(SearchAttrState))
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
		r.reason = fmt.Sprintf("gang restart %d of %d after: %s", r.restartCount, plan.Gang.MaxRestarts, d.reason)
		if end := r.wait(ctx, backoff, ch.deadline); end != nil {
			r.decision = end
			break
		}
	}
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

// planRun validates and plans the run's input, or returns the InvalidSpec failure that ends the run. The input
// is untrusted and every host worker plans it: validation bounds every size, and a panic that slipped past the
// fuzzers would still fail this one run, never retry its workflow task forever.
func planRun(in *spec.RunSpec) (plan *spec.Plan, err error) {
	defer func() {
		if p := recover(); p != nil {
			plan, err = nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("the run spec could not be planned: %v", p), ErrInvalidSpec, nil)
		}
	}()
	plan, err = spec.NewPlan(in)
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

// stopAll stops every task that has not ended and waits until each is confirmed gone. Cancellation reaches a
// RunTask only on its next heartbeat, so StopTasks on each host's downlink does the fast stop; the cancellation
// keeps Temporal from retrying and covers a host worker that is gone.
func (r *run) stopAll(ctx workflow.Context, info *workflow.Info, cancelGen workflow.CancelFunc, d decision) {
	prev := r.status
	r.status = StatusStopping
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	cancelGen()

	var hosts []string
	byHost := map[string][]string{}
	for _, t := range r.tasks {
		if t.done || !t.placed {
			continue
		}
		h := t.status.Host
		if _, ok := byHost[h]; !ok {
			hosts = append(hosts, h)
		}
		byHost[h] = append(byHost[h], t.Name)
	}
	reason := d.reason
	if d.restart {
		reason = "gang restart after: " + d.reason
	}
	grace := r.plan.StopGracePeriod
	if d.kill {
		// The stop request's grace period is over: what still runs is a straggler and is killed at once.
		grace = 0
		var stragglers []string
		for _, t := range r.tasks {
			if !t.done && t.status.State == TaskRunning {
				t.status.Straggler = true
				stragglers = append(stragglers, t.Name)
			}
		}
		if len(stragglers) > 0 {
			msg := fmt.Sprintf("; killed %d straggler(s) still running after %s: %s", len(stragglers), r.plan.StopGracePeriod, strings.Join(stragglers, ", "))
			r.decision.reason += msg
			if r.plan.Stragglers == spec.StragglersFail {
				r.decision.status = StatusFailed // tf.train.Coordinator's join without ignore_live_threads
			}
		}
	}
	var stops []workflow.Future
	for _, h := range hosts {
		stops = append(stops, workflow.ExecuteActivity(
			stopOptions(dctx, r.plan, h, fmt.Sprintf("stop %d task(s) on %s", len(byHost[h]), h)),
			ActivityStopTasks,
			StopTasksInput{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID, Tasks: byHost[h],
				GracePeriod: grace, Reason: reason}))
	}
	// A task whose stop a host confirmed is over: its process group is gone. The run need not wait for that
	// RunTask's own completion, which only repeats it (and queues behind all the others on the history).
	for i, f := range stops {
		var res StopTasksResult
		if err := f.Get(dctx, &res); err != nil {
			workflow.GetLogger(ctx).Warn("StopTasks failed; its tasks end by cancellation or heartbeat timeout", "host", hosts[i], "error", err)
			continue
		}
		now := workflow.Now(dctx)
		for _, name := range res.Stopped {
			t := r.byName[name]
			if t == nil || t.done {
				continue
			}
			t.done = true
			t.status.State, t.status.EndTime = TaskStopped, &now
			for _, x := range res.Exits {
				if x.Task == name {
					code := x.ExitCode
					t.status.ExitCode, t.status.Signal, t.status.Logs = &code, x.Signal, x.Logs
				}
			}
		}
	}
	for _, t := range r.tasks {
		switch {
		case t.done:
		case t.between():
			// Waiting to restart: nothing runs.
			now := workflow.Now(dctx)
			t.done, t.backoff = true, nil
			t.status.State, t.status.Error, t.status.EndTime = TaskStopped, "", &now
		default:
			unreachable := t.status.State == TaskUnreachable
			r.endOf(dctx, t, workflow.Now(dctx))
			if t.status.State == TaskFailed && t.status.Error == "" {
				t.status.State = TaskStopped
			}
			if unreachable && t.status.State == TaskStopped {
				t.status.Error = fmt.Sprintf("not confirmed: host %s was unreachable; it stops the task when it reconnects, "+
					"and the task's supervisor stops it after %s without its host worker", t.status.Host, t.HostLossGrace+r.plan.HeartbeatTimeout)
			}
		}
	}
	r.status = prev
}

// wait sleeps through a gang-restart backoff unless the run is canceled or times out meanwhile.
func (r *run) wait(ctx workflow.Context, d time.Duration, deadline workflow.Future) *decision {
	var end *decision
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(workflow.NewTimerWithOptions(timerCtx, d, workflow.TimerOptions{Summary: "restart backoff"}), func(workflow.Future) {})
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {
		end = &decision{status: StatusCanceled, reason: "run canceled"}
	})
	if deadline != nil {
		sel.AddFuture(deadline, func(workflow.Future) {
			end = &decision{status: StatusTimedOut, reason: fmt.Sprintf("maxRunTime %s reached", r.plan.MaxRunTime)}
		})
	}
	sel.Select(ctx)
	return end
}

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

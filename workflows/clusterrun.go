package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

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
	plan, err := spec.NewPlan(&in)
	if err != nil {
		var invalid *spec.InvalidSpecError
		if errors.As(err, &invalid) {
			return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidSpec, nil, invalid.Problems)
		}
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidSpec, nil)
	}
	r := newRun(plan, workflow.Now(ctx))
	r.searchable = workflow.GetTypedSearchAttributes(ctx).ContainsKey(temporal.NewSearchAttributeKeyKeyword(SearchAttrState))
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (RunStatus, error) { return r.snapshot(), nil }); err != nil {
		return nil, err
	}
	ch := channels{
		placed:   workflow.GetSignalChannel(ctx, SignalTasksPlaced),
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

// channels are the run's inputs that outlive a generation.
type channels struct {
	placed, arrivals, stop workflow.ReceiveChannel
	deadline               workflow.Future // maxRunTime, or nil
	warning                workflow.Future // the deadline warning, or nil
	warned                 bool
}

// runGeneration launches every task, serves the rendezvous, barriers and stop requests, and waits for a
// decision, then stops whatever still runs. It returns the decision.
func (r *run) runGeneration(ctx workflow.Context, ch *channels) decision {
	genCtx, cancelGen := workflow.WithCancel(ctx)
	sel := workflow.NewSelector(ctx)
	info := workflow.GetInfo(ctx)
	// watch keeps a control activity's future in the loop; its failure is logged (the tasks it concerned end by
	// their own heartbeat timeout if their host is gone).
	watch := func(fs []workflow.Future) {
		for _, f := range fs {
			sel.AddFuture(f, func(f workflow.Future) {
				if err := f.Get(ctx, nil); err != nil && !temporal.IsCanceledError(err) {
					workflow.GetLogger(ctx).Warn("control activity failed", "error", err)
				}
			})
		}
	}

	launch := func(t *task, attemptOffset int) {
		tctx, cancel := workflow.WithCancel(genCtx)
		t.cancel = cancel
		t.future = workflow.ExecuteActivity(runTaskOptions(tctx, r.plan, t.Task, r.generation, t.starts), ActivityRunTask,
			RunTaskInput{Task: t.Task, Generation: r.generation, AttemptOffset: attemptOffset, StopGracePeriod: r.plan.StopGracePeriod})
		f := t.future
		sel.AddFuture(f, func(workflow.Future) {
			if f != t.future {
				return // an earlier launch of a task started again
			}
			r.endOf(ctx, t, workflow.Now(ctx))
			r.judge(t)
			if r.decision == nil {
				watch(r.breakBarriers(genCtx, info, t))
			}
		})
	}
	for _, t := range r.tasks {
		launch(t, r.generation)
	}
	sel.AddReceive(workflow.GetSignalChannel(ctx, SignalTerminateTask), func(c workflow.ReceiveChannel, _ bool) {
		var req TaskControl
		c.Receive(ctx, &req)
		r.signals++
		watch(r.onTerminate(genCtx, info, req))
	})
	sel.AddReceive(workflow.GetSignalChannel(ctx, SignalStartTask), func(c workflow.ReceiveChannel, _ bool) {
		var req TaskControl
		c.Receive(ctx, &req)
		r.signals++
		if t, offset := r.onStart(ctx, req); t != nil {
			launch(t, offset)
		}
	})
	sel.AddReceive(ch.placed, func(c workflow.ReceiveChannel, _ bool) {
		var sig PlacedSignal
		c.Receive(ctx, &sig)
		r.signals++
		watch(r.onPlaced(genCtx, info, sig))
	})
	sel.AddReceive(ch.arrivals, func(c workflow.ReceiveChannel, _ bool) {
		var sig BarrierArrivals
		c.Receive(ctx, &sig)
		r.signals++
		watch(r.onArrivals(genCtx, info, sig))
	})
	sel.AddReceive(ch.stop, func(c workflow.ReceiveChannel, _ bool) {
		var req StopRequest
		c.Receive(ctx, &req)
		r.signals++
		notify, grace := r.onStop(genCtx, info, req)
		watch(notify)
		if grace != nil {
			sel.AddFuture(grace, func(workflow.Future) { r.decide(r.stopDecision(true)) })
		}
	})
	if ch.deadline != nil {
		sel.AddFuture(ch.deadline, func(workflow.Future) {
			r.decide(decision{status: StatusTimedOut, reason: fmt.Sprintf("maxRunTime %s reached", r.plan.MaxRunTime)})
		})
	}
	if ch.warning != nil && !ch.warned {
		sel.AddFuture(ch.warning, func(workflow.Future) {
			ch.warned = true
			watch(r.deadlineWarning(genCtx, info))
		})
	}
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {
		r.decide(decision{status: StatusCanceled, reason: "run canceled"})
	})

	for r.decision == nil {
		sel.Select(ctx)
	}
	d := *r.decision
	r.stopAll(ctx, info, cancelGen, d)
	return *r.decision
}

// onPlaced records where tasks landed and releases them once the rendezvous is complete: every task at once the
// first time, and later on (tasks restarted by retry) those of this signal. It returns the Release futures.
func (r *run) onPlaced(ctx workflow.Context, info *workflow.Info, sig PlacedSignal) []workflow.Future {
	var late []*task
	for _, p := range sig.Placements {
		t := r.byName[p.Task]
		if t == nil {
			workflow.GetLogger(ctx).Warn("ignoring a placement for a task this run does not have", "task", p.Task, "host", p.Host)
			continue
		}
		if p.Generation != r.generation || t.done || r.decision != nil || r.stopReq != nil {
			continue // stale: an earlier generation, an unknown name, or a task already over
		}
		t.placed = true
		st := &t.status
		st.State, st.Host, st.Addr, st.Port = TaskPlaced, p.Host, p.Addr, p.Port
		st.Attempt = p.Attempt
		st.ExitCode, st.Signal, st.Error, st.EndTime = nil, "", "", nil
		if r.released {
			late = append(late, t)
		}
	}
	if !r.released && r.allPlaced() {
		r.released = true
		for _, t := range r.tasks {
			if t.placed && !t.done {
				late = append(late, t)
			}
		}
	}
	return r.releaseByHost(ctx, info, late)
}

func (r *run) releaseByHost(ctx workflow.Context, info *workflow.Info, tasks []*task) []workflow.Future {
	var hosts []string
	byHost := map[string][]*task{}
	for _, t := range tasks {
		h := t.status.Host
		if _, ok := byHost[h]; !ok {
			hosts = append(hosts, h)
		}
		byHost[h] = append(byHost[h], t)
	}
	var futures []workflow.Future
	for _, h := range hosts {
		futures = append(futures, r.release(ctx, info, byHost[h]))
	}
	return futures
}

// release sends the cluster map to waiting attempts on one host (all given tasks share that host).
func (r *run) release(ctx workflow.Context, info *workflow.Info, tasks []*task) workflow.Future {
	now := workflow.Now(ctx)
	in := ReleaseInput{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID, Cluster: r.clusterMap()}
	for _, t := range tasks {
		t.status.State = TaskRunning
		t.status.StartTime = &now
		in.Tasks = append(in.Tasks, TaskAttempt{Task: t.Name, Attempt: t.status.Attempt})
	}
	host := tasks[0].status.Host
	return workflow.ExecuteActivity(controlOptions(ctx, host, 30*time.Second, fmt.Sprintf("release %d task(s) on %s", len(tasks), host)),
		ActivityRelease, in)
}

func (r *run) clusterMap() ClusterMap {
	m := ClusterMap{Generation: r.generation}
	for _, t := range r.tasks {
		m.Endpoints = append(m.Endpoints, Endpoint{Task: t.Name, Host: t.status.Host, Addr: t.status.Addr, Port: t.status.Port})
	}
	return m
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
		}
	}
	var stops []workflow.Future
	for _, h := range hosts {
		stops = append(stops, workflow.ExecuteActivity(
			controlOptions(dctx, h, r.plan.StopGracePeriod+30*time.Second, fmt.Sprintf("stop %d task(s) on %s", len(byHost[h]), h)),
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
					t.status.ExitCode, t.status.Signal = &code, x.Signal
				}
			}
		}
	}
	for _, t := range r.tasks {
		if !t.done {
			r.endOf(dctx, t, workflow.Now(dctx))
			if t.status.State == TaskFailed && t.status.Error == "" {
				t.status.State = TaskStopped
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

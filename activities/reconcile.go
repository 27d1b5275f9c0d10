package activities

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/clusterrun/clusterrun/activities/proc"
	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/workflows"
)

// reconcileLoop checks, every ReconcileEvery and whenever contact with the server returns, each attempt on
// this host that no lease holds against its workflow: one the workflow no longer counts as this host's (the
// run ended, the task moved on to a newer attempt, or the attempt was settled) is stopped if it still runs,
// and forgotten. That is how a host that was cut off, and whose task was started elsewhere meanwhile, kills
// its own copy when it returns.
func (h *Host) reconcileLoop(ctx context.Context) {
	every := h.ReconcileEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-h.kick:
		}
		h.continueStopped()
		if h.contact.ok() {
			h.reconcile(ctx)
		}
	}
}

// continueStopped continues the supervisors of this host's running attempts that are stopped (SIGSTOP). Their
// tasks run on, but a stopped supervisor supervises nothing: their ends go unseen (they show Running, as
// zombies) and their stops unanswered (unanswered continues it then). No one stops a supervisor to pause its
// tasks, which are processes of their own; one held by a debugger ('t') is left to it. One /proc read per
// supervisor each ReconcileEvery.
func (h *Host) continueStopped() {
	seen := map[int]bool{}
	for _, e := range h.reg.all() {
		st := e.process()
		if st == nil || e.exited() != nil || st.ShimPID <= 0 || seen[st.ShimPID] || st.BootID != shim.BootID() {
			continue
		}
		seen[st.ShimPID] = true
		if proc.State(st.ShimPID) == 'T' {
			h.Logger.Warn("a task supervisor is stopped (SIGSTOP): continuing it, or its tasks' ends go unseen", "run", e.ref.WorkflowID,
				"supervisor", st.ShimPID)
			h.silent.Lock()
			h.continueSupervisor(st.ShimPID)
			h.silent.Unlock()
		}
	}
}

// reconcileNow asks the reconciler to run at once.
func (h *Host) reconcileNow() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// reconcile asks each run that has unheld attempts here about them, and retires those it is done with.
func (h *Host) reconcile(ctx context.Context) {
	for e, why := range h.doneWith(ctx, func(e *entry) bool { return e.process() != nil || e.exited() != nil }, true) {
		go h.retire(e, why)
	}
}

// retireEnded forgets, as the worker shuts down, the ended attempts of runs that have ended, which the
// reconciler would have retired within ReconcileEvery: their records and sockets would otherwise wait in the
// runtime folder for the host's next worker (until the machine's next boot, for a host name that never starts
// again). It asks for at most until deadline; a server that cannot answer leaves them to the next worker, and
// so do runs still running (their status is a query, which the worker shutting down may be the one to answer).
func (h *Host) retireEnded(deadline time.Time) {
	if !h.contact.ok() {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for e, why := range h.doneWith(ctx, func(e *entry) bool { return e.exited() != nil }, false) {
		h.retire(e, why)
	}
}

// doneWith asks each run with unheld attempts here that pick chooses which of them it no longer counts as this
// host's, and says why for each (of a run still running, only when queryRunning). A run that cannot be asked
// now keeps its attempts.
func (h *Host) doneWith(ctx context.Context, pick func(e *entry) bool, queryRunning bool) map[*entry]string {
	type runRef struct{ workflowID, runID string }
	var runs []runRef
	byRun := map[runRef][]*entry{}
	for _, e := range h.reg.all() {
		if held, _ := e.held(); held || !pick(e) {
			continue // a lease holds it, or its launch is under way
		}
		r := runRef{e.ref.WorkflowID, e.ref.RunID}
		if _, ok := byRun[r]; !ok {
			runs = append(runs, r)
		}
		byRun[r] = append(byRun[r], e)
	}
	out := map[*entry]string{}
	for _, r := range runs {
		verdicts, err := h.ownership(ctx, r.workflowID, r.runID, byRun[r], queryRunning)
		if err != nil {
			h.Logger.Debug("cannot check the run's tasks now; trying again later", "run", r.workflowID, "error", err)
			continue
		}
		maps.Copy(out, verdicts)
	}
	return out
}

// ownership returns, for each attempt of es that its run no longer counts as this host's, why: all of them when
// the run has ended; for a run still running, what its status says (queryRunning), or none.
func (h *Host) ownership(ctx context.Context, workflowID, runID string, es []*entry, queryRunning bool) (map[*entry]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	all := func(why string) map[*entry]string {
		out := map[*entry]string{}
		for _, e := range es {
			out[e] = why
		}
		return out
	}
	desc, err := h.Client.DescribeWorkflowExecution(ctx, workflowID, runID)
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return all(fmt.Sprintf("run %s no longer exists", workflowID)), nil
	case err != nil:
		return nil, err
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return all(fmt.Sprintf("run %s has ended (%s)", workflowID, st)), nil
	}
	if !queryRunning {
		return nil, nil
	}
	v, err := h.Client.QueryWorkflow(ctx, workflowID, runID, workflows.QueryStatus)
	if err != nil {
		return nil, err
	}
	var st workflows.RunStatus
	if err := v.Get(&st); err != nil {
		return nil, err
	}
	out := map[*entry]string{}
	for _, e := range es {
		t := st.Task(e.ref.Task)
		switch {
		case t == nil:
			out[e] = fmt.Sprintf("run %s has no task %s", workflowID, e.ref.Task)
		case t.Attempt != e.ref.Attempt:
			out[e] = fmt.Sprintf("run %s moved %s on to attempt %d", workflowID, e.ref.Task, t.Attempt)
		case settled(t.State):
			out[e] = fmt.Sprintf("run %s settled %s attempt %d as %s", workflowID, e.ref.Task, e.ref.Attempt, t.State)
		}
	}
	return out, nil
}

// settled says a task state is final for its attempt.
func settled(state string) bool {
	switch state {
	case workflows.TaskSucceeded, workflows.TaskFailed, workflows.TaskStopped, workflows.TaskTerminated:
		return true
	}
	return false
}

package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/clusterrun/clusterrun/spec"
)

// Restarts within the history's limits. Every restart writes a lease's events and a backoff's timer to the
// run's history, which Temporal ends at 51,200 events (or 50 MB): the server then terminates the run, and its
// tasks are left to their hosts' reconcilers. A restart budget of maxRestarts per task (up to 1,000) can write
// more than that: 64 tasks restarting 100 times each did. So past the history budget that barriers keep too, a
// restart that is due is not made: the task ends failed, its error saying why, and the run's policies act on
// it, with room left in the history to stop every task and end the run cleanly.

// ChangeRestartHistoryBudget marks runs that stop restarting past the history budget; asked only when the
// budget is first found spent, so other runs write nothing.
const ChangeRestartHistoryBudget = "clusterrun-restart-history-budget"

// checkRestartBudget records, once the run's history is past the budget, that it restarts nothing more
// (r.noRestarts says why).
func (r *run) checkRestartBudget(ctx workflow.Context) {
	if r.noRestarts != "" {
		return
	}
	info := workflow.GetInfo(ctx)
	why := ""
	if n := info.GetCurrentHistoryLength(); n > BarrierHistoryBudget {
		why = fmt.Sprintf("the run's history holds %d events, past clusterrun's budget of %d for restarts (Temporal ends a run at 51,200)",
			n, BarrierHistoryBudget)
	} else if size := info.GetCurrentHistorySize(); size > BarrierHistoryBytesBudget {
		why = fmt.Sprintf("the run's history holds %d MB, past clusterrun's budget of %d MB for restarts (Temporal ends a run at 50 MB)",
			size>>20, BarrierHistoryBytesBudget>>20)
	}
	if why != "" && workflow.GetVersion(ctx, ChangeRestartHistoryBudget, workflow.DefaultVersion, 1) == 1 {
		workflow.GetLogger(ctx).Warn("restarting no more tasks", "why", why)
		r.noRestarts = why
	}
}

// restartRefused notes on a task whose restart was due that it is not made, and why.
func (r *run) restartRefused(t *task) {
	if t.status.Error == "" {
		t.status.Error = "not restarted: " + r.noRestarts
		return
	}
	t.status.Error += "; not restarted: " + r.noRestarts
}

// noteNoRestart says on a task that failed for good under a policy that restarts failures why this failure was
// not restarted: its budget is used up, or policy ExitCode takes the code for the program's own verdict. A
// policy of Never, and ends no policy judges (a stop, a terminate, a start that failed), say nothing.
func (r *run) noteNoRestart(t *task) {
	st := &t.status
	if st.State != TaskFailed || t.terminated || t.startFailed || r.decision != nil || r.stopReq != nil || r.plan.Scope == spec.ScopeAll {
		return
	}
	if why := whyNoRestart(t.Restart, t.restarts, t.restartCode(), "its"); why != "" {
		st.Error = joinNote(st.Error, "not restarted: "+why)
	}
}

// whyNoRestart says why policy p, with used of its restarts made, does not restart an end with this exit code
// (-1: a lost host); whose names the budget's holder ("its", "the run's"). Empty when p restarts nothing.
func whyNoRestart(p spec.Restart, used, code int, whose string) string {
	switch {
	case p.Policy == spec.PolicyNever:
		return ""
	case !p.Restartable(code) && p.Policy != spec.PolicyExitCode:
		return ""
	case !p.Restartable(code):
		return fmt.Sprintf("policy %s takes exit code %d for the program's own verdict (it restarts exit codes 128-255 and lost hosts)", p.Policy, code)
	case used < p.MaxRestarts:
		return ""
	case p.MaxRestarts == 0:
		return "maxRestarts is 0"
	case p.MaxRestarts == 1:
		return whose + " 1 restart (maxRestarts: 1) is used up"
	}
	return fmt.Sprintf("%s %d restarts (maxRestarts: %d) are used up", whose, p.MaxRestarts, p.MaxRestarts)
}

// restartCode is the exit code restart policies judge t's last end by: -1, a lost host's, for an end its host
// brought about (hostStopped), else the process's own.
func (t *task) restartCode() int {
	if t.hostStopped {
		return -1
	}
	return exitCodeOf(t.status)
}

func exitCodeOf(st TaskStatus) int {
	if st.ExitCode == nil {
		return -1
	}
	return *st.ExitCode
}

func joinNote(text, note string) string {
	if text == "" {
		return note
	}
	return text + "; " + note
}

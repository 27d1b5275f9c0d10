package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"
)

// Taking waiting tasks back from a full host. A batch some of whose tasks started on their host holds the others
// there while they wait for a slot: the lease cannot be canceled without stopping the started ones. So the run
// asks the host for the waiting ones back (WithdrawTasks on its downlink). The host gives up those that still
// wait, under the same lock their slots are taken under: each ends its lease unstarted, by report, and
// leaseEnded launches it elsewhere (movedOn); one that got its slot first runs where it is. A lease none of
// whose tasks started is asked for the same way, so that a task whose slot freed just then is not started and
// stopped; only a lease the host has not taken (it holds none of its tasks) is canceled, as before. A host from
// before this answers with an error: a lease of its that has not started is canceled, and the tasks of one that
// has wait there.

// ChangeWithdrawWaiting marks runs that take the waiting tasks of a half-started lease back from a full host;
// it is asked only when such a withdrawal is due, so other runs write no marker.
const ChangeWithdrawWaiting = "clusterrun-withdraw-waiting"

// withdrawal is the waiting tasks of a lease on host that the run takes back from it: why and moved are their
// status's note while it is under way and once it is done, reason is what the host says of each. cancel, set
// for a lease none of whose tasks started, cancels it when its host holds none of them (it has not taken the
// lease) or cannot say (a host from before WithdrawTasks).
type withdrawal struct {
	host       string
	tasks      []*task
	why, moved string
	reason     string
	cancel     workflow.CancelFunc
}

// withdrawTimeout bounds a WithdrawTasks: a host that does not answer by then keeps its tasks.
const withdrawTimeout = 10 * time.Second

// withdraw marks w's tasks moving and asks their host for them back; the answer's handler (withdrawAnswered)
// takes the mark off those the host kept.
func (g *generation) withdraw(w withdrawal) {
	if workflow.GetVersion(g.ctx, ChangeWithdrawWaiting, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		if w.cancel != nil { // runs from before cancel a whole lease at once
			for _, t := range w.tasks {
				t.markMoving(w.host, w.why, w.moved)
			}
			w.cancel()
		}
		return
	}
	r := g.r
	in := WithdrawTasksInput{WorkflowID: r.ref.WorkflowID, RunID: r.ref.RunID, Reason: w.reason}
	prev := make([]TaskStatus, len(w.tasks))
	for i, t := range w.tasks {
		in.Members = append(in.Members, LeaseAttempt{Task: t.Name, Attempt: t.attempt, Lease: t.lease})
		prev[i] = t.status
		t.markMoving(w.host, w.why, w.moved)
	}
	actx := controlOptionsWithin(g.genCtx, w.host, withdrawTimeout, withdrawTimeout,
		fmt.Sprintf("take back %d tasks waiting for a slot on %s", len(w.tasks), w.host))
	f := workflow.ExecuteActivity(actx, ActivityWithdrawTasks, in)
	g.sel.AddFuture(f, func(f workflow.Future) {
		var res WithdrawTasksResult
		err := f.Get(g.ctx, &res)
		if err != nil {
			workflow.GetLogger(g.ctx).Warn("a host did not say whether it gave back the tasks waiting for its slots",
				"host", w.host, "error", err)
		}
		if w.cancel != nil && (err != nil || len(res.Unknown) == len(in.Members)) {
			r.todo.cancel = append(r.todo.cancel, w.cancel) // its host has not taken the lease, or cannot say
			return
		}
		r.withdrawAnswered(in, prev, w.tasks, res)
	})
}

// withdrawAnswered takes the moving mark off the tasks of in that their host kept (they got a slot first, or
// the host could not say), as their status was before; those it gave up are launched again by their reports.
func (r *run) withdrawAnswered(in WithdrawTasksInput, prev []TaskStatus, ts []*task, res WithdrawTasksResult) {
	for i, t := range ts {
		m := in.Members[i]
		if slices.Contains(res.Withdrawn, t.Name) || !t.moving || t.attempt != m.Attempt || t.lease != m.Lease {
			continue
		}
		t.moving = false
		if strings.HasPrefix(t.status.Error, movingNote(t.Name)) {
			t.status.Error = prev[i].Error // what it said while it waited, unless its start said more since
		}
		t.status.Moved = prev[i].Moved
	}
}

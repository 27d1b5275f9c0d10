package activities

import (
	"context"
	"fmt"
	"sync"

	"github.com/clusterrun/clusterrun/workflows"
)

// Withdrawing waiting members. A batch member whose host has no free slot waits here (serveMember); its run,
// seeing other hosts of the pool with room, takes it back (WithdrawTasks) and launches it there. The host
// decides under one lock whether the member still waits: a member it gives up never starts here, and one that
// got its slot first is not given up, so a task is never started on two hosts.

// memberKey names one lease of a task attempt of a run.
type memberKey struct {
	workflowID, runID, task string
	attempt, lease          int
}

// waitingMember is one member waiting for a slot: cancel ends its wait, and reason, once set, says it was
// withdrawn and why.
type waitingMember struct {
	cancel context.CancelFunc
	reason string
}

// waitingMembers are this host's members waiting for a slot.
type waitingMembers struct {
	mu sync.Mutex
	m  map[memberKey]*waitingMember
}

// enter records that the member k waits, and returns the context its wait uses: done when ctx is, or when the
// member is withdrawn.
func (w *waitingMembers) enter(ctx context.Context, k memberKey) (context.Context, *waitingMember) {
	wctx, cancel := context.WithCancel(ctx)
	wm := &waitingMember{cancel: cancel}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[memberKey]*waitingMember{}
	}
	w.m[k] = wm
	return wctx, wm
}

// leave ends the wait of member k, and returns why it was withdrawn ("" when it was not: it may start).
func (w *waitingMembers) leave(k memberKey, wm *waitingMember) (withdrawn string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m[k] == wm {
		delete(w.m, k)
	}
	wm.cancel()
	return wm.reason
}

// withdraw gives up member k if it still waits, and says whether it did.
func (w *waitingMembers) withdraw(k memberKey, reason string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	wm := w.m[k]
	if wm == nil {
		return false
	}
	delete(w.m, k)
	wm.reason = reason
	wm.cancel()
	return true
}

// WithdrawTasks gives up the named members of a run that still wait here for a slot: each ends its lease
// unstarted (its report says why), and the run launches it on another host. It names those it gave up, and
// those it does not hold at all (a lease its workers have not taken).
func (h *Host) WithdrawTasks(_ context.Context, in workflows.WithdrawTasksInput) (workflows.WithdrawTasksResult, error) {
	var out workflows.WithdrawTasksResult
	for _, m := range in.Members {
		k := memberKey{workflowID: in.WorkflowID, runID: in.RunID, task: m.Task, attempt: m.Attempt, lease: m.Lease}
		why := fmt.Sprintf("host %s gave %s back before it started: %s", h.Name, m.Task, in.Reason)
		switch {
		case h.waiting.withdraw(k, why):
			out.Withdrawn = append(out.Withdrawn, m.Task)
		case h.reg.lookup(in.WorkflowID, in.RunID, m.Task, m.Attempt) == nil:
			out.Unknown = append(out.Unknown, m.Task) // its lease not taken yet, or the attempt is over here
		}
	}
	h.Logger.Info("gave back tasks waiting for a slot, for their run to launch elsewhere", "workflowID", in.WorkflowID,
		"asked", len(in.Members), "withdrawn", out.Withdrawn)
	return out, nil
}

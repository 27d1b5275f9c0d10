package activities

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/clusterrun/clusterrun/workflows"
)

// Withdrawing waiting members. A batch member whose host has no free slot waits here (serveMember); its run,
// seeing other hosts of the pool with room, takes it back (WithdrawTasks) and launches it there. The host
// decides under one lock whether the member still waits: a member it gives up never starts here, and one that
// got its slot first is not given up, so a task is never started on two hosts. A member the host does not hold
// when asked (its lease is on its way, or was never taken) is refused for good: if its lease arrives after the
// answer, in the moment before the run's cancel reaches it, it ends unstarted rather than start and be stopped.

// memberKey names one lease of a task attempt of a run.
type memberKey struct {
	workflowID, runID, task string
	attempt, lease          int
}

// waitingMember is one member from its wait for a slot to the end of its serving: cancel ends the wait, reason,
// once set, says it was withdrawn and why, and started says it got its slot (it may not be withdrawn then).
type waitingMember struct {
	cancel  context.CancelFunc
	reason  string
	started bool
}

// refusal is a member given up before its lease arrived: why it was, and when (refusals are forgotten after
// refusalKept, by when a lease dispatched before its cancel has long arrived).
type refusal struct {
	why string
	at  time.Time
}

const refusalKept = 10 * time.Minute

// waitingMembers are this host's members waiting for a slot or started after one, and the members refused
// before they came.
type waitingMembers struct {
	mu      sync.Mutex
	m       map[memberKey]*waitingMember
	refused map[memberKey]refusal
}

// enter records that the member k waits, and returns the context its wait uses: done when ctx is, or when the
// member is withdrawn. A member refused before it came does not enter: refused says why.
func (w *waitingMembers) enter(ctx context.Context, k memberKey) (wctx context.Context, wm *waitingMember, refused string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.refused[k]; ok {
		delete(w.refused, k)
		return nil, nil, r.why
	}
	wctx, cancel := context.WithCancel(ctx)
	wm = &waitingMember{cancel: cancel}
	if w.m == nil {
		w.m = map[memberKey]*waitingMember{}
	}
	w.m[k] = wm
	return wctx, wm, ""
}

// leave ends the wait of member k, and returns why it was withdrawn ("" when it was not). A member that got its
// slot (started) stays known until done, so that it is not taken for one whose lease never came.
func (w *waitingMembers) leave(k memberKey, wm *waitingMember, started bool) (withdrawn string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wm.cancel()
	if wm.reason == "" && started {
		wm.started = true
		return ""
	}
	if w.m[k] == wm {
		delete(w.m, k)
	}
	return wm.reason
}

// done forgets member k once it is served.
func (w *waitingMembers) done(k memberKey, wm *waitingMember) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m[k] == wm {
		delete(w.m, k)
	}
}

// withdrawal is what a host did with one member its run asked back.
type withdrawal int

const (
	memberKept      withdrawal = iota // it got its slot first, or runs here
	memberWithdrawn                   // it waited, and ends unstarted
	memberRefused                     // it was not here: if its lease comes, it ends unstarted
)

// withdraw gives up member k if it still waits, refuses it if it is not here (held says whether the host runs
// it otherwise, as a pinned or taken-up task), and says which.
func (w *waitingMembers) withdraw(k memberKey, why string, held func() bool, now time.Time) withdrawal {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch wm := w.m[k]; {
	case wm != nil && wm.started:
		return memberKept
	case wm != nil:
		delete(w.m, k)
		wm.reason = why
		wm.cancel()
		return memberWithdrawn
	case held():
		return memberKept
	}
	for rk, r := range w.refused {
		if now.Sub(r.at) > refusalKept {
			delete(w.refused, rk)
		}
	}
	if w.refused == nil {
		w.refused = map[memberKey]refusal{}
	}
	w.refused[k] = refusal{why: why, at: now}
	return memberRefused
}

// WithdrawTasks gives up the named members of a run that still wait here for a slot: each ends its lease
// unstarted (its report says why), and the run launches it on another host. It names those it gave up, and
// those it does not hold at all (a lease its workers have not taken), which it refuses should their lease
// still come.
func (h *Host) WithdrawTasks(_ context.Context, in workflows.WithdrawTasksInput) (workflows.WithdrawTasksResult, error) {
	var out workflows.WithdrawTasksResult
	now := time.Now()
	for _, m := range in.Members {
		k := memberKey{workflowID: in.WorkflowID, runID: in.RunID, task: m.Task, attempt: m.Attempt, lease: m.Lease}
		why := fmt.Sprintf("host %s gave %s back before it started: %s", h.Name, m.Task, in.Reason)
		held := func() bool { return h.reg.lookup(in.WorkflowID, in.RunID, m.Task, m.Attempt) != nil }
		switch h.waiting.withdraw(k, why, held, now) {
		case memberWithdrawn:
			out.Withdrawn = append(out.Withdrawn, m.Task)
		case memberRefused:
			out.Unknown = append(out.Unknown, m.Task) // its lease not taken yet, or the attempt is over here
		}
	}
	h.Logger.Info("gave back tasks waiting for a slot, for their run to launch elsewhere", "workflowID", in.WorkflowID,
		"asked", len(in.Members), "withdrawn", out.Withdrawn, "refused", out.Unknown)
	return out, nil
}

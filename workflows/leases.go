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

// Leases. A RunTask activity is a lease: "host H is responsible for attempt k of task T". The process lives in
// its host's supervisor, not in the activity, so a lease can end while the process runs on: the host lost
// contact with the server, or its worker is being restarted. The workflow then asks that very host to take the
// attempt up again with a new lease (a re-attach), and only when the host stays silent for hostLossGrace, or
// has no record of the attempt, does the attempt count as lost. Restarts are decided here too, never by
// Temporal's retries, so no retry can start a second copy of a task on another host while the first runs.

// MaxLeases bounds the leases one attempt may use before it counts as lost: a host that keeps losing contact
// would otherwise hold a task forever without it making progress.
const MaxLeases = 100

// startLease starts the RunTask activity of one lease on t and returns its future.
func (r *run) startLease(ctx workflow.Context, t *task, o launchOrder) workflow.Future {
	if !r.leased {
		in := RunTaskInput{Task: t.Task, Generation: r.generation, StopGracePeriod: r.plan.StopGracePeriod, AttemptOffset: o.offset}
		return workflow.ExecuteActivity(runTaskOptions(ctx, r.plan, t.Task, r.generation, t.starts), ActivityRunTask, in)
	}
	l := r.nextLease(t, o)
	return workflow.ExecuteActivity(withLease(ctx, l.Options), ActivityRunTask, l.Input)
}

// keepPlace adds where the status's attempt ran, if it started, to the earlier attempts (their logs are there),
// keeping the last MaxEarlierAttempts. why says what started the next attempt.
func keepPlace(st *TaskStatus, why string) {
	if st.Attempt == 0 || st.Host == "" || st.StartTime == nil {
		return
	}
	st.Earlier = append(st.Earlier, AttemptPlace{Attempt: st.Attempt, Host: st.Host, Restart: why})
	if len(st.Earlier) > MaxEarlierAttempts {
		st.Earlier = st.Earlier[len(st.Earlier)-MaxEarlierAttempts:]
	}
}

// nextLease records the start of one lease on t and returns what the lease's RunTask is given.
func (r *run) nextLease(t *task, o launchOrder) ShardLease {
	in := RunTaskInput{Task: t.Task, Generation: r.generation, StopGracePeriod: r.plan.StopGracePeriod, Run: r.ref,
		ReportExit: r.reportsExit(t)}
	t.attached = o.how == reattach
	switch o.how {
	case newAttempt:
		st := &t.status
		why := ""
		if st.State == TaskPending {
			why = st.Error // queueRestart's "restart i of n in d after: why"
		}
		keepPlace(st, why)
		t.attempt++
		t.lostHost, t.movedFrom = false, ""
		t.lease = 1
		t.placed, t.released, t.mapSent = false, false, false
		st.State, st.Attempt, st.Error = TaskPending, t.attempt, t.waitNote
		st.ExitCode, st.Signal, st.Result, st.StartTime, st.EndTime, st.Logs, st.Moved = nil, "", nil, nil, nil, nil, ""
		st.OutOfMemory = false
		r.startPrePlaced(t)
	case sameAttempt:
		t.lease++
		t.placed, t.released, t.mapSent, t.preplaced = false, false, false, false
		if t.waitNote != "" {
			t.status.Error = t.waitNote // where it waits now says more than why it left
		}
	case reattach:
		t.preplaced = false
		t.lease++
		in.Attach, in.Host = true, t.status.Host
	}
	in.Attempt, in.Lease = t.attempt, t.lease
	if host := t.Host; o.how != reattach {
		if host == "" {
			host = t.placedHost
		}
		in.Port = t.ports[host]
	}
	opts := leaseOptions(r.plan, t, o.how == reattach)
	opts.ScheduleToStart -= o.heldFor // the time held counts against startTimeout
	return ShardLease{Options: opts, Input: in}
}

// ExitSignalBudget bounds the signals a run may have received for its new leases to report exits by signal
// (RunTaskInput.ReportExit): each lease sends at most one, so with at most 1,000 leases of an unsharded run in
// flight, the run stays far below Temporal's 10,000 signals and leaves barriers most of BarrierSignalBudget.
const ExitSignalBudget = 5000

// reportsExit says whether a new lease on t reports its process's end by signal: to the run, while its
// signals leave room for one per task; in a sharded run with batched leases, to t's shard, which passes the
// ends on together (mayReport).
func (r *run) reportsExit(t *task) bool {
	if r.sharded {
		return r.batched && r.shards != nil && r.shards.mayReport(t)
	}
	return r.signals+len(r.tasks) < ExitSignalBudget
}

// onExits ends the current leases whose hosts reported that their processes ended on their own: the same end
// as their RunTasks will report, known without waiting for each completion (a write to this history apiece).
// The lease's activity future is set aside; its completion, if it comes, is ignored.
func (r *run) onExits(ctx workflow.Context, sig TaskExits) {
	for _, x := range sig.Exits {
		t := r.byName[x.Result.Task]
		if t == nil || t.done || t.future == nil || t.between() || x.Generation != r.generation ||
			x.Result.Attempt != t.attempt || x.Lease != t.lease {
			continue // stale: an earlier lease, attempt or generation, or an end already known
		}
		r.endBy(ctx, t, x)
	}
}

// endBy ends the current lease of t with a host's report of how its attempt ended.
func (r *run) endBy(ctx workflow.Context, t *task, x TaskExitReport) {
	f, set := workflow.NewFuture(ctx)
	set.Set(x.Result, x.outcome(t.Task))
	t.future = f
	r.leaseEnded(ctx, t)
}

// leaseEnded records how the current lease of t ended and queues what follows: a re-attach, the same attempt
// again, a restart, or the end of the task.
func (r *run) leaseEnded(ctx workflow.Context, t *task) {
	now := workflow.Now(ctx)
	if !r.leased {
		r.endOf(ctx, t, now)
		r.taskOver(t)
		return
	}
	res, err := leaseResult(ctx, t.future)
	if r.movedOn(t, res, err) {
		r.relaunch(ctx, t, fmt.Sprintf("%s moved off host %s before it started there", t.Name, t.movedFrom))
		return
	}
	if t.terminated && detachedUnstarted(res, err) && workflow.GetVersion(ctx, ChangeWithdrawWaiting, workflow.DefaultVersion, 1) == 1 {
		// Its host gave it up before it started, and the user asked to stop it: nothing is left to stop.
		r.endTerminated(ctx, t)
		return
	}
	switch end := leaseEndOf(err, t.attached); {
	case end == leaseContactLost && t.lease < MaxLeases:
		r.contactLost(ctx, t, res, err)
		return
	case end == leaseHostLost && !t.released && res.PID == 0 && t.lease < MaxLeases && !(silent(err) && r.mayHaveStarted(ctx, t)):
		// The attempt never started its process: start it again, wherever it lands.
		r.relaunch(ctx, t, fmt.Sprintf("host %s lost %s before its process started", orUnknown(t.status.Host), t.Name))
		return
	case end == leaseContactLost, end == leaseHostLost:
		r.lost(t, res, err, now)
	default:
		r.settle(t, res, err, now)
	}
	t.hostStopped = res.StoppedByHost && t.status.State == TaskFailed && workflow.GetVersion(ctx, ChangeHostStopsRestart, workflow.DefaultVersion, 1) == 1
	r.checkRestartBudget(ctx)
	switch {
	case r.restartDue(t) && r.noRestarts != "":
		r.restartRefused(t)
	case r.restartDue(t):
		r.queueRestart(t)
		return
	default:
		r.noteNoRestart(t)
	}
	r.taskOver(t)
}

// silent says a lease ended with no answer from its host (it never took the re-attach up), as opposed to a
// host that answered it has no record of the attempt.
func silent(err error) bool {
	var timeout *temporal.TimeoutError
	return errors.As(err, &timeout)
}

// mayHaveStarted says whether an attempt with no confirmed start may still run: a Release carried its map and
// the answer is not in (runs from before this rule relaunched it, and replay the same).
func (r *run) mayHaveStarted(ctx workflow.Context, t *task) bool {
	return t.mapSent && workflow.GetVersion(ctx, "clusterrun-unconfirmed-release", workflow.DefaultVersion, 1) >= 1
}

// leaseResult reads a lease's TaskResult: its result, or the details of its error.
func leaseResult(ctx workflow.Context, f workflow.Future) (TaskResult, error) {
	var res TaskResult
	err := f.Get(ctx, &res)
	var appErr *temporal.ApplicationError
	var canceled *temporal.CanceledError
	switch {
	case errors.As(err, &appErr) && appErr.HasDetails():
		_ = appErr.Details(&res)
	case errors.As(err, &canceled) && canceled.HasDetails():
		_ = canceled.Details(&res)
	}
	return res, err
}

// leaseEnd classifies how a lease's activity ended.
type leaseEnd int

const (
	leaseSettled     leaseEnd = iota // the attempt ended: success, failure, stop, start failure
	leaseContactLost                 // the host gave the lease up or went silent: state unknown
	leaseHostLost                    // the host has no record of the attempt, or did not re-attach in time
)

func leaseEndOf(err error, attached bool) leaseEnd {
	var appErr *temporal.ApplicationError
	var timeout *temporal.TimeoutError
	switch {
	case errors.As(err, &appErr) && (appErr.Type() == ErrTaskDetached || appErr.Type() == ErrShardLost):
		return leaseContactLost
	case errors.As(err, &appErr) && appErr.Type() == ErrTaskLost:
		return leaseHostLost
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT:
		return leaseContactLost
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START && attached:
		return leaseHostLost
	}
	return leaseSettled
}

// contactLost: the task's host went silent or gave its lease up, or the shard that held the lease ended, and
// the process may well run on. Ask that host to take it up again; a task that never got as far as a host
// starts again wherever it lands.
func (r *run) contactLost(ctx workflow.Context, t *task, res TaskResult, err error) {
	var appErr *temporal.ApplicationError
	if !t.placed || detachedUnstarted(res, err) {
		if !(errors.As(err, &appErr) && appErr.Type() == ErrShardLost) {
			t.movedFrom = t.placedHost // its next placement avoids that host while the registry still lists it
		}
		r.relaunch(ctx, t, fmt.Sprintf("%s lost its host before its process started", t.Name))
		return
	}
	why := fmt.Sprintf("no heartbeat from host %s for %s", t.status.Host, r.plan.HeartbeatTimeout)
	if errors.As(err, &appErr) && (appErr.Type() == ErrTaskDetached || appErr.Type() == ErrShardLost) {
		why = appErr.Message()
	}
	t.status.State = TaskUnreachable
	t.status.Error = fmt.Sprintf("%s; waiting up to hostLossGrace %s for the host to take it up again", why, t.HostLossGrace)
	if r.decision != nil {
		// The run is stopping its tasks: it waits for the host's answer to the stop, not for a new lease.
		t.status.Error = fmt.Sprintf("%s; the run is stopping and waits for host %s to confirm the stop", why, t.status.Host)
	}
	r.todo.launch = append(r.todo.launch, launchOrder{t: t, how: reattach})
}

// relaunch starts the current attempt again: its process never started, so no restart is used. A stopping run
// starts nothing: there the task ends stopped, as a task waiting to start does (endWaiting).
func (r *run) relaunch(ctx workflow.Context, t *task, why string) {
	if r.stopReq != nil && workflow.GetVersion(ctx, ChangeStopEndsWaiting, workflow.DefaultVersion, 1) == 1 {
		r.endUnstarted(ctx, t, why+"; the run is stopping, so it is not started again")
		return
	}
	t.status.State, t.status.Error = TaskPending, why+"; starting it again"
	r.todo.launch = append(r.todo.launch, launchOrder{t: t, how: sameAttempt})
}

// lost ends an attempt whose host did not come back within hostLossGrace, or no longer knows it: a failure
// with exit code -1, which OnFailure, ExitCode and Always restart.
func (r *run) lost(t *task, res TaskResult, err error, now time.Time) {
	why := fmt.Sprintf("%s lost: host %s did not take it up again within hostLossGrace %s", t.Name, orUnknown(t.status.Host), t.HostLossGrace)
	var appErr *temporal.ApplicationError
	switch {
	case errors.As(err, &appErr) && appErr.Type() == ErrTaskLost:
		why = fmt.Sprintf("%s lost: %s", t.Name, appErr.Message())
	case t.lease >= MaxLeases:
		why = fmt.Sprintf("%s lost: its host lost contact %d times in a row", t.Name, t.lease)
	}
	t.done = true
	t.lostHost = true
	code := -1
	st := &t.status
	st.State, st.Error, st.ExitCode, st.Signal, st.EndTime = TaskFailed, why, &code, "", &now
	if res.PID != 0 {
		st.Host = res.Host
	}
}

// ChangeHostStopsRestart marks runs whose restart policies take an attempt its host stopped (TaskResult.StoppedByHost:
// hung, cut off, taken down) for a lost host's end, whatever its exit code. Asked only at such an end; runs
// started before judged its exit code, so a task that exited 0 on its SIGTERM failed without a restart.
const ChangeHostStopsRestart = "clusterrun-host-stops-restart"

// restartDue says whether the attempt that just ended is restarted under the task's own policy (scope: task).
func (r *run) restartDue(t *task) bool {
	if t.terminated || t.startFailed || r.decision != nil || r.stopReq != nil || t.restarts >= t.Restart.MaxRestarts {
		return false
	}
	switch t.status.State {
	case TaskSucceeded:
		return t.Restart.Policy == spec.PolicyAlways
	case TaskFailed:
		return t.Restart.Restartable(t.restartCode())
	}
	return false
}

// queueRestart counts a restart and waits its backoff before the next attempt.
func (r *run) queueRestart(t *task) {
	t.restarts++
	t.done = false
	why := failureText(t.status)
	if t.status.State == TaskSucceeded {
		why = t.Name + " exited 0 under restart policy Always"
	}
	t.status.State = TaskPending
	t.status.Error = fmt.Sprintf("restart %d of %d in %s after: %s", t.restarts, t.Restart.MaxRestarts, t.Restart.Backoff, why)
	r.todo.restart = append(r.todo.restart, t)
}

// taskOver handles a task that ended for good in this generation: the run's policies decide what follows, and
// barriers it can no longer pass break.
func (r *run) taskOver(t *task) {
	r.judge(t)
	if r.decision == nil {
		r.breakBarriers(t)
	}
}

package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/clusterrun/clusterrun/spec"
)

// ChangeStopAwaitsHosts marks runs whose stop waits up to hostLossGrace for a host that did not take its
// StopTasks up in time, rather than ending its tasks unconfirmed at once.
const ChangeStopAwaitsHosts = "clusterrun-stop-awaits-hosts"

// ChangeStopHearsEnds marks runs whose stop takes the hosts' reports of tasks that ended on their own, rather
// than waiting for those tasks' leases to complete.
const ChangeStopHearsEnds = "clusterrun-stop-hears-ends"

// ChangeStopTakesEnds marks runs whose stop takes the ends that a host's answer gives of attempts that ended
// before it (StopTasksResult.Ended). It is asked only when such an end is of use, so that other runs record no
// marker.
const ChangeStopTakesEnds = "clusterrun-stop-takes-ends"

// ChangeStopsHearEnds marks runs whose final stop takes the hosts' reports of ends while it waits for their
// StopTasks, and does not wait for a host whose every named task ended on its own meanwhile. It is asked only
// when such a report comes during that wait, so that a run whose stop hears none records no marker.
const ChangeStopsHearEnds = "clusterrun-stops-hear-ends"

// ChangeStopsHearLeaseEnds marks runs whose final stop does not wait for the StopTasks of a host whose tasks'
// leases all ended meanwhile, each end seen on the host. It is asked only when that happens first.
const ChangeStopsHearLeaseEnds = "clusterrun-stops-hear-lease-ends"

// stopAll stops every task that has not ended and waits until each is confirmed gone. Cancellation reaches a
// RunTask only on its next heartbeat, so StopTasks on each host's downlink does the fast stop; the cancellation
// keeps Temporal from retrying and covers a host worker that is gone.
func (r *run) stopAll(ctx workflow.Context, info *workflow.Info, cancelGen workflow.CancelFunc, d decision) {
	prev := r.status
	r.status = StatusStopping
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	cancelGen()

	hosts, byHost := r.runningByHost()
	r.noteUnreachableStops()
	in := StopTasksInput{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		GracePeriod: r.plan.StopGracePeriod, Reason: d.reason}
	if d.restart {
		in.Reason = "gang restart after: " + d.reason
	}
	if d.kill {
		// The stop request's grace period is over: what still runs is a straggler and is killed at once.
		in.GracePeriod = 0
		r.markStragglers()
	} else if !r.stopDeadline.IsZero() {
		// A cancel (or maxRunTime) during a stop request's grace period: SIGTERM now, SIGKILL when that grace
		// period ends, not a whole grace period later.
		in.GracePeriod = max(0, min(in.GracePeriod, r.stopDeadline.Sub(workflow.Now(ctx))))
	}
	// A gang restart's stop waits for every answer: its next generation starts on those hosts.
	hearEnds := r.leased && !d.restart
	silent := r.stopOnHosts(dctx, hosts, byHost, in, hearEnds, func(h string, n int) workflow.Context {
		return stopOptions(dctx, r.plan, h, fmt.Sprintf("stop %d task(s) on %s", n, h))
	})
	if len(silent) > 0 && workflow.GetVersion(ctx, ChangeStopAwaitsHosts, workflow.DefaultVersion, 1) == 1 {
		silent = r.awaitSilentHosts(dctx, silent, byHost, in)
	}
	r.endTheRest(dctx, silent)
	r.status = prev
}

// runningByHost groups the tasks that may have a process by host, hosts in the order they first appear.
func (r *run) runningByHost() (hosts []string, byHost map[string][]string) {
	byHost = map[string][]string{}
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
	return hosts, byHost
}

// noteUnreachableStops says, of each task out of contact as the run stops, what the run now waits for: its
// host's answer to the stop, not its taking the task up again.
func (r *run) noteUnreachableStops() {
	for _, t := range r.tasks {
		if !t.done && t.status.State == TaskUnreachable {
			t.status.Error = fmt.Sprintf("host %s is out of contact; the run is stopping and waits for it to confirm the stop", t.status.Host)
		}
	}
}

// markStragglers marks the tasks still running when a stop request's grace period ran out, and says so in
// the run's reason (and fails the run, with stragglers: fail).
func (r *run) markStragglers() {
	var stragglers []string
	for _, t := range r.tasks {
		if !t.done && t.status.State == TaskRunning {
			t.status.Straggler = true
			stragglers = append(stragglers, t.Name)
		}
	}
	if len(stragglers) == 0 {
		return
	}
	r.decision.reason += fmt.Sprintf("; killed %d straggler(s) still running after %s: %s", len(stragglers), r.plan.StopGracePeriod, FirstNames(stragglers))
	if r.plan.Stragglers == spec.StragglersFail {
		r.decision.status = StatusFailed // tf.train.Coordinator's join without ignore_live_threads
	}
}

// endTheRest ends every task no host confirmed stopped: one waiting out a restart backoff has nothing running;
// any other ends with its RunTask (which ends when its process is gone, or its host is lost). A task of a host
// that stayed silent, or that was unreachable, is stopped but not confirmed, and says so.
func (r *run) endTheRest(ctx workflow.Context, silent []string) {
	unanswered := map[string]bool{}
	for _, h := range silent {
		unanswered[h] = true
	}
	r.hearOwnEnds(ctx)
	for _, t := range r.tasks {
		switch {
		case t.done:
		case t.between():
			now := workflow.Now(ctx)
			t.done, t.backoff = true, nil
			why, _ := stoppedWaiting(t.status.Error)
			t.status.State, t.status.Error, t.status.EndTime = TaskStopped, why, &now
		default:
			unconfirmed := t.status.State == TaskUnreachable || unanswered[t.status.Host]
			res, err := leaseResult(ctx, t.future)
			r.settle(t, res, err, workflow.Now(ctx))
			if t.status.State == TaskFailed && t.status.Error == "" {
				t.status.State = TaskStopped
			}
			if unconfirmed && !hostSawTheEnd(err) {
				t.status.State, t.status.ExitCode, t.status.Signal = TaskStopped, nil, ""
				t.status.Error = fmt.Sprintf("not confirmed: host %s was unreachable; it stops the task when it reconnects, "+
					"and the task's supervisor stops it after %s without its host worker", t.status.Host, t.HostLossGrace+r.plan.HeartbeatTimeout)
			}
			noRecord := noRecordOf(err) // the run had queued it to start again, and its decision dropped that launch
			if noRecord == "" && !hostSawTheEnd(err) {
				noRecord = t.noRecord // its host came back, and answered the stop
			}
			if noRecord != "" {
				// Its host answered that it has no record of the attempt: nothing of it runs there.
				t.status.State, t.status.ExitCode, t.status.Signal = TaskStopped, nil, ""
				t.status.Error = "not running: " + noRecord + " (its worker stopped before starting it, or the host lost its runtime folder)"
			}
		}
	}
}

// hearOwnEnds waits until every task that no stop confirmed has its end: from its lease, or from the report its
// host sent when its process ended (onExits), whichever comes first. A task that ended on its own just before
// the stop is not its host's to confirm (StopTasks leaves it to its lease), and its report comes at once, while
// its lease completes only once the lease's cancellation reaches it on a heartbeat: in a run of 64 trivial
// tasks the run ended 50–115 ms after the reports it had (docs/design.md, "Stopping: fast and confirmed").
func (r *run) hearOwnEnds(ctx workflow.Context) {
	if !r.leased {
		return
	}
	var waiting []*task
	sel := workflow.NewSelector(ctx)
	for _, t := range r.tasks {
		if t.done || t.between() || t.future == nil || t.future.IsReady() {
			continue
		}
		waiting = append(waiting, t)
		sel.AddFuture(t.future, func(workflow.Future) {})
	}
	if len(waiting) == 0 || workflow.GetVersion(ctx, ChangeStopHearsEnds, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	sel.AddReceive(workflow.GetSignalChannel(ctx, SignalTaskExits), func(c workflow.ReceiveChannel, _ bool) {
		var sig TaskExits
		c.Receive(ctx, &sig)
		r.signals++
		r.onExits(ctx, sig)
	})
	for len(waiting) > 0 {
		sel.Select(ctx)
		waiting = slices.DeleteFunc(waiting, func(t *task) bool { return t.done || t.future.IsReady() })
	}
}

// stopOnHosts runs StopTasks on each host's downlink at once and records every end the hosts confirm. It
// returns the hosts whose StopTasks did not complete (not taken up in time, or failed), in hosts' order. With
// hearEnds it takes the hosts' reports of ends while it waits (awaitStops).
func (r *run) stopOnHosts(ctx workflow.Context, hosts []string, byHost map[string][]string, in StopTasksInput, hearEnds bool,
	opts func(host string, n int) workflow.Context) (silent []string) {
	stops := make([]workflow.Future, len(hosts))
	for i, h := range hosts {
		in.Tasks, in.Attempts = byHost[h], map[string]int{}
		for _, name := range in.Tasks {
			in.Attempts[name] = r.byName[name].attempt
		}
		stops[i] = workflow.ExecuteActivity(opts(h, len(in.Tasks)), ActivityStopTasks, in)
	}
	failed := make([]bool, len(hosts))
	answered := make([]bool, len(hosts))
	if hearEnds {
		r.awaitStops(ctx, hosts, byHost, stops, answered, failed)
	}
	// A task whose stop a host confirmed is over: its process group is gone. The run need not wait for that
	// RunTask's own completion, which only repeats it (and queues behind all the others on the history).
	for i, f := range stops {
		if !answered[i] {
			failed[i] = !r.stopAnswered(ctx, hosts[i], f)
		}
	}
	for i, h := range hosts {
		if failed[i] {
			silent = append(silent, h)
		}
	}
	return silent
}

// awaitStops waits for the hosts' StopTasks while it takes their reports of tasks that ended on their own: a
// host whose every named task has its end by then would confirm nothing, and is not waited for (its StopTasks
// still runs, and finds them gone). In a run of a chief and 63 workers that all exit at once, the reports came
// while the StopTasks were on their way, and the run waited 55 ms more for three answers that stopped nothing
// (docs/design.md, "Stopping: fast and confirmed"). It marks each host that answered, and whether it failed;
// the rest are left to stopOnHosts' Gets. Runs before this (no ChangeStopsHearEnds) leave the reports to
// hearOwnEnds: on the first one, this returns without taking it.
func (r *run) awaitStops(ctx workflow.Context, hosts []string, byHost map[string][]string, stops []workflow.Future, answered, failed []bool) {
	sel := workflow.NewSelector(ctx)
	for i, f := range stops {
		sel.AddFuture(f, func(f workflow.Future) {
			answered[i], failed[i] = true, !r.stopAnswered(ctx, hosts[i], f)
		})
	}
	asOld := false
	sel.AddReceive(workflow.GetSignalChannel(ctx, SignalTaskExits), func(c workflow.ReceiveChannel, _ bool) {
		if workflow.GetVersion(ctx, ChangeStopsHearEnds, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			asOld = true
			return
		}
		var sig TaskExits
		c.Receive(ctx, &sig)
		r.signals++
		r.onExits(ctx, sig)
	})
	leased := make([]bool, len(hosts)) // every lease of the host's tasks ended, as seen on the host
	sel.AddReceive(r.hearLeaseEnds(ctx, hosts, byHost), func(c workflow.ReceiveChannel, _ bool) {
		var i int
		c.Receive(ctx, &i)
		if !answered[i] && workflow.GetVersion(ctx, ChangeStopsHearLeaseEnds, workflow.DefaultVersion, 1) == 1 {
			leased[i] = true
		}
	})
	over := func(i int) bool { return leased[i] || r.ended(byHost[hosts[i]]) }
	waited := func() bool {
		for i := range hosts {
			if !answered[i] && !over(i) {
				return false
			}
		}
		return true
	}
	for !asOld && !waited() {
		sel.Select(ctx)
	}
	for i := range hosts {
		if !answered[i] && !asOld && over(i) {
			answered[i] = true // its tasks' reports, or their leases, said it all
		}
	}
}

// hearLeaseEnds sends on the channel it returns the index of each host whose tasks' leases have all ended, each
// end seen on the host (its process is gone), so that a stop does not wait for that host's StopTasks: it
// confirms nothing more. At 10,000 tasks a loaded server handed one host's StopTasks to a poll that never got
// it; that host's tasks stopped on their leases' cancellation 11 s later, and the run waited out the StopTasks'
// 35 s heartbeat timeout and its second attempt before it ended (docs/design.md, "Stopping: fast and
// confirmed"). A host with a task that has no lease, or whose lease the server ended (its host may still run
// the process), is left to its answer.
func (r *run) hearLeaseEnds(ctx workflow.Context, hosts []string, byHost map[string][]string) workflow.ReceiveChannel {
	ch := workflow.NewBufferedChannel(ctx, len(hosts))
	for i, h := range hosts {
		var leases []workflow.Future
		for _, name := range byHost[h] {
			if t := r.byName[name]; !t.done {
				if t.future == nil || t.between() {
					leases = nil
					break
				}
				leases = append(leases, t.future)
			}
		}
		if len(leases) == 0 {
			continue
		}
		workflow.Go(ctx, func(ctx workflow.Context) {
			for _, f := range leases {
				if _, err := leaseResult(ctx, f); !hostSawTheEnd(err) {
					return
				}
			}
			ch.Send(ctx, i)
		})
	}
	return ch
}

// stopAnswered records what a host's StopTasks confirmed; false when it failed.
func (r *run) stopAnswered(ctx workflow.Context, host string, f workflow.Future) bool {
	var res StopTasksResult
	if err := f.Get(ctx, &res); err != nil {
		workflow.GetLogger(ctx).Warn("StopTasks failed", "host", host, "error", err)
		return false
	}
	r.confirmStopped(ctx, res)
	r.takeEnds(ctx, res.Ended)
	for _, name := range res.Unknown {
		if t := r.byName[name]; t != nil && !t.done {
			t.noRecord = fmt.Sprintf("host %s has no record of %s attempt %d", host, name, t.attempt)
		}
	}
	return true
}

// takeEnds ends the tasks whose ends a host's answer to a stop gave, when the run has none: an attempt that
// ended while its host was cut off from the server (or the server was down) has no lease left to report it, as
// the server timed the lease out, and a stopping run starts no new one. Such a task ended "Stopped", "not
// confirmed", or after a server outage "lost" (exit -1), however it had ended.
func (r *run) takeEnds(ctx workflow.Context, ended []TaskExitReport) {
	var take []TaskExitReport
	for _, x := range ended {
		t := r.byName[x.Result.Task]
		if t == nil || t.done || t.future == nil || t.between() || x.Generation != r.generation ||
			x.Result.Attempt != t.attempt || x.Result.Host != t.status.Host {
			continue // an end the run has, or of an attempt, generation or host that is not the task's now
		}
		take = append(take, x)
	}
	if len(take) == 0 || workflow.GetVersion(ctx, ChangeStopTakesEnds, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	for _, x := range take {
		r.endBy(ctx, r.byName[x.Result.Task], x)
	}
}

// ended says whether every named task has its end.
func (r *run) ended(names []string) bool {
	for _, name := range names {
		if !r.byName[name].done {
			return false
		}
	}
	return true
}

// confirmStopped records the tasks a host confirmed gone, with how each ended.
func (r *run) confirmStopped(ctx workflow.Context, res StopTasksResult) {
	now := workflow.Now(ctx)
	for _, name := range res.Stopped {
		t := r.byName[name]
		if t == nil || t.done {
			continue
		}
		t.done = true
		t.status.State, t.status.Error, t.status.EndTime = TaskStopped, "", &now
		for _, x := range res.Exits {
			if x.Task == name {
				code := x.ExitCode
				t.status.ExitCode, t.status.Signal, t.status.Logs, t.status.Error = &code, x.Signal, x.Logs, x.Error
				if t.status.StartTime == nil && x.StartTime != nil {
					t.status.StartTime = x.StartTime // its start's report was not sent: the stop came first
				}
			}
		}
	}
}

// awaitSilentHosts gives each host that did not take its StopTasks up in time (it is restarting, or
// reconnecting after a server outage, or gone) up to its tasks' hostLossGrace to come back and confirm the
// stop: the same time it has to take a lease up again. The status says what the run waits for meanwhile. It
// returns the hosts that stayed silent.
func (r *run) awaitSilentHosts(ctx workflow.Context, silent []string, byHost map[string][]string, in StopTasksInput) []string {
	graces := map[string]time.Duration{}
	for _, h := range silent {
		for _, name := range byHost[h] {
			t := r.byName[name]
			graces[h] = max(graces[h], t.HostLossGrace)
			if !t.done {
				t.status.State = TaskUnreachable
				t.status.Error = fmt.Sprintf("%s has not confirmed the stop; waiting up to %s (hostLossGrace)", h, t.HostLossGrace)
			}
		}
	}
	return r.stopOnHosts(ctx, silent, byHost, in, false, func(h string, n int) workflow.Context {
		// Asked until the grace is over, however many attempts that takes: a hung worker's open polls can take
		// (and time out) one attempt after another before it resumes.
		ctx := stopOptionsWithin(ctx, r.plan, h, graces[h],
			fmt.Sprintf("stop %d task(s) on %s, which did not answer: waiting up to %s", n, h, graces[h]))
		o := workflow.GetActivityOptions(ctx)
		o.ScheduleToCloseTimeout = graces[h] + o.StartToCloseTimeout
		o.RetryPolicy = &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumInterval: 5 * time.Second}
		return workflow.WithActivityOptions(ctx, o)
	})
}

// noRecordOf is a host's answer that it has no record of an attempt (ErrTaskLost), or "" for any other end.
func noRecordOf(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == ErrTaskLost {
		return appErr.Message()
	}
	return ""
}

// hostSawTheEnd says whether a lease's end came from the host that held the process (it ran, it was stopped,
// it failed), not from the server giving the lease up: a heartbeat timeout, a detach, or a cancellation of a
// lease no host had taken. A host's cancellation carries the task's result; the server's, of a lease no host
// took up, carries only "ACTIVITY_ID_NOT_STARTED", which was taken for a host's answer.
func hostSawTheEnd(err error) bool {
	var canceled *temporal.CanceledError
	switch {
	case err == nil:
		return true
	case errors.As(err, &canceled):
		var res TaskResult
		return canceled.HasDetails() && canceled.Details(&res) == nil && res.Task != ""
	}
	return leaseEndOf(err, true) == leaseSettled
}

// namedInReason is how many tasks a message names; a run's status names every one.
const namedInReason = 10

// FirstNames names up to 10 tasks, and says how many more there are: a run's reason that named each of a
// thousand stragglers ran to 12 KB, in the CLI's last line and the Web UI.
func FirstNames(names []string) string {
	if len(names) <= namedInReason {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:namedInReason], ", "), len(names)-namedInReason)
}

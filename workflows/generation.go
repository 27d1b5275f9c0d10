package workflows

import (
	"time"

	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// generation is one launch of the whole cluster: the selector its handlers wait on, and the context whose
// cancellation stops every task of it.
type generation struct {
	r         *run
	ctx       workflow.Context // the run's
	genCtx    workflow.Context // canceled to stop every RunTask of this generation
	cancelGen workflow.CancelFunc
	sel       workflow.Selector
	info      *workflow.Info
	ch        *channels
	check     hostCheck  // the next check of waiting tasks' hosts (move.go)
	backoffs  []*backoff // restart backoffs not yet over (backoff.go)
}

// actions are what the handlers of one wait decided to do. act carries them out, always in this order, which
// is the order the handlers of runs started before leases issued them in (recorded histories replay).
type actions struct {
	terminate  []*task               // cancel their RunTask and stop their process (terminate-task)
	launch     []launchOrder         // start a lease
	restart    []*task               // start a restart's backoff timer
	release    []*task               // send the cluster map (all share one host per Release; grouped in act)
	deliver    []delivery            // barrier outcomes to publish
	moved      []string              // tasks whose address changed after the rendezvous: tell every host the new map
	notifyStop bool                  // tell every host its tasks should stop, and start the grace timer
	askStop    bool                  // tell every host the tasks are asked to stop (keepRun), or no longer are
	renotify   []string              // hosts that took tasks up again during a stop's grace period: tell them again
	reask      []string              // hosts that took tasks up again in a run that has had a keepRun request: tell them where it stands
	warn       bool                  // send the deadline warning to every task
	checkHosts bool                  // move the tasks waiting on hosts that are gone (move.go)
	cancel     []workflow.CancelFunc // cancel these leases, none of whose tasks started (withdraw.go)
}

// launchOrder starts one lease on a task.
type launchOrder struct {
	t *task
	// how: a new attempt, the same attempt again (its process never started), or a re-attach to the attempt's
	// process on its host.
	how launchKind
	// offset numbers attempts in runs started before leases (RunTaskInput.AttemptOffset).
	offset int
	// holds counts the times this launch of the task was held back for room in its pool (overflow.go), waits
	// those it waited whole for room on its hosts, and heldFor how long it was held in all.
	holds, waits int
	heldFor      time.Duration
}

type launchKind int

const (
	newAttempt launchKind = iota
	sameAttempt
	reattach
)

// runGeneration launches every task, serves the rendezvous, barriers, stop requests and task control, and
// waits for a decision, then stops whatever still runs. It returns the decision.
func (r *run) runGeneration(ctx workflow.Context, ch *channels) decision {
	genCtx, cancelGen := workflow.WithCancel(ctx)
	g := &generation{r: r, ctx: ctx, genCtx: genCtx, cancelGen: cancelGen, sel: workflow.NewSelector(ctx),
		info: workflow.GetInfo(ctx), ch: ch}
	if r.sharded {
		r.shards = newShardSet(g.info.WorkflowExecution.ID, r.plan.TasksPerShard, r.generation)
	}
	for _, t := range r.tasks {
		r.todo.launch = append(r.todo.launch, launchOrder{t: t, how: newAttempt, offset: r.generation})
	}
	g.act()
	g.listen()
	for r.decision == nil {
		g.sel.Select(ctx)
		// A batch's members end together: take every end (and signal) that is in before acting, so that what
		// follows them (their re-attaches, say) goes out as one lease too. Runs before batches acted after each.
		for r.batched && r.decision == nil && g.sel.HasPending() {
			g.sel.Select(ctx)
		}
		g.act()
	}
	d := *r.decision
	r.stopAll(ctx, g.info, cancelGen, d)
	return *r.decision
}

// listen adds the run's inputs to the selector; each handler only records what happened and what to do.
func (g *generation) listen() {
	r, ctx := g.r, g.ctx
	g.sel.AddReceive(workflow.GetSignalChannel(ctx, SignalClearStop), func(c workflow.ReceiveChannel, _ bool) {
		var req StopRequest
		c.Receive(ctx, &req)
		r.signals++
		r.onClearStop(ctx, req)
	})
	g.sel.AddReceive(workflow.GetSignalChannel(ctx, SignalTerminateTask), func(c workflow.ReceiveChannel, _ bool) {
		var req TaskControl
		c.Receive(ctx, &req)
		r.signals++
		r.onTerminate(ctx, req)
	})
	g.sel.AddReceive(workflow.GetSignalChannel(ctx, SignalStartTask), func(c workflow.ReceiveChannel, _ bool) {
		var req TaskControl
		c.Receive(ctx, &req)
		r.signals++
		r.onStart(ctx, req)
	})
	g.sel.AddReceive(g.ch.placed, func(c workflow.ReceiveChannel, _ bool) {
		var sig PlacedSignal
		c.Receive(ctx, &sig)
		r.signals++
		r.onPlaced(ctx, sig)
	})
	g.sel.AddReceive(g.ch.exits, func(c workflow.ReceiveChannel, _ bool) {
		var sig TaskExits
		c.Receive(ctx, &sig)
		r.signals++
		g.stopsFirst()
		r.onExits(ctx, sig)
	})
	g.sel.AddReceive(g.ch.arrivals, func(c workflow.ReceiveChannel, _ bool) {
		var sig BarrierArrivals
		c.Receive(ctx, &sig)
		r.signals++
		r.onArrivals(ctx, sig)
	})
	g.sel.AddReceive(g.ch.stop, func(workflow.ReceiveChannel, bool) { g.takeStop() })
	if g.ch.deadline != nil {
		g.sel.AddFuture(g.ch.deadline, func(f workflow.Future) {
			if fired(ctx, f) {
				r.decide(decision{status: StatusTimedOut, reason: fmt.Sprintf("maxRunTime %s reached", r.plan.MaxRunTime)})
			}
		})
	}
	if g.ch.warning != nil && !g.ch.warned {
		g.sel.AddFuture(g.ch.warning, func(f workflow.Future) {
			g.ch.warned = true
			r.todo.warn = fired(ctx, f)
		})
	}
	g.sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {
		r.decide(decision{status: StatusCanceled, reason: ReasonCanceled})
	})
}

// act carries out what the last handler decided: the one place in a generation that starts activities and
// timers, cancels them and publishes outcomes.
func (g *generation) act() {
	r := g.r
	todo := r.todo
	r.todo = actions{}
	for _, t := range todo.terminate {
		g.watch(r.terminate(g.genCtx, g.info, t))
	}
	for _, cancel := range todo.cancel {
		cancel()
	}
	held, w := r.place(g.genCtx, todo.launch)
	waits := map[*task]bool{}
	for _, o := range held {
		waits[o.t] = true
	}
	var launch []launchOrder
	for _, o := range todo.launch {
		if (r.decision == nil || o.t.future == nil) && !waits[o.t] {
			launch = append(launch, o)
		}
	}
	g.launchAll(launch)
	g.hold(held, w)
	r.showWaiting(g.genCtx)
	if todo.checkHosts {
		g.checkHosts()
	}
	if len(launch) > 0 || todo.checkHosts {
		g.armHostCheck(len(launch) > 0)
	}
	r.prePlaced = nil
	for _, t := range todo.restart {
		if r.decision == nil {
			g.startBackoff(t)
		}
	}
	g.watchReleases(r.releaseByHost(g.genCtx, g.info, todo.release))
	if len(todo.moved) > 0 && workflow.GetVersion(g.genCtx, ChangeStableAddresses, workflow.DefaultVersion, 1) == 1 {
		g.watch(r.updateMaps(g.genCtx, g.info, todo.moved))
	}
	r.deliver(g.genCtx, todo.deliver)
	if todo.notifyStop {
		g.watch(r.notifyStop(g.genCtx, g.info))
		r.stopDeadline = workflow.Now(g.ctx).Add(r.plan.StopGracePeriod)
		grace := workflow.NewTimerWithOptions(g.genCtx, r.plan.StopGracePeriod, workflow.TimerOptions{Summary: "stop grace period"})
		g.sel.AddFuture(grace, func(f workflow.Future) {
			if fired(g.ctx, f) {
				r.decide(r.stopDecision(true))
			}
		})
	}
	for _, h := range todo.renotify {
		g.watch([]workflow.Future{r.notifyHost(g.genCtx, g.info, h)})
	}
	if todo.askStop && !todo.notifyStop {
		g.watch(r.askStop(g.genCtx, g.info))
	}
	if !todo.askStop && !todo.notifyStop { // either tells every host with running tasks already
		for _, h := range todo.reask {
			g.watch([]workflow.Future{r.askHost(g.genCtx, g.info, h)})
		}
	}
	if todo.warn {
		g.watch(r.deadlineWarning(g.genCtx, g.info))
	}
	if r.shards != nil {
		g.sendToShards()
	}
}

// launch starts one lease on a task and waits for its end in the selector.
func (g *generation) launch(o launchOrder) {
	r, t := g.r, o.t
	if r.shards != nil {
		t.future = r.shards.lease(g.ctx, t, r.nextLease(t, o))
	} else {
		tctx, cancel := workflow.WithCancel(g.genCtx)
		t.cancel = cancel
		t.future = r.startLease(tctx, t, o)
	}
	groupLease(leaseHost(o), []*task{t}, o.how == reattach, t.cancel)
	f := t.future
	g.sel.AddFuture(f, func(workflow.Future) {
		if f != t.future {
			return // an earlier lease of a task started again
		}
		g.stopsFirst()
		r.leaseEnded(g.ctx, t)
	})
}

// ChangeStopBeforeEnds marks runs that take the stop requests already in before an end they judge. A
// selector takes the input that arrives first while it waits, but once it has woken, inputs that came
// meanwhile wait in their channels and the next Select takes them in the order they were added to it, ends
// before stop requests. So a task that asked the run to stop with an error and exited 0 right after ended the
// run Succeeded, its request ignored, when both came in one workflow task behind a third input (seen in
// TestE2E_ReadmeCommands). The marker is written only when a request is waiting as an end is judged, which
// runs from before replay without.
const ChangeStopBeforeEnds = "clusterrun-stop-before-ends"

// stopsFirst takes the stop requests already in before the end being judged.
func (g *generation) stopsFirst() {
	if g.ch.stop.Len() == 0 || workflow.GetVersion(g.ctx, ChangeStopBeforeEnds, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	for g.ch.stop.Len() > 0 {
		g.takeStop()
	}
}

// takeStop receives one stop request and records it.
func (g *generation) takeStop() {
	var req StopRequest
	g.ch.stop.Receive(g.ctx, &req)
	g.r.signals++
	g.r.onStop(g.ctx, req)
}

// watchReleases keeps Release futures in the loop. With leases, each answer says which tasks got the map (and
// a failed one is sent again); before leases, a Release was watched like any control activity.
func (g *generation) watchReleases(fs []workflow.Future, groups [][]TaskAttempt) {
	if !g.r.leased {
		g.watch(fs)
		return
	}
	for i, f := range fs {
		sent := groups[i]
		g.sel.AddFuture(f, func(f workflow.Future) {
			var res ReleaseResult
			err := f.Get(g.ctx, &res)
			if err != nil && !temporal.IsCanceledError(err) {
				workflow.GetLogger(g.ctx).Warn("release failed; sending it again", "error", err)
			}
			if temporal.IsCanceledError(err) {
				return
			}
			g.r.onReleased(sent, res, err)
		})
	}
}

// watch keeps control activities' futures in the loop; a failure is logged (the tasks they concern end by
// their own RunTask if their host is gone).
func (g *generation) watch(fs []workflow.Future) {
	for _, f := range fs {
		g.sel.AddFuture(f, func(f workflow.Future) {
			if err := f.Get(g.ctx, nil); err != nil && !temporal.IsCanceledError(err) {
				workflow.GetLogger(g.ctx).Warn("control activity failed", "error", err)
			}
		})
	}
}

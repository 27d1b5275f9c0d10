package workflows

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"
)

// barrier is one named barrier of the current generation.
type barrier struct {
	name         string
	types        []string // sorted; empty: every task
	firstBy      string   // the task that declared it first
	participants []string // plan order
	arrived      map[string]bool
	order        []string // arrival order
	released     bool
	broken       string
}

func (b *barrier) status(generation int) BarrierStatus {
	s := BarrierStatus{Name: b.name, Generation: generation, Types: b.types, Participants: len(b.participants),
		ArrivedCount: len(b.order), Released: b.released, Broken: b.broken}
	if b.released {
		return s
	}
	s.Arrived = append([]string{}, b.order...)
	for _, p := range b.participants {
		if !b.arrived[p] {
			s.Waiting = append(s.Waiting, p)
		}
	}
	return s
}

// recentBarriers is how many barriers the status lists in full.
const recentBarriers = 20

func (b *barrier) complete() bool {
	for _, p := range b.participants {
		if !b.arrived[p] {
			return false
		}
	}
	return true
}

func (b *barrier) has(task string) bool {
	for _, p := range b.participants {
		if p == task {
			return true
		}
	}
	return false
}

// Budgets that keep a run inside Temporal's default limits (51,200 history events and 10,000 signals per run),
// with room left to stop every task and end the run cleanly. Past them, new barrier arrivals are refused with an
// error instead of the run being terminated by the server.
// They are variables only so tests can lower them.
var (
	BarrierHistoryBudget      = 40000
	BarrierHistoryBytesBudget = 40 << 20
	BarrierSignalBudget       = 9500
)

// BarrierArrival is one task attempt arriving at one barrier.
type BarrierArrival struct {
	Task       string
	Attempt    int
	Generation int
	Barrier    string
	Types      []string
}

// delivery is one barrier outcome to publish: released, or failed with err.
type delivery struct {
	barrier string
	err     string
	tasks   []*task
	all     bool         // every waiter of the barrier, wherever it is
	stale   *TaskAttempt // a superseded attempt, named by itself rather than by its task's current attempt
}

// onArrivals records barrier arrivals and queues the outcomes that release or fail waiters.
func (r *run) onArrivals(ctx workflow.Context, sig BarrierArrivals) {
	var out []delivery
	touched := map[string]bool{}
	var touchedOrder []string
	overBudget := ""
	cur := workflow.GetInfo(ctx)
	if n := cur.GetCurrentHistoryLength(); n > BarrierHistoryBudget {
		overBudget = fmt.Sprintf("history length %d is past clusterrun's budget of %d (Temporal's limit is 51,200)", n, BarrierHistoryBudget)
	} else if size := cur.GetCurrentHistorySize(); size > BarrierHistoryBytesBudget {
		overBudget = fmt.Sprintf("history size %d MB is past clusterrun's budget of %d MB (Temporal's limit is 50 MB)", size>>20, BarrierHistoryBytesBudget>>20)
	} else if r.signals > BarrierSignalBudget {
		overBudget = fmt.Sprintf("%d signals received, past clusterrun's budget of %d (Temporal's limit is 10,000)", r.signals, BarrierSignalBudget)
	}
	for _, ta := range sig.Tasks {
		a := BarrierArrival{Task: ta.Task, Attempt: ta.Attempt, Generation: sig.Generation, Barrier: sig.Barrier, Types: sig.Types}
		t := r.byName[a.Task]
		if t == nil {
			workflow.GetLogger(ctx).Warn("ignoring a barrier arrival for a task this run does not have", "task", a.Task, "barrier", a.Barrier)
			continue
		}
		if a.Generation != r.generation || t.done {
			continue // stale
		}
		if r.leased && a.Attempt != t.status.Attempt {
			// A superseded attempt (a copy its host kept through a partition, say) cannot pass for the current one.
			out = append(out, delivery{barrier: a.Barrier, err: fmt.Sprintf("barrier %q refused: %s attempt %d was superseded by attempt %d",
				a.Barrier, t.Name, a.Attempt, t.status.Attempt), stale: &TaskAttempt{Task: t.Name, Attempt: a.Attempt}})
			continue
		}
		if overBudget != "" {
			out = append(out, delivery{barrier: a.Barrier, err: fmt.Sprintf("barrier %q refused: this run has used up its barrier budget: %s; "+
				"use fewer barriers or fewer hosts per run (docs/control.md#limits)", a.Barrier, overBudget), tasks: []*task{t}})
			continue
		}
		b, problem := r.barrierFor(t, a)
		switch {
		case problem != "":
			out = append(out, delivery{barrier: a.Barrier, err: problem, tasks: []*task{t}})
			continue
		case b.broken != "":
			out = append(out, delivery{barrier: b.name, err: b.broken, tasks: []*task{t}})
			continue
		}
		if !b.arrived[t.Name] {
			b.arrived[t.Name] = true
			b.order = append(b.order, t.Name)
		}
		if b.released {
			// A restarted task passes a barrier its earlier attempt passed.
			out = append(out, delivery{barrier: b.name, tasks: []*task{t}})
			continue
		}
		if !touched[b.name] {
			touched[b.name] = true
			touchedOrder = append(touchedOrder, b.name)
		}
	}
	for _, name := range touchedOrder {
		b := r.barriers[name]
		if b.complete() {
			b.released = true
			var waiters []*task
			for _, p := range b.order {
				waiters = append(waiters, r.byName[p])
			}
			out = append(out, delivery{barrier: b.name, tasks: waiters, all: true})
		}
	}
	r.todo.deliver = append(r.todo.deliver, out...)
}

// barrierFor finds or declares the barrier an arrival names, or says why the arrival is refused.
func (r *run) barrierFor(t *task, a BarrierArrival) (*barrier, string) {
	types := append([]string(nil), a.Types...)
	sort.Strings(types)
	known := map[string]bool{}
	var all []string
	for _, x := range r.tasks {
		if !known[x.Type] {
			known[x.Type] = true
			all = append(all, x.Type)
		}
	}
	for _, typ := range types {
		if !known[typ] {
			return nil, fmt.Sprintf("barrier %q names task type %q, which this run does not have (it has %s)", a.Barrier, typ, strings.Join(all, ", "))
		}
	}
	b := r.barriers[a.Barrier]
	if b == nil {
		b = &barrier{name: a.Barrier, types: types, firstBy: t.Name, arrived: map[string]bool{}}
		in := map[string]bool{}
		for _, typ := range types {
			in[typ] = true
		}
		for _, x := range r.tasks {
			if len(types) == 0 || in[x.Type] {
				b.participants = append(b.participants, x.Name)
			}
		}
		if r.barriers == nil {
			r.barriers = map[string]*barrier{}
		}
		r.barriers[a.Barrier] = b
		r.barrierOrder = append(r.barrierOrder, a.Barrier)
		for _, x := range r.tasks {
			if b.has(x.Name) && x.done && b.broken == "" {
				b.broken = fmt.Sprintf("barrier %q is broken: %s ended (%s) before arriving", b.name, x.Name, strings.ToLower(x.status.State))
			}
		}
	} else if strings.Join(b.types, ",") != strings.Join(types, ",") {
		return nil, fmt.Sprintf("barrier %q is for %s (as %s declared it), not %s", a.Barrier, typesText(b.types), b.firstBy, typesText(types))
	}
	if !b.has(t.Name) {
		return nil, fmt.Sprintf("%s is not a participant of barrier %q, which is for %s", t.Name, a.Barrier, typesText(b.types))
	}
	return b, ""
}

func typesText(types []string) string {
	if len(types) == 0 {
		return "every task"
	}
	return "task types " + strings.Join(types, ", ")
}

// breakBarriers fails every unreleased barrier task t takes part in: t ended and can no longer pass it.
func (r *run) breakBarriers(t *task) {
	var out []delivery
	for _, name := range r.barrierOrder {
		b := r.barriers[name]
		if b.released || b.broken != "" || !b.has(t.Name) {
			continue
		}
		why := strings.ToLower(t.status.State)
		if t.status.Error != "" {
			why = t.status.Error
		}
		b.broken = fmt.Sprintf("barrier %q is broken: %s ended (%s)", name, t.Name, why)
		var waiters []*task
		for _, p := range b.order {
			if w := r.byName[p]; !w.done {
				waiters = append(waiters, w)
			}
		}
		if len(waiters) > 0 {
			out = append(out, delivery{barrier: name, err: b.broken, tasks: waiters, all: true})
		}
	}
	r.todo.deliver = append(r.todo.deliver, out...)
}

// deliver publishes each delivery as one memo upsert, which host workers following the history apply. A
// delivery to every waiter of a barrier goes out untargeted.
func (r *run) deliver(ctx workflow.Context, ds []delivery) {
	for _, d := range ds {
		r.outcomes++
		o := BarrierOutcome{Seq: r.outcomes, Generation: r.generation, Barrier: d.barrier, Error: d.err}
		switch {
		case d.stale != nil:
			o.Tasks = []TaskAttempt{*d.stale}
		case !d.all:
			for _, t := range d.tasks {
				o.Tasks = append(o.Tasks, TaskAttempt{Task: t.Name, Attempt: t.status.Attempt})
			}
		}
		if err := workflow.UpsertMemo(ctx, map[string]interface{}{MemoBarrier: o}); err != nil {
			workflow.GetLogger(ctx).Error("cannot publish a barrier outcome", "barrier", d.barrier, "error", err)
		}
	}
}

func (r *run) barrierStatus() ([]BarrierStatus, *BarrierCounts) {
	if len(r.barrierOrder) == 0 {
		return nil, nil
	}
	var out []BarrierStatus
	counts := &BarrierCounts{Total: len(r.barrierOrder)}
	for i, name := range r.barrierOrder {
		b := r.barriers[name]
		if b.released {
			counts.Released++
		}
		if b.broken != "" {
			counts.Broken++
		}
		if i >= len(r.barrierOrder)-recentBarriers {
			out = append(out, b.status(r.generation))
		}
	}
	return out, counts
}

// runningHosts lists, in plan order, the hosts of tasks that are placed and not over.
func (r *run) runningHosts() []string {
	var hosts []string
	seen := map[string]bool{}
	for _, t := range r.tasks {
		if t.placed && !t.done && !seen[t.status.Host] {
			seen[t.status.Host] = true
			hosts = append(hosts, t.status.Host)
		}
	}
	return hosts
}

// onStop takes the first stop request: every host is to be told its tasks should stop, and after
// stopGracePeriod the stragglers are killed.
func (r *run) onStop(ctx workflow.Context, req StopRequest) {
	if r.stopReq != nil || r.decision != nil {
		return // the first request wins
	}
	if r.superseded(ctx, req, "stop request") {
		return
	}
	if req.KeepRun {
		if r.overtaken(ctx, req) {
			return
		}
		if r.stopAsked == nil {
			r.stopAsked = &req
			r.everAsked = true
			r.todo.askStop = true
		}
		return
	}
	r.stopReq = &req
	r.endWaiting(ctx)
	by := req.Task
	if by == "" {
		by = "outside the run"
	}
	workflow.GetLogger(ctx).Info("stop requested", "by", by, "error", req.Error)
	r.todo.notifyStop = true
}

// ChangeStopEndsWaiting marks runs whose stop request ends at once the tasks that wait to start: a restart's
// backoff, or a hold for room in the pool. Before, a backoff that ran out during the stop's grace period
// started the task again (a new process during a stop) and the run waited for it until the grace period's
// end. Likewise a task whose host lost it before it started is not launched again during a stop (relaunch).
// Asked only when some task waits, so runs from before replay as they were.
const ChangeStopEndsWaiting = "clusterrun-stop-ends-waiting"

// endWaiting ends the tasks that wait to start when the run is asked to stop: nothing of theirs runs.
func (r *run) endWaiting(ctx workflow.Context) {
	var waiting []*task
	for _, t := range r.tasks {
		if !t.done && t.between() {
			waiting = append(waiting, t)
		}
	}
	if len(waiting) == 0 || workflow.GetVersion(ctx, ChangeStopEndsWaiting, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	for _, t := range waiting {
		why := "stopped before its restart: the run was asked to stop during the backoff"
		if t.held {
			why = "stopped before it started: it was held back for room in pool " + t.Pool
		}
		t.cancelBackoff()
		t.backoff, t.cancelBackoff, t.held = nil, nil, false
		r.endUnstarted(ctx, t, why)
	}
}

// endUnstarted ends, stopped, a task of a stopping run that has nothing running, and says why.
func (r *run) endUnstarted(ctx workflow.Context, t *task, why string) {
	now := workflow.Now(ctx)
	t.done = true
	t.status.State, t.status.Error, t.status.EndTime = TaskStopped, why, &now
	r.taskOver(t)
}

// onClearStop takes back a standing keepRun request: should-stop is false again, and a later request counts.
func (r *run) onClearStop(ctx workflow.Context, req StopRequest) {
	if r.superseded(ctx, req, "clear-stop") {
		return
	}
	if req.Task != "" && req.Seq > r.cleared[req.Task] {
		r.cleared[req.Task] = req.Seq
	}
	if r.stopAsked == nil || r.stopReq != nil || r.decision != nil {
		return
	}
	r.stopAsked = nil
	r.todo.askStop = true
}

// ChangeOrderedStops marks runs that drop a task's keepRun stop request when a clear-stop the task sent after
// it was taken first. A selector takes inputs that came in one workflow task behind a third in the order they
// were added to it, clear-stops before stop requests, so a task's request_stop(keep_run) and clear_stop in
// quick succession left its run asking every task to stop. Asked only when such a request comes, so other runs
// write no marker, and runs from before replay as they were.
const ChangeOrderedStops = "clusterrun-ordered-stops"

// overtaken says (and logs) whether req is a keepRun request that a clear-stop its task sent later has overtaken.
func (r *run) overtaken(ctx workflow.Context, req StopRequest) bool {
	if req.Task == "" || req.Seq == 0 || req.Seq >= r.cleared[req.Task] ||
		workflow.GetVersion(ctx, ChangeOrderedStops, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return false
	}
	workflow.GetLogger(ctx).Info("ignoring a stop request (keepRun) that the task's later clear-stop overtook", "task", req.Task)
	return true
}

// superseded says (and logs) whether a request comes from an attempt that is no longer the task's current one.
func (r *run) superseded(ctx workflow.Context, req StopRequest, what string) bool {
	if t := r.byName[req.Task]; r.leased && req.Task != "" && (t == nil || req.Attempt != t.status.Attempt) {
		workflow.GetLogger(ctx).Warn("ignoring a "+what+" from a superseded attempt", "task", req.Task, "attempt", req.Attempt)
		return true
	}
	return false
}

// askStop tells every host running tasks that they are asked to stop (keepRun), or, once cleared, no longer.
func (r *run) askStop(ctx workflow.Context, info *workflow.Info) []workflow.Future {
	var futures []workflow.Future
	for _, h := range r.runningHosts() {
		futures = append(futures, r.askHost(ctx, info, h))
	}
	return futures
}

// askHost tells one host where the run's keepRun request stands: its tasks are asked to stop, or no longer.
func (r *run) askHost(ctx workflow.Context, info *workflow.Info, host string) workflow.Future {
	in := NotifyStopInput{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID, Clear: r.stopAsked == nil}
	if a := r.stopAsked; a != nil {
		in.By, in.Error, in.KeepRun = orOutside(a.Task), a.Error, true
	}
	return workflow.ExecuteActivity(controlOptions(ctx, host, 30*time.Second, "ask tasks to stop on "+host), ActivityNotifyStop, in)
}

// StopByOutside is who asked a run to stop, as its tasks see it (NotifyStopInput.By, should-stop's "by"), when
// no task did: the clusterrun stop command, a signal sent with the temporal CLI.
const StopByOutside = "outside the run"

func orOutside(task string) string {
	if task == "" {
		return StopByOutside
	}
	return task
}

// notifyStop tells every host running tasks that the run asks them to stop; it returns the NotifyStop futures.
func (r *run) notifyStop(ctx workflow.Context, info *workflow.Info) []workflow.Future {
	var futures []workflow.Future
	for _, h := range r.runningHosts() {
		futures = append(futures, r.notifyHost(ctx, info, h))
	}
	return futures
}

// notifyHost tells one host that the run asks its tasks to stop.
func (r *run) notifyHost(ctx workflow.Context, info *workflow.Info, host string) workflow.Future {
	return workflow.ExecuteActivity(controlOptions(ctx, host, 30*time.Second, "notify stop on "+host), ActivityNotifyStop,
		NotifyStopInput{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID, By: orOutside(r.stopReq.Task), Error: r.stopReq.Error})
}

// stopDecision is how a run ends after a stop request.
func (r *run) stopDecision(stragglers bool) decision {
	by := "stop requested by " + r.stopReq.Task
	if r.stopReq.Task == "" {
		by = "stop requested from outside the run"
	}
	d := decision{status: StatusSucceeded, reason: by, kill: stragglers}
	if r.stopReq.Error != "" {
		d.status, d.reason = StatusFailed, by+": "+r.stopReq.Error
	}
	return d
}

// deadlineWarning sends the spec's signal to every running task process.
func (r *run) deadlineWarning(ctx workflow.Context, info *workflow.Info) []workflow.Future {
	var futures []workflow.Future
	for _, h := range r.runningHosts() {
		futures = append(futures, workflow.ExecuteActivity(
			controlOptions(ctx, h, 30*time.Second, fmt.Sprintf("%s to tasks on %s (deadline warning)", r.plan.DeadlineSignal, h)),
			ActivitySignalTasks, SignalTasksInput{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID, Signal: r.plan.DeadlineSignal}))
	}
	return futures
}

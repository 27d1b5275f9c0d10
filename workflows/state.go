package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/clusterrun/clusterrun/spec"
)

// task is the workflow's bookkeeping for one task in the current generation.
type task struct {
	spec.Task
	seq    int // the task's place in the run (r.tasks): its shard in a sharded run
	status TaskStatus
	future workflow.Future     // the current lease's RunTask
	cancel workflow.CancelFunc // cancels that RunTask alone
	placed bool
	// placedHost is the host the run chose for this unpinned task's current launch ("" leaves it to its pool),
	// and waitNote says why it may wait (no free slot there, no live host of its pool, its pinned host not live).
	placedHost string
	waitNote   string
	done       bool
	terminated bool // the user asked to stop it (terminate-task)
	starts     int  // runs before leases: launches by start-task after the first, for unique activity IDs

	// In runs with leases:
	attempt  int  // the current attempt, 1-based; 0 before the first launch
	lease    int  // the current lease on that attempt
	attached bool // the current lease re-attaches (it started no process)
	released bool // the current attempt got the cluster map, so its process may have started
	// preplaced: the current lease carries the map and the task's chosen port; its host has not said yet
	// whether it started the task there.
	preplaced bool
	mapSent   bool // a Release (or a pre-placed lease) carried the map toward the current attempt: it may have started unconfirmed
	// lostHost: the last attempt was lost with its host (silent, or without a record of it): a restart avoids
	// that host rather than going back to it.
	lostHost bool
	// hostStopped: the last attempt's host stopped it or lost its supervisor (TaskResult.StoppedByHost): its
	// restart policy takes the end for the environment's, whatever its exit code (restartCode).
	hostStopped bool
	// ports holds the port the task had on each host it ran on: it asks for the same one there again.
	ports    map[string]int
	restarts int // restarts used from the task's own budget (scope: task)
	// startFailed: the attempt could not start at all (missing command or folder); never restarted.
	startFailed bool
	// backoff is the timer the task waits on without a lease (nil when none): a pending restart's, or a hold
	// for room in its pool (overflow.go); cancelBackoff stops it.
	backoff       workflow.Future
	cancelBackoff workflow.CancelFunc
	held          bool // that timer is a hold for room, not a restart's backoff
	// group is the current lease's tasks (a batch, or this task alone) when they went to a host the run chose, and
	// what cancels it: a check of the hosts moves the group when that host is gone (move.go).
	group *leaseGroup
	// moving: that lease was canceled to launch the task elsewhere. movedFrom is the host the current attempt
	// left before it started (moved off it, or given up by it), which its next placement avoids.
	moving    bool
	movedFrom string
	// noRecord is a host's answer to the run's stop that it has no record of the current attempt (or ""):
	// nothing of it runs there.
	noRecord string
	// ended is the task's status as its attempt ended in the last generation, while a gang restart's backoff
	// holds the next launch: the status shows it (status starts afresh for the launch).
	ended *TaskStatus
}

// between says the task has no RunTask under way: it waits for a restart's backoff, or held back for room in
// its pool.
func (t *task) between() bool { return t.backoff != nil }

// decision is how the current generation ends.
type decision struct {
	status  string // a final run status, or "" for a gang restart
	reason  string
	restart bool
	kill    bool // a stop request's grace period is over: kill what still runs, and name it
}

// run is the workflow's whole state; handlers only change it, the main flow acts on it.
type run struct {
	plan         *spec.Plan
	tasks        []*task
	byName       map[string]*task
	generation   int
	restartCount int
	noRestarts   string // why no restart is made any more (its history is past the budget), or ""
	released     bool   // the current generation's rendezvous is complete (or its launch was pre-placed)
	mapRevision  int    // the cluster map's changes in this generation (ClusterMap.Revision)
	prePlaced    *prePlacement
	status       string
	reason       string
	startTime    time.Time
	// queued is when the server started the run: its place in the queue of a full pool (RunTasksInput.Queued,
	// PortRequest.Queued). The first workflow task's time, startTime, may come later for a run started first.
	queued       time.Time
	endTime      *time.Time
	decision     *decision
	barriers     map[string]*barrier
	barrierOrder []string
	stopReq      *StopRequest
	stopDeadline time.Time        // when the stop request's grace period ends: a later stop does not extend it
	stopAsked    *StopRequest     // a keepRun request standing until clear-stop
	everAsked    bool             // a keepRun request has stood at some time (a re-attached task's host is told where it stands)
	restartAt    *time.Time       // the end of a gang restart's backoff while it runs
	cleared      map[string]int64 // per task, the Seq of the latest clear-stop it sent that the run took
	signals      int              // signals received, against the run's signal budget
	outcomes     int              // barrier outcomes published (BarrierOutcome.Seq)
	searchable   bool             // started with clusterrun's search attributes, so it may update them
	shownWaiting bool             // its search attribute says Waiting (waiting.go)
	// leased: the run uses leases (started by this version or later). Runs started before replay with
	// Temporal's retries as their restarts, and a lost heartbeat as a lost task.
	leased bool
	// batched: the run's leases are RunTasks batches (started by this version or later); batchLeases counts
	// the batches of more than one task, which name them.
	batched     bool
	batchLeases int
	ref         *RunRef // this execution, named in every lease's input
	// sharded: the run has more tasks than its tasksPerShard, and shards holds the current generation's.
	sharded bool
	shards  *shardSet

	// What the handlers decided to do; act carries it out after each wait, in this order.
	todo actions
}

func newRun(p *spec.Plan, now time.Time) *run {
	r := &run{plan: p, byName: map[string]*task{}, status: StatusRunning, startTime: now, cleared: map[string]int64{}}
	for _, t := range p.Tasks {
		tk := &task{Task: t, seq: len(r.tasks), status: TaskStatus{Name: t.Name, Type: t.Type, Index: t.Index, State: TaskPending, Host: t.Host}}
		r.tasks = append(r.tasks, tk)
		r.byName[t.Name] = tk
	}
	return r
}

// MaxResultsBytes bounds the task results one RunStatus carries, so the run's result and the status query stay
// far below Temporal's 2 MB payload limit however many tasks write results.
const MaxResultsBytes = 1 << 20

// MaxStatusBytes bounds the tasks' part of a RunStatus (results included) in a run too large for every detail
// of every task to fit Temporal's 2 MB payload limit (10,000 tasks take about 2.3 MB in full).
const MaxStatusBytes = 1792 << 10

// waitsOn shows a pending task's row at the host the run placed its launch on, where its lease waits (for a
// slot, say), rather than at the host of its attempt before: a task restarted off a drained host showed
// `Pending  host-b` while its row said it waited for a slot on host-a. Its address there comes with its start.
// The task's own record keeps the host before, where a restart tries to bring it back.
func waitsOn(row *TaskStatus, t *task) {
	if row.State != TaskPending || t.placedHost == "" || row.Host == t.placedHost {
		return
	}
	row.Host, row.Addr, row.Port = t.placedHost, "", 0
}

// snapshot is the query "status" and the run's result.
func (r *run) snapshot() RunStatus {
	s := RunStatus{Name: r.plan.Name, Status: r.status, Reason: r.reason, RestartCount: r.restartCount,
		StartTime: r.startTime, EndTime: r.endTime, Sharded: r.sharded, NoItems: r.plan.Items == nil}
	if r.waiting() || r.waitingForHosts() {
		s.Status = StatusWaiting
	}
	s.Tasks = make([]TaskStatus, len(r.tasks))
	for i, t := range r.tasks {
		s.Tasks[i] = t.status
		if t.ended != nil {
			s.Tasks[i] = r.endedRow(t)
		}
		s.Tasks[i].Starting = t.preplaced && s.Tasks[i].State == TaskPlaced
		waitsOn(&s.Tasks[i], t)
	}
	fitStatuses(s.Tasks)
	s.Barriers, s.BarrierCounts = r.barrierStatus()
	s.StopRequest = r.stopReq
	if r.stopReq != nil && r.decision == nil && r.endTime == nil && !r.stopDeadline.IsZero() {
		at := r.stopDeadline
		s.StopDeadline = &at
	}
	s.StopAsked = r.stopAsked
	if r.endTime == nil {
		s.RestartAt = r.restartAt
	}
	return s
}

// fitStatuses keeps a run's task statuses within MaxStatusBytes. Every task stays listed with its state, host,
// attempt and exit; past the budget, tasks in order lose their address, times, earlier attempts and error text
// (DetailsOmitted), then results are kept in task order while they fit (ResultOmitted: result.json on the
// task's host keeps it).
func fitStatuses(tasks []TaskStatus) {
	const resultField, omittedField = len(`,"result":`), len(`,"resultOmitted":true`)
	size := 0
	if len(tasks) > spec.MaxTasksPerShard { // smaller runs fit with room to spare: no need to measure
		for i := range tasks {
			size += statusBytes(tasks[i]) + omittedField
		}
		for i := 0; i < len(tasks) && size > MaxStatusBytes-MaxStatusBytes/8; i++ {
			before := statusBytes(tasks[i])
			omitDetails(&tasks[i])
			size -= before - statusBytes(tasks[i])
		}
	}
	budget := min(MaxResultsBytes, MaxStatusBytes-size)
	for i := range tasks {
		st := &tasks[i]
		if st.Result == nil {
			continue
		}
		cost := len(st.Result) + resultField
		if cost > budget {
			st.Result, st.ResultOmitted = nil, true
			continue
		}
		budget -= cost
	}
}

// statusBytes is the size of a task's status in JSON, its result left out.
func statusBytes(st TaskStatus) int {
	st.Result = nil
	// Its output is a function of its input; workflowcheck sees the encoder cache's map.
	//workflowcheck:ignore
	b, _ := json.Marshal(st)
	return len(b)
}

// omitDetails drops what a task's status can do without: its address, times, earlier attempts, log sizes, the
// host it moved off and error text (its logs and error.json on its host keep the cause; the run's reason names the first failure).
func omitDetails(st *TaskStatus) {
	st.Addr, st.Port, st.StartTime, st.EndTime, st.Earlier, st.Error, st.Logs, st.Moved = "", 0, nil, nil, nil, "", nil, ""
	st.DetailsOmitted = true
}

// decide records how the generation ends; the first decision wins.
func (r *run) decide(d decision) {
	if r.decision == nil {
		r.decision = &d
	}
}

func (r *run) allPlaced() bool {
	for _, t := range r.tasks {
		if !t.placed && !t.done {
			return false
		}
	}
	return true
}

func (r *run) allDone() bool {
	for _, t := range r.tasks {
		if !t.done {
			return false
		}
	}
	return true
}

// endOf turns a RunTask future's outcome into the task's final state for this generation.
func (r *run) endOf(ctx workflow.Context, t *task, now time.Time) {
	var res TaskResult
	err := t.future.Get(ctx, &res)
	r.settle(t, res, err, now)
}

// settle records how a task's attempt ended, from its RunTask's result or error.
func (r *run) settle(t *task, res TaskResult, err error, now time.Time) {
	t.done = true
	st := &t.status
	st.EndTime = &now
	if st.StartTime == nil && res.PID > 0 && !res.StartTime.IsZero() {
		start := res.StartTime // a pre-placed task that ended before its host's report that it started came
		st.StartTime = &start
	}
	var appErr *temporal.ApplicationError
	var canceled *temporal.CanceledError
	timeout, timedOut := timeoutOf(err)
	switch {
	case err == nil:
		st.State = TaskSucceeded
		if res.Stopped {
			st.State = TaskStopped
		}
		// Its host reported the end: a note of lost contact or of an unconfirmed stop, which an end can
		// overtake, no longer holds.
		st.Error = ""
		r.record(t, res)
	case errors.As(err, &canceled):
		st.State = TaskStopped
		if canceled.HasDetails() && canceled.Details(&res) == nil {
			r.record(t, res)
		}
		if why, ok := stoppedWaiting(st.Error); ok && st.StartTime == nil && res.PID == 0 {
			st.Error = why
		}
	case !timedOut && errors.As(err, &appErr):
		if appErr.HasDetails() && appErr.Details(&res) == nil {
			r.record(t, res)
		}
		st.State = TaskFailed
		st.Error = appErr.Message()
		t.startFailed = appErr.Type() == ErrTaskStartFailed
		if appErr.Type() == ErrTaskRestart {
			// Policy Always ran out of restarts on a clean exit: that is a success.
			st.State, st.Error = TaskSucceeded, ""
		}
	case timedOut:
		st.State = TaskFailed
		code := -1
		st.ExitCode = &code
		switch timeout.TimeoutType() {
		case enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
			st.Error = fmt.Sprintf("no host worker picked up %s within startTimeout %s: is a clusterrun-worker running for %s?",
				t.Name, r.plan.StartTimeout, placeOf(t))
			if t.Host == "" && t.placedHost != "" {
				// Its host's queue takes as many leases at once as the host has slots: a live host whose slots
				// stayed taken leaves the lease there too.
				st.Error = fmt.Sprintf("no host worker picked up %s within startTimeout %s on host %s, where the run placed it from pool %s: "+
					"its worker was down, or its slots (--slots) stayed taken (clusterrun hosts shows which)", t.Name, r.plan.StartTimeout, t.placedHost, t.Pool)
			}
			var hostSaid *temporal.ApplicationError
			if errors.As(timeout.Unwrap(), &hostSaid) {
				// Its host took its lease up but had no free slot for it (a batch member).
				st.Error = fmt.Sprintf("%s found no free slot within startTimeout %s: %s", t.Name, r.plan.StartTimeout, hostSaid.Message())
			}
			if head := slotNotePrefix + t.placedHost + ": "; t.placedHost != "" && strings.HasPrefix(t.waitNote, head) {
				st.Error = fmt.Sprintf("%s found no free slot on %s within startTimeout %s: %s", t.Name, t.placedHost, r.plan.StartTimeout,
					strings.TrimPrefix(t.waitNote, head))
			}
		case enumspb.TIMEOUT_TYPE_HEARTBEAT:
			st.Error = fmt.Sprintf("%s lost: no heartbeat from host %s for %s (host worker stopped or unreachable)",
				t.Name, orUnknown(st.Host), r.plan.HeartbeatTimeout)
		default:
			st.Error = fmt.Sprintf("%s timed out (%s)", t.Name, timeout.TimeoutType())
		}
	default:
		st.State = TaskFailed
		st.Error = err.Error()
	}
	if r.status == StatusStopping && st.State == TaskFailed && res.Stopped {
		st.State = TaskStopped
	}
	if t.terminated && st.State != TaskSucceeded {
		st.State, st.Error = TaskTerminated, "terminated by the user"
	}
}

// stoppedWaiting is the error of a task stopped before it started, from the note of what it waited for (a host,
// a slot, a host of its pool), which alone read as if it still waited; ok is false for a note of another kind.
func stoppedWaiting(note string) (why string, ok bool) {
	if !strings.HasPrefix(note, "waiting for ") {
		return "", false
	}
	return "stopped before it started: it was " + note, true
}

func (r *run) record(t *task, res TaskResult) {
	st := &t.status
	if res.Host != "" {
		st.Host = res.Host
	}
	if res.Attempt > 0 {
		st.Attempt = res.Attempt
	}
	st.ExitCode = nil
	if res.PID > 0 || res.ExitCode != 0 || res.Signal != "" {
		// Only a process that ran has an exit code: an attempt stopped before it started (at its rendezvous,
		// or waiting for a slot) comes back as 0 from its host.
		code := res.ExitCode
		st.ExitCode = &code
	}
	st.Signal, st.OutOfMemory = res.Signal, res.OutOfMemory
	st.Result = res.Result
	st.Logs = res.Logs
	if res.Error != "" {
		st.Error = res.Error
	}
}

// timeoutOf finds a timeout that is the lease's error itself (the activity's wrapper taken off), not one's
// cause: a host that had no slot for a batch member says why as the timeout's cause.
func timeoutOf(err error) (*temporal.TimeoutError, bool) {
	var actErr *temporal.ActivityError
	if errors.As(err, &actErr) {
		err = actErr.Unwrap()
	}
	t, ok := err.(*temporal.TimeoutError)
	return t, ok
}

func placeOf(t *task) string {
	if t.Host != "" {
		return "host " + t.Host + " (--host " + t.Host + ")"
	}
	if t.placedHost != "" {
		return fmt.Sprintf("host %s, where the run placed it from pool %s (clusterrun hosts shows when it last reported)", t.placedHost, t.Pool)
	}
	return "pool " + t.Pool + " (--pool " + t.Pool + ")"
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// judge decides, after task t ended on its own, whether the generation ends.
func (r *run) judge(t *task) {
	st := t.status
	p := r.plan
	if r.stopReq != nil {
		// A requested stop decides the outcome: endings during its grace period change nothing.
		if r.allDone() {
			r.decide(r.stopDecision(false))
		}
		return
	}
	switch st.State {
	case TaskTerminated:
		if t.Type == "chief" && p.ChiefExit == spec.ChiefExitTerminate {
			r.decide(decision{status: StatusCanceled, reason: "chief-0 terminated by the user"})
			return
		}
	case TaskSucceeded:
		if t.Type == "chief" && p.ChiefExit == spec.ChiefExitTerminate {
			r.decide(decision{status: StatusSucceeded, reason: "chief-0 exited 0"})
			return
		}
	case TaskFailed:
		code := t.restartCode()
		cause := failureText(st)
		if p.Scope == spec.ScopeAll && p.Gang.Restartable(code) && r.restartCount < p.Gang.MaxRestarts {
			if r.noRestarts == "" {
				r.decide(decision{restart: true, reason: cause})
				return
			}
			cause += "; no gang restart: " + r.noRestarts
		} else if why := whyNoRestart(p.Gang, r.restartCount, code, "the run's"); p.Scope == spec.ScopeAll && why != "" {
			cause += "; no gang restart: " + why
		}
		if t.Type == "chief" {
			r.decide(decision{status: StatusFailed, reason: cause})
			return
		}
		if p.OnFailure == spec.OnFailureFailFast {
			r.decide(decision{status: StatusFailed, reason: cause + " (onFailure: failFast)"})
			return
		}
	}
	if r.allDone() {
		r.decide(r.verdict())
	}
}

// verdict judges a generation in which every task ended on its own.
func (r *run) verdict() decision {
	if r.plan.HasChief() {
		chief := r.tasks[0].status
		if chief.State == TaskSucceeded {
			return decision{status: StatusSucceeded, reason: "chief-0 exited 0"}
		}
		return decision{status: StatusFailed, reason: failureText(chief)}
	}
	var failed []string
	for _, t := range r.tasks {
		if t.status.State == TaskFailed {
			failed = append(failed, t.Name)
		}
	}
	if len(failed) == 0 && len(r.tasks) == 1 {
		return decision{status: StatusSucceeded, reason: r.tasks[0].Name + " exited 0"}
	}
	if len(failed) == 0 {
		return decision{status: StatusSucceeded, reason: fmt.Sprintf("all %d tasks exited 0", len(r.tasks))}
	}
	first := r.byName[failed[0]].status
	return decision{status: StatusFailed, reason: fmt.Sprintf("%d of %d tasks failed; first: %s", len(failed), len(r.tasks), failureText(first))}
}

func failureText(st TaskStatus) string {
	if strings.HasPrefix(st.Error, st.Name+" ") {
		return st.Error
	}
	if st.Error != "" {
		return st.Name + " failed: " + st.Error
	}
	if st.ExitCode != nil {
		return fmt.Sprintf("%s failed with exit code %d", st.Name, *st.ExitCode)
	}
	return st.Name + " failed"
}

// resetForGeneration prepares every task for a new launch after a gang restart. Each keeps where its earlier
// attempts ran, this generation's included, for their logs; why they ended is the run's reason, said once.
func (r *run) resetForGeneration() {
	r.generation++
	r.restartCount++
	r.released, r.mapRevision = false, 0
	r.decision = nil
	r.barriers, r.barrierOrder = nil, nil
	for _, t := range r.tasks {
		ended := t.status
		t.ended = &ended
		t.placed, t.done, t.future = false, false, nil
		t.released, t.mapSent, t.startFailed, t.backoff, t.cancelBackoff, t.held = false, false, false, nil, nil, false
		t.preplaced, t.group, t.moving, t.movedFrom, t.noRecord = false, nil, false, "", ""
		keepPlace(&t.status, "")
		t.status = TaskStatus{Name: t.Name, Type: t.Type, Index: t.Index, State: TaskPending, Host: t.Host, Attempt: t.attempt,
			Earlier: t.status.Earlier}
	}
}

// endedRow is the status of a task whose next launch waits for a gang restart's backoff: its last attempt as it
// ended (state, host, exit, error), with GangWait saying the restart it waits for. A run that ended in the
// backoff shows the ending alone.
func (r *run) endedRow(t *task) TaskStatus {
	row := *t.ended
	if r.endTime == nil {
		row.GangWait = r.restartCount
	}
	return row
}

// forgetEnded ends the backoff's rows: the tasks' statuses are their new launch's.
func (r *run) forgetEnded() {
	r.restartAt = nil
	for _, t := range r.tasks {
		t.ended = nil
	}
}

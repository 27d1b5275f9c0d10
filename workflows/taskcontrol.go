package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/clusterrun/clusterrun/spec"
)

// onTerminate records the user's request to stop one task; act cancels its RunTask (so it is not restarted)
// and has its host stop the process (SIGTERM, stopGracePeriod, SIGKILL). The task then ends Terminated. A
// request for a task that is not running is logged and ignored; `clusterrun terminate-task` checks first and
// says so.
func (r *run) onTerminate(ctx workflow.Context, req TaskControl) {
	t := r.byName[req.Task]
	if t == nil || t.done || r.decision != nil {
		workflow.GetLogger(ctx).Warn("ignoring terminate-task: no such running task", "task", req.Task)
		return
	}
	t.terminated = true
	if t.between() {
		// It waits to restart: nothing runs, so it ends here and now.
		t.cancelBackoff()
		t.backoff, t.cancelBackoff, t.held = nil, nil, false
		r.endTerminated(ctx, t)
		return
	}
	r.todo.terminate = append(r.todo.terminate, t)
}

// endTerminated ends a terminated task that has nothing running: it waited to restart, or its host gave it up
// before it started.
func (r *run) endTerminated(ctx workflow.Context, t *task) {
	now := workflow.Now(ctx)
	t.done = true
	t.status.State, t.status.Error, t.status.EndTime = TaskTerminated, "terminated by the user", &now
	r.taskOver(t)
}

// terminate cancels t's RunTask and, if it was placed, stops its process on its host; it returns the StopTasks
// future.
func (r *run) terminate(ctx workflow.Context, info *workflow.Info, t *task) []workflow.Future {
	if t.cancel != nil {
		t.cancel()
	}
	if !t.placed {
		// A lease of its own ends with its cancellation before it starts; a task that shares its lease with
		// others is stopped once its placement comes in (onPlaced).
		return nil
	}
	h := t.status.Host
	return []workflow.Future{workflow.ExecuteActivity(
		stopOptions(ctx, r.plan, h, fmt.Sprintf("terminate %s on %s", t.Name, h)),
		ActivityStopTasks,
		StopTasksInput{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID, Tasks: []string{t.Name},
			GracePeriod: r.plan.StopGracePeriod, Reason: "terminated by the user"})}
}

// MaxTasksOf is the most tasks a run may grow to with start-task: a run that holds its leases itself keeps
// them under Temporal's 2,000 pending activities; a sharded run starts more shards.
func MaxTasksOf(sharded bool) int {
	if sharded {
		return spec.MaxTasks
	}
	return spec.MaxTasksPerShard
}

// ChangeStartTaskComesBack marks runs whose task started again with start-task comes back like a restart: to
// its last host and port when that host is live, with its earlier attempts' hosts kept in its status. Before,
// its status was reset, so an unpinned task went wherever placement put it, and `logs --attempt` looked for
// its earlier attempts on its new host.
const ChangeStartTaskComesBack = "clusterrun-start-task-comes-back"

// onStart records the user's request to start a task that is not running: an ended one again (its attempts go
// on counting), or a new index of a type (a copy of the type's first task, with the next rank). The request is
// logged and ignored when it cannot be served; `clusterrun start-task` checks first and says why.
// ChangeStartTaskNoGaps marks runs whose start-task refuses a new index past the next of its type; asked only
// when one comes, so runs from before, which added it, replay as they were.
const ChangeStartTaskNoGaps = "clusterrun-start-task-no-gaps"

func (r *run) onStart(ctx workflow.Context, req TaskControl) {
	logger := workflow.GetLogger(ctx)
	var proto *task
	count := 0
	for _, t := range r.tasks {
		if t.Type == req.Type {
			if proto == nil {
				proto = t
			}
			count++
		}
	}
	if proto == nil || r.decision != nil || r.stopReq != nil {
		logger.Warn("ignoring start-task: no such task type, or the run is ending", "type", req.Type)
		return
	}
	index := count
	if req.Index != nil {
		index = *req.Index
	}
	name := fmt.Sprintf("%s-%d", req.Type, index)
	if t := r.byName[name]; t != nil {
		if !t.done {
			logger.Warn("ignoring start-task: the task is running", "task", name)
			return
		}
		offset := t.status.Attempt
		t.starts++
		t.placed, t.done, t.terminated, t.startFailed = false, false, false, false
		if workflow.GetVersion(ctx, ChangeStartTaskComesBack, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			t.status = TaskStatus{Name: t.Name, Type: t.Type, Index: t.Index, State: TaskPending, Host: t.Host, Attempt: offset}
		} else {
			// As a restart: the status keeps its last host, so the placement prefers it, and the lease records
			// where this attempt ran among the earlier ones.
			t.status.State, t.status.Error = TaskPending, "started again with start-task"
		}
		r.todo.launch = append(r.todo.launch, launchOrder{t: t, how: newAttempt, offset: offset})
		return
	}
	if index < 0 {
		logger.Warn("ignoring start-task: negative index", "index", index)
		return
	}
	if index != count && workflow.GetVersion(ctx, ChangeStartTaskNoGaps, workflow.DefaultVersion, 1) == 1 {
		// TF_CONFIG lists a type's addresses by index: worker-5 beside worker-0 and worker-1 would be index 5
		// of a list of three, and every other worker's list would put it at index 2.
		logger.Warn("ignoring start-task: a new index must be the next of its type", "task", name, "next", fmt.Sprintf("%s-%d", req.Type, count))
		return
	}
	if most := MaxTasksOf(r.sharded); len(r.tasks) >= most {
		logger.Warn("ignoring start-task: the run has as many tasks as it may have", "tasks", len(r.tasks), "max", most)
		return
	}
	nt := &task{Task: proto.Task, seq: len(r.tasks)}
	nt.Name, nt.Index = name, index
	nt.Host = ""
	if proto.Rank >= 0 {
		nt.Rank = len(r.tasks)
	}
	nt.status = TaskStatus{Name: name, Type: nt.Type, Index: index, State: TaskPending}
	r.tasks = append(r.tasks, nt)
	r.byName[name] = nt
	r.todo.launch = append(r.todo.launch, launchOrder{t: nt, how: newAttempt, offset: r.generation})
}

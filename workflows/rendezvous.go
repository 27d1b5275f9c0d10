package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"
)

// onPlaced records where tasks landed and queues their release once the rendezvous is complete: every task at
// once the first time, and later on (restarted tasks) those of this signal.
func (r *run) onPlaced(ctx workflow.Context, sig PlacedSignal) {
	for _, p := range sig.Placements {
		t := r.byName[p.Task]
		if t == nil {
			workflow.GetLogger(ctx).Warn("ignoring a placement for a task this run does not have", "task", p.Task, "host", p.Host)
			continue
		}
		if p.Generation != r.generation || t.done || r.decision != nil || r.stopReq != nil {
			continue // stale: an earlier generation, or a task already over
		}
		if r.leased && p.Reattached {
			if p.Attempt == t.attempt && p.Lease == t.lease && t.status.State == TaskUnreachable {
				t.status.State, t.status.Error = TaskRunning, ""
			}
			continue
		}
		if r.leased && (p.Attempt != t.attempt || p.Lease != t.lease || t.placed) {
			continue // an earlier lease, or a placement seen already
		}
		t.placed = true
		st := &t.status
		st.State, st.Host, st.Addr, st.Port = TaskPlaced, p.Host, p.Addr, p.Port
		st.Attempt = p.Attempt
		st.ExitCode, st.Signal, st.Error, st.EndTime = nil, "", "", nil
		if r.released {
			r.todo.release = append(r.todo.release, t)
		}
	}
	if !r.released && r.allPlaced() {
		r.released = true
		for _, t := range r.tasks {
			if t.placed && !t.done {
				r.todo.release = append(r.todo.release, t)
			}
		}
	}
}

// releaseByHost sends the cluster map to waiting tasks, one Release per host, and returns the futures with the
// tasks each one carries.
func (r *run) releaseByHost(ctx workflow.Context, info *workflow.Info, tasks []*task) ([]workflow.Future, [][]*task) {
	var hosts []string
	byHost := map[string][]*task{}
	for _, t := range tasks {
		h := t.status.Host
		if _, ok := byHost[h]; !ok {
			hosts = append(hosts, h)
		}
		byHost[h] = append(byHost[h], t)
	}
	var futures []workflow.Future
	var groups [][]*task
	for _, h := range hosts {
		futures = append(futures, r.release(ctx, info, byHost[h]))
		groups = append(groups, byHost[h])
	}
	return futures, groups
}

// release sends the cluster map to waiting attempts on one host (all given tasks share that host). In runs
// before leases a task counts as running from here; with leases, from its host's confirmation (released).
func (r *run) release(ctx workflow.Context, info *workflow.Info, tasks []*task) workflow.Future {
	now := workflow.Now(ctx)
	in := ReleaseInput{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID, Cluster: r.clusterMap()}
	for _, t := range tasks {
		if !r.leased {
			t.status.State = TaskRunning
			t.released = true
		}
		t.status.StartTime = &now
		in.Tasks = append(in.Tasks, TaskAttempt{Task: t.Name, Attempt: t.status.Attempt})
	}
	host := tasks[0].status.Host
	return workflow.ExecuteActivity(controlOptions(ctx, host, 30*time.Second, fmt.Sprintf("release %d task(s) on %s", len(tasks), host)),
		ActivityRelease, in)
}

// onReleased records a Release's answer: the tasks its host found waiting got the map, so their processes start;
// a Release that failed (its host did not answer in time: the server was down, say) is sent again to those
// still waiting for it.
func (r *run) onReleased(tasks []*task, res ReleaseResult, err error) {
	if err != nil {
		for _, t := range tasks {
			if t.placed && !t.released && !t.done && t.status.State == TaskPlaced {
				r.todo.release = append(r.todo.release, t)
			}
		}
		return
	}
	got := map[string]bool{}
	for _, name := range res.Released {
		got[name] = true
	}
	for _, t := range tasks {
		if got[t.Name] && t.placed && !t.done && t.status.State == TaskPlaced {
			t.released = true
			t.status.State = TaskRunning
		}
	}
}

// clusterMap is every task's endpoint as of now, in plan order.
func (r *run) clusterMap() ClusterMap {
	m := ClusterMap{Generation: r.generation}
	for _, t := range r.tasks {
		m.Endpoints = append(m.Endpoints, Endpoint{Task: t.Name, Type: t.Type, Host: t.status.Host, Addr: t.status.Addr, Port: t.status.Port})
	}
	return m
}

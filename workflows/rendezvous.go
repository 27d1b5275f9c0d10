package workflows

import (
	"fmt"
	"slices"
	"strings"
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
		if p.Generation != r.generation || t.done || r.decision != nil {
			continue // stale: an earlier generation, or a task already over
		}
		if r.leased && p.Reattached {
			if p.Attempt == t.attempt && p.Lease == t.lease && t.status.State == TaskUnreachable && (r.stopReq == nil || backDuringStop(ctx)) {
				t.status.State, t.status.Error = TaskRunning, ""
				if r.stopReq != nil && !slices.Contains(r.todo.renotify, p.Host) {
					// Its host may not have heard of the stop: its worker was down when the run told it.
					r.todo.renotify = append(r.todo.renotify, p.Host)
				}
				if r.stopReq == nil && r.everAsked && !slices.Contains(r.todo.reask, p.Host) && askOnReturn(ctx) {
					// Nor of a keepRun request, or of its clear: tell it where the ask stands now.
					r.todo.reask = append(r.todo.reask, p.Host)
				}
			}
			continue
		}
		if r.stopReq != nil {
			continue // a stopping run starts nothing more
		}
		if r.leased && t.preplaced && p.Attempt == t.attempt && p.Lease == t.lease && r.onPrePlaced(t, p, workflow.Now(ctx)) {
			continue
		}
		if r.leased && (p.Attempt != t.attempt || p.Lease != t.lease || t.placed) {
			continue // an earlier lease, or a placement seen already
		}
		t.placed = true
		st := &t.status
		if r.leased && r.released && st.Port != 0 && (st.Host != p.Host || st.Addr != p.Addr || st.Port != p.Port) {
			r.todo.moved = append(r.todo.moved, t.Name)
			r.mapRevision++
		}
		if t.ports == nil {
			t.ports = map[string]int{}
		}
		t.ports[p.Host] = p.Port
		st.State, st.Host, st.Addr, st.Port = TaskPlaced, p.Host, p.Addr, p.Port
		st.Attempt = p.Attempt
		st.ExitCode, st.Signal, st.Error, st.EndTime, st.OutOfMemory = nil, "", "", nil, false
		if t.terminated {
			r.todo.terminate = append(r.todo.terminate, t) // it shares its lease: its host stops it before it starts
			continue
		}
		if r.released {
			r.todo.release = append(r.todo.release, t)
			r.todo.askStop = r.todo.askStop || r.stopAsked != nil // a task started later is asked too
		}
	}
	if !r.released && r.allPlaced() {
		r.released = true
		for _, t := range r.tasks {
			if t.placed && !t.done && !t.terminated {
				r.todo.release = append(r.todo.release, t)
			}
		}
	}
}

// ChangeBackDuringStop marks runs in which a task taken up again during a stop request's grace period is
// running again, as at any other time: before, it stayed Unreachable, and so was not counted a straggler when
// the grace ran out (a run with stragglers: fail succeeded with one killed). Its host is told of the stop again
// (NotifyStop), which a host worker that was down when the run told it missed.
const ChangeBackDuringStop = "clusterrun-back-during-stop"

func backDuringStop(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, ChangeBackDuringStop, workflow.DefaultVersion, 1) == 1
}

// ChangeAskOnReturn marks runs that tell a host which takes a task up again where the run's keepRun request
// stands: asked, or cleared. Before, a host worker that was down when the run asked (or cleared) never heard
// of it, so its task was not asked to stop, or (its record kept the ask) stayed asked after the clear. Asked
// only at such a re-attach in a run that has had a keepRun request, so other runs write no marker.
const ChangeAskOnReturn = "clusterrun-ask-on-return"

func askOnReturn(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, ChangeAskOnReturn, workflow.DefaultVersion, 1) == 1
}

// releaseByHost sends the cluster map to waiting tasks, one Release per host, and returns the futures with the
// attempts each one carries.
func (r *run) releaseByHost(ctx workflow.Context, info *workflow.Info, tasks []*task) ([]workflow.Future, [][]TaskAttempt) {
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
	var groups [][]TaskAttempt
	for _, h := range hosts {
		f, sent := r.release(ctx, info, byHost[h])
		futures = append(futures, f)
		groups = append(groups, sent)
	}
	return futures, groups
}

// release sends the cluster map to waiting attempts on one host (all given tasks share that host). In runs
// before leases a task counts as running from here; with leases, from its host's confirmation (released).
func (r *run) release(ctx workflow.Context, info *workflow.Info, tasks []*task) (workflow.Future, []TaskAttempt) {
	now := workflow.Now(ctx)
	in := ReleaseInput{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID, Cluster: r.clusterMap()}
	for _, t := range tasks {
		if !r.leased {
			t.status.State = TaskRunning
			t.released = true
		}
		t.status.StartTime = &now
		t.mapSent = true
		in.Tasks = append(in.Tasks, TaskAttempt{Task: t.Name, Attempt: t.status.Attempt})
	}
	host := tasks[0].status.Host
	return workflow.ExecuteActivity(controlOptions(ctx, host, 30*time.Second, fmt.Sprintf("release %d task(s) on %s", len(tasks), host)),
		ActivityRelease, in), in.Tasks
}

// onReleased records a Release's answer: the attempts its host found waiting got the map, so their processes
// start; a Release that failed (its host did not answer in time: the server was down, say) is sent again to
// those still waiting for it. A confirmation counts even when the attempt's lease ended meanwhile (the two
// answers race): its process may run, so a later loss must not start the attempt a second time elsewhere.
func (r *run) onReleased(sent []TaskAttempt, res ReleaseResult, err error) {
	got := map[string]bool{}
	for _, name := range res.Released {
		got[name] = true
	}
	for _, s := range sent {
		t := r.byName[s.Task]
		if t == nil || t.done || !t.placed || t.status.Attempt != s.Attempt {
			continue
		}
		switch {
		case err != nil:
			if !t.released && t.status.State == TaskPlaced {
				r.todo.release = append(r.todo.release, t)
			}
		case got[t.Name]:
			t.released = true
			if t.status.State == TaskPlaced {
				t.status.State = TaskRunning
			}
		}
	}
}

// updateMaps sends the current cluster map to every host with running tasks, after the named tasks moved:
// their peers read it from their cluster file (CLUSTERRUN_CLUSTER_FILE) and may get mapChangeSignal.
func (r *run) updateMaps(ctx workflow.Context, info *workflow.Info, moved []string) []workflow.Future {
	in := UpdateMapInput{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID, Cluster: r.clusterMap(),
		Moved: moved, Signal: r.plan.MapChangeSignal}
	var futures []workflow.Future
	for _, h := range r.runningHosts() {
		futures = append(futures, workflow.ExecuteActivity(
			controlOptions(ctx, h, 30*time.Second, fmt.Sprintf("new cluster map on %s (%s moved)", h, strings.Join(moved, ", "))),
			ActivityUpdateMap, in))
	}
	return futures
}

// clusterMap is every task's endpoint as of now, in plan order.
func (r *run) clusterMap() ClusterMap {
	m := ClusterMap{Generation: r.generation, Revision: r.mapRevision}
	for _, t := range r.tasks {
		m.Endpoints = append(m.Endpoints, Endpoint{Task: t.Name, Type: t.Type, Host: t.status.Host, Addr: t.status.Addr, Port: t.status.Port})
	}
	return m
}

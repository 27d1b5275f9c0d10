package workflows

import (
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// A run that waits for room. Queued behind other runs on a full pool, a run whose launch waits whole holds no
// lease and runs nothing (claims.go), yet said Running in clusterrun list, its status and the Web UI, like one
// whose tasks run: a Slurm user sees such a job PENDING in squeue. Now its status says Waiting while it waits so,
// and its ClusterRunState search attribute too, so that clusterrun list, --state Waiting and a Temporal list
// filter (ClusterRunState = 'Waiting') find it; it says Running again once its launch goes out.

// A run whose tasks all wait for a host runs nothing either: a task pinned to a host with no live worker (a
// misspelt name, a worker that is down) or to a drained one, a pool no live host serves, a host whose slots
// are taken. Its leases wait on queues no host takes them from, and it said Running (squeue says PENDING,
// ReqNodeNotAvail); it says Waiting too.

// ChangeWaitingState marks runs that record Waiting in their ClusterRunState search attribute; asked only when
// a run starts or stops waiting.
const ChangeWaitingState = "clusterrun-waiting-state"

// ChangeWaitingForHosts marks runs that count waiting for a host as waiting; asked only when a run's tasks all
// wait so and it waits for no room.
const ChangeWaitingForHosts = "clusterrun-waiting-for-hosts"

// waiting says the run waits for room: some task is held back for it, and no task holds a lease. A sharded
// run's leases are its shards'; it never says so.
func (r *run) waiting() bool {
	if r.sharded || r.decision != nil || r.status != StatusRunning {
		return false
	}
	held := false
	for _, t := range r.tasks {
		if t.future != nil {
			return false
		}
		held = held || t.held
	}
	return held
}

// waitingForHosts says the run runs nothing and waits for hosts: no task's process may run, and some task holds
// a lease that waits for its host or pool, as its note says (notes come from the host registry, so a launch
// that goes out as usual has none).
func (r *run) waitingForHosts() bool {
	if r.sharded || r.decision != nil || r.status != StatusRunning {
		return false
	}
	noted := false
	for _, t := range r.tasks {
		switch {
		case t.done:
		case t.released || t.mapSent || t.status.State == TaskRunning || t.status.State == TaskUnreachable:
			return false
		case t.future != nil && t.waitNote != "" && t.status.State == TaskPending:
			noted = true
		}
	}
	return noted
}

// showWaiting records in the run's search attribute whether it waits for room or hosts, when that has changed;
// a run that has decided how it ends records that instead (finish).
func (r *run) showWaiting(ctx workflow.Context) {
	if !r.searchable || r.decision != nil {
		return
	}
	w := r.waiting()
	if !w && r.waitingForHosts() {
		w = workflow.GetVersion(ctx, ChangeWaitingForHosts, workflow.DefaultVersion, 1) == 1
	}
	if w == r.shownWaiting || workflow.GetVersion(ctx, ChangeWaitingState, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	state := StatusRunning
	if w {
		state = StatusWaiting
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, temporal.NewSearchAttributeKeyKeyword(SearchAttrState).ValueSet(state)); err != nil {
		workflow.GetLogger(ctx).Warn("cannot record in the run's search attribute whether it waits for room", "error", err)
		return
	}
	r.shownWaiting = w
}

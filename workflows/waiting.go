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

// ChangeWaitingState marks runs that record Waiting in their ClusterRunState search attribute; asked only when
// a run starts or stops waiting.
const ChangeWaitingState = "clusterrun-waiting-state"

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

// showWaiting records in the run's search attribute whether it waits for room, when that has changed; a run
// that has decided how it ends records that instead (finish).
func (r *run) showWaiting(ctx workflow.Context) {
	w := r.waiting()
	if !r.searchable || r.decision != nil || w == r.shownWaiting || workflow.GetVersion(ctx, ChangeWaitingState, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
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

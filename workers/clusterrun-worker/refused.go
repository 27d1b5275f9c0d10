package main

import (
	"sync"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/clusterrun/clusterrun/workflows"
)

// metricUpdatesRefused counts the updates the server refused for having too many in flight for their workflow.
const metricUpdatesRefused = "clusterrun_updates_refused"

// refusedUpdates tells the operator of the updates the server refused for having too many in flight
// (conn.RefusedUpdates): a warning at the first for each workflow, and again at its 10th, 100th, ... with the
// count; and a counter of them all. The workflows it has heard of are forgotten past refusedKept.
type refusedUpdates struct {
	logger  log.Logger
	counter client.MetricsCounter

	mu   sync.Mutex
	seen map[string]int // refusals so far, by workflow ID
}

const refusedKept = 1000

func newRefusedUpdates(logger log.Logger, metrics client.MetricsHandler) *refusedUpdates {
	return &refusedUpdates{logger: logger, counter: metrics.Counter(metricUpdatesRefused), seen: map[string]int{}}
}

// refused is the conn.RefusedUpdates of a host worker.
func (r *refusedUpdates) refused(workflowID string) {
	r.counter.Inc(1)
	r.mu.Lock()
	if len(r.seen) >= refusedKept {
		clear(r.seen)
	}
	r.seen[workflowID]++
	n := r.seen[workflowID]
	r.mu.Unlock()
	if n == 1 || n == 10 || n == 100 || n%1000 == 0 {
		r.logger.Warn("the Temporal server refused an update to this workflow because it already had as many in flight as "+
			"history.maxInFlightUpdates admits (10 by default); the SDK sends it again, but each refusal also makes the server "+
			"drop its cached state of the workflow, which slows it down. "+refusalCause(workflowID),
			"workflowID", workflowID, "refusals", n)
	}
}

// refusalCause says what makes the server refuse updates to workflowID so, and what to raise.
func refusalCause(workflowID string) string {
	if workflowID == workflows.PortAllocatorID {
		return "Many runs are launching at once (each asks this workflow for its tasks' ports): they start, a little later. " +
			"To launch more at once without refusals, raise that limit for the namespace (docs/operations.md, \"Many runs launching at once\")"
	}
	return "A run whose work items are served from more than 8 hosts needs that limit raised for its namespace, " +
		"to at least its hosts + 2 (docs/operations.md, \"Work items over many hosts\")"
}

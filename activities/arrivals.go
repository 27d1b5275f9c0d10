package activities

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/clusterrun/clusterrun/workflows"
)

// maxArrivalHold bounds how long a host holds barrier arrivals back while it waits for its other local
// participants, so the run's view of a barrier (clusterrun status, timeout messages) is at most this stale.
const maxArrivalHold = time.Second

// arrivalGate sends a host's arrivals at one barrier as one signal once every local participant has arrived.
// Holding them costs no time: the barrier cannot be released before its last participant arrives anyway. It
// keeps a barrier at about one signal per host, which is what lets a run pass a thousand barriers within
// Temporal's 10,000 signals per run.
type arrivalGate struct {
	mu      sync.Mutex
	pending map[string]*heldArrivals
}

type heldArrivals struct {
	workflowID, runID string
	sig               workflows.BarrierArrivals
	waiters           []chan error
	timer             *time.Timer
}

// arrive reports that attempt e arrived at a barrier (declared for types) and returns once the signal carrying
// the arrival was sent (or failed).
func (h *Host) arrive(ctx context.Context, e *entry, barrier string, types []string) error {
	expected := h.localParticipants(e.ref.WorkflowID, e.ref.RunID, e.ref.Generation, types)
	// Arrivals that name other types go apart: the workflow refuses the odd ones with a clear error.
	k := e.ref.WorkflowID + "\x00" + e.ref.RunID + "\x00" + barrier + "\x00" + strconv.Itoa(e.ref.Generation) + "\x00" + strings.Join(types, ",")
	done := make(chan error, 1)
	g := &h.gate
	g.mu.Lock()
	if g.pending == nil {
		g.pending = map[string]*heldArrivals{}
	}
	held := g.pending[k]
	if held == nil {
		held = &heldArrivals{workflowID: e.ref.WorkflowID, runID: e.ref.RunID,
			sig: workflows.BarrierArrivals{Barrier: barrier, Generation: e.ref.Generation, Types: types}}
		held.timer = time.AfterFunc(maxArrivalHold, func() { h.sendArrivals(k) })
		g.pending[k] = held
	}
	held.sig.Tasks = append(held.sig.Tasks, workflows.TaskAttempt{Task: e.ref.Task, Attempt: e.ref.Attempt})
	held.waiters = append(held.waiters, done)
	full := len(held.sig.Tasks) >= expected
	g.mu.Unlock()
	if full {
		h.sendArrivals(k)
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendArrivals signals the arrivals held under k, if they were not sent yet.
func (h *Host) sendArrivals(k string) {
	g := &h.gate
	g.mu.Lock()
	held := g.pending[k]
	delete(g.pending, k)
	g.mu.Unlock()
	if held == nil {
		return
	}
	held.timer.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := h.Client.SignalWorkflow(ctx, held.workflowID, held.runID, workflows.SignalBarrierArrivals, held.sig)
	for _, w := range held.waiters {
		w <- err
	}
}

// localParticipants counts this host's running tasks of a run and generation that take part in a barrier for
// types.
func (h *Host) localParticipants(workflowID, runID string, generation int, types []string) int {
	n := 0
	for _, e := range h.reg.find(workflowID, runID, nil) {
		if e.ref.Generation != generation || e.exited() != nil {
			continue
		}
		in := len(types) == 0
		for _, t := range types {
			in = in || e.ref.Type == t
		}
		if in {
			n++
		}
	}
	return n
}

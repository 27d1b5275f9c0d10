package activities

import (
	"context"
	"sync"
	"time"

	"github.com/clusterrun/clusterrun/workflows"
)

// placeBatchWindow is how long a host waits for more placements of the same run before it signals. Tasks of a
// run land on a host within a few milliseconds of each other; one signal for all of them keeps the rendezvous
// from queueing on the workflow's history, where signals are applied one at a time.
const placeBatchWindow = 3 * time.Millisecond

// placer batches placement reports per workflow run.
type placer struct {
	mu   sync.Mutex
	runs map[string]*placeBatch
}

type placeBatch struct {
	workflowID, runID string
	items             []placeItem
	sending           bool
}

type placeItem struct {
	p    workflows.Placement
	done chan error
}

// reportPlacement sends p to the run within a batch and returns once the batch's signal was sent (or failed).
func (h *Host) reportPlacement(ctx context.Context, workflowID, runID string, p workflows.Placement) error {
	pl := &h.placer
	item := placeItem{p: p, done: make(chan error, 1)}
	k := workflowID + "\x00" + runID
	pl.mu.Lock()
	if pl.runs == nil {
		pl.runs = map[string]*placeBatch{}
	}
	b := pl.runs[k]
	if b == nil {
		b = &placeBatch{workflowID: workflowID, runID: runID}
		pl.runs[k] = b
	}
	b.items = append(b.items, item)
	if !b.sending {
		b.sending = true
		go h.sendPlacements(k, b)
	}
	pl.mu.Unlock()
	select {
	case err := <-item.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendPlacements signals batches until none is pending for the run.
func (h *Host) sendPlacements(k string, b *placeBatch) {
	pl := &h.placer
	for {
		time.Sleep(placeBatchWindow)
		pl.mu.Lock()
		items := b.items
		b.items = nil
		if len(items) == 0 {
			b.sending = false
			delete(pl.runs, k)
			pl.mu.Unlock()
			return
		}
		pl.mu.Unlock()
		sig := workflows.PlacedSignal{}
		for _, it := range items {
			sig.Placements = append(sig.Placements, it.p)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := h.Client.SignalWorkflow(ctx, b.workflowID, b.runID, workflows.SignalTasksPlaced, sig)
		cancel()
		for _, it := range items {
			it.done <- err
		}
	}
}

package activities

import (
	"context"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/clusterrun/clusterrun/workflows"
)

// followRun makes sure this host follows a run's history for barrier outcomes (the workflow publishes each one
// as a memo upsert: one history event, however many hosts wait). A host follows a run from its first barrier
// until it has no task of the run left; the long poll costs nothing while the history is quiet.
func (h *Host) followRun(workflowID, runID string) {
	k := workflowID + "\x00" + runID
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.followers == nil {
		h.followers = map[string]context.CancelFunc{}
	}
	if _, ok := h.followers[k]; ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.followers[k] = cancel
	go h.follow(ctx, workflowID, runID)
}

// unfollowIfIdle stops following a run once no task of it is left on this host.
func (h *Host) unfollowIfIdle(workflowID, runID string) {
	if h.reg.hasRun(workflowID, runID) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := workflowID + "\x00" + runID
	if cancel, ok := h.followers[k]; ok {
		cancel()
		delete(h.followers, k)
	}
}

func (h *Host) follow(ctx context.Context, workflowID, runID string) {
	dc := h.DataConverter
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	seen := 0 // outcomes are numbered; a restarted iterator reads the history again from the start
	for ctx.Err() == nil {
		it := h.Client.GetWorkflowHistory(ctx, workflowID, runID, true, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				if ctx.Err() == nil {
					h.Logger.Warn("following the run's history failed; retrying", "run", workflowID, "error", err)
				}
				break
			}
			attrs := ev.GetWorkflowPropertiesModifiedEventAttributes()
			if attrs == nil {
				continue
			}
			p, ok := attrs.GetUpsertedMemo().GetFields()[workflows.MemoBarrier]
			if !ok {
				continue
			}
			var o workflows.BarrierOutcome
			if err := dc.FromPayload(p, &o); err != nil || o.Seq <= seen {
				continue
			}
			seen = o.Seq
			h.applyOutcome(workflowID, runID, o)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// applyOutcome hands a barrier outcome to the matching waiters on this host.
func (h *Host) applyOutcome(workflowID, runID string, o workflows.BarrierOutcome) {
	for _, e := range h.reg.find(workflowID, runID, nil) {
		if e.ref.Generation != o.Generation {
			continue
		}
		hit := len(o.Tasks) == 0
		for _, t := range o.Tasks {
			hit = hit || (t.Task == e.ref.Task && t.Attempt == e.ref.Attempt)
		}
		if hit {
			e.releaseBarrier(o.Barrier, o.Error)
		}
	}
}

package activities

import (
	"context"
	"encoding/json"
	"time"

	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/workflows"
)

// Exits by signal. When the tasks of a run end together (a run of short tasks, or its last step), one
// completion per lease, each a write to the run's history, queue in front of the run's final workflow task:
// 0.3–0.5 s for 64 tasks on the dev server here. A lease whose run asks for it (RunTaskInput.ReportExit) first
// reports its process's own end by signal, batched with the host's other ends of that run, then waits a moment
// and asks the server whether the run still holds the lease. A run that has ended by then has no use for the
// completion, and none is sent; one that goes on gets it as before, and ignores it (it has the end already).

// exitHoldBack is how long a lease whose end went by signal waits before it asks whether its run still needs
// the completion.
var exitHoldBack = time.Second // a variable only so tests can lengthen it

// maxExitReport bounds an end that goes by signal: a larger one (a big result file) goes by the lease's
// completion alone, and maxExitBatch bounds one signal, far below Temporal's 2 MB payload limit.
const (
	maxExitReport = 64 << 10
	maxExitBatch  = 480 << 10
)

// exitReported reports the end of an attempt's process to its run by signal when the run asked for it and the
// process ended on its own, and says whether the lease's completion can be left out: the server no longer
// knows the lease once the hold-back is over (the run has ended).
func (h *Host) exitReported(ctx context.Context, in workflows.RunTaskInput, e *entry, res workflows.TaskResult, hb *heartbeater) bool {
	if !in.ReportExit || e.legacy {
		return false
	}
	if x := e.exited(); x.Stopped || x.By == shim.ByReap {
		return false // stopped by the run or by this host: StopTasks or the completion says so
	}
	if b, err := json.Marshal(res); err != nil || len(b) > maxExitReport {
		return false
	}
	report := workflows.TaskExitReport{Generation: in.Generation, Lease: in.Lease, Result: res}
	if err := h.exits.add(ctx, e.ref.WorkflowID, e.ref.RunID, report); err != nil {
		h.Logger.Info("cannot report a task's end by signal; its lease's completion reports it", "task", e.ref.Task, "error", err)
		return false
	}
	return h.runEnded(ctx, hb)
}

// sendStarts signals a run the starts gathered for it (reportStarted), less those of attempts the run has asked
// to stop since (a fail-fast, the chief's end, a cancel): their stop's answer gives the run their ends and
// their start times, and a start sent then lands while the run is ending. In a fail-fast of 64 on PostgreSQL,
// such starts came in one to three signals in the run's last 100 ms, and its final workflow task failed on them
// (UnhandledCommand) in one run in two.
func (h *Host) sendStarts(ctx context.Context, workflowID, runID string, items []workflows.Placement) error {
	var keep []workflows.Placement
	for _, p := range items {
		if e := h.reg.lookup(workflowID, runID, p.Task, p.Attempt); e != nil {
			if by, _ := e.stopCause(); by == stopByRun {
				continue
			}
		}
		keep = append(keep, p)
	}
	if len(keep) == 0 {
		return nil
	}
	return h.placements.send(ctx, workflowID, runID, keep)
}

// sendExits signals a run the ends gathered for it, in as many signals as their size needs, after the starts
// this host gathered for the run (reportStarted): a start that reached the run after its task's end could come
// in as the run completes on its ends, and fail its final workflow task. The starts of the attempts that end
// here are not sent at all: an end carries its process's start (TaskResult's PID and StartTime), and the run
// takes it for one (state.go). In a run of short tasks they were half its signals, and each signal is a write
// and a workflow task while the hosts still start processes (docs/design.md, "Decision: ends carry their starts").
// Should the ends not go out (they are tried again, or their leases' completions report them), the starts they
// carried go out on their own, ahead of them as before.
func (h *Host) sendExits(ctx context.Context, workflowID, runID string, items []workflows.TaskExitReport) error {
	ended := endedAttempts(items)
	carried := h.starts.drop(workflowID, runID, func(p workflows.Placement) bool { return ended[leaseOf(p)] })
	_ = h.starts.after(ctx, workflowID, runID) // a start that cannot be sent is its sender's to report
	sent, err := h.signalExits(ctx, workflowID, runID, items)
	if err != nil {
		unsent := endedAttempts(items[sent:])
		var starts []workflows.Placement
		for _, p := range carried {
			if unsent[leaseOf(p)] {
				starts = append(starts, p)
			}
		}
		if len(starts) > 0 {
			_ = h.sendStarts(ctx, workflowID, runID, starts)
		}
	}
	return err
}

// signalExits signals the ends to the run in as many signals as their size needs, and says how many of them
// went out.
func (h *Host) signalExits(ctx context.Context, workflowID, runID string, items []workflows.TaskExitReport) (sent int, err error) {
	var batch []workflows.TaskExitReport
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := h.Client.SignalWorkflow(ctx, workflowID, runID, workflows.SignalTaskExits, workflows.TaskExits{Exits: batch}); err != nil {
			return err
		}
		sent += len(batch)
		batch, size = nil, 0
		return nil
	}
	for _, it := range items {
		b, _ := json.Marshal(it)
		if size+len(b) > maxExitBatch {
			if err := flush(); err != nil {
				return sent, err
			}
		}
		batch, size = append(batch, it), size+len(b)
	}
	return sent, flush()
}

// attemptLease names one lease of one attempt of a run's task.
type attemptLease struct {
	task                       string
	attempt, generation, lease int
}

// leaseOf names the lease whose start p reports.
func leaseOf(p workflows.Placement) attemptLease {
	return attemptLease{p.Task, p.Attempt, p.Generation, p.Lease}
}

// endedAttempts is the set of the attempts (and leases) whose ends are in ends.
func endedAttempts(ends []workflows.TaskExitReport) map[attemptLease]bool {
	set := make(map[attemptLease]bool, len(ends))
	for _, x := range ends {
		set[attemptLease{x.Result.Task, x.Result.Attempt, x.Generation, x.Lease}] = true
	}
	return set
}

package activities

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/spec"
)

// HangDumpWait is how long a hung task has, between its diagnostic signal and SIGTERM, to dump its stacks.
const HangDumpWait = 5 * time.Second

// hangLoop looks for hung tasks every second: those whose spec sets hangTimeout and that have written no
// output and reported no progress for that long, outside waits on the run (entry.beginWait: a task waiting at
// a barrier, for a stop or for work items waits for others, and is not hung itself). The heartbeat proves only
// that the host worker lives; this proves that the task does something.
func (h *Host) hangLoop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, e := range h.reg.unordered() {
				if idle, hung := h.idleFor(e, now); hung {
					go h.stopHung(e, idle)
				}
			}
		}
	}
}

// outputMark is what a look at a log file sees: a write changes its size, or (once the file is at its cap and
// drops its oldest output in place) its modification time. Only a change counts, never the time's value.
type outputMark struct{ size, modified int64 }

// idleFor says how long a running task has shown no sign of life, and whether that makes it hung (once). Its
// clock starts at this worker's first look at the running process, so a worker that takes a task up after a
// restart counts its silence from then: the worker before kept the last progress report, and while no worker
// served its socket the task could send none.
func (h *Host) idleFor(e *entry, now time.Time) (time.Duration, bool) {
	limit := e.task.HangTimeout
	st := e.process()
	if e.legacy || limit <= 0 || st == nil || e.exited() != nil {
		return 0, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hung || e.waiting > 0 || e.stopBy != "" {
		return 0, false
	}
	if e.watchedSince.IsZero() {
		e.watchedSince = now
	}
	logs := AttemptDir(h.LogDir, e.ref.WorkflowID, e.ref.Attempt, e.ref.Task)
	for i, name := range []string{"stdout.log", "stderr.log"} {
		if fi, err := os.Stat(filepath.Join(logs, name)); err == nil {
			if m := (outputMark{fi.Size(), fi.ModTime().UnixNano()}); m != e.outSeen[i] {
				e.outSeen[i], e.outAt = m, now
			}
		}
	}
	last := e.watchedSince
	for _, t := range []time.Time{e.progressAt, e.outAt} {
		if t.After(last) {
			last = t
		}
	}
	idle := now.Sub(last)
	if idle < limit {
		return idle, false
	}
	e.hung = true
	return idle, true
}

// stopHung sends a hung task its diagnostic signal (hangSignal), waits HangDumpWait, then stops it; it ends
// failed as hung, and its restart policy applies.
func (h *Host) stopHung(e *entry, idle time.Duration) {
	sig := spec.SignalName(e.task.HangSignal)
	num := spec.SignalNumber(sig)
	reason := fmt.Sprintf("no output or progress for %s (hangTimeout %s); sent %s for a stack dump, then stopped it",
		idle.Round(time.Second), e.task.HangTimeout, sig)
	h.Logger.Warn("task hung", "run", e.ref.WorkflowID, "task", e.ref.Task, "attempt", e.ref.Attempt, "idle", idle.Round(time.Second), "signal", sig)
	h.Metrics.Counter(metricTasksHung).Inc(1)
	e.requestStop(stopByHang, reason, e.grace)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := h.shimClient(e).Stop(ctx, shim.Stop{Grace: e.grace, By: stopByHang, Reason: reason, First: num, FirstWait: HangDumpWait})
	if err != nil && e.exited() == nil {
		h.Logger.Warn("cannot reach the hung task's supervisor", "task", e.ref.Task, "error", err)
	}
}

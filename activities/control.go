package activities

import (
	"context"
	"errors"
	"fmt"

	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

// Release hands the cluster map to the named attempts waiting on this host, and names those that have it: a
// Release sent again (its answer was lost) names the attempts the first one reached too. An attempt that is no
// longer here (it failed or was replaced) is skipped: a later attempt reports its placement again.
func (h *Host) Release(_ context.Context, in workflows.ReleaseInput) (workflows.ReleaseResult, error) {
	var out workflows.ReleaseResult
	for _, ta := range in.Tasks {
		e := h.reg.lookup(in.WorkflowID, in.RunID, ta.Task, ta.Attempt)
		if e == nil || e.exited() != nil && e.process() == nil {
			continue
		}
		select {
		case e.release <- in.Cluster:
		default: // released already: its map is waiting in the channel, or its process started
		}
		out.Released = append(out.Released, ta.Task)
	}
	return out, nil
}

// StopTasks stops the named tasks of a run on this host (every attempt of each, superseded copies included)
// and returns once their processes are gone (or, for an attempt that had not started its process yet, once it
// has ended), with how each task's newest attempt ended.
func (h *Host) StopTasks(ctx context.Context, in workflows.StopTasksInput) (workflows.StopTasksResult, error) {
	// The ends this host gathered for the run and has not sent (pace later) go first, beside the stop: the
	// answer repeats those it names, and a signal sent after it could reach the run as it completes.
	flushed := make(chan struct{})
	go func() { defer close(flushed); _ = h.exits.after(ctx, in.WorkflowID, in.RunID) }()
	defer func() { <-flushed }()
	entries := h.reg.find(in.WorkflowID, in.RunID, in.Tasks)
	h.Logger.Info("stopping tasks", "run", in.WorkflowID, "tasks", len(entries), "reason", in.Reason)
	ownEnd := map[*entry]bool{}
	var stop []*entry
	for _, e := range entries {
		if x := e.exited(); x != nil {
			// It ended before this stop. If an earlier stop of the run ended the task's current attempt (a
			// StopTasks whose answer was lost: it timed out while the worker hung), this one reports it; one
			// that ended on its own is its lease's to report, and an earlier attempt is not the task's now.
			ownEnd[e] = !x.Stopped || x.By != stopByRun || e.ref.Attempt == 0 || in.Attempts[e.ref.Task] != e.ref.Attempt
			continue
		}
		stop = append(stop, e)
	}
	h.stopEntries(stop, stopByRun, in.Reason, in.GracePeriod)
	defer h.beatWhileStopping(ctx)()
	newest := map[string]*entry{}
	for _, e := range entries {
		select {
		case <-e.ended:
		case <-ctx.Done():
			return workflows.StopTasksResult{}, fmt.Errorf("stop tasks on %s: %w", h.Name, ctx.Err())
		}
		if cur := newest[e.ref.Task]; cur == nil || e.ref.Attempt > cur.ref.Attempt {
			newest[e.ref.Task] = e
		}
	}
	var out workflows.StopTasksResult
	for _, e := range entries {
		if newest[e.ref.Task] == e && ownEnd[e] && !e.legacy && e.process() != nil && in.Attempts[e.ref.Task] == e.ref.Attempt {
			out.Ended = append(out.Ended, h.ownEnd(e))
		}
		if newest[e.ref.Task] != e || ownEnd[e] {
			continue
		}
		out.Stopped = append(out.Stopped, e.ref.Task)
		if st := e.process(); st != nil {
			x := e.exited()
			exit := workflows.TaskExit{Task: e.ref.Task, Attempt: e.ref.Attempt, ExitCode: x.Code, Signal: x.Signal,
				Logs: logSizes(AttemptDir(h.LogDir, e.ref.WorkflowID, e.ref.Attempt, e.ref.Task)), Error: killedNote(*x)}
			if started := st.StartedAt; !started.IsZero() {
				exit.StartTime = &started
			}
			out.Exits = append(out.Exits, exit)
		}
	}
	sort.Strings(out.Stopped)
	out.Unknown = unknownAttempts(in, entries)
	return out, nil
}

// unknownAttempts names the tasks of a stop that have no entry here of the attempt the run asked about (runs
// from before Attempts ask about none).
func unknownAttempts(in workflows.StopTasksInput, entries []*entry) []string {
	known := map[string]bool{}
	for _, e := range entries {
		if e.ref.Attempt == in.Attempts[e.ref.Task] {
			known[e.ref.Task] = true
		}
	}
	var out []string
	for _, name := range in.Tasks {
		if attempt, asked := in.Attempts[name]; asked && attempt > 0 && !known[name] {
			out = append(out, name)
		}
	}
	return out
}

// ownEnd is how an attempt that ended before a stop ended, as a lease of it reports it: its lease may be gone
// (the server timed it out while this host was cut off), and a stopping run sends no other.
func (h *Host) ownEnd(e *entry) workflows.TaskExitReport {
	e.mu.Lock()
	lease := e.lease
	e.mu.Unlock()
	in := workflows.RunTaskInput{Task: e.task, Generation: e.ref.Generation, Attempt: e.ref.Attempt, Lease: lease}
	res, err := h.report(context.Background(), in, e)
	return workflows.TaskExitReport{Generation: e.ref.Generation, Lease: lease, Result: res, Member: true, Error: workflows.LeaseErrorOf(err)}
}

// beatWhileStopping heartbeats a StopTasks every third of its heartbeat timeout until the returned func is
// called. A worker that took the StopTasks up and then hung (SIGSTOP, a frozen VM: its open polls still take
// tasks) is noticed within that timeout, and the run asks again and says it waits, rather than after the whole
// start-to-close. It beats through the client, as leases do: a slow RPC is only slow.
func (h *Host) beatWhileStopping(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) || activity.GetInfo(ctx).HeartbeatTimeout <= 0 {
		return func() {}
	}
	info := activity.GetInfo(ctx)
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(info.HeartbeatTimeout / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = h.Client.RecordActivityHeartbeat(ctx, info.TaskToken)
			}
		}
	}()
	return func() { close(done) }
}

// NotifyStop tells this host's tasks of a run that the run should stop (their should-stop turns true).
func (h *Host) NotifyStop(_ context.Context, in workflows.NotifyStopInput) error {
	entries := h.reg.find(in.WorkflowID, in.RunID, nil)
	h.Logger.Info("run asks its tasks to stop", "run", in.WorkflowID, "by", in.By, "error", in.Error, "tasks", len(entries))
	var changed, ending []*entry
	for _, e := range entries {
		moved, ends := e.setNotice(in)
		if ends {
			ending = append(ending, e)
		}
		if moved {
			changed = append(changed, e)
		}
	}
	h.sendStopRequestSignals(ending)
	// Then on disk, once every task knows: a worker that takes a task up after a restart during the stop's grace
	// period still answers should-stop with it (seen as a user: the task was told no, and killed as a straggler
	// when the grace ran out).
	for _, e := range changed {
		if e.process() == nil || e.exited() != nil {
			continue // an ended task needs none; one still starting is left to its launch's record (a request that falls between that write and the start is not kept)
		}
		if err := h.saveRecord(e); err != nil {
			h.Logger.Warn("cannot save the task's record", "task", e.ref.Task, "error", err)
		}
	}
	return nil
}

// sendStopRequestSignals sends each task its stopRequestSignal, once, if it has one and a request that ends its
// run stands, so that one which does not check should-stop still hears of the request before its grace ends.
func (h *Host) sendStopRequestSignals(entries []*entry) {
	var orders []signalOrder
	for _, e := range entries {
		if !e.claimStopRequestSignal() {
			continue
		}
		sig := syscall.Signal(spec.SignalNumber(e.task.StopRequestSignal))
		if sig == 0 {
			h.Logger.Warn("the task's stopRequestSignal is not a signal name; it gets none", "task", e.ref.Task, "stopRequestSignal", e.task.StopRequestSignal)
			continue
		}
		orders = append(orders, signalOrder{e, sig})
	}
	h.signalEntries(orders, "stopRequestSignal")
}

// SignalTasks sends a signal to the process group of every task of a run on this host.
func (h *Host) SignalTasks(_ context.Context, in workflows.SignalTasksInput) error {
	num := spec.SignalNumber(in.Signal)
	if num == 0 {
		return fmt.Errorf("unknown signal %q", in.Signal)
	}
	entries := h.reg.find(in.WorkflowID, in.RunID, nil)
	h.Logger.Info("signaling tasks", "run", in.WorkflowID, "signal", in.Signal, "tasks", len(entries))
	orders := make([]signalOrder, len(entries))
	for i, e := range entries {
		orders[i] = signalOrder{e, syscall.Signal(num)}
	}
	h.signalEntries(orders, in.Signal)
	return nil
}

// ControlHost drains this host (it takes no new tasks; running ones go on), undrains it, or takes it down now
// (drained, and its tasks stopped: they end failed, so their restart policy applies, elsewhere for unpinned
// ones). It returns the host's state.
func (h *Host) ControlHost(_ context.Context, in workflows.ControlHostInput) (workflows.HostState, error) {
	if in.Drain != nil {
		if err := h.setDrain(*in.Drain); err != nil {
			return workflows.HostState{}, err
		}
	}
	stopping := 0
	if in.StopTasks {
		reason := in.Reason
		if reason == "" {
			reason = "host " + h.Name + " taken down by the operator"
		}
		for _, e := range h.reg.all() {
			if e.exited() == nil {
				stopping++
				go h.stopEntry(e, stopByHost, reason, e.grace)
			}
		}
	}
	st := h.State()
	st.Stopping = stopping // a task that dies at once on its SIGTERM already shows ended in st.Tasks
	return st, nil
}

// State describes this host: drained or not, and every task attempt on it.
func (h *Host) State() workflows.HostState {
	h.mu.Lock()
	st := workflows.HostState{Host: h.Name, Drained: h.drained}
	h.mu.Unlock()
	for _, e := range h.reg.all() {
		t := workflows.HostTask{Run: e.ref.WorkflowID, Task: e.ref.Task, Attempt: e.ref.Attempt, State: "placing"}
		if p := e.process(); p != nil {
			t.PID, t.State = p.PID, "running"
		}
		if x := e.exited(); x != nil {
			t.State = "ended"
		}
		t.Held, _ = e.held()
		st.Tasks = append(st.Tasks, t)
	}
	return st
}

// setDrain records the drain state on disk (a drained host stays drained across worker restarts) and starts or
// stops taking new tasks.
func (h *Host) setDrain(drained bool) error {
	h.mu.Lock()
	h.drained = drained
	h.mu.Unlock()
	marker := filepath.Join(h.StateDir, "drained")
	if drained {
		if err := os.WriteFile(marker, []byte("drained by clusterrun drain\n"), 0o600); err != nil {
			return err
		}
	} else if err := os.Remove(marker); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	h.Logger.Info("drain state changed", "drained", drained)
	if h.OnDrain != nil {
		return h.OnDrain(drained)
	}
	return nil
}

// loadDrain reads the drain state a previous worker recorded.
func (h *Host) loadDrain() {
	_, err := os.Stat(filepath.Join(h.StateDir, "drained"))
	h.mu.Lock()
	h.drained = err == nil
	h.mu.Unlock()
}

// Drained reports whether this host takes no new tasks.
func (h *Host) Drained() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.drained
}

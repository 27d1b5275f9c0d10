// Package activities adapts process control to Temporal: the RunTask activity that runs one task attempt on
// this host, and the short control activities on the host's downlink queue (Release, StopTasks, ReadLogs).
//
// One Host value lives in each clusterrun-worker process. It keeps an in-memory registry of this host's task
// attempts, which is how a control activity reaches a RunTask activity running in the same process: Temporal has
// no push channel from a workflow to a running activity, so the workflow sends a short activity to the host's
// own queue instead.
package activities

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/clusterrun/clusterrun/activities/proc"
	"github.com/clusterrun/clusterrun/task"

	"github.com/clusterrun/clusterrun/workflows"
)

// Host is this machine as a clusterrun host: its name, its address as other tasks should dial it, where logs
// go, and the registry of task attempts running here.
type Host struct {
	// Name is the host name tasks are pinned to (--host).
	Name string
	// Addr is the address other tasks use to reach tasks on this host (--addr).
	Addr string
	// LogDir is the root of the per-run log folders (--log-dir).
	LogDir string
	// SocketDir holds the tasks' control sockets (--socket-dir). Optional: default <tmp>/clusterrun-<uid>.
	SocketDir string
	// Client signals workflows.
	Client client.Client
	Logger log.Logger
	// Metrics receives clusterrun's own metrics. Optional: default none.
	Metrics client.MetricsHandler

	placements batcher[workflows.Placement]
	gate       arrivalGate

	mu        sync.Mutex
	entries   map[string]*entry
	followers map[string]context.CancelFunc // runs whose history this host follows
	shutdown  bool
	idle      *sync.Cond
}

// NewHost returns a Host with an empty registry.
func NewHost(name, addr, logDir string, c client.Client, logger log.Logger) *Host {
	h := &Host{Name: name, Addr: addr, LogDir: logDir, Client: c, Logger: logger, Metrics: client.MetricsNopHandler,
		entries: map[string]*entry{}}
	h.idle = sync.NewCond(&h.mu)
	h.placements.send = func(ctx context.Context, workflowID, runID string, items []workflows.Placement) error {
		return h.Client.SignalWorkflow(ctx, workflowID, runID, workflows.SignalTasksPlaced, workflows.PlacedSignal{Placements: items})
	}
	return h
}

// Stop sources: who asked a task attempt to stop decides how it reports the end.
const (
	stopByRun  = "run"  // the workflow (StopTasks or cancellation): the task ends as stopped
	stopByHost = "host" // this host worker is shutting down: the task ends as failed, so its policy applies
)

// entry is one task attempt on this host.
type entry struct {
	workflowID, runID, task string
	attempt, generation     int
	release                 chan workflows.ClusterMap

	mu       sync.Mutex
	proc     *proc.Process // set once the process runs
	grace    time.Duration
	stopReq  chan struct{}
	stopBy   string
	reason   string
	finished chan struct{}

	barriers map[string]chan string // barrier name -> waiter ("" released, else the error)
	progress *workflows.Progress
	notice   *workflows.NotifyStopInput // the run asked its tasks to stop
}

func (e *entry) waitBarrier(name string) chan string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.barriers == nil {
		e.barriers = map[string]chan string{}
	}
	ch := make(chan string, 1)
	e.barriers[name] = ch
	return ch
}

func (e *entry) forgetBarrier(name string, ch chan string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.barriers[name] == ch {
		delete(e.barriers, name)
	}
}

// releaseBarrier hands the outcome to the waiter of a barrier, if one waits.
func (e *entry) releaseBarrier(name, errMsg string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.barriers[name]
	if !ok {
		return false
	}
	select {
	case ch <- errMsg:
	default:
	}
	return true
}

func (e *entry) setProgress(p *workflows.Progress) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.progress = p
}

func (e *entry) lastProgress() *workflows.Progress {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.progress
}

func (e *entry) setNotice(n workflows.NotifyStopInput) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.notice == nil {
		e.notice = &n
	}
}

// stopState answers should-stop: the run asked its tasks to stop, or clusterrun is stopping this task.
func (e *entry) stopState() task.StopState {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.notice != nil {
		return task.StopState{Stop: true, By: e.notice.By, Error: e.notice.Error}
	}
	select {
	case <-e.stopReq:
		return task.StopState{Stop: true, By: "clusterrun", Error: e.reason}
	default:
	}
	return task.StopState{}
}

func key(workflowID, runID, task string) string { return workflowID + "\x00" + runID + "\x00" + task }

// ErrShuttingDown refuses new task attempts while the host worker shuts down.
var ErrShuttingDown = errors.New("host worker is shutting down")

func (h *Host) register(workflowID, runID, task string, attempt, generation int) (*entry, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shutdown {
		return nil, ErrShuttingDown
	}
	e := &entry{workflowID: workflowID, runID: runID, task: task, attempt: attempt, generation: generation,
		release: make(chan workflows.ClusterMap, 1), stopReq: make(chan struct{}), finished: make(chan struct{})}
	if old := h.entries[key(workflowID, runID, task)]; old != nil {
		// A newer attempt replaces a stale one (its activity timed out here but has not returned yet).
		old.requestStop(stopByRun, "replaced by attempt "+itoa(attempt))
	}
	h.entries[key(workflowID, runID, task)] = e
	return e, nil
}

func (h *Host) unregister(e *entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.entries[key(e.workflowID, e.runID, e.task)] == e {
		delete(h.entries, key(e.workflowID, e.runID, e.task))
	}
	close(e.finished)
	h.unfollowIfIdle(e.workflowID, e.runID)
	h.idle.Broadcast()
}

// find returns the entries of one workflow run, all of them when tasks is empty.
func (h *Host) find(workflowID, runID string, tasks []string) []*entry {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*entry
	if len(tasks) == 0 {
		for _, e := range h.entries {
			if e.workflowID == workflowID && e.runID == runID {
				out = append(out, e)
			}
		}
		return out
	}
	for _, t := range tasks {
		if e := h.entries[key(workflowID, runID, t)]; e != nil {
			out = append(out, e)
		}
	}
	return out
}

func (e *entry) requestStop(by, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.stopReq:
		return
	default:
	}
	e.stopBy, e.reason = by, reason
	close(e.stopReq)
	if e.proc != nil {
		// Signal the group here and now: RunTask's own loop may be busy (a heartbeat RPC, say).
		go e.proc.Stop(e.grace)
	}
}

// started records the attempt's process; a stop requested before it started applies at once.
func (e *entry) started(p *proc.Process, grace time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.proc, e.grace = p, grace
	select {
	case <-e.stopReq:
		go p.Stop(grace)
	default:
	}
}

// process returns the attempt's process, or nil before it started.
func (e *entry) process() *proc.Process {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.proc
}

func (e *entry) stopSource() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopBy
}

// Shutdown refuses new attempts, stops every running process (SIGTERM, grace, SIGKILL) and waits until every
// RunTask on this host has returned, or until timeout. The tasks end as failed ("host worker shut down"), so
// their restart policy may start them elsewhere.
func (h *Host) Shutdown(grace, timeout time.Duration) {
	h.mu.Lock()
	h.shutdown = true
	for _, e := range h.entries {
		e.requestStop(stopByHost, "host worker "+h.Name+" shut down")
	}
	h.mu.Unlock()

	done := make(chan struct{})
	go func() {
		h.mu.Lock()
		for len(h.entries) > 0 {
			h.idle.Wait()
		}
		h.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		h.Logger.Warn("tasks still running after shutdown timeout", "timeout", timeout)
	}
}

// Running counts the task attempts on this host.
func (h *Host) Running() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.entries)
}

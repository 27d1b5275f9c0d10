// Package activities adapts process control to Temporal: the RunTask activity that holds a lease on one task
// attempt on this host, and the short control activities on the host's downlink queue (Release, StopTasks,
// NotifyStop, SignalTasks, ReadLogs, ControlHost).
//
// One Host value lives in each clusterrun-worker process. Its parts:
//   - the registry (registry.go, entry.go): this host's task attempts, from placement until the workflow is done
//     with them. A RunTask holds a lease on an entry; the process belongs to the entry's supervisor.
//   - supervision (supervise.go): each attempt's process runs under its own clusterrun-shim and has a record on
//     disk, so a worker that restarts takes its attempts up again; a worker that stops gives them up (detach)
//     and leaves them running.
//   - liveness (contact.go, reconcile.go, hang.go): whether the server can be reached, stopping tasks after
//     stopAfterDisconnect, stopping attempts the workflow no longer counts as this host's, and hung tasks.
//   - coordination (socket.go, arrivals.go, follow.go): each task's control socket, barrier arrivals going up
//     and barrier outcomes coming down.
package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"

	"github.com/clusterrun/clusterrun/activities/proc"
	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/workflows"
)

// Host is this machine as a clusterrun host: its name, its address as other tasks should dial it, where logs
// and records go, and the registry of task attempts here.
type Host struct {
	// Name is the host name tasks are pinned to (--host).
	Name string
	// Addr is the address other tasks use to reach tasks on this host (--addr).
	Addr string
	// LogDir is the root of the per-run log folders (--log-dir).
	LogDir string
	// LogCap is the most of each log stream an attempt keeps (--log-cap; 0: no cap). A spec may ask for less.
	LogCap int64
	// StateDir holds this host's records of the attempts it supervises (--state-dir/<host>).
	StateDir string
	// SocketDir holds the tasks' control sockets, their supervisors' sockets and the runs' cluster files.
	// Optional: default RuntimeDir (a tmpfs when there is one).
	SocketDir string
	// Shim is the supervisor command (clusterrun-shim and any leading arguments).
	Shim []string
	// SupervisorIdle is how long a run's supervisor lives on with no task and no worker connection. Optional:
	// default shim.DefaultIdleAfter.
	SupervisorIdle time.Duration
	// TaskEnv says which of the worker's own environment variables its tasks inherit. Optional: default all but
	// DefaultWithheld.
	TaskEnv EnvPolicy
	// Policy is what this host runs and as whom (--allow-command, --allow-dir, --run-as). Optional: default
	// anything, as the worker's user.
	Policy HostPolicy
	// Slots bounds the unpinned tasks of batched leases this host runs at once, per pool (--slots). Optional:
	// default no bound. (RunTask leases, of runs started before batches, are bounded by their queue's worker.)
	Slots int
	// CgroupParent is where task cgroups are made. Optional: default none (process groups only).
	CgroupParent string
	// Client signals and queries workflows.
	Client client.Client
	Logger log.Logger
	// DataConverter decodes payloads read from histories by hand; it must be the client's. Optional: default the
	// SDK's default converter.
	DataConverter converter.DataConverter
	// Metrics receives clusterrun's own metrics. Optional: default none.
	Metrics client.MetricsHandler
	// given holds, per port, the attempt this host last gave it to (givePort), at most one per port; wanted,
	// until when a run's chosen port for a task of a batch this host took is kept from its own picks (wantPorts).
	given struct {
		sync.Mutex
		to     map[int]*entry
		wanted map[int]time.Time
	}
	// silent records when each supervisor that did not answer a stop was continued (unanswered).
	silent struct {
		sync.Mutex
		continued map[int]time.Time
	}
	// ProbeEvery is how often the server's health is checked. Optional: default 1s.
	ProbeEvery time.Duration
	// ReconcileEvery is how often unheld attempts are checked against their workflows. Optional: default 10s.
	ReconcileEvery time.Duration
	// Namespace is the Temporal namespace this host's worker serves, written in each run's log folder for log
	// retention. Optional: default none written.
	Namespace string
	// Ports is the range this host's tasks listen in (--ports): the runs choose pre-placed tasks' ports in it,
	// and the host picks the others' there too. Optional: nil (--ports off) lets the kernel pick.
	Ports *workflows.PortRange
	// LogRetention is how long after its last write an ended run's log folder is kept (--log-retention).
	// Optional: default 0, kept for ever.
	LogRetention time.Duration
	// RunEnded says whether a run has ended, for log retention. Optional: default the server's description.
	RunEnded func(ctx context.Context, runID string) (bool, error)
	// OnDrain starts (false) or stops (true) taking new tasks; the worker's main sets it.
	OnDrain func(drained bool) error

	placements batcher[workflows.Placement]
	starts     batcher[workflows.Placement] // pre-placed attempts' starts, gathered longer (startsWindow)
	exits      batcher[workflows.TaskExitReport]
	gate       arrivalGate
	reg        registry
	slots      slots
	waiting    waitingMembers // batch members waiting for a slot, which their run may take back
	maps       sharedMaps
	running    atomic.Int64 // attempts whose process runs, for the gauge
	contact    contact
	kick       chan struct{} // asks the reconciler to run now

	mu        sync.Mutex
	followers map[string]context.CancelFunc // runs whose history this host follows
	takeGates takeGates                     // takes of a run's items that wait, one at a time (takegate.go)
	drained   bool
	stopLoops context.CancelFunc
	spares    *shim.Spares // a supervisor started ahead of the next run's first task here
	lock      *os.File     // held from Start to the end of Shutdown: one worker per host and state folder
}

// NewHost returns a Host with an empty registry.
func NewHost(name, addr, logDir string, c client.Client, logger log.Logger) *Host {
	h := &Host{Name: name, Addr: addr, LogDir: logDir, Client: c, Logger: logger, Metrics: client.MetricsNopHandler,
		kick: make(chan struct{}, 1)}
	h.placements.send = func(ctx context.Context, workflowID, runID string, items []workflows.Placement) error {
		return h.Client.SignalWorkflow(ctx, workflowID, runID, workflows.SignalTasksPlaced, workflows.PlacedSignal{Placements: items})
	}
	h.exits.send = h.sendExits
	h.starts.send = h.sendStarts
	h.starts.window, h.starts.maxWindow = startsWindow, startsMaxWindow
	h.contact.lastOK = time.Now()
	return h
}

// Start takes up the attempts this host's records name (after a crash, SIGKILL or upgrade of the worker),
// kills processes left over from attempts that are gone, and starts the liveness loops. Call it once, before
// the Temporal workers start polling.
func (h *Host) Start() error {
	if h.StateDir == "" {
		return errors.New("host: StateDir is empty")
	}
	for _, d := range []struct {
		flag, dir string
		mode      os.FileMode
	}{
		{"--state-dir", h.StateDir, 0o700}, {"--state-dir", filepath.Join(h.StateDir, "tasks"), 0o700},
		{"--log-dir", h.LogDir, 0o711}, {"--socket-dir", SocketDir(h.SocketDir), 0o711}, {"--socket-dir", h.recordRoot(), 0o700},
	} {
		if err := checkOwnDir(d.flag, d.dir, d.mode); err != nil {
			return err
		}
	}
	lock, err := lockHost(h.StateDir, h.Name)
	if err != nil {
		return err
	}
	h.lock = lock
	h.slots.max = h.Slots
	h.recover()
	h.sweep()
	h.loadDrain()
	ctx, cancel := context.WithCancel(context.Background())
	h.stopLoops = cancel
	if len(h.Shim) > 0 {
		h.spares = &shim.Spares{Command: h.Shim, Env: supervisorEnv(), LogDir: h.supervisorLogs()}
		h.spares.Fill()
	}
	go h.probeLoop(ctx)
	go h.reconcileLoop(ctx)
	go h.hangLoop(ctx)
	if h.LogRetention > 0 {
		go h.pruneLoop(ctx)
	}
	return nil
}

// sweep kills processes that this host's tasks started but that belong to no attempt it holds: what a task left
// behind outside its process group, before this worker's start. It is needed only without cgroups: a task's
// cgroup holds everything it started, and is killed when the task ends or its supervisor is reaped. A task's
// processes carry its host's name and its result file, which lies under its worker's --log-dir: another worker
// of the same name with a log folder of its own (a second dev environment on the machine, a test cluster)
// keeps its tasks.
func (h *Host) sweep() {
	if h.CgroupParent != "" {
		return
	}
	live := map[string]bool{}
	for _, e := range h.reg.all() {
		if e.exited() == nil {
			live[fmt.Sprintf("%s/%s/%d", e.ref.WorkflowID, e.ref.Task, e.ref.Attempt)] = true
		}
	}
	logs := strings.TrimSuffix(filepath.Clean(h.LogDir), string(filepath.Separator)) + string(filepath.Separator)
	for _, l := range proc.FindLeftovers("CLUSTERRUN_HOST=" + h.Name) {
		if live[l.Env("CLUSTERRUN_RUN_ID")+"/"+l.Env("CLUSTERRUN_TASK")+"/"+l.Env("CLUSTERRUN_ATTEMPT")] ||
			!strings.HasPrefix(l.Env("CLUSTERRUN_RESULT_FILE"), logs) {
			continue
		}
		if l.Kill() == nil {
			h.Logger.Warn("killed a task process that no attempt on this host owns (left over from an earlier run of this host worker)",
				"pid", l.PID, "command", l.Cmdline)
		}
	}
}

// holdUntilPollsStop holds the end of a lease while this host shuts down, until the worker running the lease
// has stopped polling its task queue (or a bound passes). Its run launches the task again as soon as it hears
// of the end, on this host's queues; a launch that reached a poll this worker still held was taken by it and
// dropped as it stopped, and the task waited for its heartbeat timeout (seen after make up: 8 s Unreachable).
func (h *Host) holdUntilPollsStop(ctx context.Context) {
	if !h.reg.closed() {
		return
	}
	select {
	case <-activity.GetWorkerStopChannel(ctx):
	case <-ctx.Done():
	case <-time.After(pollsStopBound):
	}
}

// pollsStopBound bounds holdUntilPollsStop: a worker stops its polls at the start of its shutdown.
const pollsStopBound = 5 * time.Second

// Shutdown refuses new attempts and lets go of every lease: the RunTasks return TaskDetached, and the processes
// go on under their supervisors, for the next worker with this host name to take up; batch members still
// waiting for a slot give theirs up unstarted, for their run to launch again. With stopTasks (and
// always for attempts of runs started before leases) it stops the processes instead (SIGTERM, grace,
// SIGKILL); those tasks end failed ("host worker shut down"), so their restart policy applies. It returns once
// every RunTask on this host has returned, or after timeout.
func (h *Host) Shutdown(stopTasks bool, grace, timeout time.Duration) {
	h.reg.close()
	h.slots.close() // members waiting for a slot give their lease up, unstarted
	if h.stopLoops != nil {
		h.stopLoops()
	}
	if h.spares != nil {
		h.spares.Close()
	}
	reason := "host worker " + h.Name + " shut down"
	for _, e := range h.reg.all() {
		if stopTasks || e.legacy {
			h.stopEntry(e, stopByHost, reason, grace)
			continue
		}
		e.mu.Lock()
		lease := e.lease
		e.mu.Unlock()
		h.reg.whileCurrent(e, func() { keepProgress(e) })
		e.letGo(lease)
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && h.busy(stopTasks) {
		time.Sleep(20 * time.Millisecond)
	}
	if h.busy(stopTasks) {
		h.Logger.Warn("tasks still held after the shutdown timeout", "timeout", timeout)
	}
	h.retireEnded(time.Now().Add(min(time.Until(deadline), retireOnShutdown)))
	for _, e := range h.reg.all() {
		h.closeControl(e)
	}
	h.unfollowAll() // before the worker closes its client: the next worker follows these runs
}

// retireOnShutdown bounds the last retirement of ended attempts (retireEnded) in a worker's shutdown.
const retireOnShutdown = 3 * time.Second

// Close lets the host's lock go, for the next worker of this host and state folder: a worker's last step,
// after Shutdown and after its pollers and its last registry report stopped. (Exiting lets it go too.)
func (h *Host) Close() {
	// A records folder left empty goes too (rmdir refuses one that holds a record): a host with no task left
	// leaves nothing in the runtime folder. The lock is still held, so no worker of this host adds one meanwhile.
	_ = os.Remove(h.recordRoot())
	if h.lock != nil {
		h.lock.Close()
		h.lock = nil
	}
}

// busy reports whether a RunTask still holds an entry (or, when stopping, a process still runs).
func (h *Host) busy(stopping bool) bool {
	for _, e := range h.reg.unordered() {
		if held, _ := e.held(); held {
			return true
		}
		if (stopping || e.legacy) && e.process() != nil && e.exited() == nil {
			return true
		}
	}
	return false
}

// Running counts the task attempts on this host whose process runs.
func (h *Host) Running() int {
	n := 0
	for _, e := range h.reg.unordered() {
		if e.process() != nil && e.exited() == nil {
			n++
		}
	}
	return n
}

// PortsIn lists the ports of rng (at most max) that are not free on this host: those its running tasks were
// given, and those any other socket of the machine holds (another program's server, say). The registry hands
// them to no task (workflows/ports.go), so a task the run places here ahead of time finds its port free, unless
// it was taken since this host's last report.
func (h *Host) PortsIn(rng workflows.PortRange, max int) []int {
	used := proc.TCPPortsInUse(rng.From, rng.To)
	for _, e := range h.reg.unordered() {
		if e.process() != nil && e.exited() == nil && e.port >= rng.From && e.port <= rng.To {
			used[e.port] = true // set before its process was: read after
		}
	}
	out := make([]int, 0, len(used))
	for p := range used {
		out = append(out, p)
	}
	slices.Sort(out)
	return out[:min(len(out), max)]
}

// Load counts the task attempts this host holds (a lease or a running process), and those among them that take
// one of its slots (every task its spec does not pin to a host): what the host registry shows and places by;
// and, run by run (by workflow ID), how many of those slots each takes, at most workflows.MaxRunLoads runs.
func (h *Host) Load() (held, unpinned int, runs []workflows.RunLoad) {
	per := map[string]int{}
	for _, e := range h.reg.unordered() {
		isHeld, _ := e.held()
		if isHeld || e.process() != nil && e.exited() == nil {
			held++
			if e.task.Host == "" {
				unpinned++
				per[e.ref.WorkflowID]++
			}
		}
	}
	for run, n := range per {
		runs = append(runs, workflows.RunLoad{Run: run, Unpinned: n})
	}
	slices.SortFunc(runs, func(a, b workflows.RunLoad) int { return strings.Compare(a.Run, b.Run) })
	return held, unpinned, runs[:min(len(runs), workflows.MaxRunLoads)]
}

package activities

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/task"
	"github.com/clusterrun/clusterrun/workflows"
)

// attemptRef names one task attempt of one run: identity travels as fields.
type attemptRef struct {
	WorkflowID string `json:"workflowId"`
	RunID      string `json:"runId"`
	Task       string `json:"task"`
	Type       string `json:"type"`
	Index      int    `json:"index"`
	Attempt    int    `json:"attempt"`
	Generation int    `json:"generation"`
}

// Who stopped a task: the host worker's words for shim.Exit.By (the shim has its own for orphans and signals).
const (
	stopByRun        = "run"        // the workflow (StopTasks or cancellation): the task ends Stopped
	stopByHost       = "host"       // this host: shutting down with --stop-tasks-on-exit, taken down, or the task is not its own any more
	stopByHang       = "hang"       // no output or progress for hangTimeout
	stopByDisconnect = "disconnect" // out of contact with the server for stopAfterDisconnect
)

// entry is one task attempt on this host, from its placement until the workflow is done with it. Its process
// belongs to its supervisor (clusterrun-shim), not to a RunTask: a RunTask holds a lease on the entry, and a
// later lease (a re-attach) takes it over, or the host keeps the entry unheld while it has no contact.
type entry struct {
	ref    attemptRef
	task   spec.Task
	legacy bool   // from a run started before leases: it lives and dies with its RunTask, as then
	key    string // names its record folder and its socket folder
	record string // its record folder (recordDir, or where an older worker kept it)
	grace  time.Duration
	// controlSocket and shimSocket are set once at launch (or from the record): the task's CLUSTERRUN_SOCKET,
	// and its supervisor's socket.
	controlSocket string
	shimSocket    string
	// port is the port the attempt was given here, set at launch (0 for attempts taken up from a record).
	port int
	// takenUp is set for an attempt taken up from an older worker's record until its first take that reads the
	// items workflow's memo, which looks for a take that worker left waiting there (takeLeftWaiting).
	takenUp atomic.Bool
	// itemsSeen says the run's items workflow has answered a call of this attempt: it has seen the attempt, and
	// freed what an older attempt of its task held (takeByReads need not send it a take with nothing to apply).
	itemsSeen atomic.Bool
	// asChosen says the attempt starts at the port its run chose (a pre-placed launch): its start is reported
	// once its process runs.
	asChosen bool
	// supervisor is its run's supervisor's socket, where one request stops many of its tasks ("" in records
	// of older workers: each is stopped through its own socket).
	supervisor string
	// clusterFile holds the run's current cluster map for the task (CLUSTERRUN_CLUSTER_FILE): the file the
	// run's tasks on this host share (sharedMap), or, taken up from an older worker's record, its own.
	clusterFile string
	sharedMap   bool
	release     chan workflows.ClusterMap
	// launching says its process is started or being started (the registry's lock guards it): a later lease of
	// the same attempt takes this entry up rather than starting the attempt again. launched closes once the
	// start is over, whether it succeeded or not.
	launching bool
	launched  chan struct{}
	stopReq   chan struct{} // closed on the first stop request, started or not
	ended     chan struct{} // closed once the attempt is over: its exit is recorded, or it ended before starting

	mu         sync.Mutex
	lease      int
	holder     chan struct{} // closed when the lease is taken over, or the host gives it up
	started    *shim.Started // set once the process runs
	exit       *shim.Exit    // set once it is gone
	stopBy     string
	stopReason string
	stopGrace  time.Duration // the shortest grace a stop asked for
	stopSent   bool          // its supervisor took a stop with that grace
	info       task.Info
	hosts      []string // the hosts info.Cluster spans, by name (hostsOf): shared, never changed
	ctl        *controlServer
	barriers   map[string]chan string // barrier name -> waiter ("" released, else the error)
	waiting    int                    // waits on the run under way (beginWait): a task that waits is not hung
	heldCalls  map[string]heldCall    // calls the server has not taken yet, by request id (hold.go)
	progress   *workflows.Progress
	keeping    *time.Timer // a write of progress into the record is due (keepProgressSoon)
	keptAt     time.Time   // the last such write
	// The hang clock (hang.go) reads only this worker's monotonic time, so a step of the wall clock (NTP, a
	// resumed VM) makes no task hung, nor a hung one look alive.
	progressAt   time.Time                  // the last progress report, or the end of the last wait
	watchedSince time.Time                  // the first look at the running process
	outSeen      [2]outputMark              // stdout.log and stderr.log at the last look
	outAt        time.Time                  // when a look last found them changed
	notice       *workflows.NotifyStopInput // the run asked its tasks to stop
	signalled    bool                       // its stopRequestSignal was sent
	// stopMoved is closed, and replaced, whenever the stop state changes: wait-for-stop waits on it.
	stopMoved chan struct{}
	hung      bool
	unheldAt  time.Time // when it lost its last lease (zero while held)
	// killedSupervisor says why its host killed its supervisor (it did not answer), for the reaped end.
	killedSupervisor string
	slot             func() // frees the host slot it holds (an unpinned task of a batched lease), once it has ended
}

func newEntry(ref attemptRef, t spec.Task, legacy bool, grace time.Duration) *entry {
	return &entry{ref: ref, task: t, legacy: legacy, key: recordKey(ref), grace: grace,
		release: make(chan workflows.ClusterMap, 1), launched: make(chan struct{}), stopReq: make(chan struct{}), ended: make(chan struct{}),
		unheldAt: time.Now()}
}

// supervisorKilled records why the host killed the attempt's supervisor.
func (e *entry) supervisorKilled(why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.killedSupervisor = why
}

// whySupervisorDied is why its host killed the attempt's supervisor, or "".
func (e *entry) whySupervisorDied() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.killedSupervisor
}

// claim gives the entry to lease n and returns the channel that closes when that lease loses it. A stale
// lease (lower than the current) gets nil.
func (e *entry) claim(n int) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n < e.lease {
		return nil
	}
	if e.holder != nil {
		close(e.holder)
	}
	e.lease, e.holder, e.unheldAt = n, make(chan struct{}), time.Time{}
	return e.holder
}

// letGo ends lease n's hold, if it still holds the entry.
func (e *entry) letGo(n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lease == n && e.holder != nil {
		close(e.holder)
		e.holder, e.unheldAt = nil, time.Now()
	}
}

// held reports whether a lease holds the entry, and since when it has not.
func (e *entry) held() (bool, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.holder != nil, e.unheldAt
}

// markStarted records the running process.
func (e *entry) markStarted(st shim.Started) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.started = &st
}

// process returns the running process's record, or nil before it started.
func (e *entry) process() *shim.Started {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started
}

// markEnded records how the attempt ended, and frees its slot; only the first call counts.
func (e *entry) markEnded(x shim.Exit) {
	e.mu.Lock()
	if e.exit != nil {
		e.mu.Unlock()
		return
	}
	e.exit = &x
	close(e.ended)
	slot := e.slot
	e.slot = nil
	e.mu.Unlock()
	if slot != nil {
		slot()
	}
}

// holdSlot gives the attempt a host slot to hold until it ends. One it does not need (it holds one already,
// or it has ended) is freed at once.
func (e *entry) holdSlot(release func()) {
	if release == nil {
		return
	}
	e.mu.Lock()
	if e.exit == nil && e.slot == nil {
		e.slot = release
		release = nil
	}
	e.mu.Unlock()
	if release != nil {
		release()
	}
}

// endBeforeStart ends an attempt that never started its process.
func (e *entry) endBeforeStart() { e.markEnded(shim.Exit{Code: -1}) }

// exited returns how the attempt ended, or nil while it is not over.
func (e *entry) exited() *shim.Exit {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.exit
}

// requestStop records a stop request: the first one's by and reason stand. It reports whether the supervisor
// must be asked: unless it took a stop already with a grace no longer than this one's.
func (e *entry) requestStop(by, reason string, grace time.Duration) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.stopReq:
		if grace < e.stopGrace {
			e.stopGrace, e.stopSent = grace, false
		}
		return !e.stopSent
	default:
	}
	e.stopBy, e.stopReason, e.stopGrace = by, reason, grace
	close(e.stopReq)
	return true
}

// stopRequested says whether anybody asked the attempt to stop.
func (e *entry) stopRequested() bool {
	select {
	case <-e.stopReq:
		return true
	default:
		return false
	}
}

// stopTaken records that the supervisor took a stop with grace.
func (e *entry) stopTaken(grace time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if grace <= e.stopGrace {
		e.stopSent = true
	}
}

// stopGraceAsked is the shortest grace a stop asked for.
func (e *entry) stopGraceAsked() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopGrace
}

// stopCause says who asked the attempt to stop, and why ("" when nobody did).
func (e *entry) stopCause() (by, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopBy, e.stopReason
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

// beginWait and endWait bracket a call in which the task waits on its run (a barrier, a stop, work items, or
// any of them held through an outage): it is not hung meanwhile (hangTimeout), and the wait's end is a sign of
// life, from which its silence counts again.
func (e *entry) beginWait() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.waiting++
}

func (e *entry) endWait() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.waiting--
	e.progressAt = time.Now()
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
	e.progress, e.progressAt = p, time.Now()
}

func (e *entry) lastProgress() *workflows.Progress {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.progress
}

// setNotice records the run's stop request: one that ends the run stands for good; a keepRun one stands
// until cleared. changed says the task's stop state moved; ends, that this call turned on a request that ends
// the run.
func (e *entry) setNotice(n workflows.NotifyStopInput) (changed, ends bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case n.Clear:
		if e.notice == nil || !e.notice.KeepRun {
			return false, false
		}
		e.notice = nil
	case e.notice == nil || (e.notice.KeepRun && !n.KeepRun):
		e.notice = &n
	default:
		return false, false
	}
	e.stopChangedLocked()
	return true, e.notice != nil && !e.notice.KeepRun
}

// stopNotice returns the run's standing stop request, or nil.
func (e *entry) stopNotice() *workflows.NotifyStopInput {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.notice
}

// claimStopRequestSignal says, once, that the attempt is to get its stopRequestSignal now: it has one, a
// request that ends its run stands, and its process runs. NotifyStop and the launch both ask, so a request that
// came while the process started is not missed, nor is the signal sent twice.
func (e *entry) claimStopRequestSignal() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.signalled || e.task.StopRequestSignal == "" || e.notice == nil || e.notice.KeepRun || e.started == nil {
		return false
	}
	e.signalled = true
	return true
}

// endedByStopRequestSignal says whether the attempt ended of its stopRequestSignal, sent on a stop request that ends its run:
// killed by it, or exiting 128 plus its number as a shell does.
func (e *entry) endedByStopRequestSignal(x shim.Exit) bool {
	n := e.stopNotice()
	ending := n != nil && !n.KeepRun
	num := spec.SignalNumber(e.task.StopRequestSignal)
	return ending && num != 0 && !x.Stopped && (x.Signal == e.task.StopRequestSignal || x.Code == 128+num)
}

// stopChangedLocked wakes every wait-for-stop; e.mu is held.
func (e *entry) stopChangedLocked() {
	if e.stopMoved != nil {
		close(e.stopMoved)
	}
	e.stopMoved = make(chan struct{})
}

// stopWatch returns the stop state now and a channel closed when it next changes.
func (e *entry) stopWatch() (task.StopState, chan struct{}) {
	st := e.stopState()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopMoved == nil {
		e.stopMoved = make(chan struct{})
	}
	return st, e.stopMoved
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
		return task.StopState{Stop: true, By: "clusterrun", Error: e.stopReason}
	default:
	}
	return task.StopState{}
}

// setInfo keeps what the task's info endpoint answers, and the hosts its cluster map spans (hostsOf).
func (e *entry) setInfo(info task.Info, hosts []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.info, e.hosts = info, hosts
}

// runHosts is the number of hosts in the run's cluster map as the task last had it (0 before it had one).
func (e *entry) runHosts() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.hosts)
}

// hostRank is the place of host among the hosts of the run's cluster map, by name, from 0.
func (e *entry) hostRank(host string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	rank, _ := slices.BinarySearch(e.hosts, host)
	return rank
}

func (e *entry) taskInfo() task.Info {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.info
}

package activities

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

// AttemptDir is where one attempt's files live: <log-dir>/<run-id>/attempt_<n>/<task>.
func AttemptDir(logDir, runID string, attempt int, task string) string {
	return filepath.Join(logDir, runID, "attempt_"+strconv.Itoa(attempt), task)
}

// RunTask holds one lease on one task attempt on this host. A launch registers the attempt, reports its
// placement, waits for the rendezvous and starts the process under its supervisor; a re-attach (in.Attach)
// takes up a process an earlier lease started here. Either way it then heartbeats until the process ends
// (and reports how), the run stops it, or the lease is given up (TaskDetached: the process runs on).
func (h *Host) RunTask(ctx context.Context, in workflows.RunTaskInput) (workflows.TaskResult, error) {
	hb := h.startHeartbeats(ctx, false)
	defer hb.stop()
	res, err := h.serve(ctx, in, h.memberOf(hb, in, true))
	h.holdUntilPollsStop(ctx)
	return res, err
}

// memberLease is one attempt's part of the lease that holds it: its entry in the lease's heartbeats, and the
// lease's heartbeater, whose verdict every member sees.
type memberLease struct {
	hb   *heartbeater
	beat *beat
	// alone: the lease holds this attempt alone (RunTask), so the attempt's end decides whether the lease
	// reports at all. A RunTasks member hands its end to the batch, which decides.
	alone bool
	// slot is the host slot a batch member waited for (nil: it needs none); the attempt holds it until it ends.
	slot func()
}

// freeSlot gives back a slot the member got but will not use.
func (ml memberLease) freeSlot() {
	if ml.slot != nil {
		ml.slot()
	}
}

func (h *Host) memberOf(hb *heartbeater, in workflows.RunTaskInput, alone bool) memberLease {
	phase := phaseRendezvous
	if in.Attach {
		phase = phaseRunning
	}
	return memberLease{hb: hb, alone: alone, beat: hb.member(workflows.HeartbeatDetails{Task: in.Task.Name, Host: h.Name,
		Attempt: in.Attempt, Lease: max(in.Lease, 1), Phase: phase})}
}

// serve is one lease's part in one task attempt: what RunTask does for its task and RunTasks for each member.
func (h *Host) serve(ctx context.Context, in workflows.RunTaskInput, ml memberLease) (workflows.TaskResult, error) {
	defer ml.hb.drop(ml.beat)
	ref := attemptOf(ctx, in)
	lease := max(in.Lease, 1)
	res := workflows.TaskResult{Task: ref.Task, Host: h.Name, Attempt: ref.Attempt}
	if in.Attach {
		return h.attach(ctx, in, ref, lease, res, ml)
	}
	adm, err := h.admit(ref, in, res)
	if err != nil {
		ml.freeSlot()
		return res, err
	}
	e, holder, err := h.register(in, ref, lease)
	if err != nil {
		ml.freeSlot()
		return res, h.refused(in, res, err)
	}
	e.holdSlot(ml.slot)
	if e.process() != nil {
		// The same attempt again, while its process runs (a lease lost at the start): never a second copy.
		defer e.letGo(lease)
		return h.hold(ctx, in, e, lease, holder, ml, true)
	}
	defer e.letGo(lease)
	// The supervisor starts while the placement is reported and the rendezvous completes, not before: the
	// placements of a big run must not wait for a fork each.
	spawned := make(chan spawnResult, 1)
	go func() {
		p, err := h.spawnShim(e)
		spawned <- spawnResult{p, err}
	}()
	cluster, ln, end := h.rendezvous(ctx, in, e, holder, res, ml)
	sp := <-spawned
	switch {
	case end != nil:
		if sp.err == nil {
			h.abortShim(e, sp.pending)
		}
		return end.res, end.err
	case sp.err != nil:
		ln.Close()
		h.forget(e)
		return res, fmt.Errorf("start the supervisor of %s on %s: %w", e.ref.Task, h.Name, sp.err)
	}
	if end := h.start(ctx, in, e, adm, sp.pending, cluster, ln, res); end != nil {
		return end.res, end.err
	}
	return h.hold(ctx, in, e, lease, holder, ml, false)
}

type spawnResult struct {
	pending *shim.Pending
	err     error
}

// ending is how a RunTask returns before it holds a running process.
type ending struct {
	res workflows.TaskResult
	err error
}

// attemptOf names the attempt a lease serves: the workflow's number, or (runs started before leases) the
// offset plus Temporal's own attempt.
func attemptOf(ctx context.Context, in workflows.RunTaskInput) attemptRef {
	info := activity.GetInfo(ctx)
	attempt := in.Attempt
	if !in.Leased() {
		attempt = in.AttemptOffset + int(info.Attempt)
	}
	run := workflows.RunRef{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID}
	if in.Run != nil {
		run = *in.Run // the lease is held by one of the run's shards
	}
	return attemptRef{WorkflowID: run.WorkflowID, RunID: run.RunID, Task: in.Task.Name,
		Type: in.Task.Type, Index: in.Task.Index, Attempt: attempt, Generation: in.Generation}
}

// register adds the attempt to this host's registry and gives it to the lease. An attempt already here (the
// same attempt launched again) is taken up rather than started twice; older attempts of the task are retired.
func (h *Host) register(in workflows.RunTaskInput, ref attemptRef, lease int) (*entry, chan struct{}, error) {
	for {
		e := newEntry(ref, in.Task, !in.Leased(), in.StopGracePeriod)
		e.record = h.recordDir(e.key)
		started, superseded, err := h.reg.add(e)
		if err != nil {
			return nil, nil, err
		}
		if started != nil {
			// An earlier lease started the attempt here, or is starting it: running or ended, it is taken up.
			<-started.launched
			if started.process() != nil {
				return started, started.claim(lease), nil
			}
			continue // its start failed: this lease starts it
		}
		for _, old := range superseded {
			go h.retire(old, fmt.Sprintf("superseded by attempt %d", ref.Attempt))
		}
		return e, e.claim(lease), nil
	}
}

// refused answers a lease this host will not take: it is shutting down.
func (h *Host) refused(in workflows.RunTaskInput, res workflows.TaskResult, err error) error {
	if in.Leased() {
		return detachedError(fmt.Sprintf("host worker %s is shutting down; %s was not started", h.Name, in.Task.Name), res)
	}
	return temporal.NewApplicationError(fmt.Sprintf("%s: %v", h.Name, err), workflows.ErrTaskFailed, res)
}

// rendezvous reserves a port, reports the placement, and waits for the cluster map. The returned listener
// holds the port until the process starts, so nothing else on this host takes it meanwhile.
func (h *Host) rendezvous(ctx context.Context, in workflows.RunTaskInput, e *entry, holder chan struct{}, res workflows.TaskResult,
	ml memberLease) (workflows.ClusterMap, net.Listener, *ending) {
	if in.Cluster != nil {
		if ln, err := listenOn(in.Port); err == nil {
			e.asChosen = true
			return *in.Cluster, ln, nil
		}
		h.Logger.Info("the port the run chose is taken; placing the task as usual", "task", e.ref.Task, "port", in.Port)
	}
	ln, err := h.reservePort(in.Port)
	if err != nil {
		h.forget(e)
		return workflows.ClusterMap{}, nil, &ending{res, fmt.Errorf("reserve a port on %s for %s: %w", h.Name, e.ref.Task, err)}
	}
	port := ln.Addr().(*net.TCPAddr).Port
	placed := workflows.Placement{Task: e.ref.Task, Generation: in.Generation, Attempt: e.ref.Attempt, Lease: in.Lease,
		Host: h.Name, Addr: h.Addr, Port: port}
	end := func(x *ending) (workflows.ClusterMap, net.Listener, *ending) {
		ln.Close()
		h.forget(e)
		return workflows.ClusterMap{}, nil, x
	}
	if err := h.placements.add(ctx, e.ref.WorkflowID, e.ref.RunID, placed); err != nil {
		if in.Leased() && ctx.Err() == nil {
			return end(&ending{res, detachedError(fmt.Sprintf("report the placement of %s: %v", e.ref.Task, err), res)})
		}
		return end(&ending{res, fmt.Errorf("report placement of %s to run %s: %w", e.ref.Task, e.ref.WorkflowID, err)})
	}
	select {
	case cluster := <-e.release:
		return cluster, ln, nil
	case <-e.stopReq:
		return end(h.stoppedBeforeStart(ctx, in, e, res))
	case <-holder:
		return end(&ending{res, detachedError(fmt.Sprintf("host worker %s is shutting down; %s was not started", h.Name, e.ref.Task), res)})
	case <-ml.hb.verdicts():
		if ml.hb.verdictNow() == leaseGone && in.Leased() {
			return end(&ending{res, detachedError("the server no longer knows this lease; "+e.ref.Task+" was not started", res)})
		}
		res.Stopped = true
		return end(&ending{res, temporal.NewCanceledError(res)})
	case <-ctx.Done():
		if in.Leased() {
			return end(&ending{res, detachedError(leaseEnded(ctx)+"; "+e.ref.Task+" was not started", res)})
		}
		res.Stopped = true
		return end(&ending{res, temporal.NewCanceledError(res)})
	}
}

// reservePort listens on the port a task had on this host earlier in its run, so that a restart comes back at
// its address; when that port is taken (or there was none), on a free port of this host's --ports range (see
// portInRange); with no range, or none free there, on any port the kernel gives.
func (h *Host) reservePort(want int) (net.Listener, error) {
	if want > 0 {
		if ln, err := listenOn(want); err == nil {
			return ln, nil
		}
	}
	if ln := h.portInRange(); ln != nil {
		return ln, nil
	}
	return net.Listen("tcp", ":0")
}

// rangeTries bounds the binds portInRange tries before it leaves the choice to the kernel.
const rangeTries = 64

// portInRange listens on a free port of h.Ports, so that a task the run did not place ahead of time (a sharded
// run's, a new index, a restart that moved) listens where its operator opened the network for the tasks, and
// below the kernel's ephemeral ports, which an outgoing connection could take between the worker's release and
// the task's own bind. It starts at a random port, as the run's allocator hands the range out in order from a
// cursor, and skips the ports this host gave attempts that live on (givePort): one let go for its task to bind
// looks free until the task binds it. Nil when no port of the range could be bound in rangeTries tries.
func (h *Host) portInRange() net.Listener {
	rng := h.Ports
	if rng == nil || rng.To < rng.From {
		return nil
	}
	size := rng.To - rng.From + 1
	start := rand.IntN(size)
	for i := 0; i < min(size, rangeTries); i++ {
		port := rng.From + (start+i)%size
		if h.portHeld(port) {
			continue
		}
		if ln, err := listenOn(port); err == nil {
			return ln
		}
	}
	return nil
}

// givePort records that attempt e listens at port on this host, before its listener is let go.
func (h *Host) givePort(e *entry, port int) {
	e.port = port
	h.given.Lock()
	defer h.given.Unlock()
	if h.given.to == nil {
		h.given.to = map[int]*entry{}
	}
	h.given.to[port] = e
}

// wantFor is how long a port a run chose for a task of a batch is kept from this host's own picks: time for
// the batch's tasks to bind theirs, after which givePort holds them.
const wantFor = 30 * time.Second

// wantPorts keeps the ports the run chose for the members of batch (a pre-placed launch) from this host's own
// picks for a while: a member whose chosen port was taken picks another in the range while the others bind
// theirs, and one that took a port another member was about to bind made that member move too
// (TestE2E_PrePlacedLaunch: two moves where one was due).
func (h *Host) wantPorts(batch workflows.RunTasksInput) {
	now := time.Now()
	h.given.Lock()
	defer h.given.Unlock()
	for port, until := range h.given.wanted {
		if now.After(until) {
			delete(h.given.wanted, port)
		}
	}
	if batch.Cluster == nil || batch.Attach {
		return
	}
	for _, m := range batch.Members {
		if m.Port <= 0 {
			continue
		}
		if h.given.wanted == nil {
			h.given.wanted = map[int]time.Time{}
		}
		h.given.wanted[m.Port] = now.Add(wantFor)
	}
}

// portHeld says whether port was given to an attempt that is still this host's and has not ended, or is
// wanted by a task of a pre-placed launch (wantPorts).
func (h *Host) portHeld(port int) bool {
	h.given.Lock()
	e, until := h.given.to[port], h.given.wanted[port]
	h.given.Unlock()
	if time.Now().Before(until) {
		return true
	}
	return e != nil && e.exited() == nil && h.reg.lookup(e.ref.WorkflowID, e.ref.RunID, e.ref.Task, e.ref.Attempt) == e
}

func listenOn(port int) (net.Listener, error) { return net.Listen("tcp", fmt.Sprintf(":%d", port)) }

// releasePort closes the listener that held a task's port, and returns once no process this worker forked
// still holds a copy of it: a fork copies every open descriptor, and the child keeps its copies until it
// execs (close-on-exec). A supervisor forked in that moment would hold the port, and the task's bind could
// find it taken (a test's port probe was held so in CI, by the test host's spare supervisor). Go forks with
// syscall.ForkLock held for writing until the child has exec'd, so taking it for reading waits them out.
func releasePort(ln net.Listener) {
	ln.Close()
	syscall.ForkLock.RLock()
	//lint:ignore SA2001 the empty critical section is the point: it waits for the forks in flight
	syscall.ForkLock.RUnlock()
}

// reportStarted tells the run that a pre-placed attempt runs here as the run chose (batched with this host's
// other placements), once its process started and its record is written: the run takes it for started from
// then on. Sent sooner (at the port's bind, as it was), a worker SIGKILLed in between left an attempt whose
// start the run had taken and which the next worker had no record of, and the run counted it lost (a failure:
// make bench's worker-SIGKILL scenario failed its run so); unreported, the run starts it again. Should the
// signal fail, the task only shows as placed, not running, until it ends.
func (h *Host) reportStarted(ctx context.Context, in workflows.RunTaskInput, e *entry, at time.Time) {
	placed := workflows.Placement{Task: e.ref.Task, Generation: in.Generation, Attempt: e.ref.Attempt, Lease: in.Lease,
		Host: h.Name, Addr: h.Addr, Port: in.Port, Started: true, StartedAt: &at}
	go func() {
		if err := h.starts.add(ctx, e.ref.WorkflowID, e.ref.RunID, placed); err != nil && ctx.Err() == nil {
			h.Logger.Warn("cannot tell the run that a task started", "task", e.ref.Task, "error", err)
		}
	}()
}

// forget drops an attempt that ends before its process started.
func (h *Host) forget(e *entry) {
	e.endBeforeStart()
	h.reg.remove(e)
}

func (h *Host) stoppedBeforeStart(ctx context.Context, in workflows.RunTaskInput, e *entry, res workflows.TaskResult) *ending {
	if by, reason := e.stopCause(); by == stopByHost {
		if in.Leased() {
			return &ending{res, detachedError(reason+"; "+e.ref.Task+" was not started", res)}
		}
		res.ExitCode, res.Error = -1, "host worker "+h.Name+" shut down before the task started"
		return &ending{res, temporal.NewApplicationError(res.Error, workflows.ErrTaskFailed, res)}
	}
	res.Stopped = true
	if ctx.Err() != nil {
		return &ending{res, temporal.NewCanceledError(res)}
	}
	return &ending{res, nil}
}

// start prepares the attempt's log folder and control socket, builds its environment and has its supervisor
// (spawned during the rendezvous) start the process.
func (h *Host) start(ctx context.Context, in workflows.RunTaskInput, e *entry, adm Admitted, pending *shim.Pending,
	cluster workflows.ClusterMap, ln net.Listener, res workflows.TaskResult) *ending {
	if !h.reg.claimLaunch(e) {
		// A later lease of this attempt replaced this one during the rendezvous: that lease starts it.
		ln.Close()
		h.abortShim(e, pending)
		return &ending{res, detachedError(fmt.Sprintf("a later lease of %s attempt %d starts it on %s", e.ref.Task, e.ref.Attempt, h.Name), res)}
	}
	defer close(e.launched)
	launched := false
	fail := func(err error) *ending {
		h.reg.launchFailed(e)
		ln.Close()
		h.closeControl(e)
		if !launched {
			h.abortShim(e, pending)
		}
		h.forget(e)
		h.dropRuntimeFolders(e)
		return &ending{res, err}
	}
	if n, ok := h.maps.newer(h.runFolder(e.ref), cluster); ok {
		cluster = n.m // a peer moved since the lease carried the map
	}
	dir := AttemptDir(h.LogDir, e.ref.WorkflowID, e.ref.Attempt, e.ref.Task)
	if err := h.prepareLogs(dir); err != nil {
		return fail(h.withRoomNote(fmt.Errorf("log files for %s on %s: %w", e.ref.Task, h.Name, err)))
	}
	if err := h.markNamespace(e.ref.WorkflowID); err != nil {
		return fail(h.withRoomNote(fmt.Errorf("log folder of run %s on %s: %w", e.ref.WorkflowID, h.Name, err)))
	}
	h.giveInfo(e, cluster)
	ctl, err := h.serveControl(e)
	if err != nil {
		return fail(h.withRoomNote(fmt.Errorf("control socket for %s on %s: %w", e.ref.Task, h.Name, err)))
	}
	if err := h.writeClusterFile(e, cluster); err != nil {
		return fail(h.withRoomNote(fmt.Errorf("cluster file for %s on %s: %w", e.ref.Task, h.Name, err)))
	}
	env := TaskEnv(append(h.TaskEnv.Filter(os.Environ()), h.userEnv()...), TaskIdentity{RunID: e.ref.WorkflowID, Task: in.Task, Attempt: e.ref.Attempt,
		RestartCount: in.Generation, Host: h.Name, ResultFile: filepath.Join(dir, "result.json"),
		ErrorFile: filepath.Join(dir, "error.json"), Socket: ctl.path, ClusterFile: e.clusterFile}, cluster)

	h.givePort(e, ln.Addr().(*net.TCPAddr).Port)
	releasePort(ln)
	launched = true
	st, err := h.launch(e, pending, adm, env, activity.GetInfo(ctx).HeartbeatTimeout)
	var se *shim.StartError
	switch {
	case errors.As(err, &se):
		res.ExitCode, res.Error = 127, se.Msg
		return fail(temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s cannot start on host %s: %s", e.ref.Task, h.Name, se.Msg),
			workflows.ErrTaskStartFailed, nil, res))
	case err != nil:
		return fail(h.withRoomNote(fmt.Errorf("start %s on %s: %w", e.ref.Task, h.Name, err)))
	}
	// A stop asked for while the process was starting applies now.
	if by, reason := e.stopCause(); by != "" {
		h.askSupervisor(e, by, reason, e.stopGraceAsked())
	}
	if e.asChosen {
		h.reportStarted(ctx, in, e, st.StartedAt)
	}
	h.giveNewerMap(e, cluster)
	h.taskStarted(e.ref.Attempt)
	h.audit(e, adm, st.PID)
	return nil
}

// attach takes up an attempt an earlier lease started on this host: the process, its control socket and its
// logs go on as they were; only the lease is new.
func (h *Host) attach(ctx context.Context, in workflows.RunTaskInput, ref attemptRef, lease int, res workflows.TaskResult,
	ml memberLease) (workflows.TaskResult, error) {
	e := h.reg.lookupSettled(ref.WorkflowID, ref.RunID, ref.Task, ref.Attempt)
	if e != nil && e.process() == nil && e.exited() == nil {
		// It still waits for its rendezvous: nothing runs to take up. The run starts the attempt again.
		return res, detachedError(fmt.Sprintf("%s attempt %d has not started on host %s", ref.Task, ref.Attempt, h.Name), res)
	}
	if e == nil || e.process() == nil {
		msg := fmt.Sprintf("host %s has no record of %s attempt %d", h.Name, ref.Task, ref.Attempt)
		if other := h.reg.latest(ref.WorkflowID, ref.RunID, ref.Task); other != nil {
			msg += fmt.Sprintf(" (it holds attempt %d)", other.ref.Attempt)
		}
		return res, temporal.NewNonRetryableApplicationError(msg, workflows.ErrTaskLost, nil, res)
	}
	res.PID = e.process().PID
	if h.reg.closed() {
		// This worker is on its way out: the next one takes the task up.
		return res, detachedError(fmt.Sprintf("host worker %s is shutting down; %s goes on running for its next worker", h.Name, ref.Task), res)
	}
	holder := e.claim(lease)
	if holder == nil {
		return res, detachedError(fmt.Sprintf("lease %d of %s attempt %d is stale", lease, ref.Task, ref.Attempt), res)
	}
	defer e.letGo(lease)
	h.Metrics.Counter(metricTaskReattaches).Inc(1)
	h.Logger.Info("task taken up again", "run", ref.WorkflowID, "task", ref.Task, "attempt", ref.Attempt, "lease", lease, "pid", res.PID)
	// Tell the run the task is back (batched with this host's other re-attaches). Should the signal fail, the
	// task only shows as unreachable until it ends.
	go func() {
		err := h.placements.add(ctx, ref.WorkflowID, ref.RunID, workflows.Placement{Task: ref.Task, Generation: ref.Generation,
			Attempt: ref.Attempt, Lease: lease, Host: h.Name, Addr: h.Addr, Reattached: true})
		if err != nil && ctx.Err() == nil {
			h.Logger.Warn("cannot tell the run that a task was taken up again", "task", ref.Task, "error", err)
		}
	}()
	return h.hold(ctx, in, e, lease, holder, ml, true)
}

// hold heartbeats for a running attempt until its process ends (and reports how), the run stops it, or the
// lease is given up: contact with the server is lost, a newer lease took over, or this worker shuts down. The
// process runs on in every case but the first two. takenUp says the process ran before this lease (a worker
// took it up again): its last output line goes with the lease's first beat, not only with the next tick's.
func (h *Host) hold(ctx context.Context, in workflows.RunTaskInput, e *entry, lease int, holder chan struct{}, ml memberLease, takenUp bool) (workflows.TaskResult, error) {
	st := e.process()
	res := workflows.TaskResult{Task: e.ref.Task, Host: h.Name, Attempt: e.ref.Attempt, PID: st.PID}
	logs := AttemptDir(h.LogDir, e.ref.WorkflowID, e.ref.Attempt, e.ref.Task)
	stdout, stderr := filepath.Join(logs, "stdout.log"), filepath.Join(logs, "stderr.log")
	last := ""
	if takenUp {
		last = lastLine(stdout, stderr)
	}
	hb := ml.hb
	hb.update(ml.beat, func(d *workflows.HeartbeatDetails) {
		d.PID, d.Lease, d.Phase, d.Note = st.PID, lease, phaseRunning, ""
		if takenUp {
			d.Last = last
		}
	}, func(d *workflows.HeartbeatDetails) {
		d.Last = lastLine(stdout, stderr)
		d.Progress = e.lastProgress()
	})

	select {
	case <-e.ended:
		if ml.alone && h.runHasTheEnd(e, hb) {
			return res, activity.ErrResultPending
		}
		res, err := h.report(ctx, in, e)
		if ml.alone && h.exitReported(ctx, in, e, res, hb) {
			return res, activity.ErrResultPending
		}
		return res, err
	case <-holder:
		if e.exited() != nil {
			return h.report(ctx, in, e)
		}
		if e.legacy {
			<-e.ended // the host stops it (shutdown)
			return h.report(ctx, in, e)
		}
		return res, detachedError(h.whyLetGo(e, lease), res)
	case <-hb.verdicts():
		v := hb.verdictNow()
		if v == leaseCanceled || e.legacy {
			// The run is stopping and StopTasks did not reach this host first (or, before leases, the server gave
			// the attempt up). Either way the process must not outlive this lease. A batch stops all its members
			// with one request (RunTasks); a lone lease stops its own.
			if ml.alone || !e.stopRequested() {
				h.stopEntry(e, stopByRun, "canceled", e.grace)
			}
			<-e.ended
			return h.reportLease(in, e, v)
		}
		e.letGo(lease)
		return res, detachedError("the server no longer knows lease "+strconv.Itoa(lease)+" (it timed it out); the task goes on running on "+h.Name, res)
	case <-ctx.Done():
		if e.legacy {
			h.stopEntry(e, stopByRun, "canceled", e.grace)
			<-e.ended
			return h.report(ctx, in, e)
		}
		e.letGo(lease)
		return res, detachedError(leaseEnded(ctx)+"; the task goes on running on "+h.Name, res)
	}
}

// reportHoldBack is how long the lease of an attempt its run stopped waits before it reports the end.
const reportHoldBack = 200 * time.Millisecond

// runHasTheEnd says whether an attempt's end need not be reported at all. An attempt the run stopped (StopTasks)
// has its end in the run already, from StopTasks' answer. If the run ends there (fail-fast, the chief's exit), its
// final workflow task would otherwise queue behind one completion per task, each a write to the same history,
// that only repeat what the run knows (0.45 s of a 64-task fail-fast here). So the lease waits a moment, then asks
// the server: if the run is over (its lease is gone), there is nobody to report to. Otherwise it reports as usual.
func (h *Host) runHasTheEnd(e *entry, hb *heartbeater) bool {
	if by, _ := e.stopCause(); by != stopByRun || e.legacy {
		return false
	}
	select {
	case <-hb.verdicts():
		return hb.verdictNow() == leaseGone
	case <-time.After(reportHoldBack):
	}
	return hb.ask() == leaseGone
}

// reportLease reports an attempt its lease stopped on the server's word: a cancellation is Canceled; a lease
// of a run started before leases that the server gave up failed, as it did then.
func (h *Host) reportLease(in workflows.RunTaskInput, e *entry, v verdict) (workflows.TaskResult, error) {
	res, err := h.report(context.Background(), in, e)
	if !res.Stopped {
		return res, err
	}
	if v == leaseGone {
		res.Stopped, res.Error = false, "lost contact with the Temporal server (it no longer knows this attempt)"
		return res, temporal.NewApplicationError(fmt.Sprintf("%s on %s was stopped: %s", e.ref.Task, h.Name, res.Error), workflows.ErrTaskFailed, res)
	}
	return res, temporal.NewCanceledError(res)
}

// whyLetGo says why lease lost its hold on e.
func (h *Host) whyLetGo(e *entry, lease int) string {
	e.mu.Lock()
	current := e.lease
	e.mu.Unlock()
	if current > lease {
		return fmt.Sprintf("lease %d of %s attempt %d was taken over by lease %d", lease, e.ref.Task, e.ref.Attempt, current)
	}
	return fmt.Sprintf("host worker %s is shutting down; %s goes on running for its next worker", h.Name, e.ref.Task)
}

// leaseEnded explains an activity context that ended: this lease does not heartbeat through the SDK, so only
// the worker's stop or the activity's own deadline end it.
func leaseEnded(ctx context.Context) string {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return "the lease ended (" + cause.Error() + ")"
	}
	return "the lease ended (the host worker is stopping)"
}

func detachedError(msg string, res workflows.TaskResult) error {
	return temporal.NewNonRetryableApplicationError(msg, workflows.ErrTaskDetached, nil, res)
}

// report turns how an attempt ended into RunTask's result: a task stopped by the run is Stopped; one stopped by
// the host (hung, cut off, taken down, orphaned) or whose supervisor died failed, whatever its exit code; else
// its exit code decides.
func (h *Host) report(ctx context.Context, in workflows.RunTaskInput, e *entry) (workflows.TaskResult, error) {
	x := *e.exited()
	st := e.process()
	res := workflows.TaskResult{Task: e.ref.Task, Host: h.Name, Attempt: e.ref.Attempt, ExitCode: x.Code, Signal: x.Signal,
		StartTime: st.StartedAt, EndTime: x.EndedAt, PID: st.PID}
	dir := AttemptDir(h.LogDir, e.ref.WorkflowID, e.ref.Attempt, e.ref.Task)
	collectFiles(&res, filepath.Join(dir, "result.json"), filepath.Join(dir, "error.json"), filepath.Join(dir, "stderr.log"))
	res.Logs = logSizes(dir)
	switch {
	case x.Stopped && x.By == stopByRun:
		res.Stopped, res.Error = true, killedNote(x)
		if ctx.Err() != nil {
			return res, temporal.NewCanceledError(res)
		}
		return res, nil
	case e.endedByStopRequestSignal(x):
		res.Stopped = true
		res.Error = fmt.Sprintf("ended on its stopRequestSignal, sent when the run's stop request reached %s", h.Name)
		return res, nil
	case x.Stopped || x.By == shim.ByReap:
		res.Hung = x.By == stopByHang
		res.StoppedByHost = true
		res.Error = x.Reason
		if e.legacy {
			return res, workflows.ExitOutcome(in.Task, res)
		}
		return res, workflows.TaskFailure(in.Task, res)
	}
	h.noteLogsFull(&res, x)
	noteOOM(&res, x)
	return res, workflows.AttemptOutcome(in, res)
}

// noteOOM puts the OOM killer's kills first in the error of a task that ended on its own: its main process's
// (the task ran out of memory), or else, when it failed, its other processes' (a data loader's worker, say).
func noteOOM(res *workflows.TaskResult, x shim.Exit) {
	var note string
	switch {
	case x.OOMKilled != nil:
		res.OutOfMemory = true
		note = "the kernel's OOM killer killed " + oomKilled(*x.OOMKilled) + oomWhere(*x.OOMKilled)
	case len(x.OOMKilledChildren) == 1 && res.ExitCode != 0:
		k := x.OOMKilledChildren[0]
		note = "the kernel's OOM killer killed a process of the task, " + oomKilled(k) + "," + oomWhere(k)
	case len(x.OOMKilledChildren) > 1 && res.ExitCode != 0:
		var each []string
		for _, k := range x.OOMKilledChildren {
			each = append(each, oomKilled(k))
		}
		note = fmt.Sprintf("the kernel's OOM killer killed %d processes of the task, %s,%s", len(each),
			strings.Join(each, ", "), oomWhere(x.OOMKilledChildren[0]))
	default:
		return
	}
	if res.Error != "" {
		note += "; " + res.Error
	}
	res.Error = note
}

// oomKilled names a process the OOM killer killed: "python3 (pid 4567, 1.2 GiB resident)".
func oomKilled(k shim.OOMKill) string {
	if k.RSS < 1<<20 {
		return fmt.Sprintf("%s (pid %d)", k.Name, k.PID)
	}
	return fmt.Sprintf("%s (pid %d, %s resident)", k.Name, k.PID, spec.FormatSize(k.RSS&^(1<<20-1))) // whole MiB: "56 MiB", "1.2 GiB"
}

// oomWhere says why the kernel killed it.
func oomWhere(k shim.OOMKill) string {
	if k.Cgroup {
		return " at its memory cgroup's limit"
	}
	return " as the host ran out of memory"
}

// killedNote says why a stopped task was killed, when it outlived its stop's grace period; else it is empty.
func killedNote(x shim.Exit) string {
	if x.KilledAfter <= 0 {
		return ""
	}
	return fmt.Sprintf("it did not exit within its %s grace period (stopGracePeriod) after SIGTERM", x.KilledAfter)
}

// heartbeatEvery picks the heartbeat period: half the timeout, so a beat whose RPC is as slow as a period
// still lands within it, at about the SDK's own rate (it sends at most one per 0.8 × the timeout).
func heartbeatEvery(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return 5 * time.Second
	}
	return max(timeout/2, 100*time.Millisecond)
}

package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/clusterrun/clusterrun/spec"
)

// behavior is how a fake task attempt ends once released: exit with a code after a short while, or run until
// stopped.
type behavior struct {
	exit  int
	block bool
	// barriers are passed in order after the release; a broken one ends the attempt with exit 1.
	barriers []barrierCall
	// stop, when set, is requested after the barriers.
	stop *StopRequest
	// obey makes a blocked attempt exit 0 once its host is told the run should stop.
	obey bool
	// atOnce makes an attempt that requests a stop exit right after. The request and the end reach the run in
	// one workflow task behind another input (a clear-stop with nothing to clear), as they can on a server: the
	// first input wakes the run's selector, and the two after it wait in their channels.
	atOnce bool
	// oom makes the attempt end as its host reports a process the kernel's OOM killer killed.
	oom bool
	// takenDown makes the attempt end as its host reports a task it stopped (clusterrun drain --now) that exited
	// 0 on its SIGTERM.
	takenDown bool
}

type barrierCall struct {
	name  string
	types []string
}

func exits(code int) behavior { return behavior{exit: code} }

var blocks = behavior{block: true}

// fakeHosts stands in for host workers: RunTask signals its placement, waits for Release, then behaves as told;
// StopTasks stops blocked attempts. It records what the workflow asked of it.
type fakeHosts struct {
	env *testsuite.TestWorkflowEnvironment
	// script gives each (task, attempt, generation) its behavior; the default blocks.
	script func(task string, attempt, generation int) behavior

	mu       sync.Mutex
	released map[string]chan ClusterMap // task -> waiting attempt
	stop     map[string]chan struct{}
	queues   map[string]string // task -> task queue it ran on
	// registry is what the host registry lists; taken are ports in use on every host, which a pre-placed task
	// cannot have.
	registry []HostEntry
	taken    map[int]bool
	// memoName is the name the run recorded in its memo, if it did.
	memoName string
	// silentStart: the host of a pre-placed task dies before it reports the start.
	silentStart func(RunTaskInput) bool
	// startedAt, when set, is the process start a pre-placed task's report and a StopTasks answer carry.
	startedAt *time.Time
	ids       []string // activity IDs seen
	releases  []ReleaseInput
	stops     []StopTasksInput
	maps      map[string]ClusterMap  // task -> map it was released with
	barrier   map[string]chan string // task/barrier -> "" or the error
	// waiterAttempt is the attempt waiting at each task/barrier: outcomes are for attempts, not names.
	waiterAttempt map[string]int
	passed        map[string][]string // task -> "barrier: ok" or "barrier: error"
	notified      chan struct{}       // closed on NotifyStop
	notices       []NotifyStopInput
	notifyQueues  []string // the task queue of each NotifyStop
	outcomes      []BarrierOutcome
	signals       []SignalTasksInput
	inputs        []RunTaskInput // every lease, in order (a batch's members as the RunTask each amounts to)
	batches       []RunTasksInput
	// quietEnds leaves the members' ends to the batch's completion (their reports are lost).
	quietEnds bool
	// batchFails, when it returns an error for a batch, ends that lease as a whole with it once its members run
	// (their fakes go on blocking, as processes outlive a lease that timed out).
	batchFails func(in RunTasksInput) error
	// untaken, while it says so of a lease's queue, leaves that lease untaken, as a host that is gone or full
	// does: canceled meanwhile, it ends canceled, never having reached a host.
	untaken func(queue string) bool
	// beforePlacing, when set, runs before a launch reports its placement.
	beforePlacing func(in RunTaskInput)
	// loseBeforePlacing, when it says so, ends a launch's lease before its placement, as a host that gave the
	// lease up before it started the process does.
	loseBeforePlacing func(in RunTaskInput) bool
	// failReleases makes that many Releases fail, as when the server goes down before they reach their host.
	failReleases int
	// lease, when set, may end a lease its own way once its process "runs" (after the release of a launch, at
	// once for a re-attach); done false lets the task behave as scripted.
	lease func(ctx context.Context, in RunTaskInput, res TaskResult) (out TaskResult, err error, done bool)
	// releaseAnswered, when set, may hold back a Release's answer after its tasks got the map.
	releaseAnswered func()
	// portFor, when set, picks the port a lease reports (default 2000 + rank).
	portFor  func(in RunTaskInput) int
	mapMoves []UpdateMapInput
	// stopFails, when it returns an error for a StopTasks on a task queue, fails that call, as when its host
	// does not take it up in time; stopQueues lists the queue of every StopTasks call.
	stopFails  func(queue string, in StopTasksInput) error
	stopQueues []string
	// stopHold, when set, runs as a StopTasks begins, before the fake takes its lock: a host slow to answer.
	stopHold func(in StopTasksInput)
	// stopEnds, when set, gives the ends a StopTasks reports of tasks that ended before it (under the lock).
	stopEnds func(in StopTasksInput) []TaskExitReport
	// stopUnknown, when set, names the tasks a StopTasks reports it has no record of (under the lock).
	stopUnknown func(in StopTasksInput) []string
	// waitsForSlot, while it says so of a batch member on a queue, holds that member before it starts, as a
	// host without a free slot does; withdrawTasks gives such members back (withdrawals lists its calls, which
	// fail while withdrawFails is set).
	waitsForSlot   func(queue string, in RunTaskInput) bool
	waitingMembers map[LeaseAttempt]chan struct{}
	withdrawals    []WithdrawTasksInput
	withdrawFails  bool
	// batchEnds, when set, runs before a batch completes, once all its members have ended: a host's batch
	// completes only once its lease's cancellation reaches it on a heartbeat.
	batchEnds func(ctx context.Context, in RunTasksInput)
	// runEnded, when set, answers an AwaitRunEnd at once with the run it names; else it says none ended, and the
	// run waits the rest on its clock. watched lists every AwaitRunEnd's input.
	runEnded func(in AwaitRunEndInput) string
	watched  []AwaitRunEndInput
}

// stoppedHoldBack is the fakes' hold-back of a stopped member's report (a host's is exitHoldBack, 1 s).
const stoppedHoldBack = 200 * time.Millisecond

func newFakeHosts(env *testsuite.TestWorkflowEnvironment, script func(string, int, int) behavior) *fakeHosts {
	f := &fakeHosts{env: env, script: script, released: map[string]chan ClusterMap{}, stop: map[string]chan struct{}{},
		queues: map[string]string{}, maps: map[string]ClusterMap{}, barrier: map[string]chan string{}, waiterAttempt: map[string]int{}, passed: map[string][]string{},
		notified: make(chan struct{})}
	env.RegisterActivityWithOptions(f.runTask, activity.RegisterOptions{Name: ActivityRunTask})
	env.RegisterActivityWithOptions(f.runTasks, activity.RegisterOptions{Name: ActivityRunTasks})
	env.RegisterActivityWithOptions(f.release, activity.RegisterOptions{Name: ActivityRelease})
	env.RegisterActivityWithOptions(f.stopTasks, activity.RegisterOptions{Name: ActivityStopTasks})
	// The registry lists no host unless a test says: unpinned tasks go to their pool's queue, as the fakes'
	// scripts expect.
	testPorts = PortAllocatorState{}
	testRegistry = func() []HostEntry {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Clone(f.registry)
	}
	// Host workers follow the run's memo for barrier outcomes; so do the fakes.
	env.OnUpsertMemo(mock.Anything).Run(func(args mock.Arguments) {
		m := args.Get(0).(map[string]interface{})
		if o, ok := m[MemoBarrier].(BarrierOutcome); ok {
			f.outcome(o)
		}
		if name, ok := m[MemoName].(string); ok {
			f.mu.Lock()
			f.memoName = name
			f.mu.Unlock()
		}
	}).Return(nil)
	env.RegisterActivityWithOptions(f.notifyStop, activity.RegisterOptions{Name: ActivityNotifyStop})
	env.RegisterActivityWithOptions(f.signalTasks, activity.RegisterOptions{Name: ActivitySignalTasks})
	env.RegisterActivityWithOptions(f.updateMap, activity.RegisterOptions{Name: ActivityUpdateMap})
	env.RegisterActivityWithOptions(f.withdrawTasks, activity.RegisterOptions{Name: ActivityWithdrawTasks})
	env.RegisterActivityWithOptions(f.awaitRunEnd, activity.RegisterOptions{Name: ActivityAwaitRunEnd})
	return f
}

func (f *fakeHosts) awaitRunEnd(_ context.Context, in AwaitRunEndInput) (AwaitRunEndResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watched = append(f.watched, in)
	if f.runEnded == nil {
		return AwaitRunEndResult{}, nil
	}
	return AwaitRunEndResult{Ended: f.runEnded(in)}, nil
}

func (f *fakeHosts) runTask(ctx context.Context, in RunTaskInput) (TaskResult, error) {
	if !f.takenUp(ctx) {
		return TaskResult{}, temporal.NewCanceledError()
	}
	return f.serve(ctx, in, activity.GetInfo(ctx).ActivityID)
}

// takenUp waits while untaken says so of the lease's queue; false: the lease was canceled meanwhile.
func (f *fakeHosts) takenUp(ctx context.Context) bool {
	for f.untaken != nil && f.untaken(activity.GetInfo(ctx).TaskQueue) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// runTasks serves each member of a batch as runTask serves its one task, reports each member's end by signal
// as a host does, and completes with every end.
func (f *fakeHosts) runTasks(ctx context.Context, in RunTasksInput) (RunTasksResult, error) {
	if !f.takenUp(ctx) {
		return RunTasksResult{}, temporal.NewCanceledError()
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var out RunTasksResult
	f.mu.Lock()
	f.batches = append(f.batches, in)
	f.mu.Unlock()
	var fails error
	if f.batchFails != nil {
		fails = f.batchFails(in)
	}
	mctx := ctx
	if fails != nil {
		mctx = context.WithoutCancel(ctx) // the processes outlive the lease, and report nothing
	}
	// A host takes up every member at once: the fakes record them all before any is served, but for those that
	// wait for a slot.
	taken := make([]lease, len(in.Members))
	waits := make([]bool, len(in.Members))
	for i, m := range in.Members {
		if waits[i] = f.waitsForSlot != nil && f.waitsForSlot(activity.GetInfo(ctx).TaskQueue, in.MemberInput(m)); !waits[i] {
			taken[i] = f.take(ctx, in.MemberInput(m), LeaseID(m.Task.Name, m.Attempt, m.Lease))
		}
	}
	queue := activity.GetInfo(ctx).TaskQueue
	for i := range in.Members {
		m := in.Members[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res TaskResult
			var err error
			if waits[i] {
				res, err = f.awaitSlot(mctx, queue, in, m)
				if err == nil {
					res, err = f.serve(mctx, in.MemberInput(m), LeaseID(m.Task.Name, m.Attempt, m.Lease))
				}
			} else {
				res, err = f.serveTaken(mctx, in.MemberInput(m), taken[i])
			}
			if fails != nil {
				return
			}
			end := TaskExitReport{Generation: in.Generation, Lease: m.Lease, Result: res, Member: true, Error: LeaseErrorOf(err)}
			if in.ReportExit && !f.quietEnds {
				if res.Stopped {
					// A host holds back the end of an attempt a StopTasks stopped (exitHoldBack): the stop's
					// answer, which has it, comes first.
					time.Sleep(stoppedHoldBack)
				}
				f.report(in.ReportTo, end)
			}
			mu.Lock()
			out.Ends = append(out.Ends, end)
			mu.Unlock()
		}()
	}
	if fails != nil {
		for !f.running(in) {
			time.Sleep(time.Millisecond)
		}
		return RunTasksResult{}, fails
	}
	wg.Wait()
	if f.batchEnds != nil {
		f.batchEnds(ctx, in)
	}
	return out, nil
}

// awaitSlot holds member m of a batch on queue while waitsForSlot says so of it, as a host holds a member
// that waits for a slot, until the lease is canceled or the run takes the member back (withdrawTasks): then
// it ends unstarted, as a host's member does.
func (f *fakeHosts) awaitSlot(ctx context.Context, queue string, in RunTasksInput, m LeaseMember) (TaskResult, error) {
	res := TaskResult{Task: m.Task.Name, Attempt: m.Attempt}
	back := make(chan struct{})
	k := LeaseAttempt{Task: m.Task.Name, Attempt: m.Attempt, Lease: m.Lease}
	f.mu.Lock()
	if f.waitingMembers == nil {
		f.waitingMembers = map[LeaseAttempt]chan struct{}{}
	}
	f.waitingMembers[k] = back
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.waitingMembers, k)
		f.mu.Unlock()
	}()
	for f.waitsForSlot(queue, in.MemberInput(m)) {
		select {
		case <-back:
			return res, temporal.NewNonRetryableApplicationError("the host gave it back before it started", ErrTaskDetached, nil, res)
		case <-ctx.Done():
			res.Stopped = true
			return res, temporal.NewCanceledError(res)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return res, nil
}

// withdrawTasks gives back the named members that wait for a slot (awaitSlot), and names those whose lease no
// fake took.
func (f *fakeHosts) withdrawTasks(_ context.Context, in WithdrawTasksInput) (WithdrawTasksResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.withdrawals = append(f.withdrawals, in)
	if f.withdrawFails {
		return WithdrawTasksResult{}, errors.New("no such activity: a host from before WithdrawTasks")
	}
	var out WithdrawTasksResult
	for _, m := range in.Members {
		if back, ok := f.waitingMembers[m]; ok {
			close(back)
			delete(f.waitingMembers, m)
			out.Withdrawn = append(out.Withdrawn, m.Task)
		} else if !slices.Contains(f.ids, LeaseID(m.Task, m.Attempt, m.Lease)) {
			out.Unknown = append(out.Unknown, m.Task) // a lease no fake took (untaken)
		}
	}
	return out, nil
}

// report signals a member's end where its lease says: the run, or the shard that holds the lease.
func (f *fakeHosts) report(to RunRef, end TaskExitReport) {
	x := TaskExits{Exits: []TaskExitReport{end}}
	if strings.Contains(to.WorkflowID, "/shard-") {
		// A shard that has ended needs no report (a host gets "not found", and stops sending). The test
		// environment looks its workflows up unguarded, so the signal is sent from its own loop.
		f.env.RegisterDelayedCallback(func() { _ = f.env.SignalWorkflowByID(to.WorkflowID, SignalTaskExits, x) }, 0)
		return
	}
	f.env.SignalWorkflow(SignalTaskExits, x)
}

// running says whether every member of a batch got the map (a launch) or began serving (a re-attach).
func (f *fakeHosts) running(in RunTasksInput) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range in.Members {
		if _, ok := f.maps[m.Task.Name]; !ok && !in.Attach {
			return false
		}
	}
	return true
}

func addrOf(t spec.Task) string { return "10.0.0." + fmt.Sprint(t.Index+1) }

// mapsNow is the map each task got so far, read under the fakes' lock: a lease's goroutines may outlive the run
// (a member stopped by the run may still be recording that it got its map).
func (f *fakeHosts) mapsNow() map[string]ClusterMap {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.maps)
}

// leasedMaps is the map each task's leases carried (pre-placed launches), read under the fakes' lock.
func (f *fakeHosts) leasedMaps() map[string]ClusterMap {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]ClusterMap{}
	for _, in := range f.inputs {
		if in.Cluster != nil {
			out[in.Task.Name] = *in.Cluster
		}
	}
	return out
}

func (f *fakeHosts) isTaken(port int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.taken[port]
}

// lease is what the fakes hold for one task attempt's lease: where its cluster map and its stop arrive.
type lease struct {
	rel  chan ClusterMap
	stop chan struct{}
}

// serve runs one task attempt's lease; id names it (its RunTask's activity ID, or what it would be).
func (f *fakeHosts) serve(ctx context.Context, in RunTaskInput, id string) (TaskResult, error) {
	return f.serveTaken(ctx, in, f.take(ctx, in, id))
}

// take records that a task attempt's lease began, on the activity's queue.
func (f *fakeHosts) take(ctx context.Context, in RunTaskInput, id string) lease {
	l := lease{rel: make(chan ClusterMap, 1), stop: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released[in.Task.Name], f.stop[in.Task.Name] = l.rel, l.stop
	f.queues[in.Task.Name] = activity.GetInfo(ctx).TaskQueue
	f.ids = append(f.ids, id)
	f.inputs = append(f.inputs, in)
	return l
}

// serveTaken runs a taken lease as its behaviour says, until it ends, is stopped or is canceled.
func (f *fakeHosts) serveTaken(ctx context.Context, in RunTaskInput, l lease) (TaskResult, error) {
	rel, stop := l.rel, l.stop
	host := in.Task.Host
	if host == "" {
		host = "pooled-host"
	}
	if in.Attach {
		host = in.Host
	}
	attempt := in.Attempt
	res := TaskResult{Task: in.Task.Name, Host: host, Attempt: attempt}
	if in.Cluster != nil && !in.Attach && !f.isTaken(in.Port) {
		for _, ep := range in.Cluster.Endpoints {
			if ep.Task == in.Task.Name {
				host = ep.Host // where the run placed it
			}
		}
		res.Host = host
		f.mu.Lock()
		f.maps[in.Task.Name] = *in.Cluster
		f.mu.Unlock()
		if f.silentStart == nil || !f.silentStart(in) {
			f.env.SignalWorkflow(SignalTasksPlaced, PlacedSignal{Placements: []Placement{{Task: in.Task.Name, Generation: in.Generation,
				Attempt: attempt, Lease: in.Lease, Host: host, Addr: addrOf(in.Task), Port: in.Port, Started: true, StartedAt: f.startedAt}}})
		}
	} else if !in.Attach {
		port := 2000 + in.Task.Rank
		if f.portFor != nil {
			port = f.portFor(in)
		}
		if in.Cluster != nil {
			port = 30000 + in.Task.Rank // its chosen port was taken
		}
		if f.loseBeforePlacing != nil && f.loseBeforePlacing(in) {
			return res, temporal.NewNonRetryableApplicationError("the host gave the lease up", ErrTaskDetached, nil, res)
		}
		if f.beforePlacing != nil {
			f.beforePlacing(in)
		}
		f.env.SignalWorkflow(SignalTasksPlaced, PlacedSignal{Placements: []Placement{{Task: in.Task.Name, Generation: in.Generation,
			Attempt: attempt, Lease: in.Lease, Host: host, Addr: addrOf(in.Task), Port: port}}})
		select {
		case m := <-rel:
			f.mu.Lock()
			f.maps[in.Task.Name] = m
			f.mu.Unlock()
		case <-stop: // stopped before it started
			res.Stopped = true
			return res, nil
		case <-ctx.Done():
			return res, temporal.NewCanceledError(res)
		}
	}
	res.PID = 100 + in.Task.Rank
	if f.lease != nil {
		if out, err, done := f.lease(ctx, in, res); done {
			return out, err
		}
	}
	if in.Attach {
		f.env.SignalWorkflow(SignalTasksPlaced, PlacedSignal{Placements: []Placement{{Task: in.Task.Name, Generation: in.Generation,
			Attempt: attempt, Lease: in.Lease, Host: host, Reattached: true}}})
	}
	b := blocks
	if f.script != nil {
		b = f.script(in.Task.Name, attempt, in.Generation)
	}
	for _, call := range b.barriers {
		ch := make(chan string, 1)
		f.mu.Lock()
		f.barrier[in.Task.Name+"/"+call.name] = ch
		f.waiterAttempt[in.Task.Name+"/"+call.name] = attempt
		f.mu.Unlock()
		f.env.SignalWorkflow(SignalBarrierArrivals, BarrierArrivals{Barrier: call.name, Generation: in.Generation, Types: call.types,
			Tasks: []TaskAttempt{{Task: in.Task.Name, Attempt: res.Attempt}}})
		select {
		case e := <-ch:
			f.mu.Lock()
			if e == "" {
				f.passed[in.Task.Name] = append(f.passed[in.Task.Name], call.name+": ok")
			} else {
				f.passed[in.Task.Name] = append(f.passed[in.Task.Name], call.name+": "+e)
			}
			f.mu.Unlock()
			if e != "" {
				res.ExitCode = 1
				return res, AttemptOutcome(in, res)
			}
		case <-stop:
			res.ExitCode, res.Signal, res.Stopped = 143, "SIGTERM", true
			return res, nil
		case <-ctx.Done():
			return res, temporal.NewCanceledError(res)
		}
	}
	if b.stop != nil {
		req := *b.stop
		if req.Task != "" {
			req.Attempt = attempt
		}
		if b.atOnce {
			f.env.SignalWorkflowSkippingWorkflowTask(SignalClearStop, StopRequest{})
			f.env.SignalWorkflowSkippingWorkflowTask(SignalStop, req)
		} else {
			f.env.SignalWorkflow(SignalStop, req)
		}
	}
	if b.block {
		var notified <-chan struct{}
		if b.obey {
			notified = f.notified
		}
		select {
		case <-notified:
			res.ExitCode = 0
			return res, nil
		case <-stop:
			res.ExitCode, res.Signal, res.Stopped = 143, "SIGTERM", true
			return res, nil
		case <-ctx.Done():
			res.ExitCode, res.Signal = 143, "SIGTERM"
			return res, temporal.NewCanceledError(res)
		}
	}
	if !b.atOnce {
		time.Sleep(20 * time.Millisecond)
	}
	res.ExitCode = b.exit
	if b.exit != 0 {
		res.Error = "boom"
	}
	if b.oom {
		res.ExitCode, res.Signal, res.OutOfMemory = 137, "SIGKILL", true
		res.Error = "the kernel's OOM killer killed python3 (pid 4567, 3 GiB resident) as the host ran out of memory"
	}
	if b.takenDown {
		res.ExitCode, res.Error, res.StoppedByHost = 0, "host pooled-host taken down by the operator", true
		return res, TaskFailure(in.Task, res)
	}
	return res, AttemptOutcome(in, res)
}

func (f *fakeHosts) release(_ context.Context, in ReleaseInput) (ReleaseResult, error) {
	if f.releaseAnswered != nil {
		defer f.releaseAnswered()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases = append(f.releases, in)
	if f.failReleases > 0 {
		f.failReleases--
		return ReleaseResult{}, temporal.NewNonRetryableApplicationError("host did not answer", "Unreachable", nil)
	}
	var out ReleaseResult
	for _, t := range in.Tasks {
		if ch, ok := f.released[t.Task]; ok {
			ch <- in.Cluster
			out.Released = append(out.Released, t.Task)
		}
	}
	return out, nil
}

func (f *fakeHosts) stopTasks(ctx context.Context, in StopTasksInput) (StopTasksResult, error) {
	if f.stopHold != nil {
		f.stopHold(in)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	queue := activity.GetInfo(ctx).TaskQueue
	f.stopQueues = append(f.stopQueues, queue)
	if f.stopFails != nil {
		if err := f.stopFails(queue, in); err != nil {
			return StopTasksResult{}, err
		}
	}
	f.stops = append(f.stops, in)
	var out StopTasksResult
	if f.stopEnds != nil {
		out.Ended = f.stopEnds(in)
	}
	if f.stopUnknown != nil {
		out.Unknown = f.stopUnknown(in)
	}
	for _, t := range in.Tasks {
		if ch, ok := f.stop[t]; ok {
			select {
			case <-ch:
			default:
				close(ch)
			}
			out.Stopped = append(out.Stopped, t)
			out.Exits = append(out.Exits, TaskExit{Task: t, ExitCode: 143, Signal: "SIGTERM", StartTime: f.startedAt})
		}
	}
	return out, nil
}

func (f *fakeHosts) outcome(o BarrierOutcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outcomes = append(f.outcomes, o)
	for key, ch := range f.barrier {
		task, name, _ := strings.Cut(key, "/")
		if name != o.Barrier {
			continue
		}
		hit := len(o.Tasks) == 0
		for _, t := range o.Tasks {
			hit = hit || (t.Task == task && t.Attempt == f.waiterAttempt[key])
		}
		if hit {
			ch <- o.Error
			delete(f.barrier, key)
		}
	}
}

func (f *fakeHosts) notifyStop(ctx context.Context, in NotifyStopInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.notices) == 0 {
		close(f.notified)
	}
	f.notices = append(f.notices, in)
	f.notifyQueues = append(f.notifyQueues, activity.GetInfo(ctx).TaskQueue)
	return nil
}

func (f *fakeHosts) signalTasks(_ context.Context, in SignalTasksInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals = append(f.signals, in)
	return nil
}

func (f *fakeHosts) updateMap(_ context.Context, in UpdateMapInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mapMoves = append(f.mapMoves, in)
	return nil
}

func (f *fakeHosts) stoppedTasks() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for _, s := range f.stops {
		names = append(names, s.Tasks...)
	}
	sort.Strings(names)
	return names
}

func mustSpec(t *testing.T, doc string) spec.RunSpec {
	t.Helper()
	s, err := spec.Parse([]byte(doc))
	require.NoError(t, err)
	return *s
}

type harness struct {
	suite testsuite.WorkflowTestSuite
	env   *testsuite.TestWorkflowEnvironment
	hosts *fakeHosts
	warns *warnings
}

// warnings keeps the SDK's warnings about the workflows it ran; the rest of its log is discarded.
type warnings struct {
	mu    sync.Mutex
	lines []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, r.Message)
	return nil
}

func (w *warnings) said(msg string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.lines, msg)
}

func newHarness(t *testing.T, script func(string, int, int) behavior) *harness {
	h := &harness{warns: &warnings{}}
	h.suite.SetLogger(log.NewStructuredLogger(slog.New(h.warns)))
	h.env = h.suite.NewTestWorkflowEnvironment()
	h.env.SetTestTimeout(30 * time.Second)
	h.env.RegisterWorkflowWithOptions(ClusterRun, workflowRegisterOptions())
	h.env.RegisterWorkflowWithOptions(ClusterShard, workflow.RegisterOptions{Name: ShardWorkflowType})
	h.hosts = newFakeHosts(h.env, script)
	// The fakes stand in for the registry and the allocator through package variables: a replay after this test
	// must read the recorded ones.
	t.Cleanup(func() { testRegistry, testPorts = nil, PortAllocatorState{} })
	// The test environment's namespace has no search attributes, unless a test says.
	testSearchAttributes = func() bool { return false }
	t.Cleanup(func() { testSearchAttributes = nil })
	return h
}

// run executes the workflow and returns its status (from the result or from the failure's details) and error.
func (h *harness) run(t *testing.T, s spec.RunSpec) (RunStatus, error) {
	t.Helper()
	s = shardedIfAsked(s)
	h.env.ExecuteWorkflow(WorkflowType, s)
	require.True(t, h.env.IsWorkflowCompleted())
	// A signal the run never read (a late start, say) is logged as a warning on the host worker that ended it.
	assert.False(t, h.warns.said("Workflow has unhandled signals"), "the run ended with signals it had not read")
	err := h.env.GetWorkflowError()
	var st RunStatus
	if err == nil {
		require.NoError(t, h.env.GetWorkflowResult(&st))
		return st, nil
	}
	st, _ = StatusFromError(err)
	return st, err
}

// shardedIfAsked gives every task a shard of its own when CLUSTERRUN_TEST_SHARDS=1 (make test-unit runs this
// package both ways), so that every scenario here also runs with its leases held by ClusterShard children.
// Scenarios about large runs keep their own layout.
func shardedIfAsked(s spec.RunSpec) spec.RunSpec {
	n := 0
	for _, t := range s.Tasks {
		n += t.Replicas
	}
	if os.Getenv("CLUSTERRUN_TEST_SHARDS") == "1" && s.TasksPerShard == 0 && n <= 16 {
		s.TasksPerShard = 1
	}
	return s
}

func states(st RunStatus) map[string]string {
	m := map[string]string{}
	for _, t := range st.Tasks {
		m[t.Name] = t.State
	}
	return m
}

func errType(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}

const demo = `
name: demo
command: [python3, train.py]
tasks:
  chief: {replicas: 1}
  worker: {replicas: 2}
  ps: {replicas: 1, hosts: [host-b]}
`

func TestClusterRun_ChiefExitTerminatesTheRest(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "chief-0" {
			return exits(0)
		}
		return blocks
	})
	st, err := h.run(t, mustSpec(t, demo))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, "chief-0 exited 0", st.Reason)
	assert.Equal(t, map[string]string{"chief-0": TaskSucceeded, "worker-0": TaskStopped, "worker-1": TaskStopped, "ps-0": TaskStopped}, states(st))
	assert.Equal(t, []string{"ps-0", "worker-0", "worker-1"}, h.hosts.stoppedTasks())
	assert.Equal(t, 0, *st.Task("chief-0").ExitCode)
	assert.Equal(t, "SIGTERM", st.Task("ps-0").Signal, "exit as the host confirmed it")
	assert.NotNil(t, st.EndTime)
}

func TestClusterRun_PlacementAndRendezvous(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior { return exits(0) })
	_, err := h.run(t, mustSpec(t, demo))
	require.NoError(t, err)

	assert.Equal(t, HostQueue("host-b"), h.hosts.queues["ps-0"], "pinned task goes to its host's queue")
	assert.Equal(t, PoolQueue("default"), h.hosts.queues["worker-1"], "unpinned task goes to its pool's queue")

	// One rendezvous: every task released with the same, complete map, one Release per host.
	require.Len(t, h.hosts.releases, 2)
	got := h.hosts.mapsNow()
	want := got["chief-0"]
	require.Len(t, want.Endpoints, 4)
	for _, e := range want.Endpoints {
		assert.NotZero(t, e.Port, e.Task)
	}
	for task, m := range got {
		assert.Equal(t, want, m, task)
	}
	assert.ElementsMatch(t, []string{"chief-0", "worker-0", "worker-1", "ps-0"}, h.hosts.ids, "activity IDs are the task names")
}

func TestClusterRun_InvalidSpecLaunchesNothing(t *testing.T) {
	h := newHarness(t, nil)
	h.env.ExecuteWorkflow(WorkflowType, spec.RunSpec{Name: "Bad Name", Tasks: map[string]spec.TaskSpec{"chief": {Replicas: 2}}})
	err := h.env.GetWorkflowError()
	require.Error(t, err)
	assert.Equal(t, ErrInvalidSpec, errType(err))
	assert.Contains(t, err.Error(), "tasks.chief.replicas")
	assert.Contains(t, err.Error(), "name")
	assert.Empty(t, h.hosts.ids)
}

// A run whose env value cannot be what was meant (started by the temporal CLI, which does not check specs)
// fails InvalidSpec, saying how to write it: a $NAME no shell expands, or a ${CLUSTERRUN_...} clusterrun does not
// set. A run started before either rule of ChangeEnvReferences replays as it ran (testdata/histories/v10, v12).
func TestClusterRun_AnEnvReferenceThatCannotBeRightFailsInvalidSpec(t *testing.T) {
	for value, want := range map[string]string{
		"/opt/x/bin:$PATH": `env.V: "/opt/x/bin:$PATH" has $PATH, which no shell expands here: write ${PATH} for the host's value`,
		"/ckpt/${CLUSTERRUN_TASK_NAME}": `env.V: "/ckpt/${CLUSTERRUN_TASK_NAME}" has ${CLUSTERRUN_TASK_NAME}, which clusterrun does not set ` +
			`for a task: did you mean ${CLUSTERRUN_TASK}?`,
	} {
		h := newHarness(t, nil)
		h.env.ExecuteWorkflow(WorkflowType, spec.RunSpec{Name: "env", Command: []string{"true"}, Env: map[string]string{"V": value},
			Tasks: map[string]spec.TaskSpec{"worker": {Replicas: 1}}})
		err := h.env.GetWorkflowError()
		require.Error(t, err, value)
		assert.Equal(t, ErrInvalidSpec, errType(err))
		assert.Contains(t, err.Error(), want)
		assert.Empty(t, h.hosts.ids)
	}
}

// A run started by the temporal CLI with a null in its command or env (version 4 of ChangeEnvReferences) fails
// InvalidSpec, where the value was read as "" before (testdata/histories/v16).
func TestClusterRun_ANullValueFailsInvalidSpec(t *testing.T) {
	h := newHarness(t, nil)
	h.env.ExecuteWorkflow(WorkflowType, json.RawMessage(`{"name": "nulls", "command": ["sh", null], "env": {"A": null},
		"tasks": {"worker": {"replicas": 1}}}`))
	err := h.env.GetWorkflowError()
	require.Error(t, err)
	assert.Equal(t, ErrInvalidSpec, errType(err))
	assert.Contains(t, err.Error(), `command[1]: has no value (null): write "" for an empty string`)
	assert.Contains(t, err.Error(), `env.A: has no value (null)`)
	assert.Empty(t, h.hosts.ids)
}

// A run's env value reads the spec's other values (version 3 of ChangeEnvReferences): the leases carry CKPT
// with the run's BASE written in, and a reference to the host's HOME left for the host. A run started before
// it, replayed or restarted on today's workers, keeps ${BASE} for the host to read, as it did.
func TestClusterRun_EnvValuesReadTheSpecsOtherValuesFromVersion3(t *testing.T) {
	for version, want := range map[workflow.Version]string{3: "/data/${HOME}/ckpt", 2: "${BASE}/ckpt"} {
		h := newHarness(t, func(string, int, int) behavior { return exits(0) })
		if version < 3 {
			h.env.OnGetVersion(ChangeEnvReferences, workflow.DefaultVersion, 4).Return(version)
		}
		_, err := h.run(t, spec.RunSpec{Name: "env", Command: []string{"true"}, Env: map[string]string{"BASE": "/data/${HOME}", "CKPT": "${BASE}/ckpt"},
			Tasks: map[string]spec.TaskSpec{"worker": {Replicas: 1}}})
		require.NoError(t, err)
		require.NotEmpty(t, h.hosts.inputs)
		assert.Equal(t, want, h.hosts.inputs[0].Task.Env["CKPT"], "version %d", version)
	}
}

// The overflow spec of the trust-boundary issue: two types whose replicas overflow their sum. Planning it once
// took every host worker down with an out-of-memory crash; it now fails the run InvalidSpec.
func TestClusterRun_OverflowingSpecFailsInvalidSpec(t *testing.T) {
	h := newHarness(t, nil)
	h.env.ExecuteWorkflow(WorkflowType, spec.RunSpec{Name: "overflow", Command: []string{"true"},
		Tasks: map[string]spec.TaskSpec{"a": {Replicas: 1 << 62}, "b": {Replicas: 1 << 62}}, MaxRunTime: "2562047h47m"})
	err := h.env.GetWorkflowError()
	require.Error(t, err)
	assert.Equal(t, ErrInvalidSpec, errType(err))
	assert.Contains(t, err.Error(), "tasks.a.replicas: 4611686018427387904 is more than 1000")
	assert.Contains(t, err.Error(), "maxRunTime")
	assert.Empty(t, h.hosts.ids)
}

func TestClusterRun_FailFastStopsTheRest(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "worker-1" {
			return exits(3)
		}
		return blocks
	})
	st, err := h.run(t, mustSpec(t, demo))
	require.Error(t, err)
	assert.Equal(t, ErrRunFailed, errType(err))
	assert.Equal(t, StatusFailed, st.Status)
	assert.Contains(t, st.Reason, "worker-1 exited with code 3")
	assert.Contains(t, st.Reason, "failFast")
	assert.Equal(t, TaskFailed, st.Task("worker-1").State)
	assert.Equal(t, 3, *st.Task("worker-1").ExitCode)
	assert.Equal(t, []string{"chief-0", "ps-0", "worker-0"}, h.hosts.stoppedTasks())
}

// A task the OOM killer killed says so in its status, for scripts (outOfMemory) and in its error; its next
// attempt starts without the mark.
func TestClusterRun_AnOOMKilledTaskSaysSo(t *testing.T) {
	h := newHarness(t, func(task string, attempt, _ int) behavior {
		if task == "worker-1" && attempt == 1 {
			return behavior{oom: true}
		}
		if task == "worker-2" {
			return behavior{oom: true}
		}
		return exits(0)
	})
	st, err := h.run(t, mustSpec(t, `
name: oom
command: [x]
onFailure: continue
tasks: {worker: {replicas: 3, restart: {policy: OnFailure, maxRestarts: 1, backoff: 1s}}}
`))
	require.Error(t, err)
	w2 := st.Task("worker-2")
	assert.True(t, w2.OutOfMemory)
	assert.Equal(t, 137, *w2.ExitCode)
	assert.Contains(t, w2.Error, "worker-2 ran out of memory on pooled-host (attempt 2): the kernel's OOM killer killed python3")
	w1 := st.Task("worker-1")
	assert.Equal(t, TaskSucceeded, w1.State)
	assert.False(t, w1.OutOfMemory, "its second attempt succeeded")
	assert.False(t, st.Task("worker-0").OutOfMemory)
}

func TestClusterRun_OnFailureContinue(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "worker-1" {
			return exits(1)
		}
		return exits(0)
	})
	st, err := h.run(t, mustSpec(t, `
name: cont
command: [x]
onFailure: continue
tasks: {worker: {replicas: 3}}
`))
	require.Error(t, err)
	assert.Contains(t, st.Reason, "1 of 3 tasks failed")
	assert.Equal(t, map[string]string{"worker-0": TaskSucceeded, "worker-1": TaskFailed, "worker-2": TaskSucceeded}, states(st))
	assert.Empty(t, h.hosts.stoppedTasks())
}

func TestClusterRun_ChiefExitWait(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior { return exits(0) })
	st, err := h.run(t, mustSpec(t, `
name: wait
command: [x]
chiefExit: wait
tasks: {chief: {replicas: 1}, worker: {replicas: 2}}
`))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"chief-0": TaskSucceeded, "worker-0": TaskSucceeded, "worker-1": TaskSucceeded}, states(st))
	assert.Empty(t, h.hosts.stoppedTasks(), "with chiefExit wait nothing is stopped")
}

// A run of one task that succeeded says so by the task's name, not "all 1 tasks".
func TestClusterRun_OneTaskSucceededSaysWhich(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	st, err := h.run(t, mustSpec(t, `{name: one, command: [x], tasks: {worker: {replicas: 1}}}`))
	require.NoError(t, err)
	assert.Equal(t, "worker-0 exited 0", st.Reason)
}

func TestClusterRun_TaskRestartSucceedsOnAttempt2(t *testing.T) {
	h := newHarness(t, func(task string, attempt, _ int) behavior {
		if task == "worker-1" && attempt == 1 {
			return exits(1)
		}
		return exits(0)
	})
	st, err := h.run(t, mustSpec(t, `
name: retry
command: [x]
tasks: {worker: {replicas: 2, restart: {policy: OnFailure, maxRestarts: 2, backoff: 10ms}}}
`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, "all 2 tasks exited 0", st.Reason)
	assert.Equal(t, 2, st.Task("worker-1").Attempt)
	assert.Equal(t, 1, st.Task("worker-0").Attempt)
	// The restarted attempt was released on its own, with the current map.
	require.Len(t, h.hosts.releases, 2)
	assert.Equal(t, []TaskAttempt{{Task: "worker-1", Attempt: 2}}, h.hosts.releases[1].Tasks)
}

func TestClusterRun_RestartBudgetExhausted(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "worker-0" {
			return exits(2)
		}
		return blocks
	})
	st, err := h.run(t, mustSpec(t, `
name: budget
command: [x]
tasks: {chief: {replicas: 1}, worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 2, backoff: 1ms}}}
`))
	require.Error(t, err)
	assert.Equal(t, 3, st.Task("worker-0").Attempt, "1 launch + 2 restarts")
	assert.Equal(t, TaskStopped, st.Task("chief-0").State)
	// The task and the run say that no restart was left, not only how the last attempt ended.
	assert.Contains(t, st.Task("worker-0").Error, "; not restarted: its 2 restarts (maxRestarts: 2) are used up")
	assert.Contains(t, st.Reason, "; not restarted: its 2 restarts (maxRestarts: 2) are used up (onFailure: failFast)")
}

// A failure that a policy of restarts leaves for good says why: ExitCode takes codes 1-127 for the program's
// verdict; a maxRestarts of 0 restarts nothing. Policy Never, the default, says nothing more.
func TestClusterRun_AFailureNotRestartedSaysWhy(t *testing.T) {
	for _, tc := range []struct{ restart, note string }{
		{"{policy: ExitCode, maxRestarts: 3}", "worker-0 exited with code 3 on pooled-host (attempt 1): boom; not restarted: policy ExitCode takes exit code 3 for the program's own verdict (it restarts exit codes 128-255 and lost hosts)"},
		{"{policy: OnFailure, maxRestarts: 0}", "worker-0 exited with code 3 on pooled-host (attempt 1): boom; not restarted: maxRestarts is 0"},
		{"{policy: Never}", "worker-0 exited with code 3 on pooled-host (attempt 1): boom"},
	} {
		t.Run(tc.restart, func(t *testing.T) {
			h := newHarness(t, func(string, int, int) behavior { return exits(3) })
			st, err := h.run(t, mustSpec(t, `
name: why
command: [x]
tasks: {worker: {replicas: 1, restart: `+tc.restart+`}}
`))
			require.Error(t, err)
			assert.Equal(t, 1, st.Task("worker-0").Attempt)
			assert.Equal(t, tc.note, st.Task("worker-0").Error)
		})
	}
}

func TestClusterRun_ExitCodePolicy(t *testing.T) {
	for _, tc := range []struct {
		code     int
		attempts int
	}{{3, 1}, {137, 2}} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			h := newHarness(t, func(task string, attempt, _ int) behavior {
				if attempt == 1 {
					return exits(tc.code)
				}
				return exits(0)
			})
			st, _ := h.run(t, mustSpec(t, `
name: codes
command: [x]
tasks: {worker: {replicas: 1, restart: {policy: ExitCode, maxRestarts: 1, backoff: 1ms}}}
`))
			assert.Equal(t, tc.attempts, st.Task("worker-0").Attempt)
		})
	}
}

// A task its host stopped (drain --now, a hang, a cut-off host) failed whatever its exit code, and its restart
// policy takes the end for a lost host's: a task that exits 0 on its SIGTERM is restarted under OnFailure and
// ExitCode (it was failFast's end of the run before); Never still restarts nothing.
func TestClusterRun_ATaskItsHostStoppedIsRestartedWhateverItsExitCode(t *testing.T) {
	for _, tc := range []struct {
		restart  string
		attempts int
	}{{"{policy: OnFailure, maxRestarts: 1, backoff: 1ms}", 2}, {"{policy: ExitCode, maxRestarts: 1, backoff: 1ms}", 2}, {"{policy: Never}", 1}} {
		t.Run(tc.restart, func(t *testing.T) {
			h := newHarness(t, func(task string, attempt, _ int) behavior {
				if attempt == 1 {
					return behavior{takenDown: true}
				}
				return exits(0)
			})
			st, err := h.run(t, mustSpec(t, `
name: down
command: [x]
tasks: {worker: {replicas: 1, restart: `+tc.restart+`}}
`))
			w := st.Task("worker-0")
			assert.Equal(t, tc.attempts, w.Attempt)
			if tc.attempts == 1 {
				require.Error(t, err)
				assert.Equal(t, TaskFailed, w.State)
				assert.Equal(t, "worker-0 was stopped by its host pooled-host (attempt 1; it exited with code 0): host pooled-host taken down by the operator", w.Error)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, TaskSucceeded, w.State)
		})
	}
}

func TestClusterRun_PolicyAlwaysRestartsCleanExits(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	st, err := h.run(t, mustSpec(t, `
name: always
command: [x]
tasks: {worker: {replicas: 1, restart: {policy: Always, maxRestarts: 2, backoff: 1ms}}}
`))
	require.NoError(t, err)
	assert.Equal(t, 3, st.Task("worker-0").Attempt)
	assert.Equal(t, TaskSucceeded, st.Task("worker-0").State)
}

func TestClusterRun_MaxRunTime(t *testing.T) {
	h := newHarness(t, nil)
	st, err := h.run(t, mustSpec(t, `
name: slow
command: [x]
maxRunTime: 300ms
tasks: {chief: {replicas: 1}, worker: {replicas: 2}}
`))
	require.Error(t, err)
	assert.Equal(t, ErrRunTimedOut, errType(err))
	assert.Equal(t, StatusTimedOut, st.Status)
	assert.Equal(t, "maxRunTime 300ms reached", st.Reason)
	assert.Equal(t, []string{"chief-0", "worker-0", "worker-1"}, h.hosts.stoppedTasks())
}

func TestClusterRun_GangRestart(t *testing.T) {
	h := newHarness(t, func(task string, _, generation int) behavior {
		switch {
		case generation == 0 && task == "worker-1":
			return exits(1)
		case task == "chief-0" && generation == 1:
			return exits(0)
		}
		return blocks
	})
	st, err := h.run(t, mustSpec(t, `
name: gang
command: [x]
restart: {policy: OnFailure, maxRestarts: 2, backoff: 10ms, scope: all}
tasks: {chief: {replicas: 1}, worker: {replicas: 2}}
`))
	require.NoError(t, err)
	assert.Equal(t, 1, st.RestartCount)
	assert.Equal(t, 2, st.Task("chief-0").Attempt, "attempt counts gang restarts")
	assert.Contains(t, h.hosts.ids, "worker-1.a2", "one activity per attempt, named by it")
	// Generation 0's survivors were stopped, then generation 1's workers after the chief exited.
	assert.Equal(t, []string{"chief-0", "worker-0", "worker-0", "worker-1"}, h.hosts.stoppedTasks())
	require.Len(t, h.hosts.releases, 2, "a new rendezvous per generation")
	assert.Equal(t, 1, h.hosts.releases[1].Cluster.Generation)
	// Each task keeps where its first attempt ran (clusterrun logs --attempt 1 reads it there).
	for _, name := range []string{"chief-0", "worker-0", "worker-1"} {
		require.Len(t, st.Task(name).Earlier, 1, name)
		e := st.Task(name).Earlier[0]
		assert.Equal(t, 1, e.Attempt, name)
		assert.Equal(t, "pooled-host", e.Host, name)
		assert.Empty(t, e.Restart, "%s: the run's reason says why, once", name)
	}
}

// A failure after the last gang restart says that the run's restarts are used up; one that policy ExitCode
// takes for the program's verdict says so, with no gang restart at all.
func TestClusterRun_AGangRestartNotMadeSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		restart, reason string
		restarts        int
	}{
		{"{policy: OnFailure, maxRestarts: 1, backoff: 1ms, scope: all}",
			"worker-1 exited with code 3 on pooled-host (attempt 2): boom; no gang restart: the run's 1 restart (maxRestarts: 1) is used up (onFailure: failFast)", 1},
		{"{policy: ExitCode, maxRestarts: 2, backoff: 1ms, scope: all}",
			"worker-1 exited with code 3 on pooled-host (attempt 1): boom; no gang restart: policy ExitCode takes exit code 3 for the program's own verdict (it restarts exit codes 128-255 and lost hosts) (onFailure: failFast)", 0},
	} {
		t.Run(tc.restart, func(t *testing.T) {
			h := newHarness(t, func(task string, _, _ int) behavior {
				if task == "worker-1" {
					return exits(3)
				}
				return blocks
			})
			st, err := h.run(t, mustSpec(t, `
name: gangwhy
command: [x]
restart: `+tc.restart+`
tasks: {worker: {replicas: 2}}
`))
			require.Error(t, err)
			assert.Equal(t, tc.restarts, st.RestartCount)
			assert.Equal(t, tc.reason, st.Reason)
		})
	}
}

// Once its backoff is over, the run's reason says the gang restart happened, not that it comes "in" the
// backoff: a status read while the next generation runs said "gang restart 1 of 2 in 5s after: ...".
func TestClusterRun_AGangRestartIsSaidDoneOnceItsBackoffIsOver(t *testing.T) {
	h := newHarness(t, func(task string, _, generation int) behavior {
		if generation == 0 && task == "worker-1" {
			return exits(1)
		}
		return blocks
	})
	var seen RunStatus
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&seen))
		h.env.CancelWorkflow()
	}, time.Second)
	_, _ = h.run(t, mustSpec(t, `
name: gang
command: [x]
restart: {policy: OnFailure, maxRestarts: 2, backoff: 10ms, scope: all}
tasks: {worker: {replicas: 2}}
`))
	require.Equal(t, 1, seen.RestartCount)
	assert.Equal(t, TaskRunning, seen.Task("worker-0").State, "the next generation runs")
	assert.True(t, strings.HasPrefix(seen.Reason, "gang restart 1 of 2 after: worker-1 exited with code 1"), seen.Reason)
	assert.Nil(t, seen.RestartAt, "no restart is to come")
}

// While a gang restart's backoff holds the next launch, each task's row is its attempt as it ended (state, host,
// exit, error), with GangWait: before, every row was a blank Pending of the ended attempt. A run canceled in
// the backoff ends with those endings.
func TestClusterRun_AGangRestartsBackoffShowsHowEachTaskEnded(t *testing.T) {
	h := newHarness(t, func(task string, _, generation int) behavior {
		if generation == 0 && task == "worker-1" {
			return exits(1)
		}
		return blocks
	})
	var seen RunStatus
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&seen))
		h.env.CancelWorkflow()
	}, 3*time.Second)
	st, _ := h.run(t, mustSpec(t, `
name: gang
command: [x]
restart: {policy: OnFailure, maxRestarts: 2, backoff: 10s, scope: all}
tasks: {chief: {replicas: 1}, worker: {replicas: 2}}
`))
	require.True(t, strings.HasPrefix(seen.Reason, "gang restart 1 of 2 in 10s after: worker-1 exited with code 1"), seen.Reason)
	require.NotNil(t, seen.RestartAt, "when the next generation starts")
	assert.WithinDuration(t, seen.StartTime.Add(10*time.Second), *seen.RestartAt, 2*time.Second)
	failed := seen.Task("worker-1")
	assert.Equal(t, TaskFailed, failed.State)
	assert.Equal(t, 1, failed.GangWait)
	assert.Equal(t, "pooled-host", failed.Host)
	assert.Equal(t, 1, failed.Attempt)
	require.NotNil(t, failed.ExitCode)
	assert.Equal(t, 1, *failed.ExitCode)
	assert.Equal(t, "worker-1 exited with code 1 on pooled-host (attempt 1): boom", failed.Error)
	assert.Empty(t, failed.Earlier, "its first attempt is this row, not an earlier one")
	stopped := seen.Task("chief-0")
	assert.Equal(t, TaskStopped, stopped.State)
	assert.Equal(t, 1, stopped.GangWait)
	assert.Equal(t, "pooled-host", stopped.Host)
	assert.Equal(t, "SIGTERM", stopped.Signal, "stopped for the gang restart")

	require.Equal(t, StatusCanceled, st.Status)
	assert.Equal(t, TaskFailed, st.Task("worker-1").State, "a run canceled in the backoff ends with how each task ended")
	assert.Equal(t, TaskStopped, st.Task("chief-0").State)
	assert.Zero(t, st.Task("chief-0").GangWait, "no restart is to come")
	assert.Nil(t, st.RestartAt)
}

func TestClusterRun_GangBudgetExhausted(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior {
		if task == "worker-0" {
			return exits(1)
		}
		return blocks
	})
	st, err := h.run(t, mustSpec(t, `
name: gang
command: [x]
restart: {policy: OnFailure, maxRestarts: 1, backoff: 1ms, scope: all}
tasks: {worker: {replicas: 2}}
`))
	require.Error(t, err)
	assert.Equal(t, 1, st.RestartCount)
	assert.Contains(t, st.Reason, "worker-0 exited with code 1")
}

func TestClusterRun_CancelStopsEverything(t *testing.T) {
	h := newHarness(t, nil)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 200*time.Millisecond)
	st, err := h.run(t, mustSpec(t, demo))
	var canceled *temporal.CanceledError
	require.True(t, errors.As(err, &canceled), "got %v", err)
	assert.Equal(t, StatusCanceled, st.Status)
	for name, state := range states(st) {
		assert.Equal(t, TaskStopped, state, name)
	}
}

// A run with maxRunTime (and a deadline warning) that is canceled ends canceled: the cancel also cancels the
// maxRunTime timer, whose future then resolves, and that is not the deadline passing (nor the warning's time).
// The test environment settles a canceled timer after the context's Done, where a worker settles it first, so
// the order that broke on a real server is tested end to end (TestE2E_ACanceledRunWithAMaxRunTimeEndsCanceled);
// this covers each place the timers are awaited, the gang restart's backoff among them.
func TestClusterRun_CancelWithAMaxRunTimeIsNoTimeout(t *testing.T) {
	for _, spec := range []string{
		`{name: c, command: [x], maxRunTime: 10m, tasks: {worker: {replicas: 2}}}`,
		`{name: c, command: [x], maxRunTime: 10m, deadlineWarning: {signal: SIGUSR1, before: 5m}, tasks: {worker: {replicas: 2}}}`,
		`{name: c, command: [x], maxRunTime: 10m, restart: {policy: OnFailure, maxRestarts: 1, backoff: 1h, scope: all}, tasks: {worker: {replicas: 2}}}`,
		`{name: c, command: [x], maxRunTime: 10m, items: {}, tasks: {chief: {replicas: 1}, worker: {replicas: 2}}}`,
		`{name: c, command: [x], maxRunTime: 10m, tasks: {worker: {replicas: 2}, ps: {replicas: 1, hosts: [gpu-z]}}}`,
	} {
		t.Run(spec, func(t *testing.T) {
			failed := strings.Contains(spec, "scope: all")
			h := newHarness(t, func(task string, _, _ int) behavior {
				if failed && task == "worker-0" {
					return exits(1) // the gang restarts, and the cancel comes in its backoff
				}
				return behavior{block: true}
			})
			h.env.RegisterWorkflow(ClusterItems)
			h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 200*time.Millisecond)
			st, err := h.run(t, mustSpec(t, spec))
			var canceled *temporal.CanceledError
			require.True(t, errors.As(err, &canceled), "got %v", err)
			assert.Equal(t, StatusCanceled, st.Status)
			assert.Equal(t, ReasonCanceled, st.Reason)
			assert.Empty(t, h.hosts.signals, "no deadline warning was sent")
		})
	}
}

func TestClusterRun_QueryStatus(t *testing.T) {
	h := newHarness(t, nil)
	var seen RunStatus
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&seen))
		h.env.CancelWorkflow()
	}, 200*time.Millisecond)
	_, _ = h.run(t, mustSpec(t, demo))
	assert.Equal(t, StatusRunning, seen.Status)
	assert.Equal(t, TaskRunning, seen.Task("worker-0").State)
	assert.Equal(t, "host-b", seen.Task("ps-0").Host)
	assert.Equal(t, 1, seen.Task("ps-0").Attempt)
}

func TestClusterRun_StartTimeout(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(ClusterRun, workflowRegisterOptions())
	env.RegisterActivityWithOptions(func(ctx context.Context, in RunTasksInput) (RunTasksResult, error) {
		return RunTasksResult{}, temporal.NewTimeoutError(0x2 /* SCHEDULE_TO_START */, nil)
	}, activity.RegisterOptions{Name: ActivityRunTasks})
	env.ExecuteWorkflow(WorkflowType, mustSpec(t, `{name: lonely, command: [x], tasks: {ps: {replicas: 1, hosts: [gpu-z]}}}`))
	err := env.GetWorkflowError()
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "no host worker picked up ps-0") && strings.Contains(err.Error(), "--host gpu-z"), err.Error())
}

func TestClusterRun_UnknownTaskInSignalIsIgnored(t *testing.T) {
	h := newHarness(t, func(task string, _, _ int) behavior { return exits(0) })
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(SignalTasksPlaced, PlacedSignal{Placements: []Placement{{Task: "gpu-9", Host: "x"}, {Task: "worker-7", Host: "x"}}})
	}, 0)
	st, err := h.run(t, mustSpec(t, `{name: x, command: [x], tasks: {worker: {replicas: 2}}}`))
	require.NoError(t, err, "the run is unharmed")
	assert.Len(t, st.Tasks, 2)
	assert.Equal(t, StatusSucceeded, st.Status)
}

func TestClusterRun_ResultsStayBounded(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(ClusterRun, workflowRegisterOptions())
	big := json.RawMessage(`"` + strings.Repeat("x", 300<<10) + `"`)
	env.RegisterActivityWithOptions(func(ctx context.Context, in RunTasksInput) (RunTasksResult, error) {
		var out RunTasksResult
		for _, m := range in.Members {
			env.SignalWorkflow(SignalTasksPlaced, PlacedSignal{Placements: []Placement{{Task: m.Task.Name, Attempt: m.Attempt, Lease: m.Lease, Host: "h"}}})
			out.Ends = append(out.Ends, TaskExitReport{Lease: m.Lease, Member: true,
				Result: TaskResult{Task: m.Task.Name, Attempt: m.Attempt, Result: big}})
		}
		return out, nil
	}, activity.RegisterOptions{Name: ActivityRunTasks})
	env.RegisterActivityWithOptions(func(context.Context, ReleaseInput) (ReleaseResult, error) { return ReleaseResult{}, nil },
		activity.RegisterOptions{Name: ActivityRelease})
	env.ExecuteWorkflow(WorkflowType, mustSpec(t, `{name: big, command: [x], tasks: {worker: {replicas: 8}}}`))
	require.NoError(t, env.GetWorkflowError())
	var st RunStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	kept := 0
	for _, task := range st.Tasks {
		if task.ResultOmitted {
			assert.Nil(t, task.Result)
		} else {
			kept++
		}
	}
	assert.Equal(t, 3, kept, "3 × 300 KiB fit in 1 MiB, in task order")
	assert.True(t, st.Tasks[7].ResultOmitted)
}

// A stop request in a gang restart's backoff ends the run there: nothing runs, and no next generation starts.
// (Tried as a user: the stop waited out the backoff, the next generation started, never told of the stop, and
// its tasks were killed when the grace ran out.)
func TestClusterRun_AStopInAGangRestartsBackoffEndsTheRun(t *testing.T) {
	h := newHarness(t, func(task string, _, generation int) behavior {
		if generation == 0 && task == "worker-1" {
			return exits(1)
		}
		return blocks
	})
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(SignalStop, StopRequest{Error: "enough"}) }, 3*time.Second)
	st, err := h.run(t, mustSpec(t, `
name: gang
command: [x]
restart: {policy: OnFailure, maxRestarts: 2, backoff: 1h, scope: all}
tasks: {chief: {replicas: 1}, worker: {replicas: 2}}
`))
	require.Error(t, err)
	assert.Equal(t, StatusFailed, st.Status)
	assert.Equal(t, "stop requested from outside the run: enough", st.Reason)
	assert.Less(t, st.EndTime.Sub(st.StartTime), time.Minute, "not after the backoff")
	for _, in := range h.hosts.inputs {
		assert.Equal(t, 0, in.Generation, "no next generation: %s", in.Task.Name)
	}
	assert.Nil(t, st.RestartAt)
	assert.Zero(t, st.Task("chief-0").GangWait, "no restart is to come")
	assert.Equal(t, TaskStopped, st.Task("chief-0").State)
}

package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Shards. Temporal holds at most 2,000 pending activities per execution, and every lease's events land in the
// history of the execution that holds it. A run with more tasks than its tasksPerShard gives its leases to
// ClusterShard children, tasksPerShard tasks each (by the task's place in the run): a shard only starts the
// RunTask activities it is sent, cancels those it is told to, and reports how each ended. Everything else (the
// tasks' state, placement, the rendezvous, barriers, stops, status) stays in the ClusterRun, whose history then
// grows with hosts and batches, not with tasks.

// Signals between a run and its shards.
const (
	// SignalShardLeases sends a shard leases to start ([]ShardLease).
	SignalShardLeases = "shard-leases"
	// SignalShardCancel tells a shard to cancel leases ([]string, their LeaseOptions.ID).
	SignalShardCancel = "shard-cancel"
	// SignalLeasesEnded reports to the run how a shard's leases ended (LeasesEnded).
	SignalLeasesEnded = "leases-ended"
)

// ShardWorkflowID names shard i of a run's generation: "RUN/shard-3", "RUN/shard-3.r1" after a gang restart.
func ShardWorkflowID(run string, generation, i int) string {
	id := fmt.Sprintf("%s/shard-%d", run, i)
	if generation > 0 {
		id += fmt.Sprintf(".r%d", generation)
	}
	return id
}

// ShardTakeID names the execution that takes a shard's leases up after take-1 earlier ones ended while they
// held leases: "RUN/shard-3.take2" is the second.
func ShardTakeID(run string, generation, i, take int) string {
	id := ShardWorkflowID(run, generation, i)
	if take > 1 {
		id += fmt.Sprintf(".take%d", take)
	}
	return id
}

// LeaseOptions are the activity options of one lease (a RunTask activity); Temporal never retries one.
type LeaseOptions struct {
	ID              string        `json:"id"`
	Queue           string        `json:"queue"`
	ScheduleToStart time.Duration `json:"scheduleToStart"`
	StartToClose    time.Duration `json:"startToClose"`
	Heartbeat       time.Duration `json:"heartbeat"`
	Summary         string        `json:"summary,omitempty"`
}

// ShardLease is one lease a shard starts: a RunTask on Input, or a RunTasks batch on Batch.
type ShardLease struct {
	Options LeaseOptions   `json:"options"`
	Input   RunTaskInput   `json:"input"`
	Batch   *RunTasksInput `json:"batch,omitempty"`
}

// ShardInput starts a shard with its first leases (the rest, if they did not fit, follow by signal).
type ShardInput struct {
	Leases []ShardLease `json:"leases"`
}

// LeasesEnded reports leases of one shard that ended.
type LeasesEnded struct {
	Shard string     `json:"shard"` // the shard's workflow ID
	Ends  []LeaseEnd `json:"ends"`
}

// LeaseEnd is how one lease ended: its RunTask's result (or its RunTasks batch's), or its error.
type LeaseEnd struct {
	ID     string          `json:"id"`
	Result *TaskResult     `json:"result,omitempty"`
	Batch  *RunTasksResult `json:"batch,omitempty"`
	Error  *LeaseError     `json:"error,omitempty"`
}

// shardFlushEvery spaces a shard's reports: ends that come together (a stop, a failing host) travel as one
// signal rather than one each, which keeps the run's signals and history small.
const shardFlushEvery = 200 * time.Millisecond

// maxBatchBytes bounds the leases or ends one signal or input carries, below the SDK's 512 KiB warning (the
// limit is 2 MB).
const maxBatchBytes = 480 << 10

// ClusterShard holds leases for its ClusterRun (its parent): it starts those it is given, cancels those it is
// told to, and reports how each ended, and passes on the ends its batches' hosts report to it. Canceled, it cancels every lease, reports the last ends, and returns.
func ClusterShard(ctx workflow.Context, in ShardInput) error {
	info := workflow.GetInfo(ctx)
	if info.ParentWorkflowExecution == nil {
		return temporal.NewNonRetryableApplicationError("ClusterShard runs only as a child of a ClusterRun", ErrInvalidSpec, nil)
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	s := &shard{ctx: ctx, dctx: dctx, id: info.WorkflowExecution.ID, parent: *info.ParentWorkflowExecution,
		sel: workflow.NewSelector(ctx), running: map[string]workflow.CancelFunc{}}
	s.start(in.Leases)
	s.sel.AddReceive(workflow.GetSignalChannel(ctx, SignalShardLeases), func(c workflow.ReceiveChannel, _ bool) {
		var ls []ShardLease
		c.Receive(ctx, &ls)
		s.start(ls)
	})
	// The ends of batch members, which their hosts report here: passed on to the run with the leases' ends.
	s.sel.AddReceive(workflow.GetSignalChannel(ctx, SignalTaskExits), func(c workflow.ReceiveChannel, _ bool) {
		var x TaskExits
		c.Receive(ctx, &x)
		s.exits = append(s.exits, x.Exits...)
	})
	s.sel.AddReceive(workflow.GetSignalChannel(ctx, SignalShardCancel), func(c workflow.ReceiveChannel, _ bool) {
		var ids []string
		c.Receive(ctx, &ids)
		for _, id := range ids {
			if cancel := s.running[id]; cancel != nil {
				cancel()
			}
		}
	})
	// The cancellation wakes the loop once (ctx.Done stays ready once closed, so it is not a selector case).
	woke := workflow.NewBufferedChannel(dctx, 1)
	workflow.Go(ctx, func(gctx workflow.Context) {
		ctx.Done().Receive(gctx, nil)
		woke.Send(gctx, true)
	})
	s.sel.AddReceive(woke, func(c workflow.ReceiveChannel, _ bool) { c.Receive(dctx, nil) })

	for {
		s.sel.Select(ctx)
		for s.sel.HasPending() {
			s.sel.Select(ctx)
		}
		if ctx.Err() != nil && len(s.running) == 0 {
			s.flush()
			return nil
		}
		s.schedule()
	}
}

// shard is one ClusterShard's state.
type shard struct {
	ctx, dctx workflow.Context
	id        string
	parent    workflow.Execution
	sel       workflow.Selector
	running   map[string]workflow.CancelFunc // lease ID -> cancels its RunTask
	unsent    []LeaseEnd
	exits     []TaskExitReport // members' ends their hosts reported, not yet passed on
	lastFlush time.Time
	timer     workflow.Future // the next flush, or nil
}

// start starts the given leases' RunTask activities.
func (s *shard) start(ls []ShardLease) {
	for _, l := range ls {
		id := l.Options.ID
		if _, dup := s.running[id]; dup {
			continue
		}
		actx, cancel := workflow.WithCancel(s.ctx)
		s.running[id] = cancel
		batch := l.Batch != nil
		var f workflow.Future
		if batch {
			f = workflow.ExecuteActivity(withLease(actx, l.Options), ActivityRunTasks, *l.Batch)
		} else {
			f = workflow.ExecuteActivity(withLease(actx, l.Options), ActivityRunTask, l.Input)
		}
		s.sel.AddFuture(f, func(f workflow.Future) {
			end := LeaseEnd{ID: id}
			var res TaskResult
			var results RunTasksResult
			var err error
			if batch {
				if err = f.Get(s.ctx, &results); err == nil {
					end.Batch = &results
				}
			} else if err = f.Get(s.ctx, &res); err == nil {
				end.Result = &res
			}
			end.Error = LeaseErrorOf(err)
			delete(s.running, id)
			s.unsent = append(s.unsent, end)
		})
	}
}

// schedule reports the unsent ends now, or sets a timer for when shardFlushEvery has passed since the last.
func (s *shard) schedule() {
	if len(s.unsent)+len(s.exits) == 0 || s.timer != nil {
		return
	}
	wait := s.lastFlush.Add(shardFlushEvery).Sub(workflow.Now(s.ctx))
	if wait <= 0 {
		s.flush()
		return
	}
	timer := workflow.NewTimerWithOptions(s.dctx, wait, workflow.TimerOptions{Summary: "report ended leases"})
	s.timer = timer
	s.sel.AddFuture(timer, func(workflow.Future) {
		s.timer = nil
		s.flush()
	})
}

// flush signals the unsent ends to the run, in batches that fit a payload, and waits until each is delivered.
// A run that has ended no longer needs them.
func (s *shard) flush() {
	var sent []workflow.Future
	for _, batch := range batches(s.exits) {
		sent = append(sent, workflow.SignalExternalWorkflow(s.dctx, s.parent.ID, s.parent.RunID, SignalTaskExits, TaskExits{Exits: batch}))
	}
	for _, batch := range batches(s.unsent) {
		sent = append(sent, workflow.SignalExternalWorkflow(s.dctx, s.parent.ID, s.parent.RunID, SignalLeasesEnded,
			LeasesEnded{Shard: s.id, Ends: batch}))
	}
	for _, f := range sent {
		var ended *temporal.UnknownExternalWorkflowExecutionError
		if err := f.Get(s.dctx, nil); err != nil && !errors.As(err, &ended) { // an ended run: nothing to report to
			workflow.GetLogger(s.ctx).Warn("cannot report ended leases to the run", "run", s.parent.ID, "error", err)
		}
	}
	s.unsent, s.exits = nil, nil
	s.lastFlush = workflow.Now(s.ctx)
}

// batches splits items into runs whose JSON stays within maxBatchBytes (an item larger than that alone).
func batches[T any](items []T) [][]T {
	var out [][]T
	start, size := 0, 0
	for i, it := range items {
		// Its output is a function of its input; workflowcheck sees the encoder cache's map.
		//workflowcheck:ignore
		b, _ := json.Marshal(it)
		if i > start && size+len(b) > maxBatchBytes {
			out = append(out, items[start:i])
			start, size = i, 0
		}
		size += len(b)
	}
	if start < len(items) {
		out = append(out, items[start:])
	}
	return out
}

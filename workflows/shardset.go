package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// ChangeShardLoss marks runs in which a shard that ends while it holds leases (terminated by hand, say) hands
// them back as contact lost: the run takes their tasks up again where they run, through a new execution of the
// shard, and a stop under way does not wait for their ends. Runs before it fail those tasks, and a stop waited
// for them forever.
const ChangeShardLoss = "clusterrun-shard-loss"

// ChangeShardStartRetaken marks runs in which a shard that cannot start (its ID taken) hands its leases back as
// contact lost, to go out again through the shard's next take; asked only when a start fails. Runs before it
// failed those tasks.
const ChangeShardStartRetaken = "clusterrun-shard-start-retaken"

// shardSet is a run's side of its shards in one generation: which shard holds which task, the leases and
// cancellations not yet sent to each, and the futures the run waits on for each lease a shard holds.
type shardSet struct {
	size     int  // tasks per shard
	resuming bool // a timer will bring a workflow task to send the leases left over
	gen      int
	run      string
	shards   map[int]*shardRef
	// retakes says whether a shard lost while it holds leases is taken again (ChangeShardLoss); nil until the
	// generation's first shard starts.
	retakes *bool
	// waiting holds, per shard workflow and lease ID, the future the run reads that lease's end from.
	waiting map[string]map[string]workflow.Settable
}

// shardRef is one shard of the generation.
type shardRef struct {
	index    int
	id       string // its current execution's
	take     int    // which execution of the shard that is, from 1: a lost one is taken again under a new ID
	reports  int    // members given to it whose ends their hosts report to it (against its signal budget)
	started  bool   // its execution has started: signals reach it
	starting bool   // its start is under way: its next leases wait until it runs
	leases   []ShardLease
	cancels  []string
}

func newShardSet(run string, size, generation int) *shardSet {
	return &shardSet{size: size, gen: generation, run: run, shards: map[int]*shardRef{}, waiting: map[string]map[string]workflow.Settable{}}
}

// sharded says whether a run with n tasks holds its leases in shards.
func sharded(n, tasksPerShard int) bool { return n > tasksPerShard }

// receiveEnds turns the shards' LeasesEnded signals into the ends of the futures the run waits on, for the
// whole run (every generation's shards report to it).
func (r *run) receiveEnds(ctx workflow.Context) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	ch := workflow.GetSignalChannel(ctx, SignalLeasesEnded)
	workflow.Go(dctx, func(gctx workflow.Context) {
		for {
			var m LeasesEnded
			ch.Receive(gctx, &m)
			if r.shards != nil {
				r.shards.ended(m)
			}
		}
	})
}

// lease queues one lease for t's shard and returns the future its end arrives on.
func (s *shardSet) lease(ctx workflow.Context, t *task, l ShardLease) workflow.Future {
	sh := s.shardOf(t)
	sh.leases = append(sh.leases, l)
	f, set := workflow.NewFuture(ctx)
	if s.waiting[sh.id] == nil {
		s.waiting[sh.id] = map[string]workflow.Settable{}
	}
	s.waiting[sh.id][l.Options.ID] = set
	id := l.Options.ID
	t.cancel = func() { sh.cancels = append(sh.cancels, id) }
	return f
}

// leaseBatch queues one RunTasks lease for the shard of the task at place seq (every member shares it) and
// returns the future its end arrives on, and what cancels it.
func (s *shardSet) leaseBatch(ctx workflow.Context, seq int, opts LeaseOptions, in RunTasksInput) (workflow.Future, workflow.CancelFunc) {
	sh := s.shardAt(seq)
	sh.leases = append(sh.leases, ShardLease{Options: opts, Batch: &in})
	f, set := workflow.NewFuture(ctx)
	if s.waiting[sh.id] == nil {
		s.waiting[sh.id] = map[string]workflow.Settable{}
	}
	s.waiting[sh.id][opts.ID] = set
	return f, func() { sh.cancels = append(sh.cancels, opts.ID) }
}

func (s *shardSet) shardOf(t *task) *shardRef { return s.shardAt(t.seq) }

// mayReport says whether a new lease on t has its host report its end to t's shard (which passes it on):
// while the members given to that shard stay under ExitSignalBudget, each sending at most one signal.
func (s *shardSet) mayReport(t *task) bool {
	sh := s.shardOf(t)
	if sh.reports >= ExitSignalBudget {
		return false
	}
	sh.reports++
	return true
}

func (s *shardSet) shardAt(seq int) *shardRef {
	i := seq / s.size
	sh := s.shards[i]
	if sh == nil {
		sh = &shardRef{index: i, id: ShardWorkflowID(s.run, s.gen, i), take: 1}
		s.shards[i] = sh
	}
	return sh
}

// ended sets the futures of the leases a shard reports ended.
func (s *shardSet) ended(m LeasesEnded) {
	waiting := s.waiting[m.Shard]
	for _, e := range m.Ends {
		set := waiting[e.ID]
		if set == nil {
			continue // a late report of an earlier generation, or one already failed
		}
		delete(waiting, e.ID)
		if e.Batch != nil {
			set.Set(*e.Batch, e.Error.Err())
			continue
		}
		var res TaskResult
		if e.Result != nil {
			res = *e.Result
		}
		set.Set(res, e.Error.Err())
	}
}

// lost ends every lease shard execution id still held: it did not start, it ended with its generation, or
// (runs before ChangeShardLoss) it ended on its own.
func (s *shardSet) lost(id string, err error) {
	s.endAll(id, fmt.Errorf("the run's shard %s holding this task ended: %w", id, err))
}

// endAll ends every lease shard execution id still holds with err, in the order of their IDs.
func (s *shardSet) endAll(id string, err error) {
	waiting := s.waiting[id]
	delete(s.waiting, id)
	leases := make([]string, 0, len(waiting))
	//workflowcheck:ignore
	for l := range waiting { // sorted below
		leases = append(leases, l)
	}
	sort.Strings(leases)
	for _, l := range leases {
		waiting[l].Set(TaskResult{}, err)
	}
}

// notTaken ends leases shard execution id did not take: a signal to a shard fails only once it has ended.
// Where shards are taken again, that shard is lost, and the leases go back as contact lost.
func (s *shardSet) notTaken(sh *shardRef, id string, ids []string, err error) {
	waiting := s.waiting[id]
	for _, l := range ids {
		if set := waiting[l]; set != nil {
			delete(waiting, l)
			why := fmt.Sprintf("the run's shard %s did not take this task's lease: %v", id, err)
			if *s.retakes {
				set.Set(TaskResult{}, temporal.NewApplicationError(why, ErrShardLost))
				continue
			}
			set.Set(TaskResult{}, errors.New(why))
		}
	}
	if *s.retakes {
		s.gone(sh, id, err)
	}
}

// gone hands back every lease shard execution id still held, as contact lost, and has the next leases of that
// shard start a new execution of it. Each execution is lost once: a later word of the same loss changes nothing.
func (s *shardSet) gone(sh *shardRef, id string, err error) {
	s.endAll(id, temporal.NewApplicationError(fmt.Sprintf("the run's shard %s holding this task's lease ended (%v)", id, err), ErrShardLost))
	if sh.id != id {
		return
	}
	sh.take++
	sh.id = ShardTakeID(s.run, s.gen, sh.index, sh.take)
	sh.started, sh.starting, sh.reports, sh.cancels = false, false, 0, nil
}

// maxLeaseBytesPerTask bounds the leases one workflow task sends its shards (in shard inputs and signals):
// its completion carries them all, and gRPC refuses a message over 4 MB (10 shards' first leases at once did).
var maxLeaseBytesPerTask = 1536 << 10 // a variable only so tests can lower it

// send starts the shards that have leases and are not running yet, and sends the others their new leases
// and cancellations, as far as maxLeaseBytesPerTask allows; what is left waits for the next workflow task.
// A shard's start, or its tasks' placements, bring one soon; a short timer makes sure of it. It is called at
// the end of every act.
func (g *generation) sendToShards() {
	s := g.r.shards
	budget := maxLeaseBytesPerTask
	if !g.r.batched {
		budget = math.MaxInt // runs before batched leases sent everything at once, and replay so
	}
	for _, i := range sortedShards(s.shards) {
		sh := s.shards[i]
		switch {
		case sh.started:
			g.signalShard(sh, &budget)
		case sh.leases != nil && !sh.starting && budget > 0:
			g.startShard(sh, &budget)
		}
	}
	if budget <= 0 && !s.resuming && g.leasesLeft() {
		s.resuming = true
		timer := workflow.NewTimerWithOptions(g.ctx, time.Millisecond, workflow.TimerOptions{Summary: "send the shards the rest of their leases"})
		g.sel.AddFuture(timer, func(workflow.Future) { s.resuming = false })
	}
}

// leasesLeft says whether a shard that can take leases has some waiting.
func (g *generation) leasesLeft() bool {
	s := g.r.shards
	for _, i := range sortedShards(s.shards) {
		if sh := s.shards[i]; sh.leases != nil && (sh.started || !sh.starting) {
			return true
		}
	}
	return false
}

// startShard starts a shard's execution with the leases that fit its input; the rest follow once it runs.
func (g *generation) startShard(sh *shardRef, budget *int) {
	first := batches(sh.leases)[0]
	*budget -= leaseBytes(first)
	sh.leases = sh.leases[len(first):]
	if len(sh.leases) == 0 {
		sh.leases = nil
	}
	lo, hi := sh.index*g.r.shards.size, (sh.index+1)*g.r.shards.size-1
	cctx := workflow.WithChildOptions(g.genCtx, workflow.ChildWorkflowOptions{
		WorkflowID: sh.id,
		// A run that ends, or is terminated, cancels its shards, which cancel their leases.
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		StaticSummary:     fmt.Sprintf("leases of tasks %d to %d of %s", lo, hi, g.info.WorkflowExecution.ID),
	})
	child := workflow.ExecuteChildWorkflow(cctx, ShardWorkflowType, ShardInput{Leases: first})
	sh.starting = true
	id := sh.id
	g.sel.AddFuture(child.GetChildWorkflowExecution(), func(f workflow.Future) {
		if sh.id != id {
			return // a later execution of the shard has taken over
		}
		sh.starting = false
		if err := f.Get(g.ctx, nil); err != nil {
			if g.r.shards.retaken(g.ctx) && workflow.GetVersion(g.ctx, ChangeShardStartRetaken, workflow.DefaultVersion, 1) == 1 {
				// Its ID is in use: the shard of an earlier run under this run's ID, still stopping its tasks
				// (the ID given again right after that run was terminated), say. The next take has an ID of its own.
				g.r.shards.gone(sh, id, err)
				return
			}
			g.r.shards.lost(id, err)
			return
		}
		sh.started = true
	})
	if g.r.shards.retaken(g.ctx) {
		g.watchShard(sh, id, child)
		return
	}
	g.sel.AddFuture(child, func(f workflow.Future) {
		err := f.Get(g.ctx, nil)
		if err == nil {
			err = errors.New("it returned")
		}
		if !temporal.IsCanceledError(err) || g.genCtx.Err() == nil {
			workflow.GetLogger(g.ctx).Warn("a shard ended while it held leases", "shard", sh.id, "error", err)
		}
		g.r.shards.lost(sh.id, err)
	})
}

// retaken says whether this run takes a lost shard again (ChangeShardLoss), deciding it at the first shard.
func (s *shardSet) retaken(ctx workflow.Context) bool {
	if s.retakes == nil {
		v := workflow.GetVersion(ctx, ChangeShardLoss, workflow.DefaultVersion, 1) == 1
		s.retakes = &v
	}
	return *s.retakes
}

// watchShard waits for the end of shard execution id in a coroutine of its own, so that a stop under way,
// which reads lease ends without the generation's selector, learns of it too. A shard ends by itself only
// when its generation is canceled and its leases are over; ending otherwise (terminated by hand, say), it is
// gone: its leases come back as contact lost and are taken up again through the shard's next execution.
func (g *generation) watchShard(sh *shardRef, id string, child workflow.ChildWorkflowFuture) {
	s := g.r.shards
	dctx, _ := workflow.NewDisconnectedContext(g.ctx)
	workflow.Go(dctx, func(c workflow.Context) {
		if child.GetChildWorkflowExecution().Get(c, nil) != nil {
			return // it never started: its start's handler ends its leases
		}
		err := child.Get(c, nil)
		over := err == nil || temporal.IsCanceledError(err)
		if err == nil {
			err = errors.New("it returned")
		}
		if over && g.genCtx.Err() != nil {
			s.lost(id, err) // its leases ended before it did; any report that did not come ends here
			return
		}
		if g.genCtx.Err() == nil {
			workflow.GetLogger(c).Warn("a shard ended while it held leases; taking them up again", "shard", id, "error", err)
		} else {
			workflow.GetLogger(c).Warn("a shard ended while its run stopped; its leases end with it", "shard", id, "error", err)
		}
		s.gone(sh, id, err)
	})
}

// signalShard sends a running shard its queued leases, then its queued cancellations. Leases a shard never got
// (it had ended) end at once: no report of them will come, and a stop must not wait for one.
func (g *generation) signalShard(sh *shardRef, budget *int) {
	set := g.r.shards
	var sent []workflow.Future
	var left []ShardLease
	for _, batch := range batches(sh.leases) {
		if *budget <= 0 {
			left = append(left, batch...)
			continue
		}
		*budget -= leaseBytes(batch)
		f := workflow.SignalExternalWorkflow(g.genCtx, sh.id, "", SignalShardLeases, batch)
		ids := make([]string, len(batch))
		for i, l := range batch {
			ids[i] = l.Options.ID
		}
		// Its own coroutine: a stop under way reads lease ends without the generation's selector.
		id := sh.id
		workflow.Go(g.ctx, func(c workflow.Context) {
			if err := f.Get(c, nil); err != nil {
				set.notTaken(sh, id, ids, err)
			}
		})
	}
	if len(sh.cancels) > 0 {
		sent = append(sent, workflow.SignalExternalWorkflow(g.genCtx, sh.id, "", SignalShardCancel, sh.cancels))
	}
	sh.leases, sh.cancels = left, nil
	g.watch(sent)
}

// leaseBytes is the size of leases in JSON, as a signal or input carries them.
func leaseBytes(ls []ShardLease) int {
	n := 0
	for _, l := range ls {
		// Its output is a function of its input; workflowcheck sees the encoder cache's map.
		//workflowcheck:ignore
		b, _ := json.Marshal(l)
		n += len(b)
	}
	return n
}

func sortedShards(m map[int]*shardRef) []int {
	keys := make([]int, 0, len(m))
	//workflowcheck:ignore
	for k := range m { // sorted below
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}

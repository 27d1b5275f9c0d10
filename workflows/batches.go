package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/clusterrun/clusterrun/spec"
)

// Batched leases. Every activity start, heartbeat and completion is a write to its workflow's history, applied
// one at a time under the workflow's lock: a RunTask per task put 64 starts and 64 first heartbeats of a
// 64-task launch in front of the run's own workflow tasks. So the tasks that launch on one host together (or
// re-attach there together) share one lease, a RunTasks activity: one start, one heartbeat for all of them,
// one completion. Each task keeps its own attempt and lease number, and its own future here: its end comes by
// signal (task-exits) as soon as its process ends, and the batch's completion repeats every member's end.
// Tasks whose host is not known before they start (an unplaced pool task) get a batch of one, as does every
// task of a run whose signals are too many for one report per task (reportsExit).

// MaxBatchMembers bounds the members of one RunTasks lease, and with them its heartbeat's details.
const MaxBatchMembers = 1000

// batchKey says which launch orders can share a lease: the same execution holding it, the same queue, and the
// same timeouts.
type batchKey struct {
	shard           int // the tasks' shard, -1 in an unsharded run
	queue           string
	host            string // where the queue leads ("" for a pool's shared queue)
	attach          bool
	scheduleToStart time.Duration
	alone           int // > 0: this order takes a lease of its own (the task's place + 1)
}

// launchAll starts one lease per batch of orders (runs with batched leases), or one RunTask per order.
func (g *generation) launchAll(orders []launchOrder) {
	r := g.r
	if !r.batched {
		for _, o := range orders {
			g.launch(o)
		}
		return
	}
	var keys []batchKey
	groups := map[batchKey][]*task{}
	leases := map[batchKey][]ShardLease{}
	for _, o := range orders {
		l := r.nextLease(o.t, o)
		k := batchKey{shard: -1, queue: l.Options.Queue, host: leaseHost(o), attach: l.Input.Attach, scheduleToStart: l.Options.ScheduleToStart}
		if r.shards != nil {
			k.shard = o.t.seq / r.shards.size
		}
		if !l.Input.ReportExit || k.host == "" {
			k.alone = o.t.seq + 1 // no report to end it early, or any host of a pool may take it
		}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], o.t)
		leases[k] = append(leases[k], l)
	}
	for _, k := range keys {
		ts, ls := groups[k], leases[k]
		for len(ts) > 0 {
			n := batchSize(ls)
			g.launchBatch(k.host, ts[:n], ls[:n])
			ts, ls = ts[n:], ls[n:]
		}
	}
}

// batchSize is how many of ls the next lease takes: at most MaxBatchMembers, within maxBatchBytes.
func batchSize(ls []ShardLease) int {
	n := len(batches(ls)[0])
	return min(n, MaxBatchMembers)
}

// launchBatch starts one RunTasks lease on ts (ls are their leases, as nextLease made them) and gives each
// task a future of its own, set by its end's report or by the batch's completion.
func (g *generation) launchBatch(host string, ts []*task, ls []ShardLease) {
	r := g.r
	first := ls[0]
	in := RunTasksInput{Run: *r.ref, Generation: r.generation, Attach: first.Input.Attach, Host: first.Input.Host,
		StopGracePeriod: r.plan.StopGracePeriod, StartTimeout: r.plan.StartTimeout, ReportTo: *r.ref,
		ReportExit: first.Input.ReportExit, Cluster: r.launchMap(ts), Queued: r.queued}
	if !in.Attach {
		in.StartTimeout = first.Options.ScheduleToStart // less than startTimeout after holds for room (overflow.go)
	}
	for _, l := range ls {
		in.Members = append(in.Members, LeaseMember{Task: l.Input.Task, Attempt: l.Input.Attempt, Lease: l.Input.Lease, Port: l.Input.Port})
	}
	opts := first.Options
	if len(ts) > 1 {
		r.batchLeases++
		opts.ID = BatchLeaseID(host, r.batchLeases)
		opts.Summary = batchSummary(in, host)
	}
	var batch workflow.Future
	var cancel workflow.CancelFunc
	if r.shards != nil {
		in.ReportTo = RunRef{WorkflowID: r.shards.shardOf(ts[0]).id} // its current run
		batch, cancel = r.shards.leaseBatch(g.ctx, ts[0].seq, opts, in)
	} else {
		var bctx workflow.Context
		bctx, cancel = workflow.WithCancel(g.genCtx)
		batch = workflow.ExecuteActivity(withLease(bctx, opts), ActivityRunTasks, in)
	}
	members := make([]workflow.Settable, len(ts))
	for i, t := range ts {
		f, set := workflow.NewFuture(g.ctx)
		members[i] = set
		t.future, t.cancel = f, nil
		if len(ts) == 1 && cancel != nil {
			t.cancel = cancel // a lease of its own can be canceled alone
		}
		g.sel.AddFuture(f, func(f workflow.Future) {
			if f != t.future {
				return // its end came by report, or a later lease holds it
			}
			g.stopsFirst()
			r.leaseEnded(g.ctx, t)
		})
	}
	groupLease(host, ts, in.Attach, cancel)
	// Its own coroutine: a stop under way reads the members' ends without the generation's selector.
	dctx, _ := workflow.NewDisconnectedContext(g.ctx)
	workflow.Go(dctx, func(c workflow.Context) {
		var res RunTasksResult
		err := batch.Get(c, &res)
		ends := map[TaskAttempt]TaskExitReport{}
		for _, x := range res.Ends {
			ends[TaskAttempt{Task: x.Result.Task, Attempt: x.Result.Attempt}] = x
		}
		for i, m := range in.Members {
			members[i].Set(memberEnd(m, ends, err))
		}
	})
}

// memberEnd is how member m of a batch ended, from the batch's ends, or the batch's error when it has none
// (the lease as a whole ended: it timed out, or its host gave it up).
func memberEnd(m LeaseMember, ends map[TaskAttempt]TaskExitReport, err error) (TaskResult, error) {
	if err == nil {
		if x, ok := ends[TaskAttempt{Task: m.Task.Name, Attempt: m.Attempt}]; ok && x.Lease == m.Lease {
			return x.Result, x.outcome(m.Task)
		}
		err = fmt.Errorf("the lease of %s ended without saying how %s attempt %d ended", m.Task.Name, m.Task.Name, m.Attempt)
	}
	return TaskResult{Task: m.Task.Name, Attempt: m.Attempt}, err
}

// outcome is the error the reported end stands for: a batch member's own (Member), or, for a RunTask's
// report of its process's end, the outcome of its exit.
func (x TaskExitReport) outcome(t spec.Task) error {
	if x.Member {
		return x.Error.Err()
	}
	return leasedOutcome(t, x.Result)
}

// BatchLeaseID names a RunTasks lease of several tasks: "tasks@host-a.3" is the run's third such lease, on
// host-a. A lease of one task is named by LeaseID.
func BatchLeaseID(host string, n int) string { return fmt.Sprintf("tasks@%s.%d", host, n) }

// leaseHost is the host an order's lease goes to: the host that holds a re-attaching attempt, the task's own,
// or the one its run placed it on; "" when any host of its pool may take it.
func leaseHost(o launchOrder) string {
	switch {
	case o.how == reattach:
		return o.t.status.Host
	case o.t.Host != "":
		return o.t.Host
	}
	return o.t.placedHost
}

// batchSummary says what a batch holds, for the Web UI: "16 tasks on host-a: worker-0, worker-1, … (true)".
func batchSummary(in RunTasksInput, host string) string {
	var names []string
	for i, m := range in.Members {
		if i == 6 {
			names = append(names, fmt.Sprintf("… %s", in.Members[len(in.Members)-1].Task.Name))
			break
		}
		names = append(names, m.Task.Name)
	}
	what := fmt.Sprintf("%d tasks on %s", len(in.Members), host)
	if in.Attach {
		what = fmt.Sprintf("re-attach %d tasks on %s", len(in.Members), host)
	}
	s := fmt.Sprintf("%s: %s", what, strings.Join(names, ", "))
	if cmd := strings.Join(in.Members[0].Task.Command, " "); cmd != "" && !in.Attach {
		if len(cmd) > 80 {
			cmd = cmd[:77] + "..."
		}
		s += " (" + cmd + ")"
	}
	return s
}

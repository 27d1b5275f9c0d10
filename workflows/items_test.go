package workflows

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/clusterrun/clusterrun/spec"
)

var (
	chief   = TaskAttempt{Task: "chief-0", Attempt: 1}
	worker0 = TaskAttempt{Task: "worker-0", Attempt: 1}
	worker1 = TaskAttempt{Task: "worker-1", Attempt: 1}
	t0      = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	serve   = map[string]bool{"step": true}
)

func newItems(queue int) *itemState {
	s := newItemState(spec.Items{Queue: queue, Lease: time.Minute, MaxAttempts: 3})
	s.RetryAlone = true // as every items workflow since ChangeItemsRetryAlone
	return s
}

func steps(n int) []NewItem {
	var out []NewItem
	for i := range n {
		out = append(out, NewItem{Fn: "step", Args: json.RawMessage(`[` + string(rune('0'+i)) + `]`)})
	}
	return out
}

func ok(l Lease, result string) ItemOutcome {
	return ItemOutcome{ID: l.ID, Lease: l.Lease, Result: json.RawMessage(result)}
}

// A worker whose task comes back as a new attempt lost what it held: those items go to the next worker, first.
func TestItems_LostWorkerItemsGoToAnother(t *testing.T) {
	s := newItems(10)
	ids := sched(t, s, chief, steps(3), false, t0)
	require.Equal(t, []int64{1, 2, 3}, ids)
	held := s.take(worker0, serve, 2, t0)
	require.Len(t, held, 2)

	s.seen(TaskAttempt{Task: "worker-0", Attempt: 2}, t0.Add(time.Second))
	assert.Equal(t, ItemCounts{Scheduled: 3, Queued: 3, Retried: 2}, s.Counts)
	var again []Lease
	for i, want := range [][]int64{{1}, {2}, {3}} {
		got := s.take(worker1, serve, 3, t0.Add(time.Duration(2+i)*time.Second))
		var ids []int64
		for _, l := range got {
			ids = append(ids, l.ID)
		}
		assert.Equal(t, want, ids, "lost items go first, each alone (they were lost together), then the rest")
		again = append(again, got...)
	}
	require.Len(t, again, 3)
	assert.Equal(t, "lost: worker-0 attempt 1 ended", s.Items[1].Attempts[0].Outcome)

	// The dead attempt's result, had it come, would be a duplicate once another's is in.
	s.complete([]ItemOutcome{ok(again[0], `"a"`), ok(again[1], `"b"`), ok(again[2], `"c"`)}, t0.Add(3*time.Second))
	s.complete([]ItemOutcome{ok(held[0], `"late"`)}, t0.Add(4*time.Second))
	assert.Equal(t, ItemCounts{Scheduled: 3, Done: 3, Retried: 2, Duplicates: 1}, s.Counts)
	got := s.deliver(chief, nil, Acks{})
	require.Len(t, got, 3)
	assert.JSONEq(t, `"a"`, string(got[0].Result), "the first result wins")
	assert.Empty(t, s.Items, "delivered items without a key are let go")
	assert.Zero(t, s.Bytes)
}

// A worker that dies holding a batch of items (one of them killed it, say) costs none of them an attempt: which
// one did is unknown. Each goes out alone from then on, so the one that kills its worker fails after
// maxAttempts losses of its own, and the rest of the batch is done.
func TestItems_ABatchLostWithItsWorkerIsRetriedOneItemAtATime(t *testing.T) {
	s := newItems(100)
	sched(t, s, chief, steps(5), false, t0)
	const poison = 3
	now := t0
	attempt := 1
	for range 20 {
		who := TaskAttempt{Task: "worker-0", Attempt: attempt}
		held := s.take(who, serve, 32, now)
		if len(held) == 0 {
			break
		}
		now = now.Add(time.Second)
		var done []ItemOutcome
		for _, l := range held {
			if l.ID == poison {
				break // the worker dies in this item; what it finished before is not reported either
			}
			done = append(done, ok(l, `"r"`))
		}
		if len(done) == len(held) {
			s.complete(done, now)
			continue
		}
		attempt++ // restarted: its first call voids the attempt that died
		s.seen(TaskAttempt{Task: "worker-0", Attempt: attempt}, now)
	}
	for id := int64(1); id <= 5; id++ {
		it := s.Items[id]
		if id == poison {
			assert.Equal(t, ItemFailed, it.State)
			assert.Equal(t, 4, it.Handouts, "once in the batch, then 3 times alone")
			assert.Contains(t, it.Error, "handed out 3 times without a result (maxAttempts), alone, after a batch it was in was lost")
			continue
		}
		assert.Equal(t, ItemDone, it.State, "item %d", id)
		assert.LessOrEqual(t, it.Handouts, 2, "item %d: the batch, then alone", id)
	}
	assert.Equal(t, ItemCounts{Scheduled: 5, Done: 4, Failed: 1, Retried: 7}, s.Counts)

	// Items workflows from before count every lost hand-out: there the whole batch fails with the poison.
	old := newItemState(spec.Items{Queue: 100, Lease: time.Minute, MaxAttempts: 3})
	sched(t, old, chief, steps(5), false, t0)
	for a := 1; a <= 3; a++ {
		require.Len(t, old.take(TaskAttempt{Task: "worker-0", Attempt: a}, serve, 32, t0), 5)
		old.seen(TaskAttempt{Task: "worker-0", Attempt: a + 1}, t0)
	}
	assert.Equal(t, int64(5), old.Counts.Failed)
}

// A lease with no result and no renewal expires: the item goes round again, and never sits in running forever.
func TestItems_LeaseExpiresAndMaxAttemptsEndsTheItem(t *testing.T) {
	s := newItems(10)
	sched(t, s, chief, steps(1), false, t0)
	l := s.take(worker0, serve, 1, t0)
	require.Len(t, l, 1)
	s.renew(worker0, []int64{l[0].Lease}, t0.Add(50*time.Second))
	assert.Equal(t, t0.Add(110*time.Second), s.expire(t0.Add(61*time.Second)), "a renewed lease lives on")

	s.expire(t0.Add(110 * time.Second))
	assert.Equal(t, ItemQueued, s.Items[1].State)
	assert.Contains(t, s.Items[1].Attempts[0].Outcome, "lease expired: no result or renewal from worker-0 attempt 1 within 1m0s")
	for i := range 2 {
		now := t0.Add(time.Duration(200+100*i) * time.Second)
		require.Len(t, s.take(worker1, serve, 1, now), 1)
		s.expire(now.Add(time.Minute))
	}
	it := s.Items[1]
	assert.Equal(t, ItemFailed, it.State)
	assert.Len(t, it.Attempts, 3)
	assert.Contains(t, it.Error, "handed out 3 times without a result (maxAttempts)")
	assert.Equal(t, ItemCounts{Scheduled: 1, Failed: 1, Retried: 2}, s.Counts)
}

// The same key returns the same item, finished or not, and takes no room.
func TestItems_DuplicateKeyReturnsTheSameItem(t *testing.T) {
	s := newItems(1)
	a := sched(t, s, chief, []NewItem{{Fn: "step", Key: "epoch-1"}}, false, t0)
	b := sched(t, s, chief, []NewItem{{Fn: "step", Key: "epoch-1"}, {Fn: "step"}}, false, t0)
	assert.Equal(t, []int64{1}, a)
	assert.Equal(t, []int64{1}, b, "the keyed one is known; the other finds the queue full")
	l := s.take(worker0, serve, 1, t0)
	s.complete([]ItemOutcome{ok(l[0], `42`)}, t0)
	require.Len(t, s.deliver(chief, nil, Acks{}), 1)
	assert.Empty(t, s.deliver(chief, nil, Acks{}), "delivered once")

	// A restarted chief schedules the key again and gets the result back, without running it again.
	chief2 := TaskAttempt{Task: "chief-0", Attempt: 2}
	s.seen(chief2, t0)
	assert.Equal(t, []int64{1}, sched(t, s, chief2, []NewItem{{Fn: "step", Key: "epoch-1"}}, false, t0))
	got := s.deliver(chief2, nil, Acks{})
	require.Len(t, got, 1)
	assert.JSONEq(t, `42`, string(got[0].Result))
	assert.Equal(t, int64(1), s.Counts.Scheduled)
}

// join raises the first error once, then clears it; scheduling goes on.
func TestItems_ErrorIsRaisedOnceThenSchedulingGoesOn(t *testing.T) {
	s := newItems(10)
	sched(t, s, chief, steps(2), false, t0)
	l := s.take(worker0, serve, 2, t0)
	s.complete([]ItemOutcome{{ID: l[0].ID, Lease: l[0].Lease, Error: "ValueError: bad shard"}, {ID: l[1].ID, Lease: l[1].Lease, Error: "second"}}, t0)
	assert.Zero(t, s.pending("chief-0"))
	assert.Equal(t, "item 1 (step) failed: ValueError: bad shard", s.raise("chief-0"))
	assert.Empty(t, s.raise("chief-0"), "raised once")
	assert.Equal(t, []int64{3}, sched(t, s, chief, steps(1), false, t0))
	assert.Equal(t, 1, s.pending("chief-0"))
}

// A restarted scheduler's unkeyed items nobody can take any more are dropped; running ones finish.
func TestItems_RestartedSchedulerAbandonsItsOldItems(t *testing.T) {
	s := newItems(10)
	sched(t, s, chief, steps(3), false, t0)
	s.take(worker0, serve, 1, t0)
	s.seen(TaskAttempt{Task: "chief-0", Attempt: 2}, t0)
	assert.Equal(t, int64(2), s.Counts.Abandoned)
	assert.Equal(t, int64(0), s.Counts.Queued)
	assert.Len(t, s.Items, 1, "the running one stays until its result")
}

// The queue bounds what waits, and the state carried across continue-as-new survives its JSON trip.
func TestItems_QueueBoundAndStateRoundTrip(t *testing.T) {
	s := newItems(2)
	assert.Equal(t, []int64{1, 2}, sched(t, s, chief, steps(3), true, t0))
	l := s.take(worker0, serve, 1, t0)
	assert.Equal(t, []int64{3}, sched(t, s, chief, steps(1), true, t0), "room again once one runs")

	b, err := json.Marshal(s)
	require.NoError(t, err)
	var back itemState
	require.NoError(t, json.Unmarshal(b, &back))
	back.init()
	assert.Equal(t, s.Counts, back.Counts)
	assert.Equal(t, s.Queue, back.Queue)
	back.complete([]ItemOutcome{ok(l[0], `1`)}, t0)
	assert.Empty(t, back.deliver(chief, nil, Acks{}), "held items wait to be fetched by id")
	assert.Len(t, back.deliver(chief, []int64{1}, Acks{}), 1)
}

// Items of a function no task ever took an item of are counted for their scheduler: a name no worker serves
// ("stepp" for "step") waits for ever, and the scheduler's client says so. Once any item of a function was
// taken, its queued items are only waiting their turn; the state carries that across continue-as-new.
func TestItems_UntakenFunctionsAreCountedForTheirScheduler(t *testing.T) {
	s := newItems(10)
	sched(t, s, chief, append(steps(2), NewItem{Fn: "stepp"}, NewItem{Fn: "stepp"}), false, t0)
	assert.Equal(t, map[string]int{"step": 2, "stepp": 2}, untaken(s, "chief-0"), "nothing taken yet")
	assert.Nil(t, untaken(s, "worker-0"), "a task that scheduled nothing")
	sched(t, s, worker0, []NewItem{{Fn: "eval"}}, false, t0)
	assert.Equal(t, map[string]int{"step": 2, "stepp": 2, "eval": 1}, untaken(s, ""), "every scheduler's, for the items view")

	s.take(worker0, serve, 1, t0)
	assert.Equal(t, map[string]int{"stepp": 2}, untaken(s, "chief-0"), "step is served; its other item waits its turn")
	assert.Equal(t, map[string]int{"stepp": 2, "eval": 1}, untaken(s, ""))

	b, err := json.Marshal(s)
	require.NoError(t, err)
	var back itemState
	require.NoError(t, json.Unmarshal(b, &back))
	back.init()
	assert.Equal(t, map[string]int{"stepp": 2}, untaken(&back, "chief-0"), "across continue-as-new")
}

// untaken is the first half of unattended, at t0.
func untaken(s *itemState, task string) map[string]int {
	u, _ := s.unattended(task, t0)
	return u
}

// Items of a function a task took before wait unserved once none runs and no take named the function for
// UnservedAfter: the tasks that served it have ended, and the scheduler's client says so. A take that names
// it, as it comes in or ends its wait, or an item of it running, makes them only wait their turn again; the
// state carries when takes asked across continue-as-new.
func TestItems_ItemsOfAFunctionNoTakeAsksForAreUnserved(t *testing.T) {
	s := newItems(10)
	sched(t, s, chief, append(steps(3), NewItem{Fn: "eval"}), false, t0)
	s.asked([]string{"step"}, t0)
	l := s.take(worker0, serve, 1, t0)
	require.Len(t, l, 1)
	late := t0.Add(UnservedAfter)
	_, unserved := s.unattended("chief-0", late)
	assert.Nil(t, unserved, "an item of step runs: its server is busy, not gone")

	s.complete([]ItemOutcome{ok(l[0], `1`)}, t0.Add(time.Second))
	_, unserved = s.unattended("chief-0", late.Add(-time.Millisecond))
	assert.Nil(t, unserved, "a take named step less than UnservedAfter ago")
	untaken, unserved := s.unattended("chief-0", late)
	assert.Equal(t, map[string]int{"step": 2}, unserved, "none running, no take for UnservedAfter")
	assert.Equal(t, map[string]int{"eval": 1}, untaken, "eval was never taken: untaken, not unserved")
	_, unserved = s.unattended("worker-0", late)
	assert.Nil(t, unserved, "a task that scheduled nothing")

	b, err := json.Marshal(s)
	require.NoError(t, err)
	var back itemState
	require.NoError(t, json.Unmarshal(b, &back))
	back.init()
	_, unserved = back.unattended("", late)
	assert.Equal(t, map[string]int{"step": 2}, unserved, "across continue-as-new")
	back.asked([]string{"eval", "step"}, late)
	_, unserved = back.unattended("", late.Add(UnservedAfter-time.Millisecond))
	assert.Nil(t, unserved, "a take named step again")

	old := newItems(10) // an items workflow from before Asked: its next take tells
	sched(t, old, chief, steps(2), false, t0)
	lo := old.take(worker0, serve, 1, t0)
	old.complete([]ItemOutcome{ok(lo[0], `1`)}, t0) // none running
	old.Asked = nil
	_, unserved = old.unattended("", late.Add(time.Hour))
	assert.Nil(t, unserved, "no take known: not said")
}

// The workflow end to end in the test environment: updates, a lease that expires on the workflow's timer, and
// the counts in the memo.
func TestItems_Workflow(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(ClusterItems)
	cfg := spec.Items{Queue: 100, Lease: 5 * time.Second, MaxAttempts: 5}
	var leases []Lease
	var final WaitItemsResult
	update := updater(t, env)
	var scheduled ScheduleItemsResult
	env.RegisterDelayedCallback(func() {
		update(UpdateItemsSchedule, ScheduleItemsRequest{From: chief, Items: steps(2)}, &scheduled, func() {
			assert.Equal(t, []int64{1, 2}, scheduled.IDs)
		})
	}, time.Second)
	var took TakeItemsResult
	env.RegisterDelayedCallback(func() {
		update(UpdateItemsTake, TakeItemsRequest{From: worker0, Fns: []string{"step"}, Max: 2, Wait: time.Second}, &took, func() {
			leases = took.Items
		})
	}, 2*time.Second)
	env.RegisterDelayedCallback(func() {
		// worker-0 answers one and goes silent with the other, whose lease expires at 7s.
		require.Len(t, leases, 2)
		update(UpdateItemsTake, TakeItemsRequest{From: worker0, Done: []ItemOutcome{ok(leases[0], `"x"`)}}, nil, nil)
	}, 3*time.Second)
	var again TakeItemsResult
	env.RegisterDelayedCallback(func() {
		update(UpdateItemsTake, TakeItemsRequest{From: worker1, Fns: []string{"step"}, Max: 5, Wait: 5 * time.Second}, &again, func() {
			require.Len(t, again.Items, 1)
			assert.Equal(t, int64(2), again.Items[0].ID)
			update(UpdateItemsTake, TakeItemsRequest{From: worker1, Done: []ItemOutcome{ok(again.Items[0], `"y"`)}}, nil, nil)
		})
	}, 6*time.Second)
	env.RegisterDelayedCallback(func() {
		update(UpdateItemsWait, WaitItemsRequest{From: chief, All: true, Raise: true, Wait: 5 * time.Second}, &final, nil)
	}, 6500*time.Millisecond)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryItems, 10)
		require.NoError(t, err)
		var view ItemsView
		require.NoError(t, v.Get(&view))
		assert.Equal(t, ItemCounts{Scheduled: 2, Done: 2, Retried: 1}, view.Counts)
		require.Len(t, view.Items, 2)
		assert.Equal(t, int64(2), view.Items[0].ID, "the latest first")
		assert.Len(t, view.Items[0].Attempts, 2, "the attempt history shows the expired lease")
		env.CancelWorkflow()
	}, 20*time.Second)
	env.ExecuteWorkflow(ClusterItems, ItemsInput{RunID: "r", Config: cfg})
	require.True(t, env.IsWorkflowCompleted())
	assert.Zero(t, final.Pending)
	require.Len(t, final.Results, 2)
	assert.JSONEq(t, `"y"`, string(final.Results[1].Result))
}

// updater returns a function that sends an update to the workflow under test; then, if given, runs with its
// answer decoded into out.
func updater(t *testing.T, env *testsuite.TestWorkflowEnvironment) func(name string, arg any, out any, then func()) {
	return func(name string, arg any, out any, then func()) {
		env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("%s rejected: %v", name, err) },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				require.NoError(t, err)
				if out != nil {
					b, _ := json.Marshal(v)
					require.NoError(t, json.Unmarshal(b, out))
				}
				if then != nil {
					then()
				}
			},
		}, arg)
	}
}

// A wait that names neither ids nor all only acknowledges: the CLI's fetch sends one after it printed its
// results, and it must not take results that another client of the task (Python's) is to get.
func TestItems_AWaitForNothingOnlyAcknowledges(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(ClusterItems)
	update := updater(t, env)
	on := Acks{On: true}
	var first, ackOnly, again WaitItemsResult
	// run schedules one item for the chief and has worker-0 do it.
	run := func(hold bool) {
		update(UpdateItemsSchedule, ScheduleItemsRequest{From: chief, Items: steps(1), Hold: hold}, nil, func() {
			var took TakeItemsResult
			update(UpdateItemsTake, TakeItemsRequest{From: worker0, Fns: []string{"step"}, Max: 1}, &took, func() {
				require.Len(t, took.Items, 1)
				update(UpdateItemsTake, TakeItemsRequest{From: worker0, Done: []ItemOutcome{ok(took.Items[0], `1`)}}, nil, nil)
			})
		})
	}
	env.RegisterDelayedCallback(func() { run(true) }, time.Second) // item 1, as the CLI schedules it
	env.RegisterDelayedCallback(func() {
		update(UpdateItemsWait, WaitItemsRequest{From: chief, IDs: []int64{1}, Acks: on}, &first, nil)
	}, 2*time.Second)
	env.RegisterDelayedCallback(func() { run(false) }, 3*time.Second) // item 2, as Python does in the same task
	env.RegisterDelayedCallback(func() {
		update(UpdateItemsWait, WaitItemsRequest{From: chief, Acks: Acks{On: true, Got: []int64{1}}}, &ackOnly, func() {
			update(UpdateItemsWait, WaitItemsRequest{From: chief, IDs: []int64{1}, Acks: on}, &again, env.CancelWorkflow)
		})
	}, 4*time.Second)
	env.ExecuteWorkflow(ClusterItems, ItemsInput{RunID: "r", Config: spec.Items{Queue: 10, Lease: 5 * time.Second, MaxAttempts: 3}})
	require.True(t, env.IsWorkflowCompleted())
	require.Len(t, first.Results, 1)
	assert.Empty(t, ackOnly.Results, "it hands out nothing, not even item 2, whose client is another")
	require.Len(t, again.Results, 1, "a wait hands out the task's own results too")
	assert.Equal(t, int64(2), again.Results[0].ID)
	assert.Equal(t, []int64{1}, again.Gone, "acknowledged, item 1's result went")
}

// sched schedules items and fails the test on a refusal.
func sched(t *testing.T, s *itemState, who TaskAttempt, items []NewItem, hold bool, now time.Time) []int64 {
	t.Helper()
	ids, err := s.schedule(who, items, hold, now)
	require.NoError(t, err)
	return ids
}

// Keyed results are kept for the run in a bounded store: past it a new key is refused with a clear error (a
// known one still answers), and the state carried across continue-as-new stays within one payload.
func TestItems_KeyedResultsAreBounded(t *testing.T) {
	s := newItemState(spec.Items{Queue: 100_000, Lease: time.Minute, MaxAttempts: 3})
	big := json.RawMessage(`"` + strings.Repeat("x", MaxItemResult-10) + `"`)
	n := 0
	var refused error
	for refused == nil {
		n++
		ids, err := s.schedule(chief, []NewItem{{Fn: "step", Key: fmt.Sprintf("k%d", n)}}, false, t0)
		if refused = err; err != nil {
			break
		}
		l := s.take(worker0, serve, 1, t0)
		require.Len(t, l, 1)
		s.complete([]ItemOutcome{{ID: ids[0], Lease: l[0].Lease, Result: big}}, t0)
		require.Len(t, s.deliver(chief, nil, Acks{}), 1)
	}
	assert.ErrorContains(t, refused, "this run keeps 512 KiB of keyed results already, and takes no new key")
	again, err := s.schedule(chief, []NewItem{{Fn: "step", Key: "k1"}}, false, t0)
	require.NoError(t, err, "a known key still answers")
	assert.Equal(t, []int64{1}, again)
	assert.Zero(t, s.Bytes, "kept results leave the room for held items")
	b, err := json.Marshal(s)
	require.NoError(t, err)
	assert.Less(t, len(b), 2<<20, "the carried state fits one payload")
}

// However items go round (every one handed out until maxAttempts), the state stays within one payload: the
// room an item takes reserves its history, which keeps the last 5 hand-outs.
func TestItems_StateStaysBoundedWhenItemsGoRound(t *testing.T) {
	s := newItemState(spec.Items{Queue: 100_000, Lease: time.Second, MaxAttempts: 100})
	s.RetryAlone = true
	for {
		ids := sched(t, s, chief, []NewItem{{Fn: "step", Args: json.RawMessage(`[1]`), Key: ""}}, false, t0)
		if len(ids) == 0 {
			break
		}
	}
	held := len(s.Items)
	assert.Greater(t, held, 500)
	now := t0
	for range 101 {
		for s.Counts.Queued > 0 {
			s.take(worker0, serve, held, now) // after the first loss each item goes out alone
		}
		now = now.Add(2 * time.Second)
		s.expire(now)
	}
	for _, it := range s.Items {
		require.Equal(t, ItemFailed, it.State)
		require.Equal(t, 101, it.Handouts, "100 counted, and the first, shared, not")
		require.Len(t, it.Attempts, 5, "the last 5 hand-outs")
	}
	b, err := json.Marshal(s)
	require.NoError(t, err)
	assert.Less(t, len(b), 2<<20, "%d held items, %d bytes carried", held, len(b))
	t.Logf("%d held items, all handed out 101 times: %d bytes carried", held, len(b))
	assert.LessOrEqual(t, s.Bytes, MaxItemBytes)
}

// A result goes out once: asked for again, or for an id never scheduled, the item is gone, and the wait says
// so instead of answering "nothing yet" for ever. A held result not fetched yet, or a keyed one, is not gone.
func TestItems_AResultHandedOutIsGone(t *testing.T) {
	s := newItems(10)
	ids := sched(t, s, chief, append(steps(2), NewItem{Fn: "step", Key: "k"}), true, t0)
	require.Equal(t, []int64{1, 2, 3}, ids)
	leases := s.take(worker0, serve, 3, t0)
	require.Len(t, leases, 3)
	s.complete([]ItemOutcome{ok(leases[0], `1`), ok(leases[1], `2`), ok(leases[2], `3`)}, t0)

	got := s.deliver(chief, []int64{1, 3}, Acks{})
	require.Len(t, got, 2)
	assert.Empty(t, s.gone([]int64{1, 3}, got), "answered in this very call")
	assert.Equal(t, []int64{1, 99}, s.gone([]int64{1, 2, 3, 99}, nil), "1 went out; 2 is held until fetched; 3 is keyed; 99 never was")
}

// A scheduler that acknowledges results keeps each one in the run until it says it has it: a wait for it by id
// (its first answer may have been lost, and the run may have continued as new since) gets it once more; an
// acknowledgement lets it go; another task cannot acknowledge it.
func TestItems_AcknowledgedResultsStayUntilAcknowledged(t *testing.T) {
	s := newItems(10)
	require.Equal(t, []int64{1, 2}, sched(t, s, chief, steps(2), false, t0))
	leases := s.take(worker0, serve, 2, t0)
	s.complete([]ItemOutcome{ok(leases[0], `1`), ok(leases[1], `2`)}, t0)
	held := s.Bytes

	on := Acks{On: true}
	require.Len(t, s.deliver(chief, nil, on), 2)
	assert.Equal(t, held, s.Bytes, "kept, counted, until acknowledged")
	assert.Empty(t, s.deliver(chief, nil, on), "handed out once to calls that are not tries again")
	assert.Empty(t, s.gone([]int64{1}, nil), "still the run's")

	back := roundTrip(t, s) // as continue-as-new carries it
	again := back.deliver(chief, []int64{1}, on)
	require.Len(t, again, 1, "asked for by id, it is handed out again")
	assert.JSONEq(t, `1`, string(again[0].Result))

	back.ack(worker0, Acks{On: true, Got: []int64{1, 2}})
	assert.Len(t, back.Items, 2, "only their scheduler acknowledges them")
	back.ack(chief, Acks{On: true, Got: []int64{1, 2, 77}})
	assert.Empty(t, back.Items)
	assert.Zero(t, back.Bytes)
	assert.Equal(t, []int64{1}, back.gone([]int64{1}, nil))
}

// roundTrip carries a state through JSON, as continue-as-new does.
func roundTrip(t *testing.T, s *itemState) *itemState {
	t.Helper()
	b, err := json.Marshal(s)
	require.NoError(t, err)
	var back itemState
	require.NoError(t, json.Unmarshal(b, &back))
	back.init()
	return &back
}

// At most ParkBudget requests wait inside the workflow at once, each an update in flight (Temporal admits 10
// per workflow by default). Past that, a request that would only wait is refused as busy, leaving nothing in
// the history; one that carries something to apply, or comes from an attempt the run has not seen, is
// answered at once. When work comes, the waiting requests get it.
func TestItems_AtMostParkBudgetRequestsWait(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(ClusterItems)
	update := updater(t, env)
	workers := make([]TaskAttempt, ParkBudget+2)
	took := make([]TakeItemsResult, len(workers))
	answered := make([]time.Duration, len(workers))
	began := env.Now()
	for i := range workers {
		workers[i] = TaskAttempt{Task: fmt.Sprintf("worker-%d", i), Attempt: 1}
		env.RegisterDelayedCallback(func() {
			req := TakeItemsRequest{From: workers[i], Fns: []string{"step"}, Max: 1, Wait: 5 * time.Second}
			update(UpdateItemsTake, req, &took[i], func() { answered[i] = env.Now().Sub(began) })
		}, time.Second+time.Duration(i)*time.Millisecond)
	}
	var refused []string
	var applied TakeItemsResult
	env.RegisterDelayedCallback(func() {
		late := workers[ParkBudget]
		env.UpdateWorkflow(UpdateItemsTake, "", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { refused = append(refused, err.Error()) },
			OnAccept:   func() { t.Error("a request that only waits was taken while the budget was spent") },
			OnComplete: func(any, error) {},
		}, TakeItemsRequest{From: late, Fns: []string{"step"}, Max: 1, Wait: 5 * time.Second})
		update(UpdateItemsTake, TakeItemsRequest{From: late, Renew: []int64{7}, Fns: []string{"step"}, Max: 1, Wait: 5 * time.Second}, &applied, nil)
	}, 2*time.Second)
	env.RegisterDelayedCallback(func() {
		update(UpdateItemsSchedule, ScheduleItemsRequest{From: chief, Items: steps(ParkBudget)}, nil, nil)
	}, 3*time.Second)
	env.RegisterDelayedCallback(env.CancelWorkflow, 20*time.Second)
	env.ExecuteWorkflow(ClusterItems, ItemsInput{RunID: "r", Config: spec.Items{Queue: 10, Lease: time.Minute, MaxAttempts: 3}})
	require.True(t, env.IsWorkflowCompleted())

	for i := range ParkBudget {
		assert.Len(t, took[i].Items, 1, "%s waited and got an item when the chief scheduled", workers[i].Task)
		assert.Equal(t, 3*time.Second, answered[i], workers[i].Task)
	}
	for i := ParkBudget; i < len(workers); i++ {
		assert.Empty(t, took[i].Items, "%s came past the budget: answered at once", workers[i].Task)
		assert.Less(t, answered[i], 2*time.Second, workers[i].Task)
	}
	require.Len(t, refused, 1, "the request that would only wait")
	assert.Contains(t, refused[0], "enough requests wait")
	assert.Empty(t, applied.Items, "the one with a renewal to apply was taken and answered at once")
}

// A schedule that waits for room while its scheduler has results to take is answered at once with them: with
// acknowledgements the results hold room until the scheduler's next call lets them go, so waiting for room
// meant waiting the whole wait, round after round (a Python chief scheduled 5,000 items in 54 s, 5 s now).
func TestItems_AScheduleWaitingForRoomTakesItsResults(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(ClusterItems)
	update := updater(t, env)
	big := func(n int) []NewItem {
		arg := json.RawMessage(`"` + strings.Repeat("x", MaxItemArgs-2) + `"`)
		out := make([]NewItem, n)
		for i := range out {
			out[i] = NewItem{Fn: "step", Args: arg}
		}
		return out
	}
	on := Acks{On: true}
	var first, second, third ScheduleItemsResult
	var answered time.Duration
	began := env.Now()
	env.RegisterDelayedCallback(func() {
		update(UpdateItemsSchedule, ScheduleItemsRequest{From: chief, Items: big(100), Acks: on}, &first, func() {
			var took TakeItemsResult
			update(UpdateItemsTake, TakeItemsRequest{From: worker0, Fns: []string{"step"}, Max: 100}, &took, func() {
				var done []ItemOutcome
				for _, l := range took.Items {
					done = append(done, ok(l, `1`))
				}
				update(UpdateItemsTake, TakeItemsRequest{From: worker0, Done: done}, nil, nil)
			})
		})
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		update(UpdateItemsSchedule, ScheduleItemsRequest{From: chief, Items: big(1), Wait: MaxItemWait, Acks: on}, &second, func() {
			answered = env.Now().Sub(began)
			got := Acks{On: true}
			for _, r := range second.Results {
				got.Got = append(got.Got, r.ID)
			}
			update(UpdateItemsSchedule, ScheduleItemsRequest{From: chief, Items: big(1), Wait: MaxItemWait, Acks: got}, &third, env.CancelWorkflow)
		})
	}, 2*time.Second)
	env.ExecuteWorkflow(ClusterItems, ItemsInput{RunID: "r", Config: spec.Items{Queue: 1000, Lease: time.Minute, MaxAttempts: 3}})
	require.True(t, env.IsWorkflowCompleted())
	require.NotEmpty(t, first.IDs)
	require.Less(t, len(first.IDs), 100, "the held items' bound stopped the first schedule")
	assert.Empty(t, second.IDs, "no room: the results hold it")
	assert.Len(t, second.Results, len(first.IDs), "the schedule handed its scheduler the results")
	assert.Equal(t, 2*time.Second, answered, "at once, not after its wait")
	assert.Len(t, third.IDs, 1, "acknowledged, the results made room")
}

// The results applied in the workflow task that decides to continue as new reach the memo before the move: a
// run that ended before the next history published them kept a memo showing their items running for good
// (status read "5 running, 2995 done" after its chief had every result).
func TestItems_CountsReachTheMemoBeforeAMove(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(ClusterItems)
	var memo ItemCounts
	env.OnUpsertMemo(mock.Anything).Run(func(args mock.Arguments) {
		memo = args.Get(0).(map[string]any)[MemoItems].(ItemCounts)
	}).Return(nil)
	update := updater(t, env)
	env.RegisterDelayedCallback(func() {
		update(UpdateItemsSchedule, ScheduleItemsRequest{From: chief, Items: steps(2)}, nil, nil)
	}, time.Second)
	var took TakeItemsResult
	env.RegisterDelayedCallback(func() {
		update(UpdateItemsTake, TakeItemsRequest{From: worker0, Fns: []string{"step"}, Max: 2}, &took, nil)
	}, 2*time.Second)
	env.RegisterDelayedCallback(func() {
		require.Len(t, took.Items, 2)
		done := []ItemOutcome{ok(took.Items[0], `"x"`), ok(took.Items[1], `"y"`)}
		env.UpdateWorkflow(UpdateItemsTake, "", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("the results were refused: %v", err) },
			// The server suggests a move in the workflow task that applies the results.
			OnAccept:   func() { env.SetContinueAsNewSuggested(true) },
			OnComplete: func(_ any, err error) { assert.NoError(t, err) },
		}, TakeItemsRequest{From: worker0, Done: done})
	}, 3*time.Second)
	env.ExecuteWorkflow(ClusterItems, ItemsInput{RunID: "r", Config: spec.Items{Queue: 10, Lease: time.Minute, MaxAttempts: 3}})
	require.True(t, env.IsWorkflowCompleted())
	var moved *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &moved)
	assert.Equal(t, ItemCounts{Scheduled: 2, Done: 2}, memo)
}

// The listing gives the items not finished first, then the finished ones, the latest first, whether the run
// still holds them or not: an ended run's scheduler never acknowledges its last results (no call comes after),
// and the listing of a run of 300 items showed ids 1 to 100 of them.
func TestItems_TheListingShowsTheLatestFinishedFirst(t *testing.T) {
	s := newItems(10)
	require.Equal(t, []int64{1, 2, 3, 4, 5}, sched(t, s, chief, steps(5), false, t0))
	leases := s.take(worker0, serve, 5, t0)
	require.Len(t, leases, 5)
	on := Acks{On: true}
	s.complete([]ItemOutcome{ok(leases[0], `1`)}, t0.Add(time.Second))
	s.complete([]ItemOutcome{ok(leases[1], `2`)}, t0.Add(2*time.Second))
	require.Len(t, s.deliver(chief, nil, on), 2)
	s.ack(chief, Acks{On: true, Got: []int64{1, 2}}) // let go: kept for the listing only
	s.complete([]ItemOutcome{ok(leases[3], `4`)}, t0.Add(3*time.Second))
	s.complete([]ItemOutcome{ok(leases[2], `3`)}, t0.Add(4*time.Second))
	require.Len(t, s.deliver(chief, nil, on), 2) // delivered, never acknowledged

	var ids []int64
	for _, it := range s.list(10) {
		ids = append(ids, it.ID)
	}
	assert.Equal(t, []int64{5, 3, 4, 2, 1}, ids, "the running one, then the latest finished first")
	assert.Len(t, s.list(3), 3)

	idsIn := func(n int, states ...string) []int64 {
		var ids []int64
		for _, it := range s.list(n, states...) {
			ids = append(ids, it.ID)
		}
		return ids
	}
	s.complete([]ItemOutcome{{ID: leases[4].ID, Lease: leases[4].Lease, Error: "ValueError: no"}}, t0.Add(5*time.Second))
	assert.Equal(t, []int64{5}, idsIn(10, ItemFailed))
	assert.Equal(t, []int64{3, 4}, idsIn(2, ItemDone), "the state picks before the limit counts")
	assert.Equal(t, []int64{5, 3, 4, 2, 1}, idsIn(10, ItemDone, ItemFailed))
	assert.Empty(t, idsIn(10, ItemQueued, ItemRunning))
}

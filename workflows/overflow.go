package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"
)

// Overflow: the tasks of a launch larger than its pool's live slots. placeTasks gives them, in its last tier,
// to the hosts with the fewest of the launch's tasks, where they wait for a slot until their startTimeout. But
// the registry is what the hosts last reported: a host whose reports had not come in yet (a worker that had
// just started, a report that failed) is not in it, and neither is one that came up a few seconds later.
// Placed on the hosts the registry had, the overflow waited there out its startTimeout while those hosts
// stood idle. So the run holds it back instead: it launches what fits, reads the registry again a little over
// ReportEvery later and places the held tasks where room shows, up to OverflowHolds times; what still finds
// no room then waits on the hosts as before. The time held counts against the task's startTimeout: a task is
// held only while its holds end before that, and its lease then waits for what is left of it.

// ChangeHoldOverflow marks runs that hold a launch's overflow back; it is asked only when a launch has some,
// so other runs write no marker, and runs from before place their overflow as they did.
const ChangeHoldOverflow = "clusterrun-hold-overflow"

// OverflowHolds is how many times a launch's task may be held back for room in its pool, holdEvery apart:
// about LiveFor in all, as long as a host may go unreported and still count as live.
const OverflowHolds = 3

// holdEvery is how long a hold lasts: by its end every live host has reported at least once since the launch
// (a variable for the workflow tests, whose fake hosts wait on the wall clock).
var holdEvery = ReportEvery + time.Second

// overflow says which of tasks placeTasks put beyond the room it found: beyond their host's slots (its last
// tier, which it takes only for a launch larger than the pool's live slots), or, for a task held before
// (rechecked), beyond the room its host's report shows. A hold lasts longer than ReportEvery, so that report
// is newer than the launch, and counts the run's tasks launched then.
func overflow(tasks []*task, hosts []HostEntry, rechecked []bool) []bool {
	slots, report := map[string]int{}, map[string]int{}
	for _, h := range hosts {
		slots[h.Host], report[h.Host] = h.Slots, h.Unpinned // placeTasks added this launch's tasks
	}
	for _, t := range tasks {
		report[t.placedHost]--
	}
	seen := map[string]int{}
	over := make([]bool, len(tasks))
	for i, t := range tasks {
		h := t.placedHost
		if h == "" {
			continue
		}
		room := slots[h] - seen[h]
		if rechecked[i] {
			room -= report[h]
		}
		over[i] = room <= 0
		seen[h]++
	}
	return over
}

// holdOverflow takes out of the launch the tasks placed beyond their host's slots that may be held once more,
// and says why they wait. orders[i] launches tasks[i]; need counts the launch's tasks per pool. It returns
// the held orders, each counting this hold.
func (r *run) holdOverflow(ctx workflow.Context, tasks []*task, orders []launchOrder, hosts []HostEntry, need map[string]int) []launchOrder {
	rechecked := make([]bool, len(orders))
	for i, o := range orders {
		rechecked[i] = o.holds > 0
	}
	over := overflow(tasks, hosts, rechecked)
	var held []launchOrder
	for i := range tasks {
		if over[i] && orders[i].holds < OverflowHolds && time.Duration(orders[i].holds+1)*holdEvery < r.plan.StartTimeout {
			o := orders[i]
			o.holds++
			held = append(held, o)
		}
	}
	if len(held) == 0 || workflow.GetVersion(ctx, ChangeHoldOverflow, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	free := freeSlots(hosts)
	at := workflow.Now(ctx).Add(holdEvery)
	for _, o := range held {
		t := o.t
		t.placedHost = ""
		t.waitNote = holdNote(t.Pool, need[t.Pool], free[t.Pool], at)
		if t.attempt == 0 && o.how == newAttempt {
			t.status.Error = t.waitNote // a restart's status keeps saying why it restarts
		}
	}
	return held
}

// ChangeHoldForClaims marks runs that hold back a launch whose slots other runs claimed since the hosts'
// reports (claims.go); asked only when the allocator refuses a launch.
const ChangeHoldForClaims = "clusterrun-hold-for-claims"

// ChangeWaitWhole marks runs whose launches that find no room in their hosts' free slots wait whole for it
// (claims.go): held back, asking the allocator again a second later, then every waitFirst while no run queued
// before theirs waits for those hosts, else every waitBehind, for at most WaitWholeFor. Before, a launch the
// reports showed no room for went out, and its tasks waited on their hosts, at the rendezvous, holding the
// slots they found. Asked when such a launch is about to go to the allocator, or when the allocator refuses one.
const ChangeWaitWhole = "clusterrun-wait-whole"

// How long a launch waiting whole for room is held before it asks again: first, and at the head of the queue
// (the slots free as the runs that hold them end), or behind runs queued before it (which take the slots
// first). Each ask costs 8 events of the run's history (WaitWholeFor bounds them), a registry read and a watch
// of the runs that hold the room (roomwake.go).
var (
	waitFirst  = 2 * time.Second
	waitBehind = 4 * time.Second
)

// WaitWholeFor bounds how long a launch waits whole for room; after it, the launch goes out and its tasks wait
// on their hosts for what is left of their startTimeout.
const WaitWholeFor = 10 * time.Minute

// nextWait is how long a launch waiting whole for room is held before it asks again, with ahead runs queued
// before it waiting for its hosts; or 0 when it may not be held again: its startTimeout, or WaitWholeFor,
// would run out first.
func (r *run) nextWait(orders []launchOrder, ahead int) time.Duration {
	waits, heldFor := 0, time.Duration(0)
	for _, o := range orders {
		waits, heldFor = max(waits, o.waits), max(heldFor, o.heldFor)
	}
	d := waitFirst
	switch {
	case waits == 0:
		d = time.Second
	case ahead > 0:
		d = waitBehind
	}
	d = min(d, holdEvery)
	if len(orders) == 0 || heldFor+d >= r.plan.StartTimeout || heldFor+d > WaitWholeFor {
		return 0
	}
	return d
}

// holdForRoom holds back every unpinned order of a launch the allocator refused (no), for want of room on its
// hosts, and says why each waits: when they are launched again, the registry is read anew, and the launch
// starts where it finds room. It returns the held orders and how long they are held; none (the launch goes on
// as it was, its tasks to wait on their hosts) when they may not be held again. Runs from before
// ChangeWaitWhole hold such a launch only for claims, holdEvery at a time, OverflowHolds times.
func (r *run) holdForRoom(ctx workflow.Context, orders []launchOrder, no PortGrant, need map[string]int, hosts []HostEntry) ([]launchOrder, roomWait) {
	if len(orders) == 0 || workflow.GetVersion(ctx, ChangeHoldForClaims, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil, roomWait{}
	}
	d, whole := r.nextWait(orders, no.Ahead), workflow.GetVersion(ctx, ChangeWaitWhole, workflow.DefaultVersion, 1) == 1
	if !whole {
		d = holdEvery
		for _, o := range orders {
			if o.holds >= OverflowHolds || time.Duration(o.holds+1)*holdEvery >= r.plan.StartTimeout {
				d = 0
			}
		}
	}
	if d == 0 {
		return nil, roomWait{}
	}
	w := roomWait{d: d}
	if whole {
		w.runs = watchedRuns(ctx, no.BusyRuns, r.ref.WorkflowID)
	}
	at := workflow.Now(ctx).Add(d)
	held := make([]launchOrder, 0, len(orders))
	for _, o := range orders {
		if whole {
			o.waits++ // not a hold of its overflow: the next launch places it by the reports, as the first
		} else {
			o.holds++
		}
		t := o.t
		t.placedHost = ""
		t.waitNote = roomNote(t.Pool, need[t.Pool], no, hosts, at, len(w.runs) > 0)
		if t.attempt == 0 && o.how == newAttempt {
			t.status.Error = t.waitNote
		}
		held = append(held, o)
	}
	return held, w
}

// roomNote says why a launch's task of pool waits whole: what takes the slots of the pool's hosts that had no
// room for the launch (no), and when the run asks again: at, or sooner when it watches the runs that hold them.
func roomNote(pool string, need int, no PortGrant, hosts []HostEntry, at time.Time, watched bool) string {
	slots, used, busy, reserved := 0, 0, 0, 0
	for _, h := range hosts {
		if _, full := no.Used[h.Host]; (full || no.Busy[h.Host] > 0) && inPool(h.Pools, pool) {
			slots += h.Slots
			used, busy, reserved = used+no.Used[h.Host], busy+no.Busy[h.Host], reserved+no.Reserved[h.Host]
		}
	}
	var why []string
	if used > 0 {
		why = append(why, fmt.Sprintf("their last reports count %d tasks of other runs", used))
	}
	if busy > 0 {
		why = append(why, fmt.Sprintf("runs launched since those reports took %d", busy))
	}
	switch {
	case no.Ahead == 1:
		why = append(why, fmt.Sprintf("a run queued before this one waits for %d of them first", reserved))
	case no.Ahead > 1:
		why = append(why, fmt.Sprintf("%d runs queued before this one wait for them first", no.Ahead))
	}
	if len(why) == 0 {
		why = append(why, "other tasks take them")
	}
	when := "at " + at.UTC().Format("15:04:05 UTC")
	if watched {
		when = "as soon as a run that holds them ends, and at " + at.UTC().Format("15:04:05 UTC") + " at the latest"
	}
	return fmt.Sprintf("waiting for room in pool %s: this launch's %d tasks of the pool start together, and the hosts it "+
		"would start on have too few of their %s free: %s (clusterrun hosts)%s; the run asks again %s", pool, need,
		slotCount(slots), strings.Join(why, ", "), drainedClause(drainedHosts(hosts, pool)), when)
}

// holdNote says why a held task waits, and when the run looks again.
func holdNote(pool string, need int, f *poolSlots, at time.Time) string {
	slots, drained := "no slot", ""
	if f != nil {
		slots, drained = slotCount(f.slots), drainedClause(f.drained)
	}
	return fmt.Sprintf("waiting for room in pool %s: this launch's %d tasks of the pool start together, and the host registry "+
		"lists %s on its live hosts (clusterrun hosts)%s; the run reads it again at %s for hosts that have come up or "+
		"freed slots", pool, need, slots, drained, at.UTC().Format("15:04:05 UTC"))
}

// hold waits with the held orders (w), which have no lease meanwhile (between), then launches them again: the
// launch reads the registry anew. A held task that ended meanwhile (terminate-task, a stop request:
// endWaiting) has left the hold. A wait cut short by a run's end counts only the time it took.
func (g *generation) hold(held []launchOrder, w roomWait) {
	if len(held) == 0 {
		return
	}
	start := workflow.Now(g.ctx)
	wake := awaitRoom(g.genCtx, w, fmt.Sprintf("hold %d tasks for room in their pools (hold %d)", len(held), held[0].holds+held[0].waits))
	for i := range held {
		held[i].heldFor += w.d
	}
	for _, o := range held {
		o.t.backoff, o.t.cancelBackoff, o.t.held = wake, func() {}, true
	}
	g.sel.AddFuture(wake, func(f workflow.Future) {
		var ended string
		canceled := f.Get(g.ctx, &ended) != nil
		unused := time.Duration(0)
		if ended != "" {
			unused = max(w.d-workflow.Now(g.ctx).Sub(start), 0)
		}
		for _, o := range held {
			if o.t.backoff != f {
				continue
			}
			o.t.backoff, o.t.cancelBackoff, o.t.held = nil, nil, false
			if !canceled {
				o.heldFor -= unused
				g.r.todo.launch = append(g.r.todo.launch, o)
			}
		}
	})
}

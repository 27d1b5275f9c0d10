package workflows

import (
	"fmt"
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
// reports (claims.go); asked only when the allocator says so.
const ChangeHoldForClaims = "clusterrun-hold-for-claims"

// holdForClaims holds back every unpinned order of a launch that the registry's free slots hold but other
// runs' launches since took (busy: their claims per host), as holdOverflow holds a launch's overflow: when
// they are launched again, the hosts' reports count those runs' tasks, and the launch starts in the room left,
// or waits for it at its rendezvous. It returns the held orders, or none (the launch goes on as it was) when
// one of them may not be held again.
func (r *run) holdForClaims(ctx workflow.Context, orders []launchOrder, busy map[string]int, need map[string]int) []launchOrder {
	for _, o := range orders {
		if o.holds >= OverflowHolds || time.Duration(o.holds+1)*holdEvery >= r.plan.StartTimeout {
			return nil
		}
	}
	if len(orders) == 0 || workflow.GetVersion(ctx, ChangeHoldForClaims, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	taken := 0
	//workflowcheck:ignore a sum, whatever the order
	for _, n := range busy {
		taken += n
	}
	at := workflow.Now(ctx).Add(holdEvery)
	held := make([]launchOrder, 0, len(orders))
	for _, o := range orders {
		o.holds++
		t := o.t
		t.placedHost = ""
		t.waitNote = fmt.Sprintf("waiting for room in pool %s: this launch's %d tasks of the pool start together, and runs "+
			"launched since its hosts last reported took %d of the slots those reports show free; the run reads the host "+
			"registry again at %s", t.Pool, need[t.Pool], taken, at.UTC().Format("15:04:05 UTC"))
		if t.attempt == 0 && o.how == newAttempt {
			t.status.Error = t.waitNote
		}
		held = append(held, o)
	}
	return held
}

// holdNote says why a held task waits, and when the run looks again.
func holdNote(pool string, need int, f *poolSlots, at time.Time) string {
	slots := "no slot"
	if f != nil {
		slots = slotCount(f.slots)
	}
	return fmt.Sprintf("waiting for room in pool %s: this launch's %d tasks of the pool start together, and the host registry "+
		"lists %s on its live hosts (clusterrun hosts); the run reads it again at %s for hosts that have come up or "+
		"freed slots", pool, need, slots, at.UTC().Format("15:04:05 UTC"))
}

// hold waits holdEvery with the held orders, which have no lease meanwhile (between), then launches them
// again: the launch reads the registry anew. A held task that ended meanwhile (terminate-task, a stop
// request: endWaiting) has left the hold.
func (g *generation) hold(held []launchOrder) {
	if len(held) == 0 {
		return
	}
	timer := workflow.NewTimerWithOptions(g.genCtx, holdEvery, workflow.TimerOptions{
		Summary: fmt.Sprintf("hold %d tasks for room in their pools (%d of %d)", len(held), held[0].holds, OverflowHolds)})
	for _, o := range held {
		o.t.backoff, o.t.cancelBackoff, o.t.held = timer, func() {}, true
	}
	g.sel.AddFuture(timer, func(f workflow.Future) {
		canceled := f.Get(g.ctx, nil) != nil
		for _, o := range held {
			if o.t.backoff != f {
				continue
			}
			o.t.backoff, o.t.cancelBackoff, o.t.held = nil, nil, false
			if !canceled {
				g.r.todo.launch = append(g.r.todo.launch, o)
			}
		}
	})
}

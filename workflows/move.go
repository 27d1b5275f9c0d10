package workflows

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Moving placed tasks that have not started. A run places an unpinned task on a host the registry lists as
// live, and the registry lists a host as live for LiveFor after its last report. A launch in the seconds after
// a host's worker died (SIGKILL, a lost machine) or was drained may so place tasks there, and their leases then
// wait in that host's queue, which nobody polls, until startTimeout (5 minutes by default) fails them; a task
// placed where the reports showed room that another run took since waits for a slot there however many other
// hosts have room. A lease a host took needs none of this when the host dies: its heartbeat times out, and the
// run launches again what had not started (contactLost). So while some task placed on a host has not started,
// the run reads the registry (hostCheckDelay) and moves the leases whose host the registry no longer counts
// (silent for LiveFor, drained, or not listed), and those on a full host while other hosts of their pool have
// room for them. It cancels the lease (one that no worker took ends at once) and launches its tasks again,
// elsewhere when it can. A lease of several tasks moves only when none of them has started: a started one says
// its host took the lease, whose heartbeat then tells what became of them.

// ChangeMoveFromGoneHosts marks runs that check the hosts of their placed tasks that have not started, and
// place a task launched again after its host lost it elsewhere when they can.
const ChangeMoveFromGoneHosts = "clusterrun-move-from-gone-hosts"

// hostCheckEvery is how often a run with placed tasks that have not started reads the registry in the first
// minute after a launch: a host that died before it is moved from within LiveFor+hostCheckEvery of its last
// report (a variable for the workflow tests, whose fake hosts wait on the wall clock). Later checks come
// further apart (hostCheckDelay).
var hostCheckEvery = LiveFor / 2

// leaseGroup is the tasks of one lease on a host the run chose, and what cancels that lease.
type leaseGroup struct {
	host   string
	tasks  []*task
	cancel workflow.CancelFunc
}

// groupLease records that ts share one new lease on host, which cancel cancels, when the run chose that host
// for them (an unpinned launch); other leases are not moved.
func groupLease(host string, ts []*task, attach bool, cancel workflow.CancelFunc) {
	var g *leaseGroup
	if !attach && host != "" && ts[0].Host == "" && cancel != nil {
		g = &leaseGroup{host: host, tasks: ts, cancel: cancel}
	}
	for _, t := range ts {
		t.group = g
	}
}

// awaitsHost says t's current lease waits on a host the run chose, which has not said it took t up.
func (t *task) awaitsHost() bool {
	return t.group != nil && t.future != nil && !t.done && !t.terminated && !t.between() && !t.moving && (!t.placed || t.preplaced)
}

// awaitingHosts lists the tasks whose leases wait on a host the run chose.
func (r *run) awaitingHosts() []*task {
	var out []*task
	for _, t := range r.tasks {
		if t.awaitsHost() {
			out = append(out, t)
		}
	}
	return out
}

// hostGone says why the registry no longer counts host h (listed: h is its entry) as one that takes tasks, or
// "" when it does: a host whose worker is restarting reports again within LiveFor.
func hostGone(h HostEntry, listed bool, now time.Time) string {
	switch {
	case !listed:
		return "is not in the host registry"
	case h.Drained:
		return "was drained"
	case !h.Live && now.Sub(h.LastSeen) > LiveFor:
		return fmt.Sprintf("has not reported for %s", now.Sub(h.LastSeen).Round(time.Second))
	}
	return ""
}

// moveWaiting moves the waiting tasks that are better elsewhere by hosts, the registry. A lease none of whose
// tasks has started moves off a host that is gone: it is canceled, its tasks marked moving, and leaseEnded
// launches them again. Waiting tasks move off a live host with no free slot while the other live hosts of
// their pool have room for all of them (another run took the slots their placement counted on, and a host came
// up or freed slots since): they are to be taken back from that host (withdrawals, which checkHosts sends), and
// a lease its host has not taken is canceled. A host that is gone ends a lease some of whose tasks started by
// its heartbeat.
func (r *run) moveWaiting(waiting []*task, hosts []HostEntry, now time.Time) (withdrawals []withdrawal) {
	byName := map[string]HostEntry{}
	for _, h := range hosts {
		byName[h.Host] = h
	}
	room := freeSlots(hosts)
	seen := map[*leaseGroup]bool{}
	for _, t := range waiting {
		g := t.group
		if seen[g] {
			continue
		}
		seen[g] = true
		untouched := g.untouched()
		h, listed := byName[g.host]
		pool := g.tasks[0].Pool
		gone := hostGone(h, listed, now)
		switch {
		case gone != "" && untouched:
			why := fmt.Sprintf("host %s %s (clusterrun hosts) before it started the task", g.host, gone)
			moved := fmt.Sprintf("moved off %s, which %s before it started the task", g.host, gone)
			for _, m := range g.waitingTasks() {
				m.markMoving(g.host, why, moved)
			}
			g.cancel()
		case gone == "" && h.Slots-h.Unpinned <= 0 && claimRoom(room[pool], g.host, g.waiting()):
			w := withdrawal{host: g.host, tasks: g.waitingTasks(),
				why:    fmt.Sprintf("host %s has no free slot for it, and other hosts of pool %s have (clusterrun hosts)", g.host, pool),
				moved:  fmt.Sprintf("moved off %s, which had no free slot for it while other hosts of pool %s had", g.host, pool),
				reason: fmt.Sprintf("it had no free slot for it, and other hosts of pool %s have", pool)}
			if untouched {
				w.cancel = g.cancel // its host may not have taken the lease: then it is canceled
			}
			withdrawals = append(withdrawals, w)
		case gone == "" && h.Slots-h.Unpinned <= 0:
			g.noteFull(h) // and no other host has room: it starts there as a task ends
		}
	}
	return withdrawals
}

// noteFull says, in the status of each task waiting for the lease that has no note yet, that it waits for a
// slot of h, which the registry shows full (it showed only Placed, like a task whose process is starting).
func (g *leaseGroup) noteFull(h HostEntry) {
	for _, t := range g.waitingTasks() {
		if t.status.Error == "" {
			t.status.Error = fmt.Sprintf("%s%s: its %s of pool %s are taken (clusterrun hosts); it starts there as a task "+
				"ends, or moves to another host of the pool that shows room", slotNotePrefix, g.host, slotCount(h.Slots), t.Pool)
		}
	}
}

// movingNote begins the status note of a task being moved.
func movingNote(task string) string { return "moving " + task + ": " }

// markMoving records that t's lease on host is being given up, to launch t elsewhere.
func (t *task) markMoving(host, why, moved string) {
	t.moving, t.movedFrom = true, host
	t.status.Error = movingNote(t.Name) + why
	t.status.Moved = moved
}

// claimRoom takes n of the free slots f counts on hosts other than except, when they have that many.
func claimRoom(f *poolSlots, except string, n int) bool {
	if f == nil || f.free-f.hostFree[except] < n {
		return false
	}
	for _, h := range sortedKeys(f.hostFree) {
		take := min(f.hostFree[h], n)
		if h == except || take == 0 {
			continue
		}
		f.hostFree[h] -= take
		f.free -= take
		n -= take
	}
	return true
}

// waitingTasks lists the lease's tasks that wait for it.
func (g *leaseGroup) waitingTasks() []*task {
	var out []*task
	for _, t := range g.tasks {
		if t.group == g && t.awaitsHost() {
			out = append(out, t)
		}
	}
	return out
}

// waiting counts the lease's tasks that wait for it.
func (g *leaseGroup) waiting() int { return len(g.waitingTasks()) }

// untouched says no task of the lease has started or ended on its own: its host never took the lease up.
func (g *leaseGroup) untouched() bool {
	for _, t := range g.tasks {
		if t.group == g && !t.awaitsHost() {
			return false
		}
	}
	return true
}

// checkHosts reads the registry and moves the waiting tasks that are better elsewhere, when some task waits.
func (g *generation) checkHosts() {
	r := g.r
	waiting := r.awaitingHosts()
	if len(waiting) == 0 || r.decision != nil {
		return
	}
	hosts, err := listHosts(g.genCtx)
	if err != nil {
		workflow.GetLogger(g.ctx).Warn("cannot read the host registry to check the hosts of waiting tasks", "error", err)
		return
	}
	for _, w := range r.moveWaiting(waiting, hosts, workflow.Now(g.ctx)) {
		g.withdraw(w)
	}
}

// hostCheck is the timer of the next check of the waiting tasks' hosts, and how many checks it follows since
// the last launch.
type hostCheck struct {
	timer workflow.Future
	n     int
}

// maxHostCheckEvery bounds the time between checks of a run whose tasks wait long (for slots, with a long
// startTimeout): every check writes a timer and a registry read to the run's history.
const maxHostCheckEvery = 30 * time.Minute

// hostCheckDelay is the time until check n+1 after a launch: hostCheckEvery for the first minute, by when a
// host that had died before the launch is gone from the registry, then twice as long each time, up to
// maxHostCheckEvery.
func hostCheckDelay(n int) time.Duration {
	return min(hostCheckEvery<<min(max(n-3, 0), 16), maxHostCheckEvery)
}

// armHostCheck starts the timer of the next check of the hosts while some task waits on one and none is set.
// A launch (launched) starts the count again: the checks after it come every hostCheckEvery again.
func (g *generation) armHostCheck(launched bool) {
	r, c := g.r, &g.check
	if launched {
		c.n = 0
	}
	if c.timer != nil || r.decision != nil {
		return
	}
	waiting := r.awaitingHosts()
	if len(waiting) == 0 || workflow.GetVersion(g.ctx, ChangeMoveFromGoneHosts, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	delay := hostCheckDelay(c.n)
	c.n++
	timer := workflow.NewTimerWithOptions(g.genCtx, delay, workflow.TimerOptions{
		Summary: fmt.Sprintf("check that the hosts of %d placed tasks that have not started are live", len(waiting))})
	c.timer = timer
	g.sel.AddFuture(timer, func(f workflow.Future) {
		c.timer = nil
		r.todo.checkHosts = f.Get(g.ctx, nil) == nil
	})
}

// movedOn says whether the lease of a task being moved ended as the move meant (canceled before any host
// took it, or given back unstarted by its host), so that the task is to be launched again.
func (r *run) movedOn(t *task, res TaskResult, err error) bool {
	if !t.moving {
		return false
	}
	t.moving = false
	return (temporal.IsCanceledError(err) || detachedUnstarted(res, err)) && !t.terminated
}

// detachedUnstarted says a lease ended with its host giving the task up before its process started.
func detachedUnstarted(res TaskResult, err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == ErrTaskDetached && res.PID == 0
}

// sortedKeys lists m's keys in order, so that what the workflow does with them replays alike.
func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	//workflowcheck:ignore
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

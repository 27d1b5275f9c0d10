package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Moving tasks off hosts that are gone. A run places an unpinned task on a host the registry lists as live,
// and the registry lists a host as live for LiveFor after its last report. A launch in the seconds after a
// host's worker died (SIGKILL, a lost machine) or was drained may so place tasks there, and their leases then
// wait in that host's queue, which nobody polls, until startTimeout (5 minutes by default) fails them. A lease
// a host took needs none of this: when the host dies its heartbeat times out, and the run launches again what
// had not started (contactLost). So while some task placed on a host has not started, the run reads the
// registry every hostCheckEvery, and moves the tasks whose host the registry no longer counts: silent for
// LiveFor, drained, or not listed. It cancels their lease (one that no worker took ends at once) and launches
// them again, elsewhere when it can. A lease of several tasks moves only when none of them has started: a
// started one says its host took the lease, whose heartbeat then tells what became of them.

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

// moveFromGoneHosts cancels the leases of the waiting tasks whose hosts are gone by hosts, the registry, when
// none of a lease's tasks has started, and marks those tasks moving: leaseEnded launches them again.
func (r *run) moveFromGoneHosts(waiting []*task, hosts []HostEntry, now time.Time) {
	byName := map[string]HostEntry{}
	for _, h := range hosts {
		byName[h.Host] = h
	}
	seen := map[*leaseGroup]bool{}
	for _, t := range waiting {
		g := t.group
		h, listed := byName[g.host]
		gone := hostGone(h, listed, now)
		if seen[g] || gone == "" {
			continue
		}
		seen[g] = true
		if !g.untouched() {
			continue
		}
		for _, m := range g.tasks {
			if m.group == g && m.awaitsHost() {
				m.moving, m.movedFrom = true, g.host
				m.status.Error = fmt.Sprintf("moving %s: host %s %s (clusterrun hosts) before it started the task", m.Name, g.host, gone)
				m.status.Moved = fmt.Sprintf("moved off %s, which %s before it started the task", g.host, gone)
			}
		}
		g.cancel()
	}
}

// untouched says no task of the lease has started or ended on its own: its host never took the lease up.
func (g *leaseGroup) untouched() bool {
	for _, t := range g.tasks {
		if t.group == g && !t.awaitsHost() {
			return false
		}
	}
	return true
}

// checkHosts reads the registry and moves the tasks waiting on hosts that are gone, when some task waits.
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
	r.moveFromGoneHosts(waiting, hosts, workflow.Now(g.ctx))
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
// took it), so that the task is to be launched again.
func (r *run) movedOn(t *task, err error) bool {
	if !t.moving {
		return false
	}
	t.moving = false
	return temporal.IsCanceledError(err) && !t.terminated
}

package workflows

import (
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"
)

// Pre-placed launches. A launch used to take two trips through the run's history before a process started:
// each host reported where its tasks landed (their ports), and once every task had, the run sent the cluster
// map back (Release). When the run knows every task's host already (pinned, or placed from the registry) and
// each of those hosts announces a port range (HostReport.Ports), the port allocator gives the ports (ports.go)
// and the run sends the map with the leases: each host starts its tasks at once and reports them started
// (Placement.Started).
// A host that finds a chosen port taken places that task as usual: the run releases it at its new port and
// sends the new map to the other hosts, as for a task that comes back at a new address after a restart.

// ChangePrePlaced marks, with workflow.GetVersion, runs that may pre-place a launch.
const ChangePrePlaced = "clusterrun-preplaced"

// prePlacement is the launch being pre-placed, while its leases are made: the map they carry.
type prePlacement struct {
	cluster ClusterMap
}

// mayPrePlace says whether this launch is one the run can pre-place: the first launch of a generation of an
// unsharded run with batched leases, starting every task.
func (r *run) mayPrePlace(ctx workflow.Context, orders []launchOrder) bool {
	if !r.leased || !r.batched || r.shards != nil || r.released || r.decision != nil || r.stopReq != nil || len(orders) == 0 {
		return false
	}
	launching := map[*task]bool{}
	for _, o := range orders {
		if o.how != newAttempt || o.t.terminated {
			return false
		}
		launching[o.t] = true
	}
	for _, t := range r.tasks {
		if !t.done && !launching[t] {
			return false
		}
	}
	return workflow.GetVersion(ctx, ChangePrePlaced, workflow.DefaultVersion, 1) == 1
}

// prePlace has the port allocator give every launching task a port on its host (from the host's range), and
// records them as the tasks' places: the leases made next carry the map. It does nothing unless every task has
// a live host that announces a range. When the registry's reports (hosts, as read) leave no free slot for an
// unpinned task, but its pool's live slots hold the launch's need, it asks all the same: the allocator knows
// which of the runs the reports count have ended since (claims.go). When the hosts have no room for the launch
// (no free slots, or taken by other runs' launches since the reports, or waited for by runs queued before),
// it returns the allocator's refusal, and the caller holds the launch back whole. A gang larger than its
// pool's live slots goes out, and waits at its rendezvous, not running.
func (r *run) prePlace(ctx workflow.Context, orders []launchOrder, hosts []HostEntry, need map[string]int, free map[string]*poolSlots) *PortGrant {
	known := map[string]HostEntry{}
	for _, h := range hosts {
		if h.Live && !h.Stopping && h.Addr != "" && h.Ports != nil {
			known[h.Host] = h
		}
	}
	for _, o := range orders {
		if _, ok := known[leaseHost(o)]; !ok {
			return nil // a host that chooses its own ports, or one not known yet
		}
	}
	if !r.waitsWhole(ctx, orders, need, free) {
		return nil // a task may wait for a slot: the others wait for it at the rendezvous, not running
	}
	var order []string
	count, claim := map[string]int{}, map[string]int{}
	prefer := map[string][]int{} // a gang restart's tasks want the ports they had, in the orders' order
	keep := r.gangKeepsAddresses(ctx)
	for _, o := range orders {
		h := leaseHost(o)
		if count[h] == 0 {
			order = append(order, h)
		}
		count[h]++
		if o.t.Host == "" {
			claim[h]++ // it takes one of the host's slots
		}
		want := 0
		if keep {
			want = o.t.ports[h]
		}
		prefer[h] = append(prefer[h], want)
	}
	req := portRequest(order, count, prefer, hosts)
	req.Run, req.Queued, req.Retry = r.ref.WorkflowID, r.queued, r.nextWait(orders, 1)
	for i := range req.Hosts {
		c := &req.Hosts[i]
		e := known[c.Host]
		c.Claim, c.Slots, c.Unpinned, c.Seen, c.Runs = claim[c.Host], e.Slots, e.Unpinned, e.LastSeen, e.Runs
	}
	grant, err := allocatePorts(ctx, req)
	if err != nil {
		workflow.GetLogger(ctx).Warn("no ports from the port allocator; the launch waits for its placements", "error", err)
		return nil
	}
	if grant.refused() {
		return &grant
	}
	for _, h := range order {
		if len(grant.Ports[h]) != count[h] {
			return nil
		}
	}
	for _, o := range orders {
		t, h := o.t, leaseHost(o)
		port := grant.Ports[h][0]
		grant.Ports[h] = grant.Ports[h][1:]
		if t.ports == nil {
			t.ports = map[string]int{}
		}
		t.ports[h] = port
		t.preplaced = true
		if strings.HasPrefix(t.waitNote, slotNotePrefix) {
			t.waitNote = "" // the allocator found it room: the reports' count was of runs that have ended
		}
		t.status.Host, t.status.Addr, t.status.Port = h, known[h].Addr, port
	}
	r.released = true // the map goes with the leases
	r.prePlaced = &prePlacement{cluster: r.clusterMap()}
	return nil
}

// waitsWhole says whether the launch of orders goes to the allocator: when every unpinned task found a free
// slot by the reports; else, in runs from ChangeWaitWhole on, when each of their pools' live slots hold the
// launch's need (the slots the reports show taken may have freed since).
func (r *run) waitsWhole(ctx workflow.Context, orders []launchOrder, need map[string]int, free map[string]*poolSlots) bool {
	roomless := false
	for _, o := range orders {
		if strings.HasPrefix(o.t.waitNote, slotNotePrefix) {
			roomless = true
			if f := free[o.t.Pool]; f == nil || need[o.t.Pool] > f.slots {
				return false
			}
		}
	}
	return !roomless || workflow.GetVersion(ctx, ChangeWaitWhole, workflow.DefaultVersion, 1) == 1
}

// startPrePlaced marks a pre-placed task's new lease as carrying the map: it counts as placed on its chosen
// host, and may start as soon as the host has the lease. (The map goes on the batch, launchBatch: on each
// task's lease it would be encoded once per task whenever leases are measured.)
func (r *run) startPrePlaced(t *task) {
	if !t.preplaced || r.prePlaced == nil {
		return
	}
	t.placed, t.mapSent = true, true
	t.status.State = TaskPlaced
}

// launchMap is the map a batch of ts carries: the pre-placed launch's, or none.
func (r *run) launchMap(ts []*task) *ClusterMap {
	if r.prePlaced == nil || !ts[0].preplaced {
		return nil
	}
	c := r.prePlaced.cluster
	return &c
}

// onPrePlaced takes a pre-placed task's placement: true when its host started it as the run chose, so nothing
// more is to be done; false when the host placed it elsewhere (its port was taken), to be released as a task
// that moved.
func (r *run) onPrePlaced(t *task, p Placement, now time.Time) bool {
	t.preplaced = false
	st := &t.status
	if !p.Started || p.Host != st.Host || p.Port != st.Port {
		t.placed = false
		return false
	}
	t.released = true
	if st.State == TaskPlaced {
		start := now
		if p.StartedAt != nil && !p.StartedAt.IsZero() {
			start = *p.StartedAt // the report may come up to startsMaxWindow after the process started
		}
		st.State, st.StartTime, st.Error = TaskRunning, &start, "" // what it waited for is over
	}
	if t.terminated {
		r.todo.terminate = append(r.todo.terminate, t) // its stop may have reached the host before the lease did
	}
	return true
}

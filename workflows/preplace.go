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
// a live host that announces a range, and the registry's reports (hosts, as read) leave a free slot for every
// unpinned one: a gang larger than its pool's free slots keeps waiting at its rendezvous, not running. When
// other runs launched into those free slots since the reports (claims.go), it returns their claims per host,
// and the caller holds the launch back.
func (r *run) prePlace(ctx workflow.Context, orders []launchOrder, hosts []HostEntry) (busy map[string]int) {
	known := map[string]HostEntry{}
	for _, h := range hosts {
		if h.Live && !h.Stopping && h.Addr != "" && h.Ports != nil {
			known[h.Host] = h
		}
	}
	var order []string
	count, claim := map[string]int{}, map[string]int{}
	prefer := map[string][]int{} // a gang restart's tasks want the ports they had, in the orders' order
	keep := r.gangKeepsAddresses(ctx)
	for _, o := range orders {
		h := leaseHost(o)
		if _, ok := known[h]; !ok {
			return nil // a host that chooses its own ports, or one not known yet
		}
		if strings.HasPrefix(o.t.waitNote, slotNotePrefix) {
			return nil // a task may wait for a slot: the others wait for it at the rendezvous, not running
		}
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
	req.Run = r.ref.WorkflowID
	for i := range req.Hosts {
		c := &req.Hosts[i]
		c.Claim, c.Slots, c.Unpinned, c.Seen = claim[c.Host], known[c.Host].Slots, known[c.Host].Unpinned, known[c.Host].LastSeen
	}
	grant, err := allocatePorts(ctx, req)
	if err != nil {
		workflow.GetLogger(ctx).Warn("no ports from the port allocator; the launch waits for its placements", "error", err)
		return nil
	}
	if len(grant.Busy) > 0 {
		return grant.Busy
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
		t.status.Host, t.status.Addr, t.status.Port = h, known[h].Addr, port
	}
	r.released = true // the map goes with the leases
	r.prePlaced = &prePlacement{cluster: r.clusterMap()}
	return nil
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

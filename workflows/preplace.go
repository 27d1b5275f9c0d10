package workflows

import (
	"hash/fnv"
	"time"

	"go.temporal.io/sdk/workflow"
)

// Pre-placed launches. A launch used to take two trips through the run's history before a process started:
// each host reported where its tasks landed (their ports), and once every task had, the run sent the cluster
// map back (Release). When the run knows every task's host already (pinned, or placed from the registry) and
// each of those hosts announces a port range (HostReport.Ports), the run chooses the ports itself and sends
// the map with the leases: each host starts its tasks at once and reports them started (Placement.Started).
// A host that finds a chosen port taken places that task as usual: the run releases it at its new port and
// sends the new map to the other hosts, as for a task that comes back at a new address after a restart.

// ChangePrePlaced marks, with workflow.GetVersion, runs that may pre-place a launch.
const ChangePrePlaced = "clusterrun-preplaced"

// prePlacement is the launch being pre-placed, while its leases are made: the map they carry.
type prePlacement struct {
	cluster ClusterMap
	at      time.Time
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

// prePlace chooses every launching task's port on its host, from the ranges in hosts (the registry), and
// records them as the tasks' places: the leases made next carry the map. It does nothing unless every task has
// a live host that announces a range with room for them.
func (r *run) prePlace(ctx workflow.Context, info *workflow.Info, orders []launchOrder, hosts []HostEntry) {
	known := map[string]HostEntry{}
	for _, h := range hosts {
		if h.Live && !h.Stopping && h.Addr != "" && h.Ports != nil && h.Ports.To >= h.Ports.From {
			known[h.Host] = h
		}
	}
	perHost := map[string][]*task{}
	var hostOrder []string
	for _, o := range orders {
		h := leaseHost(o)
		if _, ok := known[h]; !ok {
			return // a host that chooses its own ports, or one not known yet
		}
		if perHost[h] == nil {
			hostOrder = append(hostOrder, h)
		}
		perHost[h] = append(perHost[h], o.t)
	}
	chosen := map[*task]int{}
	for _, h := range hostOrder {
		ports, ok := choosePorts(*known[h].Ports, info.WorkflowExecution.ID, h, perHost[h])
		if !ok {
			return
		}
		for i, t := range perHost[h] {
			chosen[t] = ports[i]
		}
	}
	for _, o := range orders {
		t, h := o.t, leaseHost(o)
		if t.ports == nil {
			t.ports = map[string]int{}
		}
		t.ports[h] = chosen[t]
		t.preplaced = true
		t.status.Host, t.status.Addr, t.status.Port = h, known[h].Addr, chosen[t]
	}
	r.released = true // the map goes with the leases
	r.prePlaced = &prePlacement{cluster: r.clusterMap(), at: workflow.Now(ctx)}
}

// choosePorts gives each of ts a distinct port of rng: the one it had on this host earlier when that is in the
// range, else the next free one from a place the run's ID and the host's name pick, so that runs started
// together on one host (and hosts that share a machine, and a range) seldom choose the same ports. False when the range holds fewer ports than ts.
func choosePorts(rng PortRange, runID, host string, ts []*task) ([]int, bool) {
	size := rng.To - rng.From + 1
	if size < len(ts) {
		return nil, false
	}
	used := map[int]bool{}
	out := make([]int, len(ts))
	for i, t := range ts {
		if p := t.ports[host]; p >= rng.From && p <= rng.To && !used[p] {
			out[i], used[p] = p, true
		}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(runID + "\x00" + host))
	next := int(h.Sum32() % uint32(size))
	for i := range ts {
		if out[i] != 0 {
			continue
		}
		for used[rng.From+next] {
			next = (next + 1) % size
		}
		out[i], used[rng.From+next] = rng.From+next, true
	}
	return out, true
}

// startPrePlaced marks a pre-placed task's new lease as carrying the map: it counts as placed on its chosen
// host, and may start as soon as the host has the lease.
func (r *run) startPrePlaced(t *task, in *RunTaskInput) {
	if !t.preplaced || r.prePlaced == nil {
		return
	}
	c := r.prePlaced.cluster
	in.Cluster = &c
	t.placed, t.mapSent = true, true
	at := r.prePlaced.at
	t.status.State, t.status.StartTime = TaskPlaced, &at
}

// onPrePlaced takes a pre-placed task's placement: true when its host started it as the run chose, so nothing
// more is to be done; false when the host placed it elsewhere (its port was taken), to be released as a task
// that moved.
func (r *run) onPrePlaced(t *task, p Placement) bool {
	t.preplaced = false
	st := &t.status
	if !p.Started || p.Host != st.Host || p.Port != st.Port {
		t.placed = false
		return false
	}
	t.released = true
	if st.State == TaskPlaced {
		st.State = TaskRunning
	}
	if t.terminated {
		r.todo.terminate = append(r.todo.terminate, t) // its stop may have reached the host before the lease did
	}
	return true
}

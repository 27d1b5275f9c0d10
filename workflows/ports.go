package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Port allocation for pre-placed launches. Each host announces a range (--ports) and the ports of it that its
// running tasks hold, in its registry reports. A run sends the ranges of its launch's hosts to one long-running
// PortAllocator workflow (ID PortAllocatorID), which hands their ports out in turn from a cursor per address and
// range that its history keeps, skipping the held ones, as Slurm takes the ports of its PMI servers from
// MpiParams=ports. So two tasks of clusterrun are not given one port of a machine at once; a port another
// program holds is the only one a task can find taken. The allocator is a workflow of its own, not part of the
// host registry, so that host workers of the version before, which cannot replay its updates, still read the
// registry during a rolling upgrade.
const (
	PortAllocatorWorkflowType = "PortAllocator"
	PortAllocatorID           = "clusterrun-ports"
	// UpdateAllocatePorts asks the allocator for ports (PortRequest → PortGrant).
	UpdateAllocatePorts = "allocate-ports"
	// ActivityAllocatePorts is the local activity a run sends that update with (starting the allocator first
	// when there is none).
	ActivityAllocatePorts = "AllocatePorts"
)

// PortRequest asks for ports on the hosts of a launch, and, from runs that send Run, claims their slots.
type PortRequest struct {
	Hosts []PortCount `json:"hosts"`
	// Run is the run that launches (its workflow ID): its slot claims replace those of its earlier launches.
	Run string `json:"run,omitempty"`
	// Ended names runs that claimed slots, or that the hosts' reports count tasks of, and have ended since:
	// their claims, and their tasks in the reports, go first.
	Ended []string `json:"ended,omitempty"`
	// Queued is when the run started: launches that wait for room go in this order (claims.go).
	Queued time.Time `json:"queued,omitempty"`
	// Retry is how soon the run asks again if this launch is refused (0: it will not wait); meanwhile launches
	// of runs queued after it go only where they fit beside it.
	Retry time.Duration `json:"retry,omitempty"`
	// Keep asks for no ports: the allocator keeps the slots the hosts' Claims name for the run, this long
	// (a gang restart's backoff: keepSlots).
	Keep time.Duration `json:"keep,omitempty"`
}

// PortCount is how many ports a launch needs on one host, with what the registry says of the host's ports:
// its address, its range, and the ports of that range held by running tasks (of every host on that address
// with that range).
type PortCount struct {
	Host  string    `json:"host"`
	Count int       `json:"count"`
	Addr  string    `json:"addr"`
	Range PortRange `json:"range"`
	Held  []int     `json:"held,omitempty"`
	// Prefer is, for each of the first ports asked, the port wanted there (0: any): a gang restart's tasks
	// ask for the ports they had. A wanted port is given when it is in the range, not held and not given to
	// another of the request; else the next one is.
	Prefer []int `json:"prefer,omitempty"`
	// Claim is how many of the launch's tasks take one of the host's slots (unpinned ones), and Slots, Unpinned
	// and Seen what the registry's last report of the host said, and when it came (claims.go).
	Claim    int       `json:"claim,omitempty"`
	Slots    int       `json:"slots,omitempty"`
	Unpinned int       `json:"unpinned,omitempty"`
	Seen     time.Time `json:"seen,omitempty"`
	// Runs is whose tasks that report counts, run by run.
	Runs []RunLoad `json:"runs,omitempty"`
}

// PortGrant is the ports given, host by host, in the order asked; or, Refused, none, when a host has no room
// for the launch's tasks (claims.go). Then, for each such host: Used, the slots its report counts taken by
// other runs that run; Busy, those the launches of other runs claimed since that report; Reserved, those
// launches of runs queued before this one wait for (Ahead: how many such runs in all); and BusyRuns names all
// those runs. (Grants from before Refused say a refusal by Busy alone.)
type PortGrant struct {
	Ports    map[string][]int `json:"ports"`
	Refused  bool             `json:"refused,omitempty"`
	Used     map[string]int   `json:"used,omitempty"`
	Busy     map[string]int   `json:"busy,omitempty"`
	Reserved map[string]int   `json:"reserved,omitempty"`
	Ahead    int              `json:"ahead,omitempty"`
	BusyRuns []string         `json:"busyRuns,omitempty"`
}

// refused says whether g gives no ports for want of room.
func (g PortGrant) refused() bool { return g.Refused || len(g.Busy) > 0 }

// PortAllocatorState carries the cursors over continue-as-new: per port space (portSpace), the next port; the
// slot claims of recent launches; and the launches waiting for room.
type PortAllocatorState struct {
	Next    map[string]int `json:"next,omitempty"`
	Claims  []SlotClaim    `json:"claims,omitempty"`
	Waiting []SlotClaim    `json:"waiting,omitempty"`
}

// PortAllocator answers UpdateAllocatePorts. It never ends; it continues as new when its history is due
// (historyDue).
func PortAllocator(ctx workflow.Context, st PortAllocatorState) error {
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateAllocatePorts,
		func(ctx workflow.Context, req PortRequest) (PortGrant, error) {
			return st.allocate(req, workflow.Now(ctx))
		},
		workflow.UpdateHandlerOptions{Validator: checkPorts})
	if err != nil {
		return err
	}
	wentOn := false // an older worker went on past shortHistory in this run: wait for the server's suggestion
	for {
		err := workflow.Await(ctx, func() bool {
			info := workflow.GetInfo(ctx)
			return info.GetContinueAsNewSuggested() || !wentOn && info.GetCurrentHistoryLength() >= shortHistory
		})
		if err != nil {
			return err
		}
		if historyDue(ctx) {
			break
		}
		wentOn = true
	}
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, PortAllocatorWorkflowType, st)
}

// checkPorts refuses a request that cannot be granted: a range that is none, or more ports than it holds.
func checkPorts(req PortRequest) error {
	if req.Keep > 0 {
		return nil // no ports asked
	}
	for _, c := range req.Hosts {
		size := c.Range.To - c.Range.From + 1
		switch {
		case c.Range.From < 1 || c.Range.To > 65535 || size < 1:
			return fmt.Errorf("host %s announces no valid port range (%d-%d)", c.Host, c.Range.From, c.Range.To)
		case c.Count < 1 || c.Count > size:
			return fmt.Errorf("%d ports asked of host %s, whose range %d-%d holds %d", c.Count, c.Host, c.Range.From, c.Range.To, size)
		}
	}
	return nil
}

// allocate gives each host the next ports of its range that are not held, going round at its end. Hosts that
// share an address and a range (workers of one machine) share one cursor. A launch that claims slots gets
// none of it when its hosts have no room for it (claimSlots).
func (st *PortAllocatorState) allocate(req PortRequest, now time.Time) (PortGrant, error) {
	if err := checkPorts(req); err != nil {
		return PortGrant{}, err
	}
	if req.Keep > 0 {
		st.keep(req, now)
		return PortGrant{}, nil
	}
	if no := st.claimSlots(req, now); no != nil {
		return *no, nil
	}
	if st.Next == nil {
		st.Next = map[string]int{}
	}
	given := map[string]map[int]bool{} // port space -> ports given or held
	out := PortGrant{Ports: map[string][]int{}}
	for _, c := range req.Hosts {
		rng, space := c.Range, portSpace(c.Addr, c.Range)
		if given[space] == nil {
			given[space] = map[int]bool{}
		}
		for _, p := range c.Held {
			given[space][p] = true
		}
		ports := make([]int, c.Count)
		for i, p := range c.Prefer[:min(len(c.Prefer), c.Count)] {
			if p >= rng.From && p <= rng.To && !given[space][p] {
				ports[i] = p
				given[space][p] = true
			}
		}
		next := st.Next[space]
		if next < rng.From || next > rng.To {
			next = rng.From // a new host, or a new range
		}
		tried := 0
		for i := range ports {
			for ; ports[i] == 0; tried++ {
				if tried > rng.To-rng.From {
					return PortGrant{}, fmt.Errorf("%d ports asked of host %s, whose range %d-%d has %d free", c.Count, c.Host,
						rng.From, rng.To, countGiven(ports))
				}
				if !given[space][next] {
					ports[i] = next
					given[space][next] = true
				}
				if next++; next > rng.To {
					next = rng.From
				}
			}
		}
		out.Ports[c.Host] = ports
		st.Next[space] = next
	}
	return out, nil
}

// countGiven counts the ports given so far (not 0).
func countGiven(ports []int) int {
	n := 0
	for _, p := range ports {
		if p != 0 {
			n++
		}
	}
	return n
}

// portSpace names the ports a range covers on an address.
func portSpace(addr string, rng PortRange) string {
	return fmt.Sprintf("%s %d-%d", addr, rng.From, rng.To)
}

// portRequest is what a launch asks of the allocator: count ports on each host, in the order given, with what
// the registry (hosts) says of their ports, and the ports its tasks want there (prefer). A port a task wants
// is not counted as held: its holder, by the registry's last report, was that task's own attempt, which its
// gang restart ended (a port another program took since is found taken by the host, which moves the task).
func portRequest(order []string, count map[string]int, prefer map[string][]int, hosts []HostEntry) PortRequest {
	held := map[string][]int{}
	for _, h := range hosts {
		if h.Ports != nil {
			held[portSpace(h.Addr, *h.Ports)] = append(held[portSpace(h.Addr, *h.Ports)], h.PortsInUse...)
		}
	}
	byName := map[string]HostEntry{}
	for _, h := range hosts {
		byName[h.Host] = h
	}
	var req PortRequest
	for _, name := range order {
		h := byName[name]
		c := PortCount{Host: name, Count: count[name], Addr: h.Addr, Range: *h.Ports, Held: held[portSpace(h.Addr, *h.Ports)]}
		if slices.ContainsFunc(prefer[name], func(p int) bool { return p != 0 }) {
			c.Prefer = prefer[name]
			c.Held = slices.DeleteFunc(slices.Clone(c.Held), func(p int) bool { return slices.Contains(c.Prefer, p) })
		}
		req.Hosts = append(req.Hosts, c)
	}
	return req
}

// allocatePorts asks the allocator for a launch's ports, with a local activity.
func allocatePorts(ctx workflow.Context, req PortRequest) (PortGrant, error) {
	if testRegistry != nil {
		return testPorts.allocate(req, workflow.Now(ctx)) // the run's clock stands in for the allocator's
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 5 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	var grant PortGrant
	err := workflow.ExecuteLocalActivity(lctx, ActivityAllocatePorts, req).Get(ctx, &grant)
	return grant, err
}

// testPorts is the allocator in the workflow tests (see testRegistry).
var testPorts PortAllocatorState

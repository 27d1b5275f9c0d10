package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Port allocation for pre-placed launches. Each host announces a range (--ports); the host registry hands its
// ports out in turn, from a cursor per address and range that its history keeps (as Slurm takes the ports of
// its PMI servers from MpiParams=ports), skipping the ports the hosts' last reports say running tasks hold. So
// two tasks of clusterrun are not given one port of a machine at once; a port another program holds is the only
// one a task can find taken.
const (
	// UpdateAllocatePorts asks the registry for ports (PortRequest → PortGrant).
	UpdateAllocatePorts = "allocate-ports"
	// ActivityAllocatePorts is the local activity a run sends that update with.
	ActivityAllocatePorts = "AllocatePorts"
)

// PortRequest asks for Count ports on each host named.
type PortRequest struct {
	Hosts []PortCount `json:"hosts"`
}

// PortCount is how many ports a launch needs on one host.
type PortCount struct {
	Host  string `json:"host"`
	Count int    `json:"count"`
}

// PortGrant is the ports given, host by host, in the order asked.
type PortGrant struct {
	Ports map[string][]int `json:"ports"`
}

// checkPorts refuses a request the registry cannot grant: a host it does not know, one without a range, or
// more ports than its range holds.
func (st *HostRegistryState) checkPorts(req PortRequest) error {
	for _, c := range req.Hosts {
		h, ok := st.Hosts[c.Host]
		switch {
		case !ok:
			return fmt.Errorf("host %s has never reported", c.Host)
		case h.Ports == nil:
			return fmt.Errorf("host %s announces no port range (--ports off)", c.Host)
		case c.Count < 1 || c.Count > h.Ports.To-h.Ports.From+1:
			return fmt.Errorf("%d ports asked of host %s, whose range %d-%d holds %d", c.Count, c.Host, h.Ports.From, h.Ports.To,
				h.Ports.To-h.Ports.From+1)
		}
	}
	return nil
}

// allocatePorts gives each host the next free ports of its range, going round at its end. Hosts that share an
// address and a range (workers of one machine) share one cursor, and no port a host reported held by a running
// task is given.
func (st *HostRegistryState) allocatePorts(req PortRequest) (PortGrant, error) {
	if err := st.checkPorts(req); err != nil {
		return PortGrant{}, err
	}
	if st.NextPort == nil {
		st.NextPort = map[string]int{}
	}
	held := map[string]map[int]bool{} // port space -> ports held there
	for _, name := range hostNames(st.Hosts) {
		if h := st.Hosts[name]; h.Ports != nil {
			for _, p := range h.PortsInUse {
				if held[portSpace(h)] == nil {
					held[portSpace(h)] = map[int]bool{}
				}
				held[portSpace(h)][p] = true
			}
		}
	}
	out := PortGrant{Ports: map[string][]int{}}
	for _, c := range req.Hosts {
		h := st.Hosts[c.Host]
		rng, space := *h.Ports, portSpace(h)
		if held[space] == nil {
			held[space] = map[int]bool{}
		}
		next := st.NextPort[space]
		if next < rng.From || next > rng.To {
			next = rng.From // a new host, or a new range
		}
		for tried := 0; len(out.Ports[c.Host]) < c.Count; tried++ {
			if tried > rng.To-rng.From {
				return PortGrant{}, fmt.Errorf("%d ports asked of host %s, whose range %d-%d has %d free", c.Count, c.Host,
					rng.From, rng.To, len(out.Ports[c.Host]))
			}
			if !held[space][next] {
				out.Ports[c.Host] = append(out.Ports[c.Host], next)
				held[space][next] = true
			}
			if next++; next > rng.To {
				next = rng.From
			}
		}
		st.NextPort[space] = next
	}
	return out, nil
}

// portSpace names the ports a host's range covers: its address and the range.
func portSpace(h HostEntry) string {
	return fmt.Sprintf("%s %d-%d", h.Addr, h.Ports.From, h.Ports.To)
}

// allocatePorts asks the registry for a launch's ports, with a local activity.
func allocatePorts(ctx workflow.Context, req PortRequest) (PortGrant, error) {
	if testRegistry != nil {
		st := HostRegistryState{Hosts: map[string]HostEntry{}, NextPort: testNextPort}
		for _, h := range testRegistry() {
			st.Hosts[h.Host] = h
		}
		return st.allocatePorts(req)
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 5 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	var grant PortGrant
	err := workflow.ExecuteLocalActivity(lctx, ActivityAllocatePorts, req).Get(ctx, &grant)
	return grant, err
}

// testNextPort is the registry's cursors in the workflow tests (see testRegistry).
var testNextPort = map[string]int{}

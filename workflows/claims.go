package workflows

import (
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"
)

// Slot claims. Host reports reach the registry every ReportEvery, so two runs launched within the same
// seconds read the same free slots, and each pre-placed its whole launch in them. Each host then started the
// members of whichever batch came first, and held the rest for a slot: on 4 hosts of 4 slots, two 12-task gangs
// launched together ran 8 and 6 (or 10 and 6) of their tasks, each waiting at its rendezvous for tasks that
// waited for the other's slots, until startTimeout failed both (2026-11-27). Every pre-placed launch already
// goes through the port allocator, one at a time, so the allocator also keeps what each launch claimed of each
// host's slots, until the host's reports count it: a launch that the registry's free slots hold, but not
// beside the claims of other runs since those reports, gets no ports, and the run holds it back whole
// (overflow.go) rather than start some of its tasks in slots another gang will wait for. A claim of a run that
// has ended holds nothing: the allocator's caller (a local activity) asks the server whether the runs whose
// claims (or whose tasks in the hosts' reports, HostReport.Runs) refused a launch still run, and asks again
// without those that ended (PortRequest.Ended), so that a run launched right after another ended, before the
// hosts report again, takes the slots at once.

// Waiting launches. A launch the hosts' free slots do not hold (by their reports, less the tasks of runs that
// have ended since, and the claims of launches since) gets no ports either, and is held back whole; it does not
// go out in part to wait at its rendezvous in the slots it found, for other gangs to wait for (8 gangs of 12
// tasks in two waves on 16 slots: 5 of them failed so, 2026-11-27). While it waits it asks again every few
// seconds, and keeps the slots of the hosts it would start on (SlotClaim.Until) from the launches of runs
// queued after it: those go only where they fit beside it. So gangs queued on a full pool start in the order
// their runs started, as Slurm's queue runs its jobs, and a smaller one may still start first in slots no
// earlier run waits for (backfill).

// SlotClaim is what a launch took of a host's slots, and when; or, in the allocator's Waiting list, what a
// launch waits for there, ranked by its run's start (Queued), until it asks again (Until).
type SlotClaim struct {
	Run    string    `json:"run"`
	Host   string    `json:"host"`
	Count  int       `json:"count"`
	At     time.Time `json:"at"`
	Queued time.Time `json:"queued,omitempty"`
	// Until, on a claim, keeps it until then whatever the reports say (keepSlots); on a wait, is when it lapses.
	Until time.Time `json:"until,omitempty"`
}

// RunLoad is how many of a host's slots one run's tasks take, as the host reported.
type RunLoad struct {
	Run      string `json:"run"`
	Unpinned int    `json:"unpinned"`
}

// MaxRunLoads bounds a host report's Runs.
const MaxRunLoads = 1024

// claimCounted is how long after a claim a host's report may still not count the claim's tasks: the batches
// reach the host within milliseconds, and a report goes out as soon as it is made, so a report that reached
// the registry this long after the claim counts them (or their ends).
const claimCounted = 2 * time.Second

// waitSlack is how late a waiting launch may ask again and still find its place kept: its run's timer, a
// workflow task and the local activity that asks.
const waitSlack = 5 * time.Second

// claimSlots records the slots req claims, host by host, and returns nil; or, when a host has no room for the
// claim, records nothing, and returns the refusal. A host's room is its slots less the tasks its last report
// counts (less those of req's run and of the runs req says have ended), the claims of other runs it does not
// count yet, and what launches of runs queued before req's wait for there. A refused request that will ask
// again (Retry) is recorded as waiting. A request without a run claims nothing (runs before claims).
func (st *PortAllocatorState) claimSlots(req PortRequest, now time.Time) *PortGrant {
	if req.Run == "" {
		return nil
	}
	gone := func(run string) bool { return run == req.Run || slices.Contains(req.Ended, run) }
	st.prune(req, now, gone)
	claimed, reserved := map[string]int{}, map[string]int{}
	for _, c := range st.Claims {
		claimed[c.Host] += c.Count
	}
	for _, w := range st.Waiting {
		if queuedBefore(w.Queued, w.Run, req.Queued, req.Run) {
			reserved[w.Host] += w.Count
		}
	}
	var no *PortGrant
	for _, c := range req.Hosts {
		used := c.Unpinned
		for _, l := range c.Runs {
			if gone(l.Run) {
				used -= l.Unpinned
			}
		}
		used = max(used, 0)
		if c.Claim == 0 || c.Slots == 0 || used+claimed[c.Host]+reserved[c.Host]+c.Claim <= c.Slots {
			continue
		}
		if no == nil {
			no = &PortGrant{Refused: true, Busy: map[string]int{}, Reserved: map[string]int{}, Used: map[string]int{}}
		}
		no.Used[c.Host], no.Busy[c.Host], no.Reserved[c.Host] = used, claimed[c.Host], reserved[c.Host]
		for _, l := range c.Runs {
			no.addRun(l.Run, !gone(l.Run))
		}
	}
	if no != nil {
		st.refuse(no, req, now)
		return no
	}
	for _, c := range req.Hosts {
		if c.Claim > 0 {
			st.Claims = append(st.Claims, SlotClaim{Run: req.Run, Host: c.Host, Count: c.Claim, At: now})
		}
	}
	return nil
}

// prune drops the claims and waits of req's run and of those gone (ended), claims older than LiveFor or that a
// report of their host req carries counts, and waits not asked again in time.
func (st *PortAllocatorState) prune(req PortRequest, now time.Time, gone func(string) bool) {
	seen := map[string]time.Time{}
	for _, c := range req.Hosts {
		seen[c.Host] = c.Seen
	}
	st.Claims = slices.DeleteFunc(st.Claims, func(c SlotClaim) bool {
		if !c.Until.IsZero() {
			return gone(c.Run) || now.After(c.Until) // slots kept through a gang restart's backoff
		}
		s, asked := seen[c.Host]
		return gone(c.Run) || now.Sub(c.At) > LiveFor || asked && s.After(c.At.Add(claimCounted))
	})
	st.Waiting = slices.DeleteFunc(st.Waiting, func(w SlotClaim) bool { return gone(w.Run) || now.After(w.Until) })
}

// refuse completes the refusal of req (no, which names the hosts with no room): the runs whose claims and waits
// took their slots; and records req's launch as waiting when it will ask again.
func (st *PortAllocatorState) refuse(no *PortGrant, req PortRequest, now time.Time) {
	for _, c := range st.Claims {
		no.addRun(c.Run, no.Busy[c.Host] > 0)
	}
	ahead := map[string]bool{}
	for _, w := range st.Waiting {
		if no.Reserved[w.Host] > 0 && queuedBefore(w.Queued, w.Run, req.Queued, req.Run) && !ahead[w.Run] {
			ahead[w.Run] = true
			no.Ahead++
			no.addRun(w.Run, true)
		}
	}
	if req.Retry == 0 {
		return
	}
	for _, c := range req.Hosts {
		if c.Claim > 0 {
			st.Waiting = append(st.Waiting, SlotClaim{Run: req.Run, Host: c.Host, Count: c.Claim, At: now,
				Queued: req.Queued, Until: now.Add(req.Retry + waitSlack)})
		}
	}
}

// addRun names run among those whose slots refused the launch (to be asked whether they still run), once.
func (g *PortGrant) addRun(run string, add bool) {
	if add && !slices.Contains(g.BusyRuns, run) {
		g.BusyRuns = append(g.BusyRuns, run)
	}
}

// queuedBefore says whether the run started at qa (ID a) goes before the one started at qb (ID b): the first
// started (a run that sends no start, from before waiting launches, before every other), then by ID.
func queuedBefore(qa time.Time, a string, qb time.Time, b string) bool {
	if !qa.Equal(qb) {
		return qa.Before(qb)
	}
	return a < b
}

// Slots kept through a gang restart. When a run's tasks all end for a gang restart, its hosts report their
// slots free, and for the restart's backoff a run queued behind it could take them: the restart would then
// wait for that run to end (Slurm keeps a job's nodes across its steps). So the run asks the allocator to keep
// the slots its tasks held, host by host, until the backoff ends: its next launch, which goes back to those
// hosts (ChangeGangKeepsAddresses), replaces those claims with its own.

// ChangeKeepSlots marks runs that keep their slots through a gang restart's backoff; asked only there.
const ChangeKeepSlots = "clusterrun-keep-slots"

// keepSlots asks the allocator to keep, for d and waitSlack more, the slots the generation that ended held: its
// unpinned tasks' hosts, as their last attempts ended. Runs whose launches are not pre-placed (sharded, or with
// leases of their own) keep none, nor does one that cannot reach the allocator.
func (r *run) keepSlots(ctx workflow.Context, d time.Duration) {
	if !r.leased || !r.batched || r.sharded || d <= 0 {
		return
	}
	count := map[string]int{}
	var order []string
	for _, t := range r.tasks {
		if h := t.ended; t.Host == "" && h != nil && h.Host != "" {
			if count[h.Host] == 0 {
				order = append(order, h.Host)
			}
			count[h.Host]++
		}
	}
	if len(order) == 0 || workflow.GetVersion(ctx, ChangeKeepSlots, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	req := PortRequest{Run: r.ref.WorkflowID, Queued: r.queued, Keep: d + waitSlack}
	for _, h := range order {
		req.Hosts = append(req.Hosts, PortCount{Host: h, Claim: count[h]})
	}
	if _, err := allocatePorts(ctx, req); err != nil {
		workflow.GetLogger(ctx).Warn("the port allocator keeps no slots for the gang restart; a run queued behind it may take them", "error", err)
	}
}

// keep records req's claims as kept until req.Keep from now, in place of its run's earlier claims and waits.
func (st *PortAllocatorState) keep(req PortRequest, now time.Time) {
	mine := func(run string) bool { return run == req.Run }
	st.Claims = slices.DeleteFunc(st.Claims, func(c SlotClaim) bool { return mine(c.Run) })
	st.Waiting = slices.DeleteFunc(st.Waiting, func(w SlotClaim) bool { return mine(w.Run) })
	for _, c := range req.Hosts {
		if c.Claim > 0 {
			st.Claims = append(st.Claims, SlotClaim{Run: req.Run, Host: c.Host, Count: c.Claim, At: now, Until: now.Add(req.Keep)})
		}
	}
}

package workflows

import (
	"slices"
	"time"
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
// claims refused a launch still run, and asks again without those that ended (PortRequest.Ended), so that a
// run launched right after another ended, before the hosts report again, takes the slots at once.

// SlotClaim is what a launch took of a host's slots, and when.
type SlotClaim struct {
	Run   string    `json:"run"`
	Host  string    `json:"host"`
	Count int       `json:"count"`
	At    time.Time `json:"at"`
}

// claimCounted is how long after a claim a host's report may still not count the claim's tasks: the batches
// reach the host within milliseconds, and a report goes out as soon as it is made, so a report that reached
// the registry this long after the claim counts them (or their ends).
const claimCounted = 2 * time.Second

// claimSlots records the slots req claims, host by host, and returns nil; or, when a host's last report (as the
// run read it) leaves no room for the claim beside those of other runs it does not count yet, records nothing
// and returns those runs' claims per host, and the runs. A request without a run claims nothing (runs before
// claims). The claims of runs req says have ended go first.
func (st *PortAllocatorState) claimSlots(req PortRequest, now time.Time) (busy map[string]int, runs []string) {
	if req.Run == "" {
		return nil, nil
	}
	seen := map[string]time.Time{}
	for _, c := range req.Hosts {
		seen[c.Host] = c.Seen
	}
	st.Claims = slices.DeleteFunc(st.Claims, func(c SlotClaim) bool {
		s, asked := seen[c.Host]
		return c.Run == req.Run || slices.Contains(req.Ended, c.Run) || now.Sub(c.At) > LiveFor || asked && s.After(c.At.Add(claimCounted))
	})
	others := map[string]int{}
	for _, c := range st.Claims {
		others[c.Host] += c.Count
	}
	for _, c := range req.Hosts {
		if c.Claim > 0 && c.Slots > 0 && others[c.Host] > 0 && c.Unpinned+others[c.Host]+c.Claim > c.Slots {
			if busy == nil {
				busy = map[string]int{}
			}
			busy[c.Host] = others[c.Host]
		}
	}
	if busy != nil {
		for _, c := range st.Claims {
			if busy[c.Host] > 0 && !slices.Contains(runs, c.Run) {
				runs = append(runs, c.Run)
			}
		}
		return busy, runs
	}
	for _, c := range req.Hosts {
		if c.Claim > 0 {
			st.Claims = append(st.Claims, SlotClaim{Run: req.Run, Host: c.Host, Count: c.Claim, At: now})
		}
	}
	return nil, nil
}

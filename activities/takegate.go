package activities

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/task"
	"github.com/clusterrun/clusterrun/workflows"
)

// Takes in turn: of the tasks of one run on this host that wait for items of the same functions, one at a
// time sends its take with a wait to the run's ClusterItems workflow; the others wait here, in the worker,
// and each goes out as the one before it is answered.
//
// A take that waits is an update in flight, and the items workflow lets at most workflows.ParkBudget of
// those wait at once; it refuses the rest as busy, and their host workers read its memo until its counts
// say to send them again, from 0.1 s up to 1 s apart. With 50 idle workers on 2 hosts, 46 took turns
// reading while the queue filled: 5,000 items went at 82–247 items/s, against 5,000 items/s over 4
// workers (docs/benchmarks.md). Waiting here costs the run nothing, and a take answered with items lets
// the next go at once, so the items go out as fast as takes are answered.
//
// The takes that do not wait (a worker's report of its results while another take has the turn, a renewal)
// go a few at a time per run from this host (takesUnderWay), the rest queued here. The server refuses an
// update to a workflow that has 10 in flight (history.maxInFlightUpdates, also Temporal Cloud's limit), and
// the SDK sends a refused one again 200 ms later, then 400: 24 workers of no-op items on 2 hosts reported all
// at once, the server refused 6–9 updates per 3,000 items, and the chief's schedules among them waited
// 0.2–0.6 s while the workers ran dry. A refusal also makes the server drop its cached state of the workflow,
// which sends every other update in flight again and makes a host worker replay its history
// (docs/benchmarks.md). With one take waiting and two under way per host, three hosts and the chief's calls
// kept within the 10; over four hosts, one under way per host does. Over more hosts the turns' takes of
// most hosts do not wait in the workflow but go as takes under way, between reads of its memo (takeByReads),
// and those of the first few hosts by name wait, as many as the 10 leave room for (turnWaitsInWorkflow): up
// to 8 hosts, one call each, the waiting takes and the chief's keep within the 10. Once the run has been idle
// for a second, the first three hosts' turns wait there whatever the hosts (turnParksWhenIdle).

// takesUnderWay bounds the takes of a run that do not wait, under way at once from one host, by the number of
// hosts in the run's cluster map (0: not known).
func takesUnderWay(hosts int) int {
	if hosts > 3 {
		return 1
	}
	return 2
}

// takeGates holds the gates of the runs' takes, for as long as some take uses them: one per run and set of
// functions served, which lets one take wait at a time (takeGateKey), and one per run, which lets
// takesUnderWay go at a time (reportGateKey). A gate keeps the size it was made with while it is used.
type takeGates struct {
	mu    sync.Mutex
	gates map[string]*takeGate
}

type takeGate struct {
	slots chan struct{} // holds a token per take of this gate under way
	users int
}

// join returns the gate named key, made with room for size takes if it is new.
func (g *takeGates) join(key string, size int) *takeGate {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates == nil {
		g.gates = map[string]*takeGate{}
	}
	gate := g.gates[key]
	if gate == nil {
		gate = &takeGate{slots: make(chan struct{}, size)}
		g.gates[key] = gate
	}
	gate.users++
	return gate
}

func (g *takeGates) leave(key string, gate *takeGate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gate.users--; gate.users == 0 {
		delete(g.gates, key)
	}
}

// takeGateKey names a run's turn gate: the run, and the functions its takes serve, so that a worker of one
// function never waits behind a worker of another.
func takeGateKey(runID string, fns []string) string {
	fns = slices.Clone(fns)
	slices.Sort(fns)
	return "turn\x00" + runID + "\x00" + strings.Join(fns, "\x00")
}

// reportGateKey names the gate of a run's takes that do not wait.
func reportGateKey(runID string) string { return "report\x00" + runID }

// takeInTurn sends a take that waits when no other take of its gate waits in the run; else it waits here for
// its turn, within its own wait. A take that carries results or renewals does not hold them meanwhile: it
// sends them first with no wait, and returns the items that brings, if any. A take whose wait passes before
// its turn is answered with no item, as the run answers one whose wait passed.
//
// The take that waits keeps the update id of the call, and the one sent first gets the id with "-report":
// each phase applies once, also when the task's client sends the call again to this worker's successor.
func (c *controlServer) takeInTurn(r *http.Request, in *workflows.TakeItemsRequest, wait time.Duration, out *workflows.TakeItemsResult) (int, error) {
	take := func(suffix string, w time.Duration) (int, error) {
		return c.itemsUpdateAs(r, suffix, workflows.UpdateItemsTake, w, func(w time.Duration) any { in.Wait = w; return *in }, out)
	}
	key := takeGateKey(c.e.ref.WorkflowID, in.Fns)
	gate := c.h.takeGates.join(key, 1)
	defer c.h.takeGates.leave(key, gate)
	began := time.Now()
	select {
	case gate.slots <- struct{}{}:
	default:
		if len(in.Done) > 0 || len(in.Renew) > 0 {
			if status, err := c.underWay(r.Context(), func() (int, error) { return take("-report", 0) }); err != nil || len(out.Items) > 0 {
				return status, err
			}
			in.Done, in.Renew = nil, nil
		}
		if ok, err := c.awaitTurn(r.Context(), gate, wait); !ok {
			if err != nil {
				return http.StatusRequestTimeout, err
			}
			return 0, nil
		}
	}
	defer func() { <-gate.slots }()
	if !turnWaitsInWorkflow(c.e.runHosts(), c.e.hostRank(c.h.Name)) {
		return c.takeByReads(r.Context(), r, take, in, began.Add(wait), out)
	}
	return take("", max(wait-time.Since(began), 0))
}

// parkingHosts is the most hosts of a run whose turns' takes all wait inside the items workflow: one per host,
// within its workflows.ParkBudget.
const parkingHosts = workflows.ParkBudget

// hostsCalls is how many calls of a run's hosts the items workflow can have in flight at once: the server's 10
// less the chief's two (a schedule and a join).
const hostsCalls = 8

// turnWaitsInWorkflow reports whether the take that has a host's turn waits inside the items workflow, for the
// host of place rank (by name, from 0) among a run's hosts. The first hosts by name wait there, as many as
// leave a place among the workflow's workflows.ParkBudget waits for the chief's own (a fetch or a join that
// found all four taken read the memo, and an item every 2 s took 71–118 ms rather than 28–30 over 4 hosts), and
// as many as the hostsCalls leave beside one take under way per host (over more than four hosts each has one
// at most): every host of up to 3, 3 of 4 or 5 hosts, 2 of 6, 1 of 7, none of 8 or more. The others read
// the workflow's memo (takeByReads). An item scheduled to an idle run then goes to a waiting take at once
// rather than at the next read of the memo, which comes up to a second later.
func turnWaitsInWorkflow(hosts, rank int) bool {
	return rank < min(workflows.ParkBudget-1, hostsCalls-hosts)
}

// takeByReads is the take that has the turn on a host whose turn does not wait in the items workflow
// (turnWaitsInWorkflow): every host's turn waiting there, with their takes under way, passed the server's 10
// updates in flight (30 workers on 8 hosts: 31–54 refusals per 5,000 items and 520–950 items/s, where 4
// hosts went at 2,700 with none; docs/benchmarks.md). It sends takes that do not wait, as the run's other
// takes under way from this host, and between them reads the workflow's memo until items are queued, first
// 10 ms after, then further apart, up to 1 s; on one of the run's first hosts, once the reads find the run
// idle for a second, the take waits in the workflow instead (turnParksWhenIdle). until is when its wait
// ends. Take n has the call's update id with "-poll-n", and the take that waits the id with parkSuffix, so
// that each applies once, also when the task's client sends the call again to this worker's successor.
func (c *controlServer) takeByReads(ctx context.Context, r *http.Request, take func(string, time.Duration) (int, error),
	in *workflows.TakeItemsRequest, until time.Time, out *workflows.TakeItemsResult) (int, error) {
	c.e.beginWait()
	defer c.e.endWait()
	parks := turnParksWhenIdle(c.e.hostRank(c.h.Name))
	if parks && c.e.takenUp.Swap(false) {
		found, err := c.takeLeftWaiting(ctx, r, out)
		if err != nil {
			return http.StatusRequestTimeout, err
		}
		if found {
			return 0, nil
		}
	}
	for n := 1; ; n++ {
		if n > 1 || !c.nothingToTake(ctx, in) {
			status, err := c.underWay(ctx, func() (int, error) { return take(fmt.Sprintf("-poll-%d", n), 0) })
			if err != nil || len(out.Items) > 0 {
				return status, err
			}
			in.Done, in.Renew = nil, nil
		}
		switch c.awaitQueued(ctx, until, parks) {
		case waitOver:
			return 0, nil
		case runIdle:
			return take(parkSuffix, max(time.Until(until), 0))
		}
	}
}

// nothingToTake reports whether a call's first take from takeByReads would do nothing in the items workflow:
// it applies no result or renewal, the workflow has seen the attempt already, and the memo counts no item
// queued. The workflow takes a take that does not wait however little it does, as an update of its own:
// over 8 hosts, an idle run sent one per host every 5 s, each worker's call beginning with one (55 in 30 s).
func (c *controlServer) nothingToTake(ctx context.Context, in *workflows.TakeItemsRequest) bool {
	if len(in.Done) > 0 || len(in.Renew) > 0 || !c.e.itemsSeen.Load() {
		return false
	}
	counts, _, err := c.itemCounts(ctx, workflows.ItemsWorkflowID(c.e.ref.WorkflowID))
	return err == nil && counts.Queued == 0
}

// parkSuffix ends the update id of the take a call sends to wait in the items workflow from takeByReads: one
// such take per call, under the call's own id, so that the call sent again to this worker's successor finds
// it (takeLeftWaiting).
const parkSuffix = "-park"

// takeLeftWaiting answers, with out, a call of an attempt this worker took up from an older one's record, if
// the older worker had sent its take to wait in the items workflow (the call's id with parkSuffix) and died:
// the workflow hands items to that take all the same, and they would wait for their lease to run out. The
// task's client sends the call again with the same id, and this looks the take up and waits for its answer;
// found is false when there is none (or it cannot be read), and the call goes on as any other.
func (c *controlServer) takeLeftWaiting(ctx context.Context, r *http.Request, out *workflows.TakeItemsResult) (found bool, err error) {
	if r.Header.Get(task.HeaderRequestID) == "" {
		return false, nil
	}
	updateID, err := c.itemsUpdateID(r)
	if err != nil {
		return false, nil // the take says why
	}
	ctx, cancel := context.WithTimeout(ctx, workflows.MaxItemWait+5*time.Second)
	defer cancel()
	h := c.h.Client.GetWorkflowUpdateHandle(client.GetWorkflowUpdateHandleOptions{
		WorkflowID: workflows.ItemsWorkflowID(c.e.ref.WorkflowID), UpdateID: updateID + parkSuffix})
	if err := h.Get(ctx, out); err != nil {
		if r.Context().Err() != nil {
			return false, r.Context().Err()
		}
		return false, nil
	}
	return true, nil
}

// parkAfterIdle is how long the turn of one of a run's first hosts reads the memo and finds the run idle
// before its take waits in the items workflow instead (turnParksWhenIdle).
const parkAfterIdle = time.Second

// turnParksWhenIdle reports whether the turn of the host of place rank, when its take reads the memo
// (turnWaitsInWorkflow is false), sends it to wait in the items workflow once the run has had no item queued
// or running for parkAfterIdle. The workflow's updates in flight are few then: no worker has results to
// report, and the takes under way are sent only once items are queued, so the first hosts' waits and the
// chief's fit within the server's 10, and the items that come next go to a waiting take at once rather than
// at the next read of the memo, which comes up to a second later (over 8 hosts, one item every 2 s took a
// median of 83–144 ms). A run that is busy does not count as idle however long a host finds nothing queued:
// over 16 hosts, takes that waited once nothing was queued for a second added to the server's refusals and
// slowed 5,000 no-op items by a third. As with turnWaitsInWorkflow, at most workflows.ParkBudget - 1 hosts'
// turns wait, leaving one wait for the chief's.
func turnParksWhenIdle(rank int) bool { return rank < workflows.ParkBudget-1 }

// What awaitQueued found.
const (
	itemsQueued = iota // the memo counts items queued, or the call ended (the next take says why)
	waitOver           // the take's wait passed
	runIdle            // the reads found no item queued or running for parkAfterIdle (parks only)
)

// awaitQueued reads the items workflow's memo until it counts items queued, the call ends, until passes or,
// if parks, the reads have found the run idle for parkAfterIdle. A memo without counts has none queued: the
// workflow writes them once they change (a take sent on each such read went out every few milliseconds until
// the first schedule); a read that fails is tried again at the next pause, and does not count as idle.
func (c *controlServer) awaitQueued(ctx context.Context, until time.Time, parks bool) int {
	id := workflows.ItemsWorkflowID(c.e.ref.WorkflowID)
	idleAt := time.Now().Add(parkAfterIdle)
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		p := min(pause/2+rand.N(pause/2), time.Until(until))
		if parks {
			p = min(p, time.Until(idleAt))
		}
		if p <= 0 {
			if time.Until(until) <= 0 {
				return waitOver
			}
			return runIdle
		}
		select {
		case <-ctx.Done():
			return itemsQueued
		case <-time.After(p):
		}
		counts, _, err := c.itemCounts(ctx, id)
		switch {
		case err == nil && counts.Queued > 0:
			return itemsQueued
		case err != nil || counts.Running > 0:
			idleAt = time.Now().Add(parkAfterIdle)
		}
	}
}

// awaitTurn waits up to wait for the gate's turn: true once it is this take's; false when the wait passed
// (nil) or the task's call ended (its error). The task counts as waiting on the run meanwhile, not as hung.
func (c *controlServer) awaitTurn(ctx context.Context, gate *takeGate, wait time.Duration) (bool, error) {
	c.e.beginWait()
	defer c.e.endWait()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case gate.slots <- struct{}{}:
		return true, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// underWay sends a take that does not wait once fewer than takesUnderWay of its run's are under way from this
// host, and returns what send returns; if the task's call ends first, its error.
func (c *controlServer) underWay(ctx context.Context, send func() (int, error)) (int, error) {
	key := reportGateKey(c.e.ref.WorkflowID)
	gate := c.h.takeGates.join(key, takesUnderWay(c.e.runHosts()))
	defer c.h.takeGates.leave(key, gate)
	select {
	case gate.slots <- struct{}{}:
	case <-ctx.Done():
		return http.StatusRequestTimeout, ctx.Err()
	}
	defer func() { <-gate.slots }()
	return send()
}

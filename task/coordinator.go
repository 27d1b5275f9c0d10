package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// The Go side of work items, like the Python client's schedule/fetch/join/done/serve. Items scheduled from Go
// are held by the run until Fetch asks for them by id, so fetch as you go: held results count toward the
// 768 KiB the run holds, and Schedule waits while that is full. Like Python's, this client acknowledges the
// results it was handed with its next call, and the run keeps each until then: a Fetch whose answer was lost
// with a host worker gets it again.

// ItemError is a failed item's error, or the first error Join or Done raised.
type ItemError struct{ Message string }

func (e *ItemError) Error() string { return e.Message }

// Schedule schedules items and returns their ids in order, waiting while the run's queue is full. An item
// whose key the run knows gets that item's id back.
func (c *Client) Schedule(ctx context.Context, items ...NewItem) ([]int64, error) {
	for i, it := range items {
		if len(it.Args) > 0 && !json.Valid(it.Args) {
			return nil, fmt.Errorf("item %d (%s): its Args are not JSON: %s; give e.g. json.RawMessage(`[3, \"train\"]`)", i, it.Fn, cutArgs(it.Args))
		}
	}
	var ids []int64
	for len(items) > 0 {
		n := min(len(items), 500)
		req := ScheduleRequest{Items: items[:n], Hold: true, Wait: "10s", Acks: true, Got: c.acks.take()}
		ans, err := c.ScheduleItems(ctx, req)
		c.acks.settle(req.Got, err)
		if err != nil {
			return ids, err
		}
		for _, r := range ans.Results {
			c.acks.add(r.ID) // not this client's (it holds its results): let them go
		}
		ids = append(ids, ans.IDs...)
		items = items[len(ans.IDs):]
	}
	return ids, nil
}

// cutArgs quotes arguments for an error, cut to 80 bytes.
func cutArgs(b []byte) string {
	if len(b) > 80 {
		return fmt.Sprintf("%q...", b[:80])
	}
	return fmt.Sprintf("%q", b)
}

// Fetch waits until every given item has finished and returns their results in the same order; a failed one
// has State "failed" and its Error. If it fails, the results it was handed so far stay unacknowledged, and the
// next Fetch of them gets them.
func (c *Client) Fetch(ctx context.Context, ids ...int64) ([]ItemResult, error) {
	got := map[int64]ItemResult{}
	var handed []int64
	for len(got) < len(ids) {
		var want []int64
		for _, id := range ids {
			if _, ok := got[id]; !ok {
				want = append(want, id)
			}
		}
		ans, err := c.waitAcked(ctx, WaitRequest{IDs: want, Wait: "10s"})
		if err != nil {
			return nil, err
		}
		for _, r := range ans.Results {
			got[r.ID] = r
			handed = append(handed, r.ID)
		}
		for _, id := range ans.Gone {
			got[id] = GoneResult(id)
		}
	}
	c.acks.add(handed...) // only now: the caller has them
	out := make([]ItemResult, len(ids))
	for i, id := range ids {
		out[i] = got[id]
	}
	return out, nil
}

// Join waits until every item this task scheduled has finished. It returns an *ItemError with the first
// error since the last Join or Done, once.
func (c *Client) Join(ctx context.Context) error {
	for {
		done, err := c.doneOnce(ctx, "10s")
		if err != nil || done {
			return err
		}
	}
}

// Done says whether every item this task scheduled has finished; like Join, it returns the first error once.
func (c *Client) Done(ctx context.Context) (bool, error) { return c.doneOnce(ctx, "") }

func (c *Client) doneOnce(ctx context.Context, wait string) (bool, error) {
	ans, err := c.waitAcked(ctx, WaitRequest{All: true, Raise: true, Wait: wait})
	for _, r := range ans.Results {
		c.acks.add(r.ID) // not this client's (it holds its results): let them go
	}
	switch {
	case err != nil:
		return false, err
	case ans.Error != "":
		return ans.Pending == 0, &ItemError{Message: ans.Error}
	}
	return ans.Pending == 0, nil
}

// waitAcked is a wait that acknowledges the results handed to this client since its last call. The caller
// adds the results of its answer once it has handed them on.
func (c *Client) waitAcked(ctx context.Context, req WaitRequest) (WaitAnswer, error) {
	req.Acks, req.Got = true, c.acks.take()
	ans, err := c.WaitItems(ctx, req)
	c.acks.settle(req.Got, err)
	return ans, err
}

// UntakenNoteAfter is how long a Join or Fetch waits on items of a function no task of the run has ever taken an
// item of (a name no worker serves: "stepp" for "step") before it tells Client.Waiting, once per function.
var UntakenNoteAfter = 30 * time.Second

// untaken remembers since when each function's items have been untaken, and which were said.
type untaken struct {
	mu    sync.Mutex
	since map[string]time.Time
	said  map[string]bool
	// saidUnserved holds the functions said unserved (noteUnserved).
	saidUnserved map[string]bool
}

func (u *untaken) note(c *Client, counts map[string]int, now time.Time) {
	if c.Waiting == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.since == nil {
		u.since, u.said = map[string]time.Time{}, map[string]bool{}
	}
	for fn := range u.since {
		if _, ok := counts[fn]; !ok {
			delete(u.since, fn)
		}
	}
	for _, fn := range slices.Sorted(maps.Keys(counts)) {
		if _, ok := u.since[fn]; !ok {
			u.since[fn] = now
		}
		if waited := now.Sub(u.since[fn]); waited >= UntakenNoteAfter && !u.said[fn] {
			u.said[fn] = true
			c.note("clusterrun task: %d item(s) of %s have waited %s, and no task of this run has taken an item of %s yet: "+
				"does a task serve it? (clusterrun items %s lists them)", counts[fn], fn, waited.Round(time.Second), fn, runID())
		}
	}
}

// noteUnserved tells Client.Waiting once per function that its items wait and no task of the run asks for
// them: the run says so once they have waited 30 s that way (WaitAnswer.Unserved).
func (u *untaken) noteUnserved(c *Client, counts map[string]int) {
	if c.Waiting == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.saidUnserved == nil {
		u.saidUnserved = map[string]bool{}
	}
	for _, fn := range slices.Sorted(maps.Keys(counts)) {
		if !u.saidUnserved[fn] {
			u.saidUnserved[fn] = true
			c.note("clusterrun task: %d item(s) of %s wait, none runs, and no task of this run has asked for an item of %s "+
				"in 30s: have the tasks that serve it ended? (clusterrun status %s shows them; clusterrun items %s lists the items)",
				counts[fn], fn, fn, runID(), runID())
		}
	}
}

// runID is this task's run, for a command to name.
func runID() string {
	if id := os.Getenv("CLUSTERRUN_RUN_ID"); id != "" {
		return id
	}
	return "RUN"
}

// acks holds the ids of the results a client has handed on and not acknowledged yet.
type acks struct {
	mu  sync.Mutex
	ids []int64
}

// take returns the acknowledgements for the next call: at most MaxAcks.
func (a *acks) take() []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := min(len(a.ids), MaxAcks)
	out := a.ids[:n:n]
	a.ids = a.ids[n:]
	return out
}

// settle puts back the acknowledgements of a call that failed: the next call sends them.
func (a *acks) settle(sent []int64, err error) {
	if err == nil || len(sent) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids = append(sent, a.ids...)
}

// add queues acknowledgements for the next call.
func (a *acks) add(ids ...int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids = append(a.ids, ids...)
}

// Handler runs one item: its JSON arguments in, a JSON-able result out (at most 16 KiB encoded), or an error
// that fails the item.
type Handler func(ctx context.Context, args json.RawMessage) (any, error)

// Serve takes items of the given functions and runs them, reporting each result, until ctx ends. While a
// handler runs, the leases of the items it holds are renewed. Fast handlers take items in batches of up to
// 32 (ServeBatch); once one takes over 0.1 s, one at a time, so that idle workers get the rest. A handler that panics
// fails its item with the panic (its stack goes to stderr), and serving goes on, as for an error. The results
// of items finished when ctx ends are reported before Serve returns (within ReportOnEnd), not run again.
func (c *Client) Serve(ctx context.Context, handlers map[string]Handler) error {
	return c.serve(ctx, handlers, false)
}

// ServeUntilStop serves as Serve does, and returns nil once the run asks its tasks to stop, as Python's serve
// does: it looks when a take brings no item, so an item taken is run and reported first.
func (c *Client) ServeUntilStop(ctx context.Context, handlers map[string]Handler) error {
	return c.serve(ctx, handlers, true)
}

func (c *Client) serve(ctx context.Context, handlers map[string]Handler, untilStop bool) error {
	fns := slices.Sorted(maps.Keys(handlers))
	if len(fns) == 0 {
		return errors.New("serve needs at least one handler: Serve(ctx, map[string]task.Handler{\"step\": step})")
	}
	for _, f := range fns {
		if handlers[f] == nil {
			return fmt.Errorf("serve: the handler of %q is nil", f)
		}
	}
	r := &renewer{c: c}
	defer r.hold(nil, 0)
	var done []ItemOutcome
	defer func() { c.reportOnEnd(done) }()
	batch := c.ServeBatch
	if batch < 1 {
		batch = 32
	}
	take := batch
	for ctx.Err() == nil {
		ans, err := c.TakeItems(ctx, TakeRequest{Done: done, Fns: fns, Max: take, Wait: "5s"})
		if err != nil {
			done = nil // sent, and perhaps applied: not sent again
			return err
		}
		done = nil
		if len(ans.Items) == 0 && untilStop {
			if st, err := c.ShouldStop(ctx); err == nil && st.Stop {
				return nil
			}
		}
		for i, it := range ans.Items {
			var held []int64
			for _, h := range ans.Items[i:] {
				held = append(held, h.Lease)
			}
			r.hold(held, it.LeaseFor)
			began := time.Now()
			done = append(done, runItem(ctx, handlers[it.Fn], it))
			take = batch
			if time.Since(began) > 100*time.Millisecond {
				take = 1
			}
		}
		r.hold(nil, 0)
	}
	return ctx.Err()
}

// ReportOnEnd bounds Serve's report, once its ctx has ended, of the results it has not sent yet.
var ReportOnEnd = 10 * time.Second

// reportOnEnd sends the outcomes of items finished when Serve's context ended; the items would otherwise run
// again once their leases ran out.
func (c *Client) reportOnEnd(done []ItemOutcome) {
	if len(done) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ReportOnEnd)
	defer cancel()
	_, _ = c.TakeItems(ctx, TakeRequest{Done: done})
}

func runItem(ctx context.Context, h Handler, it LeasedItem) (out ItemOutcome) {
	out = ItemOutcome{ID: it.ID, Lease: it.Lease}
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(os.Stderr, "clusterrun task: the handler of %s (item %d) panicked: %v\n%s", it.Fn, it.ID, p, debug.Stack())
			out = ItemOutcome{ID: it.ID, Lease: it.Lease, Error: fmt.Sprintf("the handler panicked: %v", p)}
		}
	}()
	v, err := h(ctx, it.Args)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	b, err := json.Marshal(v)
	switch {
	case err != nil:
		out.Error = fmt.Sprintf("result is not JSON: %v", err)
	case len(b) > 16<<10:
		out.Error = fmt.Sprintf("result of %d bytes is over 16 KiB: write it to a file and return its path", len(b))
	default:
		out.Result = b
	}
	return out
}

// renewer renews the leases a worker holds every third of the lease, while it holds them.
type renewer struct {
	c      *Client
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (r *renewer) hold(leases []int64, leaseFor time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		r.cancel()
		r.cancel = nil
	}
	if len(leases) == 0 || leaseFor <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		t := time.NewTicker(max(leaseFor/3, 500*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_, _ = r.c.TakeItems(ctx, TakeRequest{Renew: leases})
			}
		}
	}()
}

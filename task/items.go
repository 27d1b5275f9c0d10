package task

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Work-item endpoints of the control socket: ClusterCoordinator's schedule, fetch, join and done, and the
// worker side that serves items. The run's spec must have `items:`.
const (
	PathItemsSchedule = "/v1/items/schedule"
	PathItemsTake     = "/v1/items/take"
	PathItemsWait     = "/v1/items/wait"
)

// MaxItemsBody bounds the body of a work-item request; MaxAcks bounds the results one request acknowledges.
const (
	MaxItemsBody = 1 << 20
	MaxAcks      = 10_000
)

// NewItem is one item to schedule: a function name its workers serve, JSON arguments, and an optional
// idempotency key (the same key gets the same item back, finished or not).
type NewItem struct {
	Fn   string          `json:"fn"`
	Args json.RawMessage `json:"args,omitempty"`
	Key  string          `json:"key,omitempty"`
}

// ScheduleRequest is the body of POST /v1/items/schedule. Items past the queue's room are not taken: the
// answer's ids cover a prefix, and the caller sends the rest again. Hold keeps results until fetched by id;
// without it the caller's next work-item call takes them. Wait ("5s") is how long to wait for room.
type ScheduleRequest struct {
	Items []NewItem `json:"items"`
	Hold  bool      `json:"hold,omitempty"`
	Wait  string    `json:"wait,omitempty"`
	// Acks and Got: see WaitRequest.
	Acks bool    `json:"acks,omitempty"`
	Got  []int64 `json:"got,omitempty"`
}

// ItemResult is a finished item: state done with a JSON result, or failed with an error.
type ItemResult struct {
	ID     int64           `json:"id"`
	Key    string          `json:"key,omitempty"`
	State  string          `json:"state"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// ScheduleAnswer answers a schedule: the ids of the items taken, in order, and finished results.
type ScheduleAnswer struct {
	IDs     []int64      `json:"ids"`
	Results []ItemResult `json:"results,omitempty"`
}

// ItemOutcome reports one leased item: a JSON result, or an error.
type ItemOutcome struct {
	ID     int64           `json:"id"`
	Lease  int64           `json:"lease"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// TakeRequest is the body of POST /v1/items/take: report outcomes, renew the leases still held, and take up
// to Max items of the functions in Fns, waiting up to Wait for one.
type TakeRequest struct {
	Done  []ItemOutcome `json:"done,omitempty"`
	Renew []int64       `json:"renew,omitempty"`
	Fns   []string      `json:"fns,omitempty"`
	Max   int           `json:"max,omitempty"`
	Wait  string        `json:"wait,omitempty"`
}

// LeasedItem is an item handed to a worker, under a lease that ends at Deadline unless renewed.
type LeasedItem struct {
	ID       int64           `json:"id"`
	Lease    int64           `json:"lease"`
	Fn       string          `json:"fn"`
	Args     json.RawMessage `json:"args,omitempty"`
	Deadline time.Time       `json:"deadline"`
	// LeaseFor is the lease's length: renew well within it (a third is safe).
	LeaseFor time.Duration `json:"leaseFor"`
}

// TakeAnswer answers a take.
type TakeAnswer struct {
	Items []LeasedItem `json:"items"`
}

// WaitRequest is the body of POST /v1/items/wait: wait up to Wait until the ids, or with All every item this
// task scheduled, have finished. With Raise, an answer with nothing pending carries the first error of this
// task's items that no join or done has raised yet, and clears it.
type WaitRequest struct {
	IDs   []int64 `json:"ids,omitempty"`
	All   bool    `json:"all,omitempty"`
	Raise bool    `json:"raise,omitempty"`
	Wait  string  `json:"wait,omitempty"`
	// Acks is for a client that acknowledges the results it is handed (Python's, Go's, the CLI's): each result
	// then stays in the run until a later call of the task lists its id in Got (at most MaxAcks per call), and a
	// wait for it by id hands it out again meanwhile, since its first answer may have been lost with a host
	// worker. Without Acks, a result goes out once. A wait with neither IDs nor All only acknowledges: it hands
	// out nothing.
	Acks bool    `json:"acks,omitempty"`
	Got  []int64 `json:"got,omitempty"`
}

// WaitAnswer answers a wait: finished items, how many of this task's items are pending, the error raised, and
// the ids asked for that the run has no result of to hand out (Gone): handed out already (a result goes out
// once), or never scheduled.
type WaitAnswer struct {
	Results []ItemResult `json:"results,omitempty"`
	Pending int          `json:"pending"`
	Error   string       `json:"error,omitempty"`
	Gone    []int64      `json:"gone,omitempty"`
	// Untaken counts, by function, the caller's queued items of functions no task of the run has taken an item
	// of yet: a name no worker serves waits for ever.
	Untaken map[string]int `json:"untaken,omitempty"`
	// Unserved counts, by function, the caller's queued items of functions a task of the run took items of
	// before, none running now and no task asking for one for 30 s: the tasks that served them have ended (or
	// are all busy with other functions).
	Unserved map[string]int `json:"unserved,omitempty"`
}

// GoneResult is what a fetch of an id in WaitAnswer.Gone gets: a failed result that says why.
func GoneResult(id int64) ItemResult {
	return ItemResult{ID: id, State: "failed", Error: fmt.Sprintf("item %d has no result to hand out: a result goes out once, and "+
		"this one was handed out already (to an earlier fetch or join of this task), or no such item was scheduled", id)}
}

// ScheduleItems schedules items (see ScheduleRequest).
func (c *Client) ScheduleItems(ctx context.Context, req ScheduleRequest) (ScheduleAnswer, error) {
	var out ScheduleAnswer
	err := c.call(ctx, http.MethodPost, PathItemsSchedule, body(req), &out)
	return out, err
}

// TakeItems reports, renews and takes items (see TakeRequest).
func (c *Client) TakeItems(ctx context.Context, req TakeRequest) (TakeAnswer, error) {
	var out TakeAnswer
	err := c.call(ctx, http.MethodPost, PathItemsTake, body(req), &out)
	return out, err
}

// WaitItems waits for items (see WaitRequest). An answer that counts items no task takes is told to Waiting
// (once per function; see UntakenNoteAfter), whichever call asked: Join, Fetch, or a shell's task join.
func (c *Client) WaitItems(ctx context.Context, req WaitRequest) (WaitAnswer, error) {
	var out WaitAnswer
	err := c.call(ctx, http.MethodPost, PathItemsWait, body(req), &out)
	if err == nil {
		c.untaken.note(c, out.Untaken, time.Now())
		c.untaken.noteUnserved(c, out.Unserved)
	}
	return out, err
}

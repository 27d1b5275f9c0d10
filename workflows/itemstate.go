package workflows

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/spec"
)

// The work-item state machine: ClusterCoordinator's closure queue with leases. It is plain data with no
// Temporal calls, so that the ClusterItems workflow can carry it across continue-as-new and tests can drive it
// directly. Every time it is given comes from the workflow's clock.
//
// An item is queued, then running under a lease (one worker task attempt, a deadline), then done or failed. A
// lease that ends without a result (its deadline passed, or its task came back as a newer attempt) puts the
// item back in the queue, ahead of every item scheduled after it: at-least-once, as in ClusterCoordinator. The first result wins; later
// ones count as duplicates. A result stays until the scheduler takes it; a keyed item's result stays for the
// run, so that scheduling the same key again gets it back.

// Item states.
const (
	ItemQueued  = "queued"
	ItemRunning = "running"
	ItemDone    = "done"
	ItemFailed  = "failed"
)

// Bounds on work items. Everything carried across continue-as-new must fit one payload (2 MiB by default), so
// the items the run holds (queued, running, finished and not yet taken) fit in MaxItemBytes, counting their
// arguments, results and itemOverhead each; schedule blocks while they do not. Keyed items whose results were
// taken stay for the run in MaxKeyedBytes of their own (results and keys): past it, a new key is refused.
const (
	MaxItemArgs   = 16 << 10
	MaxItemResult = 16 << 10
	MaxItemKey    = 200
	MaxItemFn     = 100
	MaxItemBytes  = 768 << 10
	MaxKeyedBytes = 512 << 10
	itemOverhead  = 200 // an item's fields, as the carried JSON holds them
	handoutBytes  = 150 // one hand-out in its history
	keptHandouts  = 5   // the most recent hand-outs an item's history keeps
	keyedOverhead = 200
	maxRecent     = 200 // finished items kept for listing
)

// ErrItemsKeysFull refuses a new idempotency key once the run keeps MaxKeyedBytes of keyed results.
const ErrItemsKeysFull = "ItemsKeysFull"

// NewItem is one item to schedule.
type NewItem struct {
	Fn   string          `json:"fn"`
	Args json.RawMessage `json:"args,omitempty"`
	Key  string          `json:"key,omitempty"`
}

// Item is a work item as the run holds it.
type Item struct {
	ID        int64           `json:"id"`
	Fn        string          `json:"fn"`
	Args      json.RawMessage `json:"args,omitempty"`
	Key       string          `json:"key,omitempty"`
	Scheduler TaskAttempt     `json:"scheduler"`
	// Hold keeps the result until it is fetched by id (the CLI); otherwise the scheduler's next call takes it.
	Hold      bool            `json:"hold,omitempty"`
	State     string          `json:"state"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     string          `json:"error,omitempty"`
	Delivered bool            `json:"delivered,omitempty"` // its scheduler has had its result
	// Unacked: handed to a scheduler that acknowledges results (Acks.On), and not acknowledged yet: it stays,
	// counted in Bytes, until it is.
	Unacked bool `json:"unacked,omitempty"`
	// Kept: a keyed item whose result was taken, kept for the run (counted in KeyedBytes, not Bytes).
	Kept bool `json:"kept,omitempty"`
	// Handouts counts the item's hand-outs; Attempts keeps the most recent ones (at most 5).
	Handouts int           `json:"handouts,omitempty"`
	Attempts []ItemAttempt `json:"attempts,omitempty"`
	// Alone: a hand-out of it shared with other items was lost with its worker (which item ended the worker is
	// unknown). That hand-out does not count toward maxAttempts, and it is handed out alone from then on.
	Alone bool `json:"alone,omitempty"`
}

// ItemAttempt is one hand-out of an item: to which task attempt, under which lease, and how it ended.
type ItemAttempt struct {
	Task     string    `json:"task"`
	Attempt  int       `json:"attempt"`
	Lease    int64     `json:"lease"`
	Start    time.Time `json:"start"`
	Deadline time.Time `json:"deadline"`
	End      time.Time `json:"end,omitzero"`
	// Outcome is empty while it runs, then done, failed, duplicate, or why the lease was lost.
	Outcome string `json:"outcome,omitempty"`
	// Shared: other items went out in the same take.
	Shared bool `json:"shared,omitempty"`
}

// ItemResult is a finished item as its scheduler sees it.
type ItemResult struct {
	ID     int64           `json:"id"`
	Key    string          `json:"key,omitempty"`
	State  string          `json:"state"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// Lease hands an item to a worker.
type Lease struct {
	ID       int64           `json:"id"`
	Lease    int64           `json:"lease"`
	Fn       string          `json:"fn"`
	Args     json.RawMessage `json:"args,omitempty"`
	Deadline time.Time       `json:"deadline"`
	// LeaseFor is the lease's length: renew well within it (a third is safe).
	LeaseFor time.Duration `json:"leaseFor"`
}

// ItemOutcome is what a worker reports for a lease: a JSON result, or an error.
type ItemOutcome struct {
	ID     int64           `json:"id"`
	Lease  int64           `json:"lease"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// ItemCounts are the run's item totals, shown by status and in the Web UI.
type ItemCounts struct {
	Scheduled  int64 `json:"scheduled"`
	Queued     int64 `json:"queued"`
	Running    int64 `json:"running"`
	Done       int64 `json:"done"`
	Failed     int64 `json:"failed"`
	Retried    int64 `json:"retried"`    // hand-outs again after a lost lease
	Duplicates int64 `json:"duplicates"` // results for an item that had one already
	Abandoned  int64 `json:"abandoned"`  // dropped: their scheduler's attempt ended before they ran
}

// itemState is the whole state, carried across continue-as-new.
type itemState struct {
	Config    spec.Items       `json:"config"`
	NextID    int64            `json:"nextID"`
	NextLease int64            `json:"nextLease"`
	Items     map[int64]*Item  `json:"items"`
	Queue     []int64          `json:"queue"`
	Keys      map[string]int64 `json:"keys"`
	// Errors holds each scheduler task's first error that join or done has not raised yet.
	Errors map[string]string `json:"errors"`
	// Attempts is the newest attempt seen of each task: older attempts' leases and items are void.
	Attempts map[string]int `json:"attempts"`
	Recent   []Item         `json:"recent"`
	Counts   ItemCounts     `json:"counts"`
	// Bytes counts the held items toward MaxItemBytes; KeyedBytes the kept keyed results toward MaxKeyedBytes.
	Bytes      int `json:"bytes"`
	KeyedBytes int `json:"keyedBytes"`
	// RetryAlone: a lost hand-out shared with other items is not counted, and the item goes out alone
	// (ChangeItemsRetryAlone); items workflows from before count every lost hand-out.
	RetryAlone bool `json:"retryAlone,omitempty"`
	// Waits: at most ParkBudget requests wait at once, and a schedule's wait for room ends when its scheduler
	// has results to take (ChangeItemsWaits); items workflows from before let every request wait, and a
	// schedule wait for room only.
	Waits bool `json:"waits,omitempty"`
	// Taken holds each function an item of which was ever handed out: a task serves it. Items workflows from
	// before it know none, and learn them at their next hand-outs.
	Taken map[string]bool `json:"taken,omitempty"`
	// Asked holds when a take that takes items last named each function, as it came in or ended its wait.
	// Items workflows from before it know none, and learn them at their next takes.
	Asked map[string]time.Time `json:"asked,omitempty"`
}

func newItemState(cfg spec.Items) *itemState {
	s := &itemState{Config: cfg}
	s.init()
	return s
}

// init makes the maps of a state decoded from JSON usable.
func (s *itemState) init() {
	if s.Items == nil {
		s.Items = map[int64]*Item{}
	}
	if s.Keys == nil {
		s.Keys = map[string]int64{}
	}
	if s.Errors == nil {
		s.Errors = map[string]string{}
	}
	if s.Attempts == nil {
		s.Attempts = map[string]int{}
	}
}

// reserve is what one held item may take of MaxItemBytes besides its arguments and result: its fields and a
// full history of hand-outs, so that items going round again cannot grow the state past its bound.
func (s *itemState) reserve() int {
	return itemOverhead + min(s.Config.MaxAttempts, keptHandouts)*handoutBytes
}

// checkNewItem says what is wrong with an item to schedule, or nil.
func checkNewItem(it NewItem) error {
	switch {
	case it.Fn == "" || len(it.Fn) > MaxItemFn:
		return fmt.Errorf("an item needs a function name of 1..%d characters (got %d)", MaxItemFn, len(it.Fn))
	case len(it.Args) > MaxItemArgs:
		return fmt.Errorf("item %q has %d bytes of arguments; at most %d: pass larger inputs by path", it.Fn, len(it.Args), MaxItemArgs)
	case len(it.Args) > 0 && !json.Valid(it.Args):
		return fmt.Errorf("item %q: its arguments are not valid JSON", it.Fn)
	case len(it.Key) > MaxItemKey:
		return fmt.Errorf("item %q: its key has %d characters; at most %d", it.Fn, len(it.Key), MaxItemKey)
	}
	return nil
}

// checkOutcome says what is wrong with a worker's report, or nil.
func checkOutcome(o ItemOutcome) error {
	switch {
	case len(o.Result) > MaxItemResult:
		return fmt.Errorf("item %d: its result has %d bytes; at most %d: write larger results to a file and return its path", o.ID, len(o.Result), MaxItemResult)
	case len(o.Result) > 0 && !json.Valid(o.Result):
		return fmt.Errorf("item %d: its result is not valid JSON", o.ID)
	case len(o.Error) > MaxItemResult:
		return fmt.Errorf("item %d: its error has %d bytes; at most %d", o.ID, len(o.Error), MaxItemResult)
	}
	return nil
}

// seen records a call from a task attempt. A newer attempt of a task voids its older attempts: their leases
// end (the items go back to the queue), and what they scheduled without a key is dropped, since no process
// is left to take its results.
func (s *itemState) seen(who TaskAttempt, now time.Time) {
	last, ok := s.Attempts[who.Task]
	if ok && who.Attempt <= last {
		return
	}
	s.Attempts[who.Task] = who.Attempt
	if !ok {
		return
	}
	lost := func(it *Item) bool {
		return it.State == ItemRunning && it.lastAttempt().Task == who.Task && it.lastAttempt().Attempt < who.Attempt
	}
	orphan := func(it *Item) bool {
		return it.Scheduler.Task == who.Task && it.Scheduler.Attempt < who.Attempt && it.Key == "" && !it.Hold
	}
	for _, id := range s.idsWhere(func(it *Item) bool { return lost(it) || orphan(it) }) {
		it := s.Items[id]
		if lost(it) {
			a := it.lastAttempt()
			s.requeue(it, now, fmt.Sprintf("lost: %s attempt %d ended", a.Task, a.Attempt))
		}
		if orphan(it) {
			s.abandon(it)
		}
	}
}

// idsWhere lists, in id order (so that every walk over them is deterministic), the held items that match: a
// walk that acts on a few of many items (a busy run holds thousands) sorts only those. The match must read the
// item alone, so that acting on one item cannot change whether another matches.
func (s *itemState) idsWhere(match func(*Item) bool) []int64 {
	var ids []int64
	//workflowcheck:ignore sorted below: the order of iteration cannot show
	for id, it := range s.Items {
		if match(it) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// lastAttempt is a running item's current hand-out.
func (it *Item) lastAttempt() *ItemAttempt { return &it.Attempts[len(it.Attempts)-1] }

// room says whether one more item of n bytes of arguments fits.
func (s *itemState) room(n int) bool {
	return int(s.Counts.Queued) < s.Config.Queue && s.Bytes+n+s.reserve() <= MaxItemBytes
}

// keysFull says whether the run can keep no more keyed results.
func (s *itemState) keysFull() bool { return s.KeyedBytes >= MaxKeyedBytes }

// schedule queues items in order until the queue is full, and returns the ids of those it took: an item
// whose key is known gets that item's id back and takes no room. A new key once the keyed results are full
// stops it with ErrItemsKeysFull.
func (s *itemState) schedule(who TaskAttempt, items []NewItem, hold bool, now time.Time) ([]int64, error) {
	s.seen(who, now)
	var ids []int64
	for _, n := range items {
		if id, ok := s.Keys[n.Key]; ok && n.Key != "" {
			ids = append(ids, id)
			if it := s.Items[id]; it != nil {
				it.Delivered = false // the new scheduler gets it too
				it.Scheduler, it.Hold = who, hold
			}
			continue
		}
		if n.Key != "" && s.keysFull() {
			return ids, temporal.NewNonRetryableApplicationError(fmt.Sprintf("item %q: this run keeps %d KiB of keyed results "+
				"already, and takes no new key; schedule without a key (results then go once to their scheduler)", n.Key, MaxKeyedBytes>>10),
				ErrItemsKeysFull, nil)
		}
		if !s.room(len(n.Args)) {
			break
		}
		s.NextID++
		it := &Item{ID: s.NextID, Fn: n.Fn, Args: n.Args, Key: n.Key, Scheduler: who, Hold: hold, State: ItemQueued}
		s.Items[it.ID] = it
		s.Queue = append(s.Queue, it.ID)
		s.Bytes += len(n.Args) + s.reserve()
		if n.Key != "" {
			s.Keys[n.Key] = it.ID
		}
		s.Counts.Scheduled++
		s.Counts.Queued++
		ids = append(ids, it.ID)
	}
	return ids, nil
}

// hasWork says whether a worker serving fns would get an item now.
func (s *itemState) hasWork(fns map[string]bool) bool {
	for _, id := range s.Queue {
		if fns[s.Items[id].Fn] {
			return true
		}
	}
	return false
}

// take leases up to max queued items of the given functions to a worker, oldest first. An item to be handed
// out alone (Item.Alone) goes out only as the first of a take, and ends it.
func (s *itemState) take(who TaskAttempt, fns map[string]bool, max int, now time.Time) []Lease {
	s.seen(who, now)
	var out []Lease
	full := false
	rest := s.Queue[:0]
	for _, id := range s.Queue {
		it := s.Items[id]
		if len(out) >= max || full || !fns[it.Fn] || (it.Alone && len(out) > 0) {
			rest = append(rest, id)
			continue
		}
		full = it.Alone
		s.NextLease++
		deadline := now.Add(s.Config.Lease)
		it.State = ItemRunning
		it.Handouts++
		it.Attempts = append(it.Attempts, ItemAttempt{Task: who.Task, Attempt: who.Attempt, Lease: s.NextLease, Start: now, Deadline: deadline})
		if len(it.Attempts) > keptHandouts {
			it.Attempts = it.Attempts[len(it.Attempts)-keptHandouts:]
		}
		s.Counts.Queued--
		s.Counts.Running++
		if !s.Taken[it.Fn] {
			if s.Taken == nil {
				s.Taken = map[string]bool{}
			}
			s.Taken[it.Fn] = true
		}
		out = append(out, Lease{ID: id, Lease: s.NextLease, Fn: it.Fn, Args: it.Args, Deadline: deadline, LeaseFor: s.Config.Lease})
	}
	s.Queue = rest
	if s.RetryAlone && len(out) > 1 {
		for _, l := range out {
			it := s.Items[l.ID]
			it.Attempts[len(it.Attempts)-1].Shared = true
		}
	}
	return out
}

// complete records workers' outcomes. The first outcome of an item wins, whichever lease it came under.
func (s *itemState) complete(outcomes []ItemOutcome, now time.Time) {
	for _, o := range outcomes {
		it := s.Items[o.ID]
		if it == nil || it.State == ItemDone || it.State == ItemFailed {
			s.Counts.Duplicates++
			if it != nil {
				s.endLease(it, o.Lease, now, "duplicate")
			}
			continue
		}
		if it.State == ItemQueued {
			s.unqueue(it.ID)
		} else {
			s.Counts.Running--
		}
		s.Bytes += len(o.Result)
		it.Result, it.Error = o.Result, o.Error
		if o.Error != "" {
			s.finish(it, ItemFailed, o.Error)
		} else {
			s.finish(it, ItemDone, "")
		}
		s.endLease(it, o.Lease, now, it.State)
	}
}

func (s *itemState) finish(it *Item, state, errMsg string) {
	it.State, it.Error = state, errMsg
	if state == ItemFailed {
		s.Counts.Failed++
		if _, ok := s.Errors[it.Scheduler.Task]; !ok {
			s.Errors[it.Scheduler.Task] = fmt.Sprintf("item %d (%s) failed: %s", it.ID, it.Fn, errMsg)
		}
	} else {
		s.Counts.Done++
	}
}

// endLease closes the attempt of an item that ran under lease.
func (s *itemState) endLease(it *Item, lease int64, now time.Time, outcome string) {
	for i := range it.Attempts {
		if a := &it.Attempts[i]; a.Lease == lease && a.Outcome == "" {
			a.End, a.Outcome = now, outcome
		}
	}
}

// renew moves the deadlines of a worker's running leases on.
func (s *itemState) renew(who TaskAttempt, leases []int64, now time.Time) {
	held := map[int64]bool{}
	for _, l := range leases {
		held[l] = true
	}
	if len(held) == 0 {
		return
	}
	//workflowcheck:ignore each item's deadline is its own: the order of iteration cannot show
	for _, it := range s.Items {
		if it.State != ItemRunning {
			continue
		}
		if a := it.lastAttempt(); held[a.Lease] && a.Task == who.Task && a.Attempt == who.Attempt {
			a.Deadline = now.Add(s.Config.Lease)
		}
	}
}

// expire puts items whose lease deadline passed back in the queue, and returns the next deadline (zero for none).
func (s *itemState) expire(now time.Time) time.Time {
	var next time.Time
	expired := s.idsWhere(func(it *Item) bool {
		if it.State != ItemRunning {
			return false
		}
		d := it.lastAttempt().Deadline
		if !now.Before(d) {
			return true
		}
		if next.IsZero() || d.Before(next) {
			next = d // the earliest of the rest: a minimum, whatever the order
		}
		return false
	})
	for _, id := range expired {
		it := s.Items[id]
		a := it.lastAttempt()
		s.requeue(it, now, fmt.Sprintf("lease expired: no result or renewal from %s attempt %d within %s", a.Task, a.Attempt, s.Config.Lease))
	}
	return next
}

// requeue ends a running item's lease without a result: it goes back to the queue, or fails once it has been
// handed out MaxAttempts times.
func (s *itemState) requeue(it *Item, now time.Time, why string) {
	a := &it.Attempts[len(it.Attempts)-1]
	a.End, a.Outcome = now, why
	s.Counts.Running--
	if s.RetryAlone && a.Shared {
		// Lost with the other items of its take: any one of them may have ended the worker (a crash, say).
		// Counting the loss against each would fail a whole batch for one bad item; handed out alone from now
		// on, each loss is its own.
		it.Alone = true
	}
	counted := it.Handouts
	if it.Alone {
		counted-- // its one shared hand-out
	}
	if counted >= s.Config.MaxAttempts {
		msg := fmt.Sprintf("handed out %d times without a result (maxAttempts); last: %s", counted, why)
		if it.Alone {
			msg = fmt.Sprintf("handed out %d times without a result (maxAttempts), alone, after a batch it was in was lost; last: %s", counted, why)
		}
		s.finish(it, ItemFailed, msg)
		return
	}
	it.State = ItemQueued
	s.Counts.Queued++
	s.Counts.Retried++
	// The queue is in id order, which is scheduling order: the item goes back to its place, ahead of every
	// item scheduled after it.
	i := sort.Search(len(s.Queue), func(i int) bool { return s.Queue[i] > it.ID })
	s.Queue = append(s.Queue[:i], append([]int64{it.ID}, s.Queue[i:]...)...)
}

func (s *itemState) unqueue(id int64) {
	for i, q := range s.Queue {
		if q == id {
			s.Queue = append(s.Queue[:i], s.Queue[i+1:]...)
			s.Counts.Queued--
			return
		}
	}
}

// abandon drops an item nobody will take the result of.
func (s *itemState) abandon(it *Item) {
	switch it.State {
	case ItemQueued:
		s.unqueue(it.ID)
		s.Counts.Abandoned++
	case ItemRunning:
		return // its worker's result is counted when it comes, then dropped
	}
	s.forget(it)
}

// forget drops a held item, keeping a short record for listing.
func (s *itemState) forget(it *Item) {
	if it.Kept {
		s.KeyedBytes -= keptSize(it)
	} else {
		s.Bytes -= len(it.Args) + len(it.Result) + s.reserve()
	}
	delete(s.Items, it.ID)
	rec := *it
	rec.Args, rec.Result = nil, nil
	s.Recent = append(s.Recent, rec)
	if len(s.Recent) > maxRecent {
		s.Recent = s.Recent[len(s.Recent)-maxRecent:]
	}
}

// deliver hands a scheduler the finished items it has not had yet: every one it scheduled without hold, plus
// those of ids it asks for. A delivered item without a key is forgotten, or with acks.On kept until
// acknowledged (asked for by id, it is handed out again); a keyed one stays for the run.
func (s *itemState) deliver(who TaskAttempt, ids []int64, acks Acks) []ItemResult {
	asked := map[int64]bool{}
	for _, id := range ids {
		asked[id] = true
	}
	var out []ItemResult
	for _, id := range s.idsWhere(func(it *Item) bool {
		mine := it.Scheduler.Task == who.Task && !it.Hold && !it.Delivered
		return (it.State == ItemDone || it.State == ItemFailed) && (mine || asked[it.ID])
	}) {
		it := s.Items[id]
		out = append(out, ItemResult{ID: it.ID, Key: it.Key, State: it.State, Result: it.Result, Error: it.Error})
		it.Delivered = true
		switch {
		case it.Key == "" && acks.On:
			it.Unacked = true
		case it.Key == "":
			s.forget(it)
		case !it.Kept:
			s.keep(it)
		}
	}
	return out
}

// ack lets go of the results a scheduler acknowledges having: its own, handed out and not acknowledged yet.
func (s *itemState) ack(who TaskAttempt, acks Acks) {
	for _, id := range acks.Got {
		if it := s.Items[id]; it != nil && it.Unacked && it.Scheduler.Task == who.Task {
			s.forget(it)
		}
	}
}

// keep moves a keyed item whose result was taken to the keyed results kept for the run: its arguments go; its
// result, key and last hand-outs stay.
func (s *itemState) keep(it *Item) {
	s.Bytes -= len(it.Args) + len(it.Result) + s.reserve()
	it.Kept, it.Args = true, nil
	s.KeyedBytes += keptSize(it)
}

// keptSize is what a kept keyed item takes of MaxKeyedBytes: its result, its key (in the item and in Keys),
// its fields and its last hand-outs.
func keptSize(it *Item) int {
	return len(it.Result) + 2*len(it.Key) + keyedOverhead + len(it.Attempts)*handoutBytes
}

// hasResults says whether a scheduler task has results to be handed with its next call (not held for a
// fetch by id, not handed out yet).
func (s *itemState) hasResults(task string) bool {
	//workflowcheck:ignore a test for any: the order of iteration cannot show
	for _, it := range s.Items {
		if (it.State == ItemDone || it.State == ItemFailed) && it.Scheduler.Task == task && !it.Hold && !it.Delivered {
			return true
		}
	}
	return false
}

// finished says whether every id given has a result.
func (s *itemState) finished(ids []int64) bool {
	for _, id := range ids {
		if it := s.Items[id]; it != nil && (it.State == ItemQueued || it.State == ItemRunning) {
			return false
		}
	}
	return true
}

// gone lists the ids asked for that neither have a result in this answer nor are held by the run: their
// result was handed out before (a result without a key goes out once), or they were never scheduled.
func (s *itemState) gone(asked []int64, answered []ItemResult) []int64 {
	got := map[int64]bool{}
	for _, r := range answered {
		got[r.ID] = true
	}
	var out []int64
	for _, id := range asked {
		if s.Items[id] == nil && !got[id] {
			out = append(out, id)
		}
	}
	return out
}

// pending counts the items a scheduler task is still waiting for.
func (s *itemState) pending(task string) int {
	n := 0
	//workflowcheck:ignore a count: the order of iteration cannot show
	for _, it := range s.Items {
		if it.Scheduler.Task == task && (it.State == ItemQueued || it.State == ItemRunning) {
			n++
		}
	}
	return n
}

// UnservedAfter is how long a function whose items wait, none running, may go without a take naming it before
// its items count as unserved: the tasks that served it have ended, or are all busy with other functions.
const UnservedAfter = 30 * time.Second

// asked records that a take naming fns came in or ended its wait at now.
func (s *itemState) asked(fns []string, now time.Time) {
	if s.Asked == nil {
		s.Asked = map[string]time.Time{}
	}
	for _, fn := range fns {
		s.Asked[fn] = now
	}
}

// unattended counts a scheduler's queued items (every scheduler's, for task "") by function, for the functions
// no task takes items of: untaken, those no task ever took an item of (a name no worker serves, "stepp" for
// "step", waits for ever); unserved, those a task took before, of which no item runs now and no take named
// the function for UnservedAfter. Their scheduler says so. Each is nil when there are none.
func (s *itemState) unattended(task string, now time.Time) (untaken, unserved map[string]int) {
	running, queued := map[string]bool{}, map[string]int{}
	//workflowcheck:ignore counts: the order of iteration cannot show
	for _, it := range s.Items {
		switch {
		case it.State == ItemRunning:
			running[it.Fn] = true
		case it.State == ItemQueued && (task == "" || it.Scheduler.Task == task):
			queued[it.Fn]++
		}
	}
	//workflowcheck:ignore builds maps: the order of iteration cannot show
	for fn, n := range queued {
		asked, known := s.Asked[fn]
		switch {
		case !s.Taken[fn]:
			untaken = addTo(untaken, fn, n)
		case known && !running[fn] && now.Sub(asked) >= UnservedAfter:
			unserved = addTo(unserved, fn, n)
		}
	}
	return untaken, unserved
}

// addTo adds n to m[key], making m when it is nil.
func addTo(m map[string]int, key string, n int) map[string]int {
	if m == nil {
		m = map[string]int{}
	}
	m[key] += n
	return m
}

// raise returns a scheduler's first error not raised yet, and clears it: join and done raise an error once.
func (s *itemState) raise(task string) string {
	e := s.Errors[task]
	delete(s.Errors, task)
	return e
}

// list gives up to n items for the items query: those not finished (queued, running) in id order, then the
// finished ones, the latest first, whether the run still holds them (a result not yet taken or acknowledged by
// its scheduler, a keyed one) or keeps them for the listing only (Recent). Held ones first, as before, showed
// an ended run's oldest items: its scheduler's last results are never acknowledged, no call coming after.
// With states, only the items in one of them (ItemQueued...) are listed, and count against n.
func (s *itemState) list(n int, states ...string) []Item {
	in := func(it *Item) bool { return len(states) == 0 || slices.Contains(states, it.State) }
	var out, finished []Item
	for _, id := range s.idsWhere(in) {
		switch it := s.Items[id]; it.State {
		case ItemQueued, ItemRunning:
			if len(out) < n {
				out = append(out, *it)
			}
		default:
			finished = append(finished, *it)
		}
	}
	for i := range s.Recent {
		if in(&s.Recent[i]) {
			finished = append(finished, s.Recent[i])
		}
	}
	slices.SortStableFunc(finished, func(a, b Item) int {
		if c := b.ended().Compare(a.ended()); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	return append(out, finished[:min(len(finished), max(n-len(out), 0))]...)
}

// ended is when a finished item's last hand-out ended (zero if it had none).
func (it *Item) ended() time.Time {
	if len(it.Attempts) == 0 {
		return time.Time{}
	}
	return it.lastAttempt().End
}

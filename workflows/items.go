package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/clusterrun/clusterrun/spec"
)

// ClusterItems holds a run's work items (ClusterCoordinator's closures): the run starts it as a child when its
// spec has `items`, and the parent's end terminates it. Tasks reach it through their host worker, which sends
// one update per request and names the calling task attempt itself, so a task cannot speak for another.
//
// It is a workflow of its own, not part of ClusterRun, because items must not be bounded by one history: the
// run's history is pinned by its long-running RunTask activities and cannot continue as new, while this one
// has nothing long-running in it and continues as new whenever its history grows, carrying its itemState.

// Update and query names of ClusterItems.
const (
	ItemsWorkflowType   = "ClusterItems"
	UpdateItemsSchedule = "items-schedule"
	UpdateItemsTake     = "items-take"
	UpdateItemsWait     = "items-wait"
	QueryItems          = "items"
	MemoItems           = "clusterrun.items"
)

// ItemsWorkflowID is the id of a run's ClusterItems workflow.
func ItemsWorkflowID(runWorkflowID string) string { return runWorkflowID + "/items" }

// MaxItemWait bounds how long one update waits inside the workflow; clients call again to wait longer. Short
// waits keep continue-as-new prompt: it waits for every running handler.
const MaxItemWait = 10 * time.Second

// itemsHistoryLimit continues ClusterItems as new past this many events where the server suggests it later or
// never (a server's default suggestion comes first, at 4,096 events: limit.historyCount.suggestContinueAsNew).
const itemsHistoryLimit = 10_000

// ItemsInput starts ClusterItems, or continues it with its state.
type ItemsInput struct {
	RunID  string     `json:"runID"`
	Config spec.Items `json:"config"`
	State  *itemState `json:"state,omitempty"`
}

// ScheduleItemsRequest schedules items for From. Items past the queue's room are not taken: the answer's IDs
// cover a prefix, and the caller sends the rest again. Wait is how long to wait for room.
type ScheduleItemsRequest struct {
	From  TaskAttempt   `json:"from"`
	Items []NewItem     `json:"items"`
	Hold  bool          `json:"hold,omitempty"`
	Wait  time.Duration `json:"wait,omitempty"`
	Acks
}

// Acks is how a client that acknowledges results takes them (Python's): with On, a result handed to it stays
// in the run until a later call lists it in Got, and a wait that asks for it by id gets it again (its first
// answer may have been lost with a host worker). Without On, a result goes out once.
type Acks struct {
	On  bool    `json:"acks,omitempty"`
	Got []int64 `json:"got,omitempty"`
}

// ScheduleItemsResult holds the ids of the items taken, in order, and the scheduler's finished items.
type ScheduleItemsResult struct {
	IDs     []int64      `json:"ids"`
	Results []ItemResult `json:"results,omitempty"`
}

// TakeItemsRequest reports a worker's outcomes, renews the leases it still holds, and takes up to Max items
// of the functions it serves, waiting up to Wait for one.
type TakeItemsRequest struct {
	From  TaskAttempt   `json:"from"`
	Done  []ItemOutcome `json:"done,omitempty"`
	Renew []int64       `json:"renew,omitempty"`
	Fns   []string      `json:"fns,omitempty"`
	Max   int           `json:"max,omitempty"`
	Wait  time.Duration `json:"wait,omitempty"`
}

// TakeItemsResult holds the items leased to the worker.
type TakeItemsResult struct {
	Items []Lease `json:"items"`
}

// WaitItemsRequest waits up to Wait until the given ids, or with All every item From's task scheduled, have
// finished. With Raise, an answer with nothing pending carries the task's first error and clears it. With
// neither IDs nor All it only acknowledges (Acks.Got) and hands out nothing.
type WaitItemsRequest struct {
	From  TaskAttempt   `json:"from"`
	IDs   []int64       `json:"ids,omitempty"`
	All   bool          `json:"all,omitempty"`
	Raise bool          `json:"raise,omitempty"`
	Wait  time.Duration `json:"wait,omitempty"`
	Acks
}

// WaitItemsResult holds the caller's finished items, how many of its task's items are pending, the error
// raised, if any, and the ids asked for that the run has no result of to hand out (Gone): handed out already,
// or never scheduled.
type WaitItemsResult struct {
	Results []ItemResult `json:"results,omitempty"`
	Pending int          `json:"pending"`
	// Untaken counts, by function, the scheduler's queued items of functions no task has ever taken an item of;
	// Unserved those of functions a task took items of before, none running now and no take naming them for
	// UnservedAfter (itemState.unattended).
	Untaken  map[string]int `json:"untaken,omitempty"`
	Unserved map[string]int `json:"unserved,omitempty"`
	Error    string         `json:"error,omitempty"`
	Gone     []int64        `json:"gone,omitempty"`
}

// ItemsView answers the items query.
type ItemsView struct {
	Config spec.Items `json:"config"`
	Counts ItemCounts `json:"counts"`
	Items  []Item     `json:"items"`
	// Untaken counts, by function, the queued items of functions no task has taken an item of yet; Unserved
	// those of functions no task takes items of now (itemState.unattended).
	Untaken  map[string]int `json:"untaken,omitempty"`
	Unserved map[string]int `json:"unserved,omitempty"`
}

// ErrItemsMoving refuses an update while ClusterItems moves to a new history; ErrItemsBusy refuses a request
// that would only wait, while ParkBudget requests wait already. Host workers send either again.
const (
	ErrItemsMoving = "ItemsMoving"
	ErrItemsBusy   = "ItemsBusy"
)

var errItemsMoving = temporal.NewApplicationError("the run's items are moving to a new history; send the request again", ErrItemsMoving)

// errItemsBusy refuses a request that would only wait; its details are the counts it saw, so that its host
// worker can tell from the memo's when to send it again.
func (w *itemsWorkflow) errItemsBusy() error {
	return temporal.NewApplicationError("enough requests wait for the run's items already; send the request again when they change",
		ErrItemsBusy, w.s.Counts)
}

// ParkBudget bounds the requests that wait inside ClusterItems at once. A waiting request is an update in
// flight, and Temporal admits 10 per workflow by default (history.maxInFlightUpdates): past that it refuses
// every update, a worker's report of its results among them, and 50 workers that each waited for items took
// every slot. So at most ParkBudget requests wait here, and the rest of the limit is left to requests that
// are answered at once. A request that would only wait is refused (ErrItemsBusy: nothing reaches the
// history) and its host worker sends it again when the item counts in the workflow's memo say it may be
// answered (a description, which costs the workflow no task); one that carries something to apply is
// answered at once.
const ParkBudget = 4

// ChangeItemsWaits marks items workflows whose requests do not wait past ParkBudget, and whose schedule stops
// waiting for room when its scheduler has results to take (itemState.Waits).
const ChangeItemsWaits = "clusterrun-items-waits"

// ChangeItemsAnswerBeforeMove marks items workflows that answer their last requests in a workflow task before
// the one that continues as new. An update answered in the same task as the continue-as-new is at times
// never given to its caller (temporalio/temporal#6375): the caller sends it again, the new history takes it
// as news, and the items the lost answer handed out wait for their lease to run out (a minute by default)
// while the chief's join waits for them. Requests that come meanwhile are refused as moving, and sent again.
const ChangeItemsAnswerBeforeMove = "clusterrun-items-answer-before-move"

// ChangeItemsMemoAtMove marks items workflows that publish their counts before they continue as new. The
// results applied in the workflow task that decides to move were left out of the memo until the next history
// published them, and a run that ended meanwhile kept counts that showed those items running for good.
const ChangeItemsMemoAtMove = "clusterrun-items-memo-at-move"

// ChangeItemsRetryAlone marks items workflows that do not count a lost hand-out shared with other items
// toward maxAttempts, and hand such an item out alone from then on (itemState.RetryAlone).
const ChangeItemsRetryAlone = "clusterrun-items-retry-alone"

// ClusterItems is the work-item workflow; see the top of this file.
func ClusterItems(ctx workflow.Context, in ItemsInput) error {
	s := in.State
	if s == nil {
		s = newItemState(in.Config)
	}
	s.init()
	if !s.RetryAlone && workflow.GetVersion(ctx, ChangeItemsRetryAlone, workflow.DefaultVersion, 1) == 1 {
		s.RetryAlone = true // carried to the next history with the state: asked once per run's items
	}
	if !s.Waits && workflow.GetVersion(ctx, ChangeItemsWaits, workflow.DefaultVersion, 1) == 1 {
		s.Waits = true
	}
	w := &itemsWorkflow{s: s}
	if err := w.register(ctx); err != nil {
		return err
	}
	for !w.moving {
		now := workflow.Now(ctx)
		next := s.expire(now)
		w.publish(ctx)
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(now), time.Millisecond)
		}
		w.changed = false
		ok, err := workflow.AwaitWithTimeout(ctx, wait, func() bool { return w.changed || w.historyFull(ctx) })
		if err != nil {
			return nil // canceled: the run ended
		}
		if ok && w.historyFull(ctx) {
			w.moving = true
		}
	}
	// Let every handler answer (waiting ones return at once), then carry the state to a new history.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return nil
	}
	if s.Counts != w.memo && workflow.GetVersion(ctx, ChangeItemsMemoAtMove, workflow.DefaultVersion, 1) == 1 {
		w.publish(ctx) // the run may end before the next history publishes them
	}
	if workflow.GetVersion(ctx, ChangeItemsAnswerBeforeMove, workflow.DefaultVersion, 1) == 1 {
		// The answers go out in a workflow task before the one that continues as new: see the constant.
		if err := workflow.Sleep(ctx, time.Millisecond); err != nil {
			return nil
		}
	}
	return workflow.NewContinueAsNewError(ctx, ClusterItems, ItemsInput{RunID: in.RunID, Config: in.Config, State: s})
}

type itemsWorkflow struct {
	s       *itemState
	memo    ItemCounts // the counts in the workflow's memo
	changed bool       // the state changed since the main loop last looked
	moving  bool       // continue-as-new is under way
	parked  int        // requests waiting in await
}

// publish puts the item counts in the workflow's memo when they changed: status reads them there, and host
// workers read them to tell when a refused request may be answered.
func (w *itemsWorkflow) publish(ctx workflow.Context) {
	if w.s.Counts == w.memo {
		return
	}
	w.memo = w.s.Counts
	if err := workflow.UpsertMemo(ctx, map[string]any{MemoItems: w.memo}); err != nil {
		workflow.GetLogger(ctx).Warn("cannot publish item counts", "error", err)
	}
}

func (w *itemsWorkflow) historyFull(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() > itemsHistoryLimit
}

// register sets the query and the update handlers. Validators refuse bad input before it reaches the history.
func (w *itemsWorkflow) register(ctx workflow.Context) error {
	// states was added after limit: a CLI that sends limit alone lists every state.
	if err := workflow.SetQueryHandler(ctx, QueryItems, func(limit int, states []string) (ItemsView, error) {
		view := ItemsView{Config: w.s.Config, Counts: w.s.Counts, Items: w.s.list(max(0, min(limit, 10_000)), states...)}
		view.Untaken, view.Unserved = w.s.unattended("", workflow.Now(ctx))
		return view, nil
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateItemsSchedule, w.schedule,
		workflow.UpdateHandlerOptions{Validator: w.checkSchedule}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateItemsTake, w.take,
		workflow.UpdateHandlerOptions{Validator: w.checkTake}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateItemsWait, w.wait,
		workflow.UpdateHandlerOptions{Validator: w.checkWait})
}

func (w *itemsWorkflow) checkSchedule(req ScheduleItemsRequest) error {
	if w.moving {
		return errItemsMoving
	}
	if err := checkFrom(req.From); err != nil {
		return err
	}
	if len(req.Items) == 0 || len(req.Items) > MaxItemsPerCall {
		return fmt.Errorf("schedule takes 1..%d items per call (got %d)", MaxItemsPerCall, len(req.Items))
	}
	if err := checkAcks(req.Acks); err != nil {
		return err
	}
	for _, it := range req.Items {
		if err := checkNewItem(it); err != nil {
			return err
		}
	}
	if w.onlyWaits(req.From, req.Wait, len(req.Acks.Got) > 0, w.scheduleReady(req)) {
		return w.errItemsBusy()
	}
	return nil
}

func (w *itemsWorkflow) checkTake(req TakeItemsRequest) error {
	if w.moving {
		return errItemsMoving
	}
	if err := checkFrom(req.From); err != nil {
		return err
	}
	if len(req.Done) > MaxItemsPerCall || len(req.Renew) > MaxItemsPerCall || len(req.Fns) > MaxItemsPerCall || req.Max < 0 || req.Max > MaxItemsPerCall {
		return fmt.Errorf("take reports, renews, serves and takes at most %d items or functions per call", MaxItemsPerCall)
	}
	if req.Max > 0 && len(req.Fns) == 0 {
		return errors.New("take names no function to serve")
	}
	for _, o := range req.Done {
		if err := checkOutcome(o); err != nil {
			return err
		}
	}
	if req.Max > 0 && w.onlyWaits(req.From, req.Wait, len(req.Done) > 0 || len(req.Renew) > 0, w.s.hasWork(fnSet(req.Fns))) {
		return w.errItemsBusy()
	}
	return nil
}

func (w *itemsWorkflow) checkWait(req WaitItemsRequest) error {
	if w.moving {
		return errItemsMoving
	}
	if err := checkFrom(req.From); err != nil {
		return err
	}
	if len(req.IDs) > MaxItemsPerCall {
		return fmt.Errorf("wait names at most %d items per call (got %d)", MaxItemsPerCall, len(req.IDs))
	}
	if err := checkAcks(req.Acks); err != nil {
		return err
	}
	if (req.All || len(req.IDs) > 0) && w.onlyWaits(req.From, req.Wait, len(req.Acks.Got) > 0, w.waitReady(req)) {
		return w.errItemsBusy()
	}
	return nil
}

// onlyWaits says whether a request should be refused as busy: ParkBudget requests wait already, and this one
// would wait too (it asks to, and what it waits for is not there) with nothing to apply first (no outcomes,
// renewals or acknowledgements, and an attempt the run has seen: a new attempt's first call frees its old
// attempt's items).
func (w *itemsWorkflow) onlyWaits(from TaskAttempt, wait time.Duration, applies, ready bool) bool {
	return w.parked >= ParkBudget && wait > 0 && !ready && !applies && w.s.Attempts[from.Task] >= from.Attempt
}

// scheduleReady says whether a schedule would take an item now, or (itemState.Waits) hand its scheduler
// results: with acknowledgements, results hold room until the scheduler's next call lets them go, so a
// schedule that waited for room while they piled up would wait its whole wait.
func (w *itemsWorkflow) scheduleReady(req ScheduleItemsRequest) bool {
	return w.s.room(len(req.Items[0].Args)) || w.s.Keys[req.Items[0].Key] != 0 || (w.s.Waits && w.s.hasResults(req.From.Task))
}

func (w *itemsWorkflow) waitReady(req WaitItemsRequest) bool {
	if req.All {
		return w.s.pending(req.From.Task) == 0
	}
	return w.s.finished(req.IDs)
}

func fnSet(fns []string) map[string]bool {
	set := make(map[string]bool, len(fns))
	for _, f := range fns {
		set[f] = true
	}
	return set
}

// MaxItemsPerCall bounds the items in one request, so that one update stays small in the history; MaxAcksPerCall
// bounds the results one request acknowledges.
const (
	MaxItemsPerCall = 1000
	MaxAcksPerCall  = 10_000
)

func checkAcks(a Acks) error {
	if len(a.Got) > MaxAcksPerCall {
		return fmt.Errorf("a call acknowledges at most %d results (got %d); acknowledge the rest with the next", MaxAcksPerCall, len(a.Got))
	}
	return nil
}

func checkFrom(from TaskAttempt) error {
	if from.Task == "" || from.Attempt < 1 {
		return errors.New("the request names no task attempt")
	}
	return nil
}

// await waits up to d for cond, or until the workflow moves to a new history. With ParkBudget requests
// waiting already, it does not wait: the request is answered with what there is, and its client asks again.
func (w *itemsWorkflow) await(ctx workflow.Context, d time.Duration, cond func() bool) {
	if d <= 0 || cond() || (w.s.Waits && w.parked >= ParkBudget) {
		return
	}
	w.parked++
	defer func() { w.parked-- }()
	_, _ = workflow.AwaitWithTimeout(ctx, min(d, MaxItemWait), func() bool { return w.moving || cond() })
}

func (w *itemsWorkflow) schedule(ctx workflow.Context, req ScheduleItemsRequest) (ScheduleItemsResult, error) {
	w.s.seen(req.From, workflow.Now(ctx))
	w.s.ack(req.From, req.Acks) // first: the room this call waits for may be its own results
	w.await(ctx, req.Wait, func() bool { return w.scheduleReady(req) })
	ids, err := w.s.schedule(req.From, req.Items, req.Hold, workflow.Now(ctx))
	w.changed = true
	if err != nil && len(ids) == 0 {
		return ScheduleItemsResult{}, err
	}
	// Items before a refused key are taken; the caller sends the rest again and gets the refusal then.
	return ScheduleItemsResult{IDs: ids, Results: w.s.deliver(req.From, nil, req.Acks)}, nil
}

func (w *itemsWorkflow) take(ctx workflow.Context, req TakeItemsRequest) (TakeItemsResult, error) {
	now := workflow.Now(ctx)
	w.s.seen(req.From, now)
	w.s.complete(req.Done, now)
	w.s.renew(req.From, req.Renew, now)
	w.changed = true
	if req.Max == 0 {
		return TakeItemsResult{}, nil
	}
	fns := fnSet(req.Fns)
	w.s.asked(req.Fns, now)
	w.await(ctx, req.Wait, func() bool { return w.s.hasWork(fns) })
	w.s.asked(req.Fns, workflow.Now(ctx))
	out := TakeItemsResult{Items: w.s.take(req.From, fns, req.Max, workflow.Now(ctx))}
	if len(out.Items) > 0 {
		w.changed = true
	}
	return out, nil
}

func (w *itemsWorkflow) wait(ctx workflow.Context, req WaitItemsRequest) (WaitItemsResult, error) {
	w.s.seen(req.From, workflow.Now(ctx))
	w.s.ack(req.From, req.Acks)
	if !req.All && len(req.IDs) == 0 { // an acknowledgement only: it hands out nothing
		w.changed = true
		return WaitItemsResult{Pending: w.s.pending(req.From.Task)}, nil
	}
	w.await(ctx, req.Wait, func() bool { return w.waitReady(req) })
	out := WaitItemsResult{Results: w.s.deliver(req.From, req.IDs, req.Acks), Pending: w.s.pending(req.From.Task)}
	out.Untaken, out.Unserved = w.s.unattended(req.From.Task, workflow.Now(ctx))
	out.Gone = w.s.gone(req.IDs, out.Results)
	if req.Raise && out.Pending == 0 {
		out.Error = w.s.raise(req.From.Task)
	}
	w.changed = true
	return out, nil
}

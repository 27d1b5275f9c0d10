package activities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/task"
	"github.com/clusterrun/clusterrun/workflows"
)

// Work items: the control socket's item endpoints pass each request on as one update of the run's
// ClusterItems workflow, naming the calling attempt themselves (a task cannot speak for another).

// itemsStartWait is how long a request waits for the run's ClusterItems workflow to exist (the run starts it
// with its first workflow task) before the run is taken to have no work items.
const itemsStartWait = 5 * time.Second

// notReadyWait is how long a call is sent again while the items workflow's tasks fail under it (the server's
// WorkflowNotReady) before the call fails with the reason: one failed task passes, a broken one does not.
const notReadyWait = 30 * time.Second

func (c *controlServer) itemsSchedule(r *http.Request) (any, int, error) {
	var req task.ScheduleRequest
	if err := decodeItems(task.PathItemsSchedule, r.Body, &req); err != nil {
		return nil, http.StatusBadRequest, err
	}
	wait, err := itemWait(req.Wait)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	in := workflows.ScheduleItemsRequest{From: c.from(), Hold: req.Hold, Acks: workflows.Acks{On: req.Acks, Got: req.Got}}
	for _, it := range req.Items {
		in.Items = append(in.Items, workflows.NewItem(it))
	}
	var out workflows.ScheduleItemsResult
	if status, err := c.itemsUpdate(r, workflows.UpdateItemsSchedule, wait, func(w time.Duration) any { in.Wait = w; return in }, &out); err != nil {
		return nil, status, err
	}
	ans := task.ScheduleAnswer{IDs: out.IDs, Results: taskResults(out.Results)}
	if ans.IDs == nil {
		ans.IDs = []int64{}
	}
	return ans, 0, nil
}

func (c *controlServer) itemsTake(r *http.Request) (any, int, error) {
	var req task.TakeRequest
	if err := decodeItems(task.PathItemsTake, r.Body, &req); err != nil {
		return nil, http.StatusBadRequest, err
	}
	wait, err := itemWait(req.Wait)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	in := workflows.TakeItemsRequest{From: c.from(), Renew: req.Renew, Fns: req.Fns, Max: req.Max}
	for _, o := range req.Done {
		in.Done = append(in.Done, workflows.ItemOutcome(o))
	}
	var out workflows.TakeItemsResult
	var status int
	if wait > 0 && in.Max > 0 {
		status, err = c.takeInTurn(r, &in, wait, &out)
	} else {
		status, err = c.underWay(r.Context(), func() (int, error) {
			return c.itemsUpdate(r, workflows.UpdateItemsTake, wait, func(w time.Duration) any { in.Wait = w; return in }, &out)
		})
	}
	if err != nil {
		return nil, status, err
	}
	ans := task.TakeAnswer{Items: []task.LeasedItem{}}
	for _, l := range out.Items {
		ans.Items = append(ans.Items, task.LeasedItem(l))
	}
	return ans, 0, nil
}

func (c *controlServer) itemsWait(r *http.Request) (any, int, error) {
	var req task.WaitRequest
	if err := decodeItems(task.PathItemsWait, r.Body, &req); err != nil {
		return nil, http.StatusBadRequest, err
	}
	wait, err := itemWait(req.Wait)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	in := workflows.WaitItemsRequest{From: c.from(), IDs: req.IDs, All: req.All, Raise: req.Raise,
		Acks: workflows.Acks{On: req.Acks, Got: req.Got}}
	var out workflows.WaitItemsResult
	if status, err := c.itemsUpdate(r, workflows.UpdateItemsWait, wait, func(w time.Duration) any { in.Wait = w; return in }, &out); err != nil {
		return nil, status, err
	}
	return task.WaitAnswer{Results: taskResults(out.Results), Pending: out.Pending, Error: out.Error, Gone: out.Gone,
		Untaken: out.Untaken, Unserved: out.Unserved}, 0, nil
}

func (c *controlServer) from() workflows.TaskAttempt {
	return workflows.TaskAttempt{Task: c.e.ref.Task, Attempt: c.e.ref.Attempt}
}

func taskResults(rs []workflows.ItemResult) []task.ItemResult {
	var out []task.ItemResult
	for _, r := range rs {
		out = append(out, task.ItemResult(r))
	}
	return out
}

// decodeItems reads a work-item request: strict JSON like every other, with room for a batch of items.
func decodeItems(path string, body io.Reader, v any) error {
	return decodeLimit(path, body, v, task.MaxItemsBody)
}

// itemWait reads a request's wait: empty for none, at most MaxItemWait (clients call again to wait longer).
func itemWait(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("wait %q is not a duration; write e.g. 5s", cut(s, 64))
	}
	return min(d, workflows.MaxItemWait), nil
}

// requestIDPattern is what a call's id (task.HeaderRequestID) may be.
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// itemsUpdateID is the update id of a work-item call: the calling attempt's own, with the id its client sent
// with every try of the call. Temporal applies an update id once per execution and answers a repeat with the
// first answer, so a call tried again after its answer was lost (this worker restarted while the call waited)
// gets that answer. Without the header, the id is drawn here, so that this worker's own tries of the call
// (itemsUpdate) apply it once.
func (c *controlServer) itemsUpdateID(r *http.Request) (string, error) {
	id := r.Header.Get(task.HeaderRequestID)
	if id == "" {
		return fmt.Sprintf("%s/%d/w-%016x", c.e.ref.Task, c.e.ref.Attempt, rand.Uint64()), nil
	}
	if !requestIDPattern.MatchString(id) {
		return "", fmt.Errorf("header %s %q: write 1 to 64 letters, digits, - or _ (a fresh random one per call)", task.HeaderRequestID, cut(id, 80))
	}
	return fmt.Sprintf("%s/%d/%s", c.e.ref.Task, c.e.ref.Attempt, id), nil
}

// itemsUpdate sends one update to the run's ClusterItems workflow and decodes its answer into out; in(w) is the
// request with a wait of w. It sends it again while the workflow moves to a new history or is about to start,
// and when the workflow refused it as busy (enough requests wait there already) once the workflow's memo says
// it may be answered. A refused take whose wait runs out is answered here with no item; a schedule or a wait
// is sent once more without waiting, for what it has to hand. Errors name what the task can do.
func (c *controlServer) itemsUpdate(r *http.Request, name string, wait time.Duration, in func(time.Duration) any, out any) (int, error) {
	return c.itemsUpdateAs(r, "", name, wait, in, out)
}

// itemsUpdateAs is itemsUpdate with suffix added to the call's update id: one call sent as two updates
// (takeInTurn) applies each once.
func (c *controlServer) itemsUpdateAs(r *http.Request, suffix, name string, wait time.Duration, in func(time.Duration) any, out any) (int, error) {
	updateID, err := c.itemsUpdateID(r)
	if err != nil {
		return http.StatusBadRequest, err
	}
	updateID += suffix
	ctx := r.Context()
	if wait > 0 { // a worker waiting for items, a chief in join: not hung (a lease's renewal does not wait)
		c.e.beginWait()
		defer c.e.endWait()
	}
	id := workflows.ItemsWorkflowID(c.e.ref.WorkflowID)
	began := time.Now()
	delay := 20 * time.Millisecond
	for {
		// A call the server does not take is held until it does (hold.go); the update's id makes it count once.
		held := c.e.hold(r.Header.Get(task.HeaderRequestID), max(wait-time.Since(began), 0))
		err := untilServerAnswers(ctx, c.e.ended, held, func() error {
			return c.sendItems(conn.WithRefusedHook(ctx, held.refusedInFlight), id, name, updateID, in(max(wait-time.Since(began), 0)), out)
		})
		if err == nil {
			c.e.itemsSeen.Store(true)
			return 0, nil
		}
		status, retry, why := itemsError(err)
		if status == http.StatusNotFound && time.Since(began) > itemsStartWait {
			return c.itemsMissing(ctx, id)
		}
		if notReady := (*serviceerror.WorkflowNotReady)(nil); errors.As(err, &notReady) && time.Since(began) > notReadyWait {
			return status, errors.New(why)
		}
		if !retry || ctx.Err() != nil {
			return status, errors.New(why)
		}
		if status == http.StatusTooManyRequests {
			var saw workflows.ItemCounts
			_ = appErrDetails(err, &saw)
			take := name == workflows.UpdateItemsTake
			if !c.awaitItems(ctx, id, take, saw, began.Add(wait)) && take {
				return 0, nil // refused, it applied nothing, and its wait ran out with no item: as the workflow answers
			}
			continue
		}
		select {
		case <-ctx.Done():
			return http.StatusRequestTimeout, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// awaitItems waits, after the items workflow refused a request as busy, until the item counts in its memo say
// the request may be answered (items queued, for a take; counts other than those it saw, for a schedule or a
// wait): true; or until its wait is over: false. It reads the workflow's description, which costs the
// workflow no task: every 100 ms at first, then further apart, up to 1 s.
func (c *controlServer) awaitItems(ctx context.Context, id string, take bool, saw workflows.ItemCounts, until time.Time) bool {
	var b backoff
	for {
		pause := min(b.next(), time.Until(until))
		if pause <= 0 {
			return false
		}
		select {
		case <-ctx.Done():
			return true // the next try says why
		case <-time.After(pause):
		}
		counts, found, err := c.itemCounts(ctx, id)
		if err != nil || !found || (take && counts.Queued > 0) || (!take && counts != saw) {
			return true
		}
	}
}

// itemCounts reads the counts in the memo of the run's ClusterItems workflow; found is false when the memo has
// none (the workflow writes them once they are other than zero) or they cannot be decoded.
func (c *controlServer) itemCounts(ctx context.Context, id string) (counts workflows.ItemCounts, found bool, err error) {
	desc, err := c.h.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return counts, false, err
	}
	p, ok := desc.GetWorkflowExecutionInfo().GetMemo().GetFields()[workflows.MemoItems]
	return counts, ok && c.h.dataConverter().FromPayload(p, &counts) == nil, nil
}

func appErrDetails(err error, v any) error {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return err
	}
	return appErr.Details(v)
}

// sendItems sends one update and waits for its answer.
func (c *controlServer) sendItems(ctx context.Context, id, name, updateID string, in, out any) error {
	h, err := c.h.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: name, UpdateID: updateID, Args: []any{in}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return err
	}
	return h.Get(ctx, out)
}

// itemsMissing says why the run's ClusterItems workflow cannot be reached: it has ended with the run, or the
// run never had one.
func (c *controlServer) itemsMissing(ctx context.Context, id string) (int, error) {
	if _, err := c.h.Client.DescribeWorkflowExecution(ctx, id, ""); err == nil {
		return http.StatusConflict, errors.New("the run's work items are closed: the run has ended")
	}
	return http.StatusNotFound, errors.New("this run has no work items: add `items: {}` to its spec (docs/control.md, Work items)")
}

// itemsError sorts an update's error: the answer's status, whether to send it again, and what to say.
func itemsError(err error) (status int, retry bool, why string) {
	var notFound *serviceerror.NotFound
	var appErr *temporal.ApplicationError
	var timedOut *client.WorkflowUpdateServiceTimeoutOrCanceledError
	var notReady *serviceerror.WorkflowNotReady
	switch {
	case errors.As(err, &notFound):
		return http.StatusNotFound, true, notFound.Error()
	case errors.As(err, &appErr) && appErr.Type() == workflows.ErrItemsMoving:
		return http.StatusServiceUnavailable, true, appErr.Message()
	case errors.As(err, &appErr) && appErr.Type() == workflows.ErrItemsBusy:
		return http.StatusTooManyRequests, true, appErr.Message()
	case errors.As(err, &appErr):
		return http.StatusBadRequest, false, appErr.Message()
	case errors.As(err, &notReady):
		// The workflow task the update was in failed (one that continued as new, when an event came in
		// meanwhile): nothing of it was applied, so this phase of the call goes again under its own id. The
		// task's client sending the whole call again instead would send again the results its "-report" had
		// already applied, to a history that does not know that id (64 duplicate results, design.md).
		return http.StatusServiceUnavailable, true, "work items: the run's items workflow failed the task that held this call, " +
			"every time for " + notReadyWait.String() + " (" + notReady.Message + "); the run's host workers' logs say why"
	case errors.As(err, &timedOut):
		return http.StatusServiceUnavailable, false, "work items: the run's items workflow did not take the call before the task " +
			"ended (the Temporal server is unreachable, or too many calls wait for it: it takes 10 at a time)"
	}
	return http.StatusServiceUnavailable, false, fmt.Sprintf("work items: %v", err)
}

package starter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/internal/codec"
	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/workflows"
)

// Run is one run, started by Start or named by Client.Run.
type Run struct {
	c  *Client
	ID string
}

// Errors a program can tell apart with errors.As.
type (
	// NoRunError: no run has this ID in the namespace. Named lists the newest runs whose spec name is the ID (a
	// name given for an ID), newest first; else Prefixed the newest whose ID starts with it (an ID cut short);
	// else Near the one whose ID is a typo or two from it among the runs of the name it starts with.
	NoRunError struct {
		ID, Namespace string
		Named         []string
		Prefixed      []string
		Near          string
	}
	// RunIDTakenError: Start was given an ID another run has used.
	RunIDTakenError struct{ ID string }
	// EncryptedError: the run's payloads are encrypted and this client has no key for them.
	EncryptedError struct {
		ID  string
		Err error
	}
	// EndedError: the run has ended, so there is nothing to stop or cancel. Status is how it ended (the run's
	// own word: Succeeded, Failed, Canceled...).
	EndedError struct{ ID, Status string }
	// RunError: the run ended, but not with success. Status holds every task's end.
	RunError struct {
		Status workflows.RunStatus
		Err    error
	}
	// SearchAttributesMissingError is a warning Start returns beside a started run: the namespace does not
	// have clusterrun's search attributes, so `clusterrun list` cannot show the run's final state.
	SearchAttributesMissingError struct{}
	// UnreadableError: the server could not be reached, or no worker answered the run's status query or log
	// read (in the seconds after the worker that held the run's state stopped, say). The run goes on; reading
	// it again later may succeed.
	UnreadableError struct {
		ID  string // the run
		Msg string // what could not be read, with a hint
		Err error
		// ServerSilent says the Temporal server itself did not answer (it is down, or cannot be reached), not
		// a worker behind it.
		ServerSilent bool
		// ServerSlow says the server is up (its health check answers) but did not answer the read in time:
		// its database may be down or overloaded.
		ServerSlow bool
	}
)

func (e *UnreadableError) Error() string {
	if e.Err == nil {
		return e.Msg
	}
	return fmt.Sprintf("%s: %v", e.Msg, e.Err)
}

// queryError says why a query failed (what: "query run R", "read the host registry"; id: the workflow asked).
// When the server answered but no worker took the query in its time, gRPC's words for it vary with who gave up
// first ("context deadline exceeded", the server's "query timed out before a worker could process it", or a
// stream reset with CANCEL, each seen as a user with every worker SIGKILLed); one sentence says it. silent says
// the server itself did not answer; gaveUp that the caller's context ended.
func queryError(what, id string, err error, silent, gaveUp bool) *UnreadableError {
	var deadline *serviceerror.DeadlineExceeded
	var canceled *serviceerror.Canceled
	if !silent && !gaveUp && (errors.Is(err, context.DeadlineExceeded) || errors.As(err, &deadline) || errors.As(err, &canceled)) {
		return &UnreadableError{ID: id, Msg: what + ": no clusterrun-worker answered it in time (is one running?)"}
	}
	return &UnreadableError{ID: id, Msg: what + " (is a clusterrun-worker running?)", Err: err, ServerSilent: silent}
}

// QueryError says why a query of workflow id that a clusterrun-worker answers failed (what: "read the host
// registry"): no worker answered in time, the server did not answer, or the error as it came. A query that got
// no answer in time from a server that is up is told apart by a describe of the workflow, which no worker
// answers: when that gets none either, the server is slow (its database down, say), not the workers (seen as a
// user: with PostgreSQL SIGKILLed under the server, `clusterrun hosts` blamed the workers, which were running).
func (c *Client) QueryError(ctx context.Context, what, id string, err error) *UnreadableError {
	e := queryError(what, id, err, c.serverSilent(ctx, err), ctx.Err() != nil)
	if e.Err != nil || ctx.Err() != nil {
		return e
	}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, derr := c.c.DescribeWorkflowExecution(dctx, id, ""); derr != nil && silent(derr) {
		return &UnreadableError{ID: id, Msg: what + ": the server answered neither it nor a describe of " + id + " in time", Err: err, ServerSlow: true}
	}
	return e
}

// serverSilent says whether a call failed because the server itself does not answer: no connection, or no
// answer in time (which a query no worker answers gives too) and no answer to a health check either.
func (c *Client) serverSilent(ctx context.Context, err error) bool {
	var unavailable *serviceerror.Unavailable
	switch {
	case errors.As(err, &unavailable):
		return true
	case !silent(err):
		return false
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_, herr := c.c.CheckHealth(hctx, &client.CheckHealthRequest{})
	return herr != nil
}

// silent says whether a call's error is the server's silence: no answer in time, or no connection.
func silent(err error) bool {
	var deadline *serviceerror.DeadlineExceeded
	var unavailable *serviceerror.Unavailable
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &deadline) || errors.As(err, &unavailable)
}
func (e *UnreadableError) Unwrap() error { return e.Err }

func (e *RunIDTakenError) Error() string {
	return fmt.Sprintf("run ID %q is already taken by another run; choose another ID (or leave it out)", e.ID)
}
func (e *EncryptedError) Error() string {
	return fmt.Sprintf("run %s's payloads are encrypted: pass --codec-key-file FILE (or set %s) with the key file its host workers use", e.ID, codec.EnvKeyFile)
}
func (e *EncryptedError) Unwrap() error { return e.Err }

func (e *RunError) Error() string {
	if e.Status.Status != "" {
		return fmt.Sprintf("run %s: %s", e.Status.Status, e.Status.Reason)
	}
	return e.Err.Error()
}
func (e *RunError) Unwrap() error { return e.Err }
func (e *SearchAttributesMissingError) Error() string {
	return fmt.Sprintf("search attributes %s and %s are not registered on this Temporal namespace, so clusterrun list shows "+
		"this run without its final state; register them with: temporal operator search-attribute create --name %s --type Keyword; "+
		"and again for %s", workflows.SearchAttrName, workflows.SearchAttrState, workflows.SearchAttrName, workflows.SearchAttrState)
}

// Run names a run started elsewhere (by the CLI, the temporal CLI, another program).
func (c *Client) Run(id string) *Run { return &Run{c: c, ID: id} }

// Status is a run's state: live while it runs, final once it has ended.
type Status struct {
	workflows.RunStatus
	// Ended says the run is over; Outcome is then its own error (nil when it succeeded).
	Ended   bool
	Outcome error
	// Heartbeats holds each running task's last heartbeat (pid, phase, progress, last output line), by task.
	Heartbeats map[string]Heartbeat
}

// Heartbeat is a running task's last heartbeat and when it came.
type Heartbeat struct {
	workflows.HeartbeatDetails
	At time.Time
}

// Results holds the result each task wrote (result.json), by task; tasks that wrote none are left out.
func (st Status) Results() map[string]json.RawMessage { return Results(st.RunStatus) }

// Results holds the result each task of a run's status wrote (result.json), by task.
func Results(st workflows.RunStatus) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for _, t := range st.Tasks {
		if len(t.Result) > 0 {
			out[t.Name] = t.Result
		}
	}
	return out
}

// Status reads the run's state: from its live query while it runs, from its result once it has ended.
func (r *Run) Status(ctx context.Context) (Status, error) {
	var st Status
	if err := r.named(); err != nil {
		return st, err
	}
	desc, err := r.c.c.DescribeWorkflowExecution(ctx, r.ID, "")
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return st, r.c.noRun(ctx, r.ID)
		}
		gone := r.c.serverSilent(ctx, err)
		return st, &UnreadableError{ID: r.ID, Msg: "describe run " + r.ID, Err: err, ServerSilent: gone, ServerSlow: !gone && silent(err) && ctx.Err() == nil}
	}
	if t := desc.GetWorkflowExecutionInfo().GetType().GetName(); t != workflows.WorkflowType {
		return st, fmt.Errorf("%s is a %s workflow, not a clusterrun run", r.ID, t)
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		v, err := r.c.c.QueryWorkflow(ctx, r.ID, "", workflows.QueryStatus)
		if err != nil {
			return st, r.c.QueryError(ctx, "query run "+r.ID, r.ID, err)
		}
		if err := v.Get(&st.RunStatus); err != nil {
			return st, r.undecodable(err)
		}
		pending := desc.GetPendingActivities()
		if st.Sharded {
			pending = append(pending, r.shardActivities(ctx, desc.GetPendingChildren())...)
		}
		st.Heartbeats = heartbeatsOf(pending)
		st.Items = r.itemCounts(ctx, st.RunStatus)
		return st, nil
	}
	st.Ended = true
	st.RunStatus, st.Outcome = r.wait(ctx)
	if info := desc.GetWorkflowExecutionInfo(); st.StartTime.IsZero() && info.GetStartTime() != nil {
		// A run that rejected its spec carries no status of its own: its start and its memo say what there is.
		st.StartTime = info.GetStartTime().AsTime()
		dc, _ := conn.DataConverter() // the dial that came before checked it
		if p := info.GetMemo().GetFields()[workflows.MemoName]; p != nil && dc.FromPayload(p, &st.Name) != nil {
			st.Name = ""
		}
	}
	var enc *EncryptedError
	if errors.As(st.Outcome, &enc) {
		return st, enc // not the run's outcome: this client cannot read it
	}
	st.Items = r.itemCounts(ctx, st.RunStatus)
	return st, nil
}

// shardActivities lists the pending activities of a sharded run's shards: its tasks' leases.
func (r *Run) shardActivities(ctx context.Context, children []*workflowpb.PendingChildExecutionInfo) []*workflowpb.PendingActivityInfo {
	var out []*workflowpb.PendingActivityInfo
	for _, ch := range children {
		if ch.GetWorkflowTypeName() != workflows.ShardWorkflowType {
			continue
		}
		desc, err := r.c.c.DescribeWorkflowExecution(ctx, ch.GetWorkflowId(), ch.GetRunId())
		if err != nil {
			continue // a shard that just ended holds no leases
		}
		out = append(out, desc.GetPendingActivities()...)
	}
	return out
}

// itemCounts reads the work-item counts from the memo of the run's ClusterItems workflow; nil when the run
// has no work items (st, its status, says so, or there is no such workflow).
func (r *Run) itemCounts(ctx context.Context, st workflows.RunStatus) *workflows.ItemCounts {
	if st.NoItems {
		return nil
	}
	desc, err := r.c.c.DescribeWorkflowExecution(ctx, workflows.ItemsWorkflowID(r.ID), "")
	if err != nil {
		return nil
	}
	var counts workflows.ItemCounts
	p, ok := desc.GetWorkflowExecutionInfo().GetMemo().GetFields()[workflows.MemoItems]
	if ok {
		dc, _ := conn.DataConverter() // the dial that came before checked it
		if dc.FromPayload(p, &counts) != nil {
			return nil
		}
	}
	return &counts
}

// Items lists a run's work items: its counts, the items not finished yet (queued, running), then the finished
// ones the run holds or kept for the listing (its 200 most recently let go), the latest first, at most limit
// in all. With states (workflows.ItemQueued...), only the items in one of them are listed.
func (r *Run) Items(ctx context.Context, limit int, states ...string) (workflows.ItemsView, error) {
	var view workflows.ItemsView
	if err := r.named(); err != nil {
		return view, err
	}
	for _, st := range states {
		if !slices.Contains(itemStates, st) {
			return view, fmt.Errorf("items in state %q: an item is %s", st, strings.Join(itemStates, ", "))
		}
	}
	v, err := r.c.c.QueryWorkflow(ctx, workflows.ItemsWorkflowID(r.ID), "", workflows.QueryItems, limit, states)
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			if _, derr := r.Status(ctx); derr != nil {
				return view, derr
			}
			return view, &NoItemsError{ID: r.ID}
		}
		return view, r.c.QueryError(ctx, "query the items of run "+r.ID, r.ID, err)
	}
	if err := v.Get(&view); err != nil {
		return view, r.undecodable(err)
	}
	if len(states) > 0 { // a worker from before states lists them all
		view.Items = slices.DeleteFunc(view.Items, func(it workflows.Item) bool { return !slices.Contains(states, it.State) })
	}
	return view, nil
}

// NoTaskError says a run has no task of the name a caller gave (LogOptions.Tasks); Tasks lists those it has.
type NoTaskError struct {
	ID, Task string
	Tasks    []string
}

func (e *NoTaskError) Error() string {
	return fmt.Sprintf("run %s has no task %q (its tasks are %s)", e.ID, e.Task, cutList(e.Tasks, 200))
}

// cutList joins names with commas, cut to about n bytes with how many more there are.
func cutList(names []string, n int) string {
	var b strings.Builder
	for i, name := range names {
		if i > 0 && b.Len()+len(name) > n {
			fmt.Fprintf(&b, ", and %d more", len(names)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(name)
	}
	return b.String()
}

func (e *EndedError) Error() string {
	return fmt.Sprintf("run %s has already ended (%s)", e.ID, e.Status)
}

// itemStates are the states an item can be in, for Items.
var itemStates = []string{workflows.ItemQueued, workflows.ItemRunning, workflows.ItemDone, workflows.ItemFailed}

// NoItemsError says a run has no work items: its spec has no items block.
type NoItemsError struct{ ID string }

func (e *NoItemsError) Error() string {
	return fmt.Sprintf("run %s has no work items: its spec has no `items:` block", e.ID)
}

// Wait blocks until the run ends (or ctx does) and returns its final status; it waits through a server outage,
// as the run does. The error is nil when the run succeeded, a *RunError when it failed, timed out or was
// canceled, and ctx's error when ctx ended first.
func (r *Run) Wait(ctx context.Context) (workflows.RunStatus, error) {
	if err := r.named(); err != nil {
		return workflows.RunStatus{}, err
	}
	st, err := r.wait(ctx)
	if st.Status != "" {
		st.Items = r.itemCounts(ctx, st)
	}
	if err == nil || ctx.Err() != nil {
		return st, err
	}
	var enc *EncryptedError
	if errors.As(err, &enc) || st.Status == "" {
		return st, err
	}
	return st, &RunError{Status: st, Err: err}
}

func (r *Run) wait(ctx context.Context) (workflows.RunStatus, error) {
	var st workflows.RunStatus
	err := r.c.c.GetWorkflow(ctx, r.ID, "").Get(ctx, &st)
	for serverGone(err) && ctx.Err() == nil && !r.deadlineHit(ctx, err) {
		// An outage: the run goes on without the server, and so does waiting for its end.
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
			err = r.c.c.GetWorkflow(ctx, r.ID, "").Get(ctx, &st)
		}
	}
	if err == nil {
		return st, nil
	}
	if ctx.Err() != nil || r.deadlineHit(ctx, err) {
		return st, ctx.Err()
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return st, r.c.noRun(ctx, r.ID)
	}
	if errors.Is(err, converter.ErrEncodingIsNotSupported) {
		return st, r.undecodable(err)
	}
	st, _ = workflows.StatusFromError(err)
	var appErr *temporal.ApplicationError
	if st.Status == "" && errors.As(err, &appErr) && appErr.Type() == workflows.ErrInvalidSpec {
		// It ended in its first step and carries no status: what it said is its status (a run the temporal
		// CLI started, which checks no spec, showed an empty one).
		st.Status, st.Reason = workflows.StatusFailed, "it rejected its spec: "+appErr.Message()
	}
	return st, err
}

// serverGone says err is no answer from the server (down, restarting, cut off), not the run's outcome.
func serverGone(err error) bool {
	var ended *temporal.WorkflowExecutionError
	var unavailable *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	return err != nil && !errors.As(err, &ended) &&
		(errors.As(err, &unavailable) || errors.As(err, &deadline) || errors.Is(err, context.DeadlineExceeded))
}

// deadlineHit says the server answered DeadlineExceeded for ctx's own deadline, a moment before ctx saw it
// pass; it waits for ctx to end then. (Found as a flaky ExampleRun_Wait on a loaded machine.)
func (r *Run) deadlineHit(ctx context.Context, err error) bool {
	var dl *serviceerror.DeadlineExceeded
	deadline, ok := ctx.Deadline()
	if !(errors.As(err, &dl) || errors.Is(err, context.DeadlineExceeded)) || !ok || time.Until(deadline) > time.Second {
		return false
	}
	<-ctx.Done()
	return true
}

func (r *Run) undecodable(err error) error {
	if strings.Contains(err.Error(), codec.Encoding) {
		return &EncryptedError{ID: r.ID, Err: err}
	}
	return err
}

// Stop asks the run to stop as a task's stop request would: tasks see should-stop, get their grace period,
// and stragglers are killed. A non-empty reason fails the run with it. A run that has ended is an *EndedError,
// one the namespace lacks a *NoRunError.
func (r *Run) Stop(ctx context.Context, reason string) error {
	if err := r.CheckRunning(ctx); err != nil {
		return err
	}
	if err := r.c.c.SignalWorkflow(ctx, r.ID, "", workflows.SignalStop, workflows.StopRequest{Error: reason}); err != nil {
		return fmt.Errorf("stop run %s: %w", r.ID, err)
	}
	return nil
}

// Cancel stops every task at once (SIGTERM, grace period, SIGKILL); the run ends Canceled. Wait to see it end.
// A run that has ended is an *EndedError, one the namespace lacks a *NoRunError.
func (r *Run) Cancel(ctx context.Context) error {
	if err := r.CheckRunning(ctx); err != nil {
		return err
	}
	if err := r.c.c.CancelWorkflow(ctx, r.ID, ""); err != nil {
		return fmt.Errorf("cancel run %s: %w", r.ID, err)
	}
	return nil
}

// named says that the run has no ID, if so: Client.Run("") names none.
func (r *Run) named() error {
	if r.ID == "" {
		return errors.New("no run ID given: name a run (clusterrun list lists them)")
	}
	return nil
}

// CheckRunning says why the run cannot be stopped or canceled, if it cannot (nil when it runs): it has no ID,
// the namespace has no such run (a *NoRunError) or its workflow is of another type, the server cannot be read
// (an *UnreadableError), or it has ended (an *EndedError). Whether it runs comes from Temporal's record of the
// execution, which costs the run no workflow task (a status query waits for the workflow task in progress,
// which on a run of a thousand tasks that just started takes seconds); its status is read only to say how it
// ended.
func (r *Run) CheckRunning(ctx context.Context) error {
	if err := r.named(); err != nil {
		return err
	}
	desc, err := r.c.c.DescribeWorkflowExecution(ctx, r.ID, "")
	info := desc.GetWorkflowExecutionInfo()
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return r.c.noRun(ctx, r.ID)
	case err != nil:
		gone := r.c.serverSilent(ctx, err)
		return &UnreadableError{ID: r.ID, Msg: "describe run " + r.ID, Err: err, ServerSilent: gone, ServerSlow: !gone && silent(err) && ctx.Err() == nil}
	case info.GetType().GetName() != workflows.WorkflowType:
		return fmt.Errorf("%s is a %s workflow, not a clusterrun run", r.ID, info.GetType().GetName())
	case info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return nil
	}
	ended := &EndedError{ID: r.ID, Status: strings.ToLower(strings.TrimPrefix(info.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"))}
	if st, err := r.Status(ctx); err == nil && st.Status != "" {
		ended.Status = st.Status
	}
	return ended
}

// heartbeatsOf reads each pending RunTask's last heartbeat details, keyed by the task they name. While a task
// is taken up again, its old lease may still be pending beside the new one: the newest lease wins.
func heartbeatsOf(pending []*workflowpb.PendingActivityInfo) map[string]Heartbeat {
	out := map[string]Heartbeat{}
	dc, _ := conn.DataConverter() // the dial that came before checked it
	for _, pa := range pending {
		if pa.GetHeartbeatDetails() == nil {
			continue
		}
		var ds []workflows.HeartbeatDetails
		switch pa.GetActivityType().GetName() {
		case workflows.ActivityRunTask:
			var d workflows.HeartbeatDetails
			if dc.FromPayloads(pa.GetHeartbeatDetails(), &d) != nil {
				continue
			}
			ds = append(ds, d)
		case workflows.ActivityRunTasks: // a batch: one entry per member
			if dc.FromPayloads(pa.GetHeartbeatDetails(), &ds) != nil {
				continue
			}
		}
		for _, d := range ds {
			if cur, ok := out[d.Task]; d.Task == "" || ok && (cur.Attempt > d.Attempt || (cur.Attempt == d.Attempt && cur.Lease > d.Lease)) {
				continue
			}
			out[d.Task] = Heartbeat{HeartbeatDetails: d, At: pa.GetLastHeartbeatTime().AsTime()}
		}
	}
	return out
}

// Client is the client the run belongs to.
func (r *Run) Client() *Client { return r.c }

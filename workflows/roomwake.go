package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Waking a launch that waits whole when room frees. A launch the allocator refused waits whole (claims.go) and
// asks again nextWait later: 1 s the first time, then every 2 s at the head of the queue and every 4 s behind
// other runs. The slots it waits for mostly free when a run that holds them ends, and that run's end was then
// seen only at the next ask: a gang queued behind another started 0–2 s after it ended, where Slurm starts a
// pending job as the one before it ends. So while it waits, the run watches the runs the refusal named
// (PortGrant.BusyRuns): an AwaitRunEnd activity, which any host worker takes from the workflows' task queue,
// long-polls each one's history for its close event, and returns as soon as one of them ends, or after the
// wait. The run then asks again at once; the allocator's caller finds that run ended and its slots free.
// What the activity cannot see (a run's tasks that end while the run goes on, a host that comes up) is seen
// at the next ask, as before; an activity that fails or that no worker takes leaves the wait to a timer.

// ChangeWakeOnRunEnd marks runs whose waiting launches watch the runs that hold their room; asked only when a
// launch waits whole with such runs named.
const ChangeWakeOnRunEnd = "clusterrun-wake-on-run-end"

// ActivityAwaitRunEnd is the activity a waiting launch watches the runs that hold its room with
// (AwaitRunEndInput → AwaitRunEndResult), on TaskQueue.
const ActivityAwaitRunEnd = "AwaitRunEnd"

// MaxWatchedRuns bounds the runs one wait watches, each with a long poll of the server; the others' ends are
// seen at the next ask.
const MaxWatchedRuns = 16

// AwaitRunEndInput names the runs (workflow IDs) to watch, and how long to wait for one of them to end.
type AwaitRunEndInput struct {
	Runs []string      `json:"runs"`
	For  time.Duration `json:"for"`
}

// AwaitRunEndResult names the run that ended, or none when the wait ran out first.
type AwaitRunEndResult struct {
	Ended string `json:"ended,omitempty"`
}

// roomWait is how long a held launch waits before it is launched again, and the runs whose end cuts the wait
// short (none: a timer).
type roomWait struct {
	d    time.Duration
	runs []string
}

// watchedRuns is the runs a launch waiting whole watches: those that refused it (busy) but its own, at most
// MaxWatchedRuns; none in runs from before ChangeWakeOnRunEnd.
func watchedRuns(ctx workflow.Context, busy []string, self string) []string {
	runs := slices.DeleteFunc(slices.Clone(busy), func(run string) bool { return run == self })
	if len(runs) == 0 || workflow.GetVersion(ctx, ChangeWakeOnRunEnd, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	return runs[:min(len(runs), MaxWatchedRuns)]
}

// awaitRoom returns a future that is ready when w is over: its time has passed (value ""), or one of its runs
// has ended (that run's ID). It fails when ctx is canceled.
func awaitRoom(ctx workflow.Context, w roomWait, summary string) workflow.Future {
	if len(w.runs) == 0 {
		return workflow.NewTimerWithOptions(ctx, w.d, workflow.TimerOptions{Summary: summary})
	}
	runs := w.runs
	until := workflow.Now(ctx).Add(w.d)
	wake, set := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		var res AwaitRunEndResult
		err := workflow.ExecuteActivity(awaitRunEndOptions(ctx, w.d, summary+", or until "+runList(runs)+" ends"),
			ActivityAwaitRunEnd, AwaitRunEndInput{Runs: runs, For: w.d}).Get(ctx, &res)
		switch {
		case ctx.Err() != nil:
			set.Set(nil, temporal.NewCanceledError())
			return
		case err == nil && res.Ended != "":
			set.Set(res.Ended, nil)
			return
		}
		if rest := until.Sub(workflow.Now(ctx)); rest > 0 { // the watch failed, or a test's fake ended it early
			err = workflow.NewTimerWithOptions(ctx, rest, workflow.TimerOptions{Summary: summary}).Get(ctx, nil)
		} else {
			err = nil
		}
		set.Set("", err)
	})
	return wake
}

// awaitRunEndOptions: the watch runs on any host worker; one that is not taken up within the wait is no use.
func awaitRunEndOptions(ctx workflow.Context, d time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              TaskQueue,
		ScheduleToStartTimeout: d,
		StartToCloseTimeout:    d + 5*time.Second,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:                summary,
	})
}

func runList(runs []string) string {
	if len(runs) == 1 {
		return "run " + runs[0]
	}
	return fmt.Sprintf("one of runs %s", strings.Join(runs, ", "))
}

package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"
)

// ChangeSharedBackoffs marks runs in which a restart queued just after another's, with the same backoff, waits
// on that restart's timer. The Temporal server keeps one timer task per workflow, for its earliest timer, and
// makes the next only when that one fires; a timer due less than a second ahead is then put off to a second
// ahead (history.timerProcessorMaxTimeShift). So of two tasks that failed 5 ms apart with a 1 s backoff, the
// second restarted a whole second after the first. The marker is written only when a restart shares a timer,
// which runs from before replay without.
const ChangeSharedBackoffs = "clusterrun-shared-backoffs"

// shareBackoffWithin bounds how soon after another restart's a restart is queued to share its timer: it then
// waits up to this much less than its backoff, and never less than nine tenths of it (shareWithin).
const shareBackoffWithin = 100 * time.Millisecond

// backoff is one restart backoff timer and the tasks that wait on it.
type backoff struct {
	timer   workflow.Future
	cancel  workflow.CancelFunc
	started time.Time
	length  time.Duration
	tasks   []*task
}

// startBackoff waits out a restart's backoff, then launches the task's next attempt: on the timer of a
// restart queued just before with the same backoff, or on a timer of its own.
func (g *generation) startBackoff(t *task) {
	if b := g.sharedBackoff(t); b != nil {
		b.join(t)
		return
	}
	bctx, cancel := workflow.WithCancel(g.genCtx)
	timer := workflow.NewTimerWithOptions(bctx, t.Restart.Backoff,
		workflow.TimerOptions{Summary: fmt.Sprintf("restart %s (attempt %d)", t.Name, t.attempt+1)})
	b := &backoff{timer: timer, cancel: cancel, started: workflow.Now(g.ctx), length: t.Restart.Backoff}
	b.join(t)
	g.backoffs = append(g.backoffs, b)
	g.sel.AddFuture(timer, func(f workflow.Future) {
		g.backoffs = slices.DeleteFunc(g.backoffs, func(x *backoff) bool { return x == b })
		over := f.Get(g.ctx, nil) == nil
		for _, t := range b.tasks {
			if t.backoff != f {
				continue // terminated, or stopped, while it waited
			}
			t.backoff, t.cancelBackoff = nil, nil
			if over {
				g.r.todo.launch = append(g.r.todo.launch, launchOrder{t: t, how: newAttempt})
			}
		}
	})
}

// sharedBackoff finds the timer a restart can share: one started within shareWithin before, of the same length,
// that some task still waits on.
func (g *generation) sharedBackoff(t *task) *backoff {
	now := workflow.Now(g.ctx)
	for _, b := range g.backoffs {
		if b.length == t.Restart.Backoff && len(b.tasks) > 0 && now.Sub(b.started) <= shareWithin(b.length) {
			if workflow.GetVersion(g.ctx, ChangeSharedBackoffs, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
				return nil
			}
			return b
		}
	}
	return nil
}

// shareWithin is how soon after a timer's start a restart may share it: a tenth of the backoff, at most
// shareBackoffWithin.
func shareWithin(d time.Duration) time.Duration { return min(d/10, shareBackoffWithin) }

// join makes t wait on b. Its cancelBackoff takes it off b, and cancels b's timer once no task waits on it.
func (b *backoff) join(t *task) {
	b.tasks = append(b.tasks, t)
	t.backoff = b.timer
	t.cancelBackoff = func() {
		b.tasks = slices.DeleteFunc(b.tasks, func(x *task) bool { return x == t })
		if len(b.tasks) == 0 {
			b.cancel()
		}
	}
}

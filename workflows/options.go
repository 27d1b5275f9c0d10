package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/clusterrun/clusterrun/spec"
)

// noLimit stands in for "no maxRunTime": Temporal needs some StartToClose bound on an activity.
const noLimit = 10 * 365 * 24 * time.Hour

// ActivityID names a task's RunTask activity: "worker-3", and "worker-3.r2" after the second gang restart.
func ActivityID(task string, generation int) string {
	if generation == 0 {
		return task
	}
	return fmt.Sprintf("%s.r%d", task, generation)
}

// runTaskOptions: one long activity per task, on its host's or its pool's queue. starts > 0 marks a relaunch
// by start-task ("worker-3.s1"), so activity IDs stay unique.
func runTaskOptions(ctx workflow.Context, p *spec.Plan, t spec.Task, generation, starts int) workflow.Context {
	id := ActivityID(t.Name, generation)
	if starts > 0 {
		id = fmt.Sprintf("%s.s%d", id, starts)
	}
	queue := PoolQueue(t.Pool)
	where := "pool " + t.Pool
	if t.Host != "" {
		queue, where = HostQueue(t.Host), "host "+t.Host
	}
	startToClose := noLimit
	if p.MaxRunTime > 0 {
		// The workflow's own timer stops the run at maxRunTime; this only bounds a lost stop.
		startToClose = p.MaxRunTime + p.StopGracePeriod + time.Minute
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID: id,
		TaskQueue:  queue,
		// A task nobody picks up is a missing or full host worker: say so instead of waiting forever.
		ScheduleToStartTimeout: p.StartTimeout,
		StartToCloseTimeout:    startToClose,
		// A host worker that stops heartbeating has lost its task (crash, network, host down).
		HeartbeatTimeout: p.HeartbeatTimeout,
		// Every stop waits until the process is confirmed gone.
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        max(t.Restart.Backoff, time.Millisecond),
			BackoffCoefficient:     1,
			MaximumAttempts:        int32(t.Restart.MaxRestarts) + 1,
			NonRetryableErrorTypes: []string{ErrTaskStartFailed},
		},
		Summary: summary(t, where),
	})
}

func summary(t spec.Task, where string) string {
	s := strings.Join(t.Command, " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return fmt.Sprintf("%s on %s: %s", t.Name, where, s)
}

// controlOptions: a short activity on one host's downlink. A host worker that does not take it within
// scheduleToStart is gone; its tasks then end by heartbeat timeout instead.
func controlOptions(ctx workflow.Context, host string, startToClose time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              ControlQueue(host),
		ScheduleToStartTimeout: 10 * time.Second,
		StartToCloseTimeout:    startToClose,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 3, InitialInterval: 100 * time.Millisecond},
		Summary:                summary,
	})
}

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

// LeaseID names the RunTask activity of one lease: "worker-3" for the first attempt's launch, "worker-3.a2"
// for attempt 2, and "worker-3.a2.l2" for the lease that re-attached to attempt 2.
func LeaseID(task string, attempt, lease int) string {
	id := task
	if attempt > 1 || lease > 1 {
		id += fmt.Sprintf(".a%d", attempt)
	}
	if lease > 1 {
		id += fmt.Sprintf(".l%d", lease)
	}
	return id
}

// leaseOptions: one lease on a task attempt. A launch goes to its host's or its pool's queue; a re-attach goes
// to the control queue of the host that holds the process, whatever the task's pool, and waits there at most
// hostLossGrace.
func leaseOptions(p *spec.Plan, t *task, attach bool) LeaseOptions {
	queue, where := PoolQueue(t.Pool), "pool "+t.Pool
	switch {
	case t.Host != "":
		queue, where = HostQueue(t.Host), "host "+t.Host
	case t.placedHost != "":
		queue, where = PlacedQueue(t.Pool, t.placedHost), fmt.Sprintf("host %s (placed from pool %s)", t.placedHost, t.Pool)
	}
	o := LeaseOptions{ID: LeaseID(t.Name, t.attempt, t.lease), Queue: queue, Summary: summary(t.Task, where),
		// A task nobody picks up is a missing or full host worker: say so instead of waiting forever.
		ScheduleToStart: p.StartTimeout, StartToClose: noLimit, Heartbeat: p.HeartbeatTimeout}
	if attach {
		host := t.status.Host
		o.Queue = ControlQueue(host)
		// A silent host keeps its task this long: the grace is measured while the server is up.
		o.ScheduleToStart = t.HostLossGrace
		o.Summary = fmt.Sprintf("%s (attempt %d) re-attach on host %s", t.Name, t.attempt, host)
	}
	if p.MaxRunTime > 0 {
		// The workflow's own timer stops the run at maxRunTime; this only bounds a lost stop.
		o.StartToClose = p.MaxRunTime + p.StopGracePeriod + time.Minute
	}
	return o
}

// withLease sets a lease's activity options on ctx. Temporal never retries a lease: restarts are the workflow's,
// so that no retry starts a second copy of a task elsewhere while its host is only cut off.
func withLease(ctx workflow.Context, o LeaseOptions) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:             o.ID,
		TaskQueue:              o.Queue,
		ScheduleToStartTimeout: o.ScheduleToStart,
		StartToCloseTimeout:    o.StartToClose,
		// A silent host means "contact lost, state unknown": the workflow then asks that host to re-attach.
		HeartbeatTimeout: o.Heartbeat,
		// Every stop waits until the process is confirmed gone.
		WaitForCancellation: true,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             o.Summary,
	})
}

// ActivityID names a task's RunTask activity in runs started before leases: "worker-3", and "worker-3.r2" after
// the second gang restart.
func ActivityID(task string, generation int) string {
	if generation == 0 {
		return task
	}
	return fmt.Sprintf("%s.r%d", task, generation)
}

// runTaskOptions: one long activity per task, on its host's or its pool's queue, retried by Temporal under the
// task's restart policy (runs started before leases). starts > 0 marks a relaunch by start-task ("worker-3.s1"),
// so activity IDs stay unique.
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

// controlOptions: a short activity on one host's downlink. A host worker that does not take it within 10 s
// is gone; its tasks then end by heartbeat timeout instead.
func controlOptions(ctx workflow.Context, host string, startToClose time.Duration, summary string) workflow.Context {
	return controlOptionsWithin(ctx, host, 10*time.Second, startToClose, summary)
}

// stopOptions: StopTasks on one host's downlink, which a host gets as long as its leases get to heartbeat
// (heartbeatTimeout, at least 10 s) to take up. A busy host's worker can take longer than 10 s to poll its
// downlink (one of four hosts of a 4,000-task run did), and its tasks then waited for their leases to learn
// of the stop, one heartbeat each (85 s in all); a host that is really gone is given up on no later than its
// leases are.
func stopOptions(ctx workflow.Context, p *spec.Plan, host, summary string) workflow.Context {
	return stopOptionsWithin(ctx, p, host, stopPickup(p), summary)
}

// stopOptionsWithin: StopTasks that a host has scheduleToStart to take up. It heartbeats while it waits for
// the processes to end: a host worker that took it up and then hung (SIGSTOP; its open polls still take tasks)
// times it out within stopPickup, as a lease would, not after its start-to-close.
func stopOptionsWithin(ctx workflow.Context, p *spec.Plan, host string, scheduleToStart time.Duration, summary string) workflow.Context {
	ctx = controlOptionsWithin(ctx, host, scheduleToStart, p.StopGracePeriod+30*time.Second, summary)
	o := workflow.GetActivityOptions(ctx)
	o.HeartbeatTimeout = stopPickup(p)
	return workflow.WithActivityOptions(ctx, o)
}

// stopPickup is how long a host has to take a StopTasks up; the run's stop then asks it again (stopping.go).
func stopPickup(p *spec.Plan) time.Duration { return max(10*time.Second, p.HeartbeatTimeout) }

func controlOptionsWithin(ctx workflow.Context, host string, scheduleToStart, startToClose time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              ControlQueue(host),
		ScheduleToStartTimeout: scheduleToStart,
		StartToCloseTimeout:    startToClose,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 3, InitialInterval: 100 * time.Millisecond},
		Summary:                summary,
	})
}

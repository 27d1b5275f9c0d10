package workflows

import (
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/spec"
)

// AttemptOutcome turns how a task's process ended on its own into RunTask's error for the lease in: nil when
// it exited 0, else a TaskFailed ApplicationError carrying the TaskResult. The workflow decides any restart.
// For runs started before leases, it is ExitOutcome.
func AttemptOutcome(in RunTaskInput, res TaskResult) error {
	if !in.Leased() {
		return ExitOutcome(in.Task, res)
	}
	return leasedOutcome(in.Task, res)
}

func leasedOutcome(t spec.Task, res TaskResult) error {
	if res.ExitCode == 0 && !res.Hung {
		return nil
	}
	return temporal.NewNonRetryableApplicationError(failureMessage(t, res), ErrTaskFailed, nil, res)
}

// ExitOutcome is AttemptOutcome for runs started before leases, where Temporal's retry restarted tasks: the
// error's type and retryability carry the task's restart policy.
func ExitOutcome(t spec.Task, res TaskResult) error {
	if res.ExitCode == 0 {
		if t.Restart.Policy == spec.PolicyAlways {
			return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("%s exited 0; restart policy Always starts it again", t.Name),
				ErrTaskRestart, temporal.ApplicationErrorOptions{Details: []any{res}})
		}
		return nil
	}
	return temporal.NewApplicationErrorWithOptions(failureMessage(t, res), ErrTaskFailed, temporal.ApplicationErrorOptions{
		NonRetryable: !t.Restart.Restartable(res.ExitCode),
		Details:      []any{res},
	})
}

// failureMessage is "worker-3 exited with code 3 on host-b (attempt 1): <cause>", or "worker-3 hung on host-b
// (attempt 1): no output or progress for 5m ..." for a task its host found hung, or "worker-3 ran out of memory
// on host-b (attempt 1): the kernel's OOM killer killed python3 ..." for one the OOM killer killed, or
// "worker-3 was stopped by its host host-b (attempt 1; it exited with code 0): host host-b taken down by the
// operator" for one its host stopped otherwise: a failure beside "exited with code 0" read as a contradiction.
func failureMessage(t spec.Task, res TaskResult) string {
	how := fmt.Sprintf("exited with code %d", res.ExitCode)
	if res.Signal != "" {
		how = fmt.Sprintf("was killed by %s", res.Signal)
	}
	if res.Hung {
		how = "hung"
	}
	if res.OutOfMemory {
		how = "ran out of memory"
	}
	msg := fmt.Sprintf("%s %s on %s (attempt %d)", t.Name, how, res.Host, res.Attempt)
	if res.StoppedByHost && !res.Hung {
		msg = fmt.Sprintf("%s was stopped by its host %s (attempt %d; it %s)", t.Name, res.Host, res.Attempt, how)
	}
	if res.Error != "" {
		msg += ": " + res.Error
	}
	return msg
}

// TaskFailure is RunTask's error for an attempt that failed whatever its exit code said: the host stopped it
// (hung, cut off from the server, taken down) or its supervisor died.
func TaskFailure(t spec.Task, res TaskResult) error {
	return temporal.NewNonRetryableApplicationError(failureMessage(t, res), ErrTaskFailed, nil, res)
}

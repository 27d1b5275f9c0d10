package workflows

import (
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/spec"
)

// ExitOutcome turns how a task's process ended on its own into RunTask's error: nil when the task succeeded,
// else an ApplicationError whose type and retryability carry the task's restart policy to Temporal's retry.
func ExitOutcome(t spec.Task, res TaskResult) error {
	if res.ExitCode == 0 {
		if t.Restart.Policy == spec.PolicyAlways {
			return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("%s exited 0; restart policy Always starts it again", t.Name),
				ErrTaskRestart, temporal.ApplicationErrorOptions{Details: []any{res}})
		}
		return nil
	}
	how := fmt.Sprintf("exited with code %d", res.ExitCode)
	if res.Signal != "" {
		how = fmt.Sprintf("was killed by %s", res.Signal)
	}
	msg := fmt.Sprintf("%s %s on %s (attempt %d)", t.Name, how, res.Host, res.Attempt)
	if res.Error != "" {
		msg += ": " + res.Error
	}
	return temporal.NewApplicationErrorWithOptions(msg, ErrTaskFailed, temporal.ApplicationErrorOptions{
		NonRetryable: !t.Restart.Restartable(res.ExitCode),
		Details:      []any{res},
	})
}

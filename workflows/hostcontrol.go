package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// HostControlPickUp is how long a host has to take up a control request (drain, undrain, take down): a host
// that does not answer soon has no worker running, and saying so beats waiting.
const HostControlPickUp = 10 * time.Second

// HostControl is a short helper workflow: it runs one ControlHost activity on a host's downlink (drain,
// undrain, take down) and returns the host's state. It is how `clusterrun drain` reaches a host worker without
// opening a port on it.
func HostControl(ctx workflow.Context, in ControlHostInput) (*HostState, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              ControlQueue(in.Host),
		ScheduleToStartTimeout: HostControlPickUp,
		StartToCloseTimeout:    30 * time.Second,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:                "control host " + in.Host,
	})
	var st HostState
	if err := workflow.ExecuteActivity(actx, ActivityControlHost, in).Get(ctx, &st); err != nil {
		return nil, fmt.Errorf("host %s did not answer (is its clusterrun-worker running?): %w", in.Host, err)
	}
	return &st, nil
}

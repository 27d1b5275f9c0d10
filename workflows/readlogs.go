package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// ReadLogs is a short helper workflow: it asks each host named in the requests for its log chunks (one ReadLogs
// activity on each host's downlink, in parallel) and returns them in request order. It is how `clusterrun run`
// and `clusterrun logs` read files that live on other machines without opening a port there.
func ReadLogs(ctx workflow.Context, in ReadLogsInput) (*ReadLogsResult, error) {
	var hosts []string
	byHost := map[string][]int{}
	for i, r := range in.Requests {
		if _, ok := byHost[r.Host]; !ok {
			hosts = append(hosts, r.Host)
		}
		byHost[r.Host] = append(byHost[r.Host], i)
	}
	out := &ReadLogsResult{Chunks: make([]LogChunk, len(in.Requests))}
	futures := make([]workflow.Future, len(hosts))
	for i, h := range hosts {
		part := ReadLogsInput{RunID: in.RunID}
		for _, j := range byHost[h] {
			part.Requests = append(part.Requests, in.Requests[j])
		}
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue: ControlQueue(h),
			// A host that does not answer soon is gone; say so rather than hold up the other hosts' logs.
			ScheduleToStartTimeout: 5 * time.Second,
			StartToCloseTimeout:    30 * time.Second,
			RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
			Summary:                "read logs on " + h,
		})
		futures[i] = workflow.ExecuteActivity(actx, ActivityReadLogs, part)
	}
	for i, h := range hosts {
		var res ReadLogsResult
		err := futures[i].Get(ctx, &res)
		for k, j := range byHost[h] {
			switch {
			case err != nil:
				out.Chunks[j] = LogChunk{ReadLogsRequest: in.Requests[j], Next: in.Requests[j].Offset, Unreachable: true,
					Error: fmt.Sprintf("host %s did not answer (is its clusterrun-worker running?): %v", h, err)}
			case k < len(res.Chunks):
				out.Chunks[j] = res.Chunks[k]
			}
		}
	}
	return out, nil
}

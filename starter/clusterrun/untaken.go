package main

import (
	"context"
	"fmt"
	"io"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/workflows"
)

// untakenAfter is how long a stop or cancel waits for its run before it looks whether any worker took the
// request up at all.
var untakenAfter = 10 * time.Second

// sayIfUntaken tells w once, when the run's workflow task that carries the verb's request has waited untakenAfter
// for a worker (none runs for the namespace, or none polls the clusterrun task queue), that no worker took it
// up: the command would otherwise wait without a word for as long as that lasts. It ends with ctx.
func sayIfUntaken(ctx context.Context, c client.Client, id, verb string, w io.Writer) {
	if note := untakenNote(ctx, c, id, verb); note != "" {
		fmt.Fprintln(w, note)
	}
}

// untakenNote waits until the run's workflow task that carries the verb's request has waited untakenAfter for a
// worker, and returns what sayIfUntaken says of it; "" once the run has ended, the server cannot be asked, or
// ctx ends.
func untakenNote(ctx context.Context, c client.Client, id, verb string) string {
	select {
	case <-ctx.Done():
		return ""
	case <-time.After(untakenAfter):
	}
	for {
		desc, err := c.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return "" // the server's trouble: the wait says it when it ends
		}
		if desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return ""
		}
		pending := desc.GetPendingWorkflowTask()
		if pending != nil && pending.GetState() == enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED {
			if waited := time.Since(pending.GetScheduledTime().AsTime()); waited >= untakenAfter {
				return fmt.Sprintf("clusterrun %s: no clusterrun-worker has taken the run's request up for %s: is one running for namespace "+
					"%s (and polling task queue %s)? Still waiting; Ctrl-C ends the wait, and the request stays",
					verb, waited.Round(time.Second), namespace(), workflows.TaskQueue)
			}
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(untakenAfter):
		}
	}
}

// namespace is the namespace the command talks to.
func namespace() string {
	if opts, err := conn.Options(); err == nil {
		return opts.Namespace
	}
	return client.DefaultNamespace
}

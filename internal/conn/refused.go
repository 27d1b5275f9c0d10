package conn

import (
	"context"
	"errors"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// The server refuses an update to a workflow that already has history.maxInFlightUpdates updates in flight
// (10 by default, per namespace). The SDK sends a refused update again on its own, so its caller never hears
// of it; but each refusal also makes the server drop its cached state of the workflow, which sends every other
// update in flight again and makes the workflow's worker replay its history (docs/benchmarks.md, "Many hosts
// of one run's items"). A run whose work items are served from more hosts than clusterrun's bounds keep within
// the default needs the limit raised, and only a refusal tells that, so a host worker hears of each one.

// RefusedUpdates is told the workflow of each update the server refused for having too many in flight.
type RefusedUpdates func(workflowID string)

// refusedUpdatesInterceptor tells seen of each such refusal, and the call's own hook if its context has one
// (WithRefusedHook). It sits under the SDK's own retries, so it sees every try of a call.
func refusedUpdatesInterceptor(seen RefusedUpdates) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if u, ok := req.(*workflowservice.UpdateWorkflowExecutionRequest); ok && refusedInFlight(err) {
			seen(u.GetWorkflowExecution().GetWorkflowId())
			if hook, ok := ctx.Value(refusedHookKey{}).(func()); ok {
				hook()
			}
		}
		return err
	}
}

type refusedHookKey struct{}

// WithRefusedHook returns ctx with hook, which a client made with a RefusedUpdates calls each time the server
// refuses an update sent with that context for its workflow's updates in flight: a task's call that waits on
// such refusals can then say why.
func WithRefusedHook(ctx context.Context, hook func()) context.Context {
	return context.WithValue(ctx, refusedHookKey{}, hook)
}

// refusedInFlight reports whether err is the server's refusal of an update for its workflow's updates in
// flight (ResourceExhausted, cause CONCURRENT_LIMIT), as opposed to a rate limit of the namespace.
func refusedInFlight(err error) bool {
	if err == nil {
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	var busy *serviceerror.ResourceExhausted
	return errors.As(serviceerror.FromStatus(st), &busy) && busy.Cause == enumspb.RESOURCE_EXHAUSTED_CAUSE_CONCURRENT_LIMIT
}

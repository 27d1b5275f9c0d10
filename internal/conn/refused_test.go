package conn

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
)

// Only an update refused for its workflow's updates in flight is told, with that workflow, and to the call's
// own hook; the error goes on to the caller (the SDK's retries) as it came.
func TestRefusedUpdatesInterceptor_TellsOnlyRefusalsForUpdatesInFlight(t *testing.T) {
	update := &workflowservice.UpdateWorkflowExecutionRequest{WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: "run-1/items"}}
	inFlight := serviceerror.ToStatus(serviceerror.NewResourceExhausted(enumspb.RESOURCE_EXHAUSTED_CAUSE_CONCURRENT_LIMIT, "too many updates in flight")).Err()
	rate := serviceerror.ToStatus(serviceerror.NewResourceExhausted(enumspb.RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT, "namespace rate limit")).Err()
	signal := &workflowservice.SignalWorkflowExecutionRequest{WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: "run-1"}}
	for _, c := range []struct {
		name string
		req  any
		err  error
		told []string
	}{
		{"an update refused for its updates in flight", update, inFlight, []string{"run-1/items"}},
		{"an update refused by a rate limit", update, rate, nil},
		{"an update taken", update, nil, nil},
		{"another call refused so", signal, inFlight, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var told []string
			hooked := 0
			call := refusedUpdatesInterceptor(func(id string) { told = append(told, id) })
			ctx := WithRefusedHook(context.Background(), func() { hooked++ })
			err := call(ctx, "/m", c.req, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
				return c.err
			})
			assert.Equal(t, c.err, err)
			assert.Equal(t, c.told, told)
			assert.Equal(t, len(c.told), hooked, "the call's own hook hears of its refusals")
		})
	}
}

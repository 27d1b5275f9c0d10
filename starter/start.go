package starter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

// StartOptions tune Start.
type StartOptions struct {
	// ID is the run ID (the workflow ID). Default: NAME-YYYYMMDD-HHMMSS-RANDOM. An ID ever used is refused.
	ID string
	// Notes, when set, hears once of a start the server left unanswered, which Start then tries again.
	Notes io.Writer
}

// StartPatience is how long Start tries a start again that the server left unanswered (each try waits up to
// the SDK's 10 s). A loaded server may answer later than one call waits and still have written the run: a try
// that finds the ID taken then recognises the run as its own by the token in its memo.
const StartPatience = time.Minute

// NewRunID makes a run ID from a spec's name: NAME-YYYYMMDD-HHMMSS-RANDOM.
func NewRunID(name string) string {
	return fmt.Sprintf("%s-%s-%s", name, time.Now().UTC().Format("20060102-150405"), randomHex(3))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Start starts a run of s. The spec is validated first (every problem in a *spec.InvalidSpecError). When the
// namespace lacks clusterrun's search attributes the run starts anyway, and a *SearchAttributesMissingError
// comes back beside it. A start the server leaves unanswered is tried again for StartPatience.
func (c *Client) Start(ctx context.Context, s *spec.RunSpec, opts StartOptions) (*Run, error) {
	if _, err := spec.NewPlan(s); err != nil {
		return nil, err
	}
	id := opts.ID
	if id == "" {
		id = NewRunID(s.Name)
	}
	if err := spec.CheckRunID(id); err != nil {
		return nil, fmt.Errorf("StartOptions.ID: %w", err)
	}
	token := randomHex(8)
	wo := startOptions(id, s, token)
	giveUp := time.Now().Add(StartPatience)
	unanswered := false // a try before this one got no answer: the run may be written, with this token
	for {
		err := c.startOnce(ctx, &wo, s)
		var warning error
		if wo.TypedSearchAttributes.Size() == 0 {
			warning = &SearchAttributesMissingError{}
		}
		switch {
		case err == nil:
			return &Run{c: c, ID: id}, warning
		case alreadyStarted(err) && !unanswered:
			return nil, &RunIDTakenError{ID: id}
		case alreadyStarted(err):
			ours, derr := c.startedWith(ctx, id, token, err)
			if derr != nil {
				return nil, notKnown(id, derr)
			}
			if !ours {
				return nil, &RunIDTakenError{ID: id}
			}
			return &Run{c: c, ID: id}, warning
		case !silent(err):
			return nil, fmt.Errorf("start run %s: %w", id, err)
		case ctx.Err() != nil || time.Now().After(giveUp):
			return nil, notKnown(id, err)
		}
		if !unanswered && opts.Notes != nil {
			fmt.Fprintf(opts.Notes, "clusterrun: the start of run %s got no answer (%v); it is tried again under the same ID for up to %s\n",
				id, err, StartPatience)
		}
		unanswered = true
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// startOptions are the workflow options of run id: the run's memo holds its name and token, the token a start
// tried again recognises its run by.
func startOptions(id string, s *spec.RunSpec, token string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                    id,
		TaskQueue:             workflows.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		// Without this the SDK hands back the existing run for a taken ID, and we would follow someone else's run.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		StaticSummary:                            summary(s),
		Memo:                                     map[string]interface{}{workflows.MemoName: s.Name, workflows.MemoStartToken: token},
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(workflows.SearchAttrName).ValueSet(s.Name),
			temporal.NewSearchAttributeKeyKeyword(workflows.SearchAttrState).ValueSet(workflows.StatusRunning)),
	}
}

// startOnce asks the server once to start the run, without clusterrun's search attributes where the namespace
// lacks them (wo then keeps none from here on).
func (c *Client) startOnce(ctx context.Context, wo *client.StartWorkflowOptions, s *spec.RunSpec) error {
	_, err := c.c.ExecuteWorkflow(ctx, *wo, workflows.WorkflowType, s)
	var invalid *serviceerror.InvalidArgument
	if errors.As(err, &invalid) && strings.Contains(err.Error(), "search attribute") {
		wo.TypedSearchAttributes = temporal.SearchAttributes{}
		_, err = c.c.ExecuteWorkflow(ctx, *wo, workflows.WorkflowType, s)
	}
	return err
}

func alreadyStarted(err error) bool {
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	return errors.As(err, &started) || strings.Contains(err.Error(), "already")
}

// startedWith says whether the run that holds id (err says which: the first run of its chain) carries token:
// whether an earlier try, whose answer was lost, started it.
func (c *Client) startedWith(ctx context.Context, id, token string, err error) (bool, error) {
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	run := ""
	if errors.As(err, &started) {
		run = started.FirstExecutionRunId
		if run == "" {
			run = started.RunId
		}
	}
	desc, err := c.c.DescribeWorkflowExecution(ctx, id, run)
	if err != nil {
		return false, err
	}
	p := desc.GetWorkflowExecutionInfo().GetMemo().GetFields()[workflows.MemoStartToken]
	if p == nil {
		return false, nil
	}
	dc, err := conn.DataConverter()
	if err != nil {
		return false, err
	}
	var got string
	return dc.FromPayload(p, &got) == nil && got == token, nil
}

// notKnown is the error of a start whose last try got no answer: the run may have been written before it was
// lost, or not, and only a read tells.
func notKnown(id string, err error) error {
	return fmt.Errorf("start run %s: %w (whether the run started is not known: `clusterrun status %s` tells once the server answers)", id, err, id)
}

func summary(s *spec.RunSpec) string {
	var counts []string
	for _, typ := range spec.TaskTypes(s.Tasks) {
		counts = append(counts, fmt.Sprintf("%s×%d", typ, s.Tasks[typ].Replicas))
	}
	out := fmt.Sprintf("%s: %s", s.Name, strings.Join(counts, ", "))
	if cmd := strings.Join(s.Command, " "); cmd != "" {
		if len(cmd) > 120 {
			cmd = cmd[:117] + "..."
		}
		out += " — " + cmd
	}
	return out
}

package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/clusterrun/clusterrun/workflows"
)

// RecordHistoriesEnv names a folder: when it is set, the suite saves the history of every ClusterRun it ran
// there, as JSON, before it stops its server. workflows/replay_test.go replays the ones kept in
// workflows/testdata/histories, so a change to the workflow cannot break runs that are in flight when workers
// are upgraded (make record-histories).
const RecordHistoriesEnv = "CLUSTERRUN_RECORD_HISTORIES"

// recordHistories writes each closed ClusterRun's history to dir/<workflow-id>.json (the fault tests' isolated
// servers record theirs too: their runs went through re-attaches, lost hosts and outages).
func (c *cluster) recordHistories(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var token []byte
	for {
		resp, err := c.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus != 'Running'", workflows.WorkflowType), NextPageToken: token})
		if err != nil {
			return fmt.Errorf("list runs: %w", err)
		}
		for _, ex := range resp.GetExecutions() {
			id, runID := ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId()
			hist := &historypb.History{}
			it := c.client.GetWorkflowHistory(ctx, id, runID, false, 0)
			for it.HasNext() {
				ev, err := it.Next()
				if err != nil {
					return fmt.Errorf("history of %s: %w", id, err)
				}
				hist.Events = append(hist.Events, ev)
			}
			data, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, id+".json"), data, 0o644); err != nil {
				return err
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/workflows"
)

const listUsage = `List runs, newest first: running ones and those that ended.

Usage: clusterrun list [--limit N] [--running]

The name comes from the run's memo and the state from its ClusterRunState search attribute (registered by make
up; see docs/operations.md), or from Temporal's own status for runs started without it.

Example:
  clusterrun list --limit 50
`

func cmdList(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	limit := fs.Int("limit", 20, "at most this many runs")
	running := fs.Bool("running", false, "only runs still running")
	output, checkOutput := addOutputFlag(fs)
	if _, err := parse(fs, listUsage, args, 0, 0, stderr); err != nil {
		return err
	}
	if err := checkOutput(); err != nil {
		return err
	}
	if *limit < 1 {
		return usageErrorf("--limit %d: must be at least 1", *limit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	query := fmt.Sprintf("WorkflowType = '%s'", workflows.WorkflowType)
	if *running {
		query += " AND ExecutionStatus = 'Running'"
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	if *output == "table" {
		fmt.Fprintln(tw, "RUN\tNAME\tSTATE\tSTARTED\tDURATION")
	}
	rows := []listedRun{}
	var token []byte
	shown := 0
	for shown < *limit {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: int32(min(*limit, 100))})
		if err != nil {
			return fmt.Errorf("list runs: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			if shown == *limit {
				break
			}
			start := e.GetStartTime().AsTime()
			end := time.Now()
			if e.GetCloseTime() != nil {
				end = e.GetCloseTime().AsTime()
			}
			r := listedRun{RunID: e.GetExecution().GetWorkflowId(), Name: payloadString(e.GetMemo().GetFields()[workflows.MemoName]),
				State:     runState(e.GetStatus(), payloadString(e.GetSearchAttributes().GetIndexedFields()[workflows.SearchAttrState])),
				StartTime: start, Seconds: end.Sub(start).Seconds()}
			if e.GetCloseTime() != nil {
				r.EndTime = &end
			}
			rows = append(rows, r)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.RunID, orDash(r.Name), r.State, start.Local().Format("2006-01-02 15:04:05"), end.Sub(start).Round(time.Second))
			shown++
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			break
		}
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if shown == 0 {
		fmt.Fprintln(stderr, "no runs yet; start one with: clusterrun run SPEC")
	}
	return nil
}

// listedRun is one run of `clusterrun list -o json`.
type listedRun struct {
	RunID     string     `json:"runId"`
	Name      string     `json:"name,omitempty"`
	State     string     `json:"state"`
	StartTime time.Time  `json:"startTime"`
	EndTime   *time.Time `json:"endTime,omitempty"`
	Seconds   float64    `json:"durationSeconds"`
}

// runState names a run's state: clusterrun's own when the run recorded it, else Temporal's status.
func runState(status enumspb.WorkflowExecutionStatus, attr string) string {
	if status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return workflows.StatusRunning
	}
	if attr != "" && attr != workflows.StatusRunning {
		return attr
	}
	switch status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return workflows.StatusSucceeded
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		return workflows.StatusFailed
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return workflows.StatusCanceled
	}
	// Terminated, timed out or continued-as-new by Temporal itself.
	name := strings.TrimPrefix(status.String(), "WORKFLOW_EXECUTION_STATUS_")
	return strings.ToUpper(name[:1]) + strings.ToLower(name[1:])
}

func payloadString(p *commonpb.Payload) string {
	if p == nil {
		return ""
	}
	var s string
	dc, _ := conn.DataConverter() // the dial that came before checked it
	if dc.FromPayload(p, &s) != nil {
		return ""
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

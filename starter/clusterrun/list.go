package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

const listUsage = `List runs, newest first: running ones and those that ended.

Usage: clusterrun list [--limit N] [--running] [--state S[,S...]] [--name NAME] [--query FILTER] [-o table|json|jsonl]

The name comes from the run's memo and the state from its ClusterRunState search attribute (registered by make
up; see docs/operations.md), or from Temporal's own status for runs started without it. Waiting is a run that
runs nothing yet: its tasks wait for room on a full pool, behind other runs, or for a host (one with no worker,
a drained one, a pool no live host serves). --state keeps the runs in one of the
states the STATE column shows (Running, Waiting, Succeeded, Failed, TimedOut, Canceled, Terminated; any case);
--name those of one spec name (its ClusterRunName search attribute); --query adds a Temporal list filter, as
temporal workflow list --query takes.

Example:
  clusterrun list --limit 50
  clusterrun list --state Failed,TimedOut --name mnist
  clusterrun list --query "StartTime > '2026-11-20T00:00:00Z'"
`

// listStates maps each state --state takes to the Temporal status its runs have; the state itself is then
// told apart as the STATE column tells it (runState): a run that timed out and one that failed both failed.
var listStates = map[string]string{
	workflows.StatusRunning:   "Running",
	workflows.StatusWaiting:   "Running",
	workflows.StatusSucceeded: "Completed",
	workflows.StatusFailed:    "Failed",
	workflows.StatusTimedOut:  "Failed', 'TimedOut",
	workflows.StatusCanceled:  "Canceled",
	"Terminated":              "Terminated",
}

// canonicalState spells a state as the STATE column does, whatever its case: --state failed is Failed.
func canonicalState(st string) string {
	for k := range listStates {
		if strings.EqualFold(k, st) {
			return k
		}
	}
	return st
}

// listQuery is the list filter of the runs asked for, and the states to keep (nil: all).
func listQuery(states, name, extra string) (string, map[string]bool, error) {
	query := fmt.Sprintf("WorkflowType = '%s'", workflows.WorkflowType)
	var keep map[string]bool
	if states != "" {
		keep = map[string]bool{}
		var in []string
		for _, st := range strings.Split(states, ",") {
			st = canonicalState(strings.TrimSpace(st))
			status, ok := listStates[st]
			if !ok {
				valid := make([]string, 0, len(listStates))
				for k := range listStates {
					valid = append(valid, k)
				}
				return "", nil, unknownState(st, sortStrings(valid), "a run's")
			}
			keep[st] = true
			if q := "'" + status + "'"; !slices.Contains(in, q) {
				in = append(in, q) // Running and Waiting are both Temporal's Running
			}
		}
		query += " AND ExecutionStatus IN (" + strings.Join(in, ", ") + ")"
	}
	if name != "" {
		if !spec.IsRunName(name) {
			return "", nil, usageErrorf("--name %q: a run's name holds only lowercase letters, digits and '-'", name)
		}
		query += fmt.Sprintf(" AND %s = '%s'", workflows.SearchAttrName, name)
	}
	if extra != "" {
		query += " AND (" + extra + ")"
	}
	return query, keep, nil
}

func cmdList(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	limit := fs.Int("limit", 20, "at most this many runs")
	running := fs.Bool("running", false, "only runs still running, or waiting for room (--state Running,Waiting)")
	states := fs.String("state", "", "only runs in these states, comma-separated: Running, Waiting, Succeeded, Failed, TimedOut, Canceled, Terminated")
	name := fs.String("name", "", "only runs of this spec name")
	extra := fs.String("query", "", "only runs this Temporal list filter also matches")
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
	if *running && *states != "" {
		return usageErrorf("--running and --state: give one (--running is --state Running,Waiting)")
	}
	if *running {
		*states = workflows.StatusRunning + "," + workflows.StatusWaiting
	}
	query, keep, err := listQuery(*states, *name, *extra)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	if *output == outTable {
		fmt.Fprintln(tw, "RUN\tNAME\tSTATE\tSTARTED\tDURATION")
	}
	rows := []listedRun{}
	var token []byte
	shown := 0
	for shown < *limit {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: int32(min(*limit, 100))})
		if err != nil {
			return listError(err, *name != "", *extra, func(p int, near string) (string, string) {
				return whereInFilter(ctx, c, query, *extra, p, near)
			})
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
			if keep != nil && !keep[r.State] {
				continue // a failed run when timed out ones were asked for, or the other way round
			}
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
	if isJSON(*output) {
		return printJSON(stdout, *output, rows)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case shown == 0 && (*states != "" || *name != "" || *extra != ""):
		fmt.Fprintln(stderr, "no runs match")
	case shown == 0:
		fmt.Fprintln(stderr, "no runs yet; start one with: clusterrun run SPEC")
	}
	return nil
}

// listError says what the server refused in a list: the query the user added (where, for a syntax error,
// says where in it the server stopped), or a search attribute the cluster does not have.
func listError(err error, byName bool, extra string, where func(position int, near string) (note, lines string)) error {
	var invalid *serviceerror.InvalidArgument
	switch {
	case !errors.As(err, &invalid):
		return fmt.Errorf("list runs: %w", err)
	case byName && strings.Contains(err.Error(), workflows.SearchAttrName):
		return &exitError{code: 1, msg: fmt.Sprintf("list runs: the server does not know the search attribute %s, which --name reads: "+
			"register it as docs/operations.md says (%v)", workflows.SearchAttrName, err)}
	case extra != "":
		// The server counts a syntax error's position in the whole query, of which the user wrote only the end.
		why, note, lines := err.Error(), "", ""
		if m := queryPosition.FindStringSubmatch(why); m != nil {
			p, _ := strconv.Atoi(m[1])
			near := ""
			if n := queryNear.FindStringSubmatch(why); n != nil {
				near = n[1]
			}
			note, lines = where(p, near)
			why = strings.Replace(why, m[0], "", 1)
		}
		return usageErrorf("--query %q: the server refused it: %s%s (Temporal's list filter: https://docs.temporal.io/list-filter)%s",
			extra, why, note, lines)
	}
	return fmt.Errorf("list runs: %w", err)
}

var (
	queryPosition = regexp.MustCompile(` at position (\d+)`)
	queryNear     = regexp.MustCompile(` near '([^']+)'`)
)

// whereInFilter says where in the user's filter (extra, the end of query) a syntax error at the server's
// position lies: a note that the filter ended too soon, or one that points to lines that show the filter with
// a mark under the token the parser stopped at (near, when the server named it); nothing when that cannot be
// told. The server parses the query inside a statement of its
// own and counts one past the failing token in that statement; a second list of the one-token query "="
// (which fails at that token) gives the statement's lead, whatever the server's version makes of it.
func whereInFilter(ctx context.Context, c client.Client, query, extra string, position int, near string) (note, lines string) {
	_, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "=", PageSize: 1})
	m := queryPosition.FindStringSubmatch(fmt.Sprint(err))
	if m == nil {
		return "", ""
	}
	probe, _ := strconv.Atoi(m[1])
	lead := probe - 2 // "=" is the statement's first character of ours, and the position counts one past it
	end := position - 1 - lead - (len(query) - len(extra) - 1)
	switch {
	case end == len(extra)+1: // at the ")" that closes the filter in query
		return ", at the filter's end: it stops short (a value, a parenthesis or a quote missing?)", ""
	case end < 1 || end > len(extra) || strings.ContainsAny(extra, "\n\t"):
		return "", ""
	}
	width := 1 // the token's last character; all of it when the server named it (near 'query')
	if n := len(near); n > 0 && n <= end && strings.EqualFold(extra[end-n:end], near) {
		width = n
	}
	return ", at the mark below", fmt.Sprintf(":\n  %s\n  %s%s", extra, strings.Repeat(" ", end-width), strings.Repeat("^", width))
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
		if attr == workflows.StatusWaiting {
			return workflows.StatusWaiting
		}
		return workflows.StatusRunning
	}
	if attr != "" && attr != workflows.StatusRunning && attr != workflows.StatusWaiting { // a run terminated while it ran or waited
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

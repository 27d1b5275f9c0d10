package starter

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/clusterrun/clusterrun/internal/flagerr"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

func (e *NoRunError) Error() string {
	head := fmt.Sprintf("no run with ID %q in namespace %s", e.ID, e.Namespace)
	switch {
	case len(e.Named) > 0:
		return fmt.Sprintf("%s; %s is a run name, not an ID: give a run's ID, as %s (clusterrun list --name %s lists them all)",
			head, e.ID, newestFirst(e.Named), e.ID)
	case len(e.Prefixed) > 0:
		return fmt.Sprintf("%s; give a whole run ID: those that start with it are %s", head, newestFirst(e.Prefixed))
	case e.Near != "":
		return fmt.Sprintf("%s; did you mean %s?", head, e.Near)
	}
	return fmt.Sprintf("%s; list runs with `clusterrun list` (or `temporal workflow list --query \"WorkflowType='ClusterRun'\"`)", head)
}

func newestFirst(ids []string) string {
	return ids[0] + " (the newest)" + strings.Join(append([]string{""}, ids[1:]...), ", ")
}

// noRun says no run has the ID id, and looks for the run that was meant: the newest of the name id is (a run's
// name is easy to give where its ID is asked for), else those whose ID starts with id (one cut short by a copy),
// else the ID one typo or two from id among the runs of the name it starts with. Each is one list call, made
// only on this error's path; a namespace without clusterrun's search attributes has no names to offer.
func (c *Client) noRun(ctx context.Context, id string) *NoRunError {
	e := &NoRunError{ID: id, Namespace: c.namespace}
	if spec.IsRunName(id) {
		if e.Named = c.runIDs(ctx, fmt.Sprintf("%s = '%s'", workflows.SearchAttrName, id), shownRuns); len(e.Named) > 0 {
			return e
		}
	}
	if !quotableID.MatchString(id) {
		return e
	}
	if e.Prefixed = c.runIDs(ctx, fmt.Sprintf("WorkflowId STARTS_WITH '%s'", id), shownRuns); len(e.Prefixed) > 0 {
		return e
	}
	if m := generatedID.FindStringSubmatch(id); m != nil && spec.IsRunName(m[1]) {
		e.Near = flagerr.Within(id, c.runIDs(ctx, fmt.Sprintf("%s = '%s'", workflows.SearchAttrName, m[1]), nearRunsRead), nearRunEdits)
	}
	return e
}

// runIDs lists the IDs of the newest ClusterRun workflows the query matches, at most n.
func (c *Client) runIDs(ctx context.Context, query string, n int) []string {
	resp, err := c.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: c.namespace,
		PageSize:  int32(n),
		Query:     fmt.Sprintf("WorkflowType = '%s' AND %s", workflows.WorkflowType, query),
	})
	if err != nil {
		return nil
	}
	var ids []string
	for _, ex := range resp.GetExecutions() {
		if len(ids) < n {
			ids = append(ids, ex.GetExecution().GetWorkflowId())
		}
	}
	return ids
}

const (
	shownRuns    = 3   // how many runs a NoRunError offers
	nearRunsRead = 100 // how many runs of a name are read for an ID close to the one given
	// nearRunEdits is how far an ID may be from the one given to be offered: a typo or two. Two runs of a name
	// started the same day differ in up to 12 characters, so a looser bound would offer another run.
	nearRunEdits = 2
)

var (
	// quotableID is an ID that goes into a list query as it is: no quote to escape, and long enough to mean
	// something as a prefix.
	quotableID = regexp.MustCompile(`^[A-Za-z0-9._-]{3,255}$`)
	// generatedID is a run ID as NewRunID makes it, give or take a typo after the name: NAME-YYYYMMDD-HHMMSS-RANDOM.
	generatedID = regexp.MustCompile(`^([a-z0-9-]+?)-\d{6,9}-\d{5,7}-[0-9a-z]{4,8}$`)
)

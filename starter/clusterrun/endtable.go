package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/clusterrun/clusterrun/workflows"
)

// endRows is how many tasks the end of a run lists a row each. A larger run's end lists only the tasks worth a
// look, at most endRows of them, and counts the others by state: a thousand rows of "Stopped" would push what
// went wrong off the screen. `clusterrun status` lists every task.
const endRows = 40

// printEnd prints the table at the end of a run (`run`, `cancel`, `stop`).
func printEnd(w io.Writer, id string, st workflows.RunStatus) {
	if len(st.Tasks) <= endRows {
		printTable(w, st, nil)
		return
	}
	var notable []workflows.TaskStatus
	for _, t := range st.Tasks {
		if worthALook(t) {
			notable = append(notable, t)
		}
	}
	listed := notable[:min(len(notable), endRows)]
	if len(listed) > 0 {
		printTable(w, workflows.RunStatus{Tasks: listed}, nil)
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%d tasks: %s. ", len(st.Tasks), stateCounts(st.Tasks))
	switch {
	case len(notable) == 0:
		fmt.Fprintf(w, "Each ended cleanly, with no result or error; `clusterrun status %s` lists each.\n", id)
	case len(listed) < len(notable):
		fmt.Fprintf(w, "Listed: the first %d of the %d that did not end cleanly, or left a result or an error; "+
			"`clusterrun status %s` lists each.\n", len(listed), len(notable), id)
	default:
		fmt.Fprintf(w, "Listed: the %d that did not end cleanly, or left a result or an error; `clusterrun status %s` "+
			"lists each.\n", len(notable), id)
	}
}

// worthALook says a task's row tells more than its state's count: it did not end cleanly (it did not succeed
// or stop, or it was killed after its grace period), or it left a result or an error.
func worthALook(t workflows.TaskStatus) bool {
	if t.State != workflows.TaskSucceeded && t.State != workflows.TaskStopped {
		return true
	}
	return t.Straggler || t.Error != "" || len(t.Result) > 0 || t.ResultOmitted
}

// stateCounts counts tasks by state, the most common first ("990 Stopped, 10 Failed").
func stateCounts(tasks []workflows.TaskStatus) string {
	count := map[string]int{}
	var order []string
	for _, t := range tasks {
		if count[t.State] == 0 {
			order = append(order, t.State)
		}
		count[t.State]++
	}
	for i := 1; i < len(order); i++ { // few states: an insertion sort keeps first-seen order among equals
		for j := i; j > 0 && count[order[j]] > count[order[j-1]]; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%d %s", count[s], s)
	}
	return strings.Join(parts, ", ")
}

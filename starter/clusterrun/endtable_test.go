package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/clusterrun/clusterrun/workflows"
)

func tasksOf(n int, state string) []workflows.TaskStatus {
	code := 143
	out := make([]workflows.TaskStatus, n)
	for i := range out {
		out[i] = workflows.TaskStatus{Name: fmt.Sprintf("worker-%d", i), State: state, Host: "host-a", Attempt: 1, ExitCode: &code, Signal: "SIGTERM"}
	}
	return out
}

// A small run's end lists every task; a large one's lists the tasks worth a look and counts the rest.
func TestPrintEnd_ListsWhatIsWorthALook(t *testing.T) {
	end := func(tasks []workflows.TaskStatus) string {
		var b bytes.Buffer
		printEnd(&b, "r1", workflows.RunStatus{Tasks: tasks})
		return b.String()
	}

	small := end(tasksOf(endRows, workflows.TaskStopped))
	assert.Contains(t, small, "worker-39 ")
	assert.Equal(t, endRows+1, strings.Count(small, "\n"), "a header and a row per task")

	quiet := end(tasksOf(1000, workflows.TaskStopped))
	assert.Equal(t, "1000 tasks: 1000 Stopped. Each ended cleanly, with no result or error; `clusterrun status r1` lists each.\n", quiet)

	tasks := tasksOf(1000, workflows.TaskStopped)
	tasks[0].State, tasks[0].Result = workflows.TaskSucceeded, json.RawMessage(`{"loss":0.2}`)
	tasks[7].State, tasks[7].Error = workflows.TaskFailed, "boom"
	tasks[9].Straggler = true
	out := end(tasks)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	assert.Len(t, lines, 1+3+2, "a header, three rows, a blank line and the counts")
	assert.Contains(t, out, `{"loss":0.2}`)
	assert.Contains(t, lines[2], "worker-7")
	assert.Contains(t, lines[2], "boom")
	assert.Contains(t, lines[3], "worker-9")
	assert.Contains(t, out, "1000 tasks: 998 Stopped, 1 Succeeded, 1 Failed. Listed: the 3 that did not end cleanly, or left a result or an error")

	many := tasksOf(1000, workflows.TaskFailed)
	out = end(many)
	assert.Equal(t, 1+endRows+2, strings.Count(out, "\n"))
	assert.Contains(t, out, "1000 tasks: 1000 Failed. Listed: the first 40 of the 1000 that did not end cleanly")
	assert.NotContains(t, out, "worker-40 ")
}

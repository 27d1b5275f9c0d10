package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/clusterrun/clusterrun/workflows"
)

// A drain lists a few tasks a row each; a host with more has them counted per run and state, not a row each.
// Ended tasks are only counted.
func TestPrintHostTasks(t *testing.T) {
	var small bytes.Buffer
	printHostTasks(&small, []workflows.HostTask{{Run: "r1", Task: "worker-0", Attempt: 1, PID: 42, State: "running"}})
	assert.Equal(t, "RUN  TASK      ATTEMPT  PID  STATE\nr1   worker-0  1        42   running\n", small.String())

	var tasks []workflows.HostTask
	for i := range 500 {
		tasks = append(tasks, workflows.HostTask{Run: "big", Task: fmt.Sprintf("worker-%d", i), Attempt: 1, PID: 100 + i, State: "running"})
	}
	for i := range 2 {
		tasks = append(tasks, workflows.HostTask{Run: "before", Task: fmt.Sprintf("ps-%d", i), Attempt: 2, State: "ended"})
	}
	var large bytes.Buffer
	printHostTasks(&large, tasks)
	assert.Equal(t, "RUN  STATE    TASKS\n"+
		"big  running  500: worker-0, worker-1, worker-2 and 497 more\n"+
		"(500 tasks in all; -o json lists each, and clusterrun status RUN shows where each went)\n"+
		"(2 ended task(s) left out; -o json lists them)\n", large.String())
	assert.Less(t, strings.Count(large.String(), "\n"), 10)

	var ended bytes.Buffer
	printHostTasks(&ended, tasks[500:])
	assert.Equal(t, "(2 ended task(s) left out; -o json lists them)\n", ended.String(),
		"after its 0 running task(s), a drain lists none")
}

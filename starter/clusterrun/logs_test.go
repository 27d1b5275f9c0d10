package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/clusterrun/clusterrun/workflows"
)

// After a listing of restarted tasks' latest attempts, logs says which had earlier ones and how to read them.
func TestEarlierAttempts_NamesTheRestartedTasks(t *testing.T) {
	at := func(name string, attempt int) workflows.TaskStatus {
		return workflows.TaskStatus{Name: name, Attempt: attempt}
	}
	assert.Empty(t, earlierAttempts("r", []workflows.TaskStatus{at("worker-0", 1), at("worker-1", 1)}))
	assert.Equal(t, "this was worker-1's attempt 2; read its attempt 1 with: clusterrun logs r worker-1 --attempt 1",
		earlierAttempts("r", []workflows.TaskStatus{at("worker-1", 2)}))
	assert.Equal(t, "this was each task's latest attempt, and 4 had earlier ones (worker-1 at attempt 2, worker-2 at attempt 3, "+
		"worker-3 at attempt 2 and 1 more); read one with: clusterrun logs r TASK --attempt N",
		earlierAttempts("r", []workflows.TaskStatus{at("worker-0", 1), at("worker-1", 2), at("worker-2", 3), at("worker-3", 2), at("ps-0", 2)}))
}

// After a listing, logs says whose output ends early because their logs' file system filled up.
func TestCutShort_NamesTheTasksWhoseLogsFilledUp(t *testing.T) {
	on := func(name, host string, full bool) workflows.TaskStatus {
		return workflows.TaskStatus{Name: name, Host: host, Attempt: 1, Logs: &workflows.LogSizes{Full: full}}
	}
	assert.Empty(t, cutShort([]workflows.TaskStatus{on("worker-0", "a", false), {Name: "worker-1"}}))
	assert.Equal(t, "ok-0's output ends early: its logs' file system on u-a filled up: output it wrote after that was lost",
		cutShort([]workflows.TaskStatus{on("ok-0", "u-a", true), on("ok-1", "u-b", false)}))
	assert.Equal(t, "the output of 4 tasks ends early (w-0 on a, w-1 on b, w-2 on a and 1 more): their logs' file system filled up, "+
		"and what they wrote after that was lost",
		cutShort([]workflows.TaskStatus{on("w-0", "a", true), on("w-1", "b", true), on("w-2", "a", true), on("w-3", "b", true), on("w-4", "b", false)}))
}

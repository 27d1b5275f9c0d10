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

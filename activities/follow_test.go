package activities

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/spec"
)

// A host that reads a stop in the run's history late may already run the task's next attempt, which the run
// started once that stop was over: the stop it reads must not reach it.
func TestStopAhead_OnlyTheAttemptsTheStopNames(t *testing.T) {
	newAttempt := func(task string, attempt int, ended bool) *entry {
		e := newEntry(attemptRef{WorkflowID: "w", RunID: "r", Task: task, Attempt: attempt}, spec.Task{Name: task}, false, 0)
		if ended {
			e.exit = &shim.Exit{}
		}
		return e
	}
	names := func(es []*entry) (out []string) {
		for _, e := range es {
			out = append(out, e.ref.Task+"#"+string(rune('0'+e.ref.Attempt)))
		}
		return out
	}
	old, next := newAttempt("worker-0", 1, false), newAttempt("worker-0", 2, false)
	done, other, legacy := newAttempt("worker-1", 1, true), newAttempt("worker-2", 3, false), newAttempt("worker-3", 1, false)
	all := []*entry{old, next, done, other, legacy}

	stop := namedAttempts(running(all), map[string]int{"worker-0": 1, "worker-1": 1, "worker-2": 3})
	assert.Equal(t, []string{"worker-0#1", "worker-2#3"}, names(stop), "attempt 2 of worker-0 is newer than the stop; worker-1 has ended; worker-3 is not named")
	assert.Empty(t, namedAttempts(all, nil), "a stop that names no attempts is left to its StopTasks")
}

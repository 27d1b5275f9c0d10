package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/workflows"
)

// A small run's changes are said a line each; in a large one, alike changes seen together share a line, and a
// change of its own (a failure with its error) keeps its line.
func TestFollower_TellsABurstOnce(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	tasks := func(n int, state string) []workflows.TaskStatus {
		ts := make([]workflows.TaskStatus, n)
		for i := range ts {
			ts[i] = workflows.TaskStatus{Name: fmt.Sprintf("worker-%d", i), State: state, Host: fmt.Sprintf("host-%c", 'a'+i%2), Attempt: 1}
		}
		return ts
	}

	f.update(workflows.RunStatus{Tasks: tasks(newsBurst, workflows.TaskRunning)})
	assert.Equal(t, newsBurst, strings.Count(out.String(), "\n"))
	assert.Contains(t, out.String(), "[worker-15] ── running on host-b (attempt 1)")

	out.Reset()
	f = newFollower(nil, "run", &out)
	f.update(workflows.RunStatus{Tasks: tasks(1000, workflows.TaskRunning)})
	assert.Equal(t, "[1000 tasks] ── running on host-a, host-b (attempt 1): worker-0, worker-1, worker-2 and 997 more\n", out.String())

	out.Reset()
	ended := tasks(1000, workflows.TaskStopped)
	for i := range ended {
		ended[i].Signal = "SIGTERM"
	}
	ended[7].State, ended[7].Error = workflows.TaskFailed, "worker-7 exited with code 3 on host-b (attempt 1): boom"
	f.update(workflows.RunStatus{Tasks: ended})
	f.tell(f.ends)
	assert.Equal(t, "[999 tasks]  ── stopped (SIGTERM): worker-0, worker-1, worker-2 and 996 more\n"+
		"[worker-7]   ── failed: worker-7 exited with code 3 on host-b (attempt 1): boom\n", out.String())

	out.Reset()
	f.tell([]workflows.TaskStatus{ended[63], ended[96], ended[108]})
	assert.Equal(t, "[3 tasks]    ── stopped (SIGTERM): worker-63, worker-96, worker-108\n", out.String(), "a large run's few changes")
}

// A task that ended having written nothing leaves no stream to read at the end, and its end is still said.
func TestFollower_DrainSaysTheEnds(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out) // no client: a read would fail
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskRunning, Host: "h", Attempt: 1}}})
	out.Reset()
	started := time.Now()
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskSucceeded, Host: "h", Attempt: 1,
		StartTime: &started, Logs: &workflows.LogSizes{}}}})
	require.NoError(t, f.drain(context.Background()))
	assert.Equal(t, "[worker-0] ── exited 0\n", out.String())
}

// A task's end waits for the output of its own attempt, not for a later attempt's.
func TestFollower_EndWaitsForItsOwnAttempt(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.open(workflows.TaskStatus{Name: "worker-0", Host: "h"}, 1, true) // attempt 1: read to its end
	f.open(workflows.TaskStatus{Name: "worker-0", Host: "h"}, 2, false)
	f.ends = []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskStopped, Attempt: 1}}
	f.tellEnds(false)
	assert.Empty(t, out.String(), "attempt 1 still has output to read")
	for _, s := range f.streams {
		if s.attempt == 1 {
			s.closed = true
		}
	}
	f.tellEnds(false)
	assert.Equal(t, "[worker-0] ── stopped\n", out.String(), "said once attempt 1 is read, while attempt 2 runs")
}

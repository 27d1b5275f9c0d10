package tests

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/workflows"
)

func TestE2E_TerminateAndStartTask(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `{name: taskctl, command: [sleep, "307"], stopGracePeriod: 2s, tasks: {chief: {replicas: 1, hosts: [host-a]}, worker: {replicas: 2, hosts: [host-a, host-b]}}}`)
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	waitUntil(t, "all tasks running", time.Minute, func() bool { return len(markedProcessesOf(t, "sleep 307")) == 3 })

	r := cli(t, "terminate-task", id, "worker-1")
	require.Equal(t, 0, r.code, r.String())
	assert.Regexp(t, `worker-1\s+Terminated\s+host-b\s+1`, r.stdout)
	waitUntil(t, "worker-1's process gone", 30*time.Second, func() bool { return len(markedProcessesOf(t, "sleep 307")) == 2 })
	st, _ := query(t, id)
	assert.Equal(t, workflows.StatusRunning, st.Status, "the run goes on")

	// status shows the tasks named, by name or pattern, under the run's own line.
	r = cli(t, "status", id, "worker-1", "--tasks", "chief-*")
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, ": Running")
	assert.Regexp(t, `chief-0\s+Running\s+host-a`, r.stdout)
	assert.Regexp(t, `worker-1\s+Terminated\s+host-b`, r.stdout)
	assert.NotContains(t, r.stdout, "worker-0")
	r = cli(t, "status", id, "worker-0", "-o", "json")
	require.Equal(t, 0, r.code, r.String())
	var one workflows.RunStatus
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &one))
	require.Len(t, one.Tasks, 1)
	assert.Equal(t, "worker-0", one.Tasks[0].Name)
	r = cli(t, "status", id, "--tasks", "ps-*")
	assert.Equal(t, 1, r.code, r.String())
	assert.Contains(t, r.stderr, "--tasks ps-* matches no task of run "+id+"; its tasks are chief-0, worker-0, worker-1")
	r = cli(t, "status", id, "--state", "terminated,pending")
	require.Equal(t, 0, r.code, r.String())
	assert.Regexp(t, `worker-1\s+Terminated\s+host-b`, r.stdout)
	assert.NotContains(t, r.stdout, "chief-0")
	assert.NotContains(t, r.stdout, "worker-0")
	r = cli(t, "status", id, "chief-0", "--state", "Failed")
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "none of the tasks chosen is Failed")
	r = cli(t, "status", id, "--state", "Crashed")
	assert.Equal(t, 2, r.code, r.String())
	assert.Contains(t, r.stderr, `--state "Crashed": a task's state is one of Pending, Placed, Running, Unreachable, Succeeded, Failed, Stopped, Terminated`)
	r = cli(t, "status", id, "worker")
	assert.Equal(t, 1, r.code, r.String())
	assert.Contains(t, r.stderr, `worker is a task type, and its tasks are worker-0, worker-1: name one or more, or show them all with --tasks 'worker-*'`)

	r = cli(t, "start-task", id, "worker-1") // by its name: the same as worker --index 1
	require.Equal(t, 0, r.code, r.String())
	assert.Regexp(t, `worker-1\s+Running\s+host-b\s+2`, r.stdout, "again, as attempt 2")

	r = cli(t, "start-task", id, "worker") // the next free index
	require.Equal(t, 0, r.code, r.String())
	assert.Regexp(t, `worker-2\s+Running\s+host-\S+\s+1`, r.stdout)
	waitUntil(t, "four processes", 30*time.Second, func() bool { return len(markedProcessesOf(t, "sleep 307")) == 4 })

	// Also through the temporal CLI.
	out, err := temporalCLI(t, "workflow", "signal", "--workflow-id", id, "--name", workflows.SignalTerminateTask,
		"--input", `{"task": "worker-2"}`)
	require.NoError(t, err, out)
	waitUntil(t, "worker-2 terminated", 30*time.Second, func() bool {
		st, ok := query(t, id)
		return ok && st.Task("worker-2").State == workflows.TaskTerminated
	})

	// Bad requests leave the run alone.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"terminate-task", id, "gpu-0"}, `has no task "gpu-0"; its tasks are chief-0, worker-0, worker-1, worker-2`},
		{[]string{"terminate-task", id, "wroker-1"}, `has no task "wroker-1"; did you mean worker-1?`},
		{[]string{"terminate-task", id, "worker"}, `has no task "worker"; worker is a task type, and its tasks are worker-0, worker-1, worker-2: name one`},
		{[]string{"terminate-task", id, "worker-2"}, "worker-2 is not running (it is Terminated)"},
		{[]string{"start-task", id, "worker", "--index", "0"}, "worker-0 has not ended (it is Running, attempt 1)"},
		{[]string{"start-task", id, "gpu"}, `has no task type "gpu" (it has chief, worker)`},
		{[]string{"start-task", id, "worker-9"}, "worker-9 would leave a gap: worker has indices 0 to 2, and TF_CONFIG lists a type's tasks by index; a new worker is worker-3"},
		{[]string{"terminate-task", "no-such-run", "worker-0"}, `no run with ID "no-such-run"`},
	} {
		r := cli(t, tc.args...)
		assert.Equal(t, 1, r.code, "%v: %s", tc.args, r)
		assert.Contains(t, r.stderr, tc.want, "%v", tc.args)
	}

	r = cli(t, "start-task", id, "worker-1", "--index", "2")
	assert.Equal(t, 2, r.code, r.String())
	assert.Contains(t, r.stderr, "worker-1 is index 1 of worker, and --index says 2")

	require.Equal(t, 0, cli(t, "cancel", id).code)
	st, _ = outcome(t, id)
	assert.Equal(t, workflows.TaskTerminated, st.Task("worker-2").State, "the user's termination is kept in the result")
	assert.Empty(t, markedProcessesOf(t, "sleep 307"))
	r = cli(t, "terminate-task", id, "worker-0")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "has already ended")
}

// Each host keeps its tasks' logs in its own folder. After a gang restart that moved a task to another host,
// `logs --attempt 1` reads the first attempt where it ran, not on the task's new host.
func TestE2E_EarlierAttemptsLogsAreReadWhereTheyRan(t *testing.T) {
	c := isolated(t)
	for _, h := range []string{"host-a", "host-b"} {
		require.NoError(t, c.startWorker(h, "--log-dir", filepath.Join(c.workDir, "logs-"+h)))
	}
	id := runID(t)
	spec := writeSpec(t, `
name: moves
stopGracePeriod: 2s
restart: {policy: OnFailure, scope: all, maxRestarts: 2, backoff: 100ms}
command: [sh, -c, 'echo "attempt $CLUSTERRUN_ATTEMPT on $CLUSTERRUN_HOST"; exec sleep 309']
tasks: {worker: {replicas: 2}}
`)
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	var onB string
	waitUntil(t, "a task on each host", time.Minute, func() bool {
		st, ok := c.query(t, id)
		if !ok || len(st.Tasks) != 2 || st.Tasks[0].State != workflows.TaskRunning || st.Tasks[1].State != workflows.TaskRunning {
			return false
		}
		for _, ts := range st.Tasks {
			if ts.Host == "host-b" {
				onB = ts.Name
			}
		}
		return onB != ""
	})

	// host-b is taken down: its task fails, the gang restarts, and both tasks run on host-a.
	r := c.cli(t, "drain", "host-b", "--now")
	require.Equal(t, 0, r.code, r.String())
	waitUntil(t, "both tasks restarted on host-a", time.Minute, func() bool {
		st, ok := c.query(t, id)
		if !ok || st.RestartCount != 1 {
			return false
		}
		for _, ts := range st.Tasks {
			if ts.State != workflows.TaskRunning || ts.Host != "host-a" {
				return false
			}
		}
		return true
	})
	r = c.cli(t, "logs", id, onB, "--attempt", "1")
	assert.Equal(t, 0, r.code, r.String())
	assert.Equal(t, "attempt 1 on host-b\n", r.stdout)
	r = c.cli(t, "logs", id, onB)
	assert.Equal(t, 0, r.code, r.String())
	assert.Equal(t, "attempt 2 on host-a\n", r.stdout)

	require.Equal(t, 0, c.cli(t, "cancel", id).code)
}

package tests

import (
	"os/exec"
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

	r = cli(t, "start-task", id, "worker-1") // by its name: the same as worker --index 1
	require.Equal(t, 0, r.code, r.String())
	assert.Regexp(t, `worker-1\s+Running\s+host-b\s+2`, r.stdout, "again, as attempt 2")

	r = cli(t, "start-task", id, "worker") // the next free index
	require.Equal(t, 0, r.code, r.String())
	assert.Regexp(t, `worker-2\s+Running\s+host-\S+\s+1`, r.stdout)
	waitUntil(t, "four processes", 30*time.Second, func() bool { return len(markedProcessesOf(t, "sleep 307")) == 4 })

	// Also through the temporal CLI.
	out, err := exec.Command(filepath.Join(env.root, "bin", "temporal"), "workflow", "signal", "--address", env.address,
		"--workflow-id", id, "--name", workflows.SignalTerminateTask, "--input", `{"task": "worker-2"}`).CombinedOutput()
	require.NoError(t, err, string(out))
	waitUntil(t, "worker-2 terminated", 30*time.Second, func() bool {
		st, ok := query(t, id)
		return ok && st.Task("worker-2").State == workflows.TaskTerminated
	})

	// Bad requests leave the run alone.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"terminate-task", id, "gpu-0"}, `has no task "gpu-0"`},
		{[]string{"terminate-task", id, "worker-2"}, "worker-2 is not running (it is Terminated)"},
		{[]string{"start-task", id, "worker", "--index", "0"}, "worker-0 is already running"},
		{[]string{"start-task", id, "gpu"}, `has no task type "gpu" (it has chief, worker)`},
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

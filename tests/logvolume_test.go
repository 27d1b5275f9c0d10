package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/clusterrun/clusterrun/workflows"
)

// taskOutput picks one task's lines out of prefixed output (clusterrun run, or logs of several tasks): the
// prefix is "[task]" padded to the longest task name, and the follower's own lines ("── ...") are left out.
func taskOutput(out, task string, width int) []byte {
	prefix := fmt.Sprintf("%-*s ", width+2, "["+task+"]")
	var b bytes.Buffer
	for _, line := range strings.SplitAfter(out, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok && !strings.HasPrefix(rest, "── ") {
			b.WriteString(rest)
		}
	}
	return b.Bytes()
}

// sameBytes checks got against want and, when they differ, shows where.
func sameBytes(t *testing.T, want, got []byte, what string) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	t.Errorf("%s: %d bytes, want %d; first difference at %d:\n want %q\n  got %q", what, len(got), len(want), i,
		want[max(0, i-40):min(len(want), i+80)], got[max(0, i-40):min(len(got), i+80)])
}

// logSessions counts the helper workflows (by ID) that read logs in c's namespace, and the old one-read helpers.
func (c *cluster) logSessions(t *testing.T) (sessions, oneShot int) {
	t.Helper()
	ids := map[string]bool{}
	var token []byte
	for {
		res, err := c.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: "WorkflowType = '" + workflows.LogSessionWorkflowType + "' OR WorkflowType = '" + workflows.ReadLogsWorkflowType + "'", NextPageToken: token})
		require.NoError(t, err)
		for _, e := range res.Executions {
			if e.GetType().GetName() == workflows.ReadLogsWorkflowType {
				oneShot++
			} else {
				ids[e.GetExecution().GetWorkflowId()] = true
			}
		}
		if token = res.NextPageToken; len(token) == 0 {
			return len(ids), oneShot
		}
	}
}

// Eight tasks that each write about 1 MB: every byte comes back through run and logs, and each command costs
// one helper workflow execution.
func TestE2E_LogsAtVolume_ManyTasks(t *testing.T) {
	t.Parallel()
	c := isolated(t, "host-a", "host-b")
	id := runID(t)
	spec := writeSpec(t, `
name: volume
command: [sh, -c, 'awk -v t="$CLUSTERRUN_TASK" "BEGIN { for (i = 0; i < 30000; i++) printf \"%s line %07d abcdefghijklmnop\n\", t, i }"']
tasks: {worker: {replicas: 8, hosts: [host-a, host-b]}}
`)
	run := c.cli(t, "run", spec, "--id", id)
	require.Equal(t, 0, run.code, run.stderr)
	all := c.cli(t, "logs", id)
	require.Equal(t, 0, all.code, all.stderr)
	for i := 0; i < 8; i++ {
		task := fmt.Sprintf("worker-%d", i)
		want, err := os.ReadFile(filepath.Join(c.logDir, id, "attempt_1", task, "stdout.log"))
		require.NoError(t, err)
		require.Greater(t, len(want), 1<<20-100<<10, "the task wrote about 1 MB")
		sameBytes(t, want, taskOutput(run.stdout, task, len(task)), task+": clusterrun run")
		sameBytes(t, want, taskOutput(all.stdout, task, len(task)), task+": clusterrun logs")
	}
	one := c.cli(t, "logs", id, "worker-5")
	require.Equal(t, 0, one.code, one.stderr)
	want, _ := os.ReadFile(filepath.Join(c.logDir, id, "attempt_1", "worker-5", "stdout.log"))
	sameBytes(t, want, []byte(one.stdout), "one task's log, unprefixed")

	sessions, oneShot := c.logSessions(t)
	assert.Equal(t, 3, sessions, "one helper workflow per command (run, logs, logs worker-5)")
	assert.Zero(t, oneShot, "no one-read helper workflows")
}

// A 100 MB log (training-log-like lines, random numbers) comes back byte for byte through run, logs and logs --follow (started while the task writes).
func TestE2E_LogsAtVolume_OneLargeLog(t *testing.T) {
	t.Parallel()
	c := isolated(t, "host-a")
	id := runID(t)
	gate := filepath.Join(t.TempDir(), "go")
	spec := writeSpec(t, fmt.Sprintf(`
name: large
command: [sh, -c, 'while [ ! -e %s ]; do sleep 0.1; done; awk "BEGIN { srand(7); for (i = 0; i < 1350000; i++) printf \"step %%8d loss %%.6f grad_norm %%.6f lr %%.2e tokens/s %%6d\n\", i, rand(), rand()*10, rand()/1000, int(rand()*100000) }"']
tasks: {worker: {replicas: 1, hosts: [host-a]}}
`, gate))
	runCmd := exec.Command(filepath.Join(c.bin, "clusterrun"), "run", spec, "--id", id)
	runCmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+c.address)
	var runOut, runErr bytes.Buffer
	runCmd.Stdout, runCmd.Stderr = &runOut, &runErr
	require.NoError(t, runCmd.Start())
	defer func() { _ = runCmd.Process.Signal(syscall.SIGKILL) }()
	waitUntil(t, "the task to run", time.Minute, func() bool {
		st, ok := c.query(t, id)
		return ok && st.Task("worker-0").State == workflows.TaskRunning
	})
	followCmd := exec.Command(filepath.Join(c.bin, "clusterrun"), "logs", id, "--follow")
	followCmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+c.address)
	var followOut, followErr bytes.Buffer
	followCmd.Stdout, followCmd.Stderr = &followOut, &followErr
	require.NoError(t, followCmd.Start())
	defer func() { _ = followCmd.Process.Signal(syscall.SIGKILL) }()
	require.NoError(t, os.WriteFile(gate, nil, 0o644))

	require.NoError(t, runCmd.Wait(), runErr.String())
	require.NoError(t, followCmd.Wait(), followErr.String())
	want, err := os.ReadFile(filepath.Join(c.logDir, id, "attempt_1", "worker-0", "stdout.log"))
	require.NoError(t, err)
	require.Greater(t, len(want), 100_000_000)
	sameBytes(t, want, followOut.Bytes(), "logs --follow")
	sameBytes(t, want, taskOutput(runOut.String(), "worker-0", len("worker-0")), "run")
	start := time.Now()
	logs := c.cli(t, "logs", id)
	took := time.Since(start)
	require.Equal(t, 0, logs.code, logs.stderr)
	sameBytes(t, want, []byte(logs.stdout), "logs")
	t.Logf("read back %d MB in %s (%.1f MB/s)", len(want)>>20, took.Round(time.Millisecond), float64(len(want))/1e6/took.Seconds())

	sessions, oneShot := c.logSessions(t)
	assert.Equal(t, 3, sessions, "one helper workflow per command (run, logs --follow, logs)")
	assert.Zero(t, oneShot)
}

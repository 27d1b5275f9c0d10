package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/workflows"
)

func TestE2E_Logs(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: logs
command: [sh, -c, 'for i in 1 2 3 4 5; do echo "$CLUSTERRUN_TASK line $i"; done; echo "$CLUSTERRUN_TASK complains" >&2; [ $CLUSTERRUN_TASK != worker-1 ]']
tasks: {worker: {replicas: 2, hosts: [host-a, host-b]}, ps: {replicas: 1, hosts: [host-b]}}
onFailure: continue
`)
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 1, r.code, "worker-1 fails: %s", r)

	all := cli(t, "logs", id)
	require.Equal(t, 0, all.code, all.String())
	for _, task := range []string{"worker-0", "worker-1", "ps-0"} {
		assert.Regexp(t, `\[`+task+`\]\s+`+task+` line 5\n\[`+task+`\]\s+`+task+` complains\n`, all.stdout,
			"stdout and stderr together by default, in the order written")
	}
	outOnly := cli(t, "logs", id, "--stdout")
	require.Equal(t, 0, outOnly.code, outOnly.String())
	assert.Contains(t, outOnly.stdout, "[ps-0]     ps-0 line 5\n")
	assert.NotContains(t, outOnly.stdout, "complains")

	// The tasks in some states: the failed ones' last words, say.
	failed := cli(t, "logs", id, "--state", "failed", "--stderr")
	require.Equal(t, 0, failed.code, failed.String())
	assert.Equal(t, "worker-1 complains\n", failed.stdout, "worker-1 alone")
	none := cli(t, "logs", id, "--tasks", "ps-*", "--state", "Failed,Stopped")
	require.Equal(t, 0, none.code, none.String())
	assert.Empty(t, none.stdout)
	assert.Contains(t, none.stderr, "none of the tasks chosen is Failed or Stopped, so there is nothing to read")
	r = cli(t, "logs", id, "--state", "Failed", "--follow")
	assert.Equal(t, 2, r.code, r.String())
	assert.Contains(t, r.stderr, "--state picks tasks by their state now")

	one := cli(t, "logs", id, "worker-1", "--stderr")
	require.Equal(t, 0, one.code, one.String())
	assert.Equal(t, "worker-1 complains\n", one.stdout, "a single task has no prefix")

	tail := cli(t, "logs", id, "--tasks", "worker-*", "--tail", "2")
	require.Equal(t, 0, tail.code, tail.String())
	assert.NotContains(t, tail.stdout, "ps-0")
	assert.NotContains(t, tail.stdout, "line 4")
	assert.Contains(t, tail.stdout, "worker-1 line 5\n[worker-1] worker-1 complains\n", "the last 2 lines of both streams together")
	tail = cli(t, "logs", id, "worker-0", "--stdout", "--tail", "2")
	require.Equal(t, 0, tail.code, tail.String())
	assert.Equal(t, "worker-0 line 4\nworker-0 line 5\n", tail.stdout)

	r = cli(t, "logs", id, "worker-0", "--attempt", "2")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "worker-0 has no attempt 2: it has run 1 attempt(s)")
	r = cli(t, "logs", id, "gpu-0")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `has no task "gpu-0"; its tasks are`)
	r = cli(t, "logs", id, "worker-*")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `has no task "worker-*"; a pattern goes with --tasks: --tasks 'worker-*'`)
	r = cli(t, "logs", id, "ps")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `has no task "ps"; ps is a task type, and its one task is ps-0`)
	r = cli(t, "logs", id, "worker")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `worker is a task type, and its tasks are worker-0, worker-1: name one or more, or read them all with --tasks 'worker-*'`)
	r = cli(t, "logs", "no-such-run")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `no run with ID "no-such-run"`)

	// A log that is gone from its host says so.
	require.NoError(t, os.Remove(filepath.Join(env.logDir, id, "attempt_1", "ps-0", "stdout.log")))
	r = cli(t, "logs", id, "ps-0")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "stdout.log of attempt 1 was deleted from host host-b")
}

func TestE2E_LogsFollow(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `{name: follow, command: [sh, -c, 'i=0; while [ $i -lt 8 ]; do i=$((i+1)); echo "tick $i"; sleep 0.3; done'], tasks: {worker: {replicas: 1, hosts: [host-b]}}}`)
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	waitUntil(t, "the task to run", time.Minute, func() bool {
		st, ok := query(t, id)
		return ok && st.Task("worker-0").State == workflows.TaskRunning
	})
	cmd := exec.Command(filepath.Join(env.bin, "clusterrun"), "logs", id, "--follow")
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.address)
	out, err := cmd.Output()
	require.NoError(t, err, string(out))
	for i := 1; i <= 8; i++ {
		assert.Equal(t, 1, strings.Count(string(out), "tick "+string(rune('0'+i))+"\n"), "tick %d exactly once in:\n%s", i, out)
	}
}

func TestE2E_StatusWatch(t *testing.T) {
	id := runID(t)
	// The task runs until the test lets it end: a sleep of 2 s had ended before the checks of its running
	// state, once, under the race-enabled suite.
	release := filepath.Join(t.TempDir(), "release")
	spec := writeSpec(t, `{name: watch, command: [sh, -c, 'while [ ! -e `+release+` ]; do sleep 0.05; done'], tasks: {worker: {replicas: 1}}}`)
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	var live cliResult
	waitUntil(t, "the heartbeat in status", 30*time.Second, func() bool {
		live = cli(t, "status", id)
		return regexp.MustCompile(`worker-0\s+Running\s+\S+\s+1\s+\d+\s+-\s+\d+s ago`).MatchString(live.stdout)
	})
	js := cli(t, "status", id, "--json")
	require.Equal(t, 0, js.code, js.String())
	var st workflows.RunStatus
	require.NoError(t, json.Unmarshal([]byte(js.stdout), &st))
	assert.Equal(t, "watch", st.Name)
	assert.Equal(t, workflows.StatusRunning, st.Status)
	require.Len(t, st.Tasks, 1)
	assert.Equal(t, workflows.TaskRunning, st.Tasks[0].State)
	assert.NotEmpty(t, st.Tasks[0].Host)
	assert.NotZero(t, st.Tasks[0].Port)

	w := env.startCLI(t, "status", id, "--watch", "300ms")
	waitUntil(t, "the watch to show the run running", 30*time.Second, func() bool { return strings.Contains(w.out.String(), ": Running") })
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	r := w.wait(t, time.Minute)
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, ": Running", "refreshed while it ran")
	assert.Contains(t, r.stdout, ": Succeeded", "and returned once it ended")
}

// `logs --follow` right after `run --detach` waits for the tasks to start, the named one or every one, and
// takes up each task as it starts, one added by start-task too: it failed at once with "no started task
// matches" (or "has not started yet"), and a task that started after its first read was never shown.
func TestE2E_LogsFollowWaitsForTasksToStart(t *testing.T) {
	c := isolated(t, "host-a")
	id := runID(t)
	gate := filepath.Join(t.TempDir(), "bye")
	spec := writeSpec(t, fmt.Sprintf(`{name: late, command: [sh, -c, 'echo "$CLUSTERRUN_TASK says hello"; while [ ! -e %s ]; do sleep 0.2; done; echo "$CLUSTERRUN_TASK says bye"'],
		tasks: {worker: {replicas: 2, hosts: [host-a, host-late]}}}`, gate))
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	type follower struct {
		out  *syncBuffer
		done chan error
	}
	follow := func(args ...string) follower {
		cmd := exec.Command(filepath.Join(c.bin, "clusterrun"), append([]string{"logs", id, "--follow"}, args...)...)
		cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+c.address)
		f := follower{out: &syncBuffer{}, done: make(chan error, 1)}
		cmd.Stdout, cmd.Stderr = f.out, f.out
		require.NoError(t, cmd.Start())
		go func() { f.done <- cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return f
	}
	// host-late has no worker yet, and a run's tasks start together: none has started.
	named, every := follow("worker-1"), follow()
	const waiting = "clusterrun logs: no task to follow has started yet; waiting for them to start\n"
	for _, f := range []follower{named, every} {
		waitUntil(t, "the follower waits", time.Minute, func() bool {
			select {
			case err := <-f.done:
				t.Fatalf("the follower ended before any task started (%v):\n%s", err, f.out)
			default:
			}
			return f.out.String() == waiting
		})
	}

	require.NoError(t, c.startWorker("host-late"))
	waitUntil(t, "both tasks followed", time.Minute, func() bool {
		out := every.out.String()
		return strings.Contains(out, "[worker-0] worker-0 says hello") && strings.Contains(out, "[worker-1] worker-1 says hello")
	})
	r := c.cli(t, "start-task", id, "worker")
	require.Equal(t, 0, r.code, r.String())
	waitUntil(t, "the task started later followed too", time.Minute, func() bool {
		return strings.Contains(every.out.String(), "[worker-2] worker-2 says hello")
	})
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	for _, f := range []follower{named, every} {
		select {
		case err := <-f.done:
			require.NoError(t, err, f.out.String())
		case <-time.After(2 * time.Minute):
			t.Fatalf("the follower did not end with the run:\n%s", f.out)
		}
	}
	assert.Equal(t, waiting+"worker-1 says hello\nworker-1 says bye\n", named.out.String())
	for _, task := range []string{"worker-0", "worker-1", "worker-2"} {
		for _, word := range []string{"hello", "bye"} {
			line := fmt.Sprintf("[%s] %s says %s\n", task, task, word)
			assert.Equal(t, 1, strings.Count(every.out.String(), line), "%q once in:\n%s", line, every.out)
		}
	}
}

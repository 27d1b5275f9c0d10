package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/clusterrun/clusterrun/activities"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/starter"
	"github.com/clusterrun/clusterrun/workflows"
)

func TestE2E_Demo(t *testing.T) {
	id := runID(t)
	r := cliEnv(t, []string{"TEMPORAL_ADDRESS=" + env.address, "CLUSTERRUN_UI_URL=http://ui.test:8233"}, "run", "examples/demo.yaml", "--id", id)
	require.Equal(t, 0, r.code, r.String())

	for _, task := range []string{"chief-0", "worker-0", "worker-1", "ps-0"} {
		assert.Contains(t, r.stdout, "["+task+"]", "live output of %s", task)
		assert.Contains(t, r.stdout, "I am "+task, "identity line of %s", task)
	}
	assert.Contains(t, r.stdout, `TF_CONFIG={"cluster":`)
	assert.Contains(t, r.stdout, "parameter server: SIGTERM received")
	// In the order it happened, though both come in the run's last read: the chief's last words, then the
	// parameter server's stop that its exit caused.
	last, stopped := strings.Index(r.stdout, "chief: result written, exiting"), strings.Index(r.stdout, "parameter server: SIGTERM received")
	assert.True(t, last >= 0 && last < stopped, "the chief's exit is shown after the stop it caused:\n%s", r.stdout)
	assert.NotContains(t, r.stdout, "Terminated", "the demo's parameter server ends on its trap, with no word from sh")
	assert.Contains(t, r.stdout, `{"steps":4,"final_loss":0.200,"cluster_size":4}`)
	assert.Contains(t, r.stdout, "run "+id+" Succeeded: chief-0 exited 0")
	assert.Contains(t, r.stderr, "Web UI: http://ui.test:8233/namespaces/default/workflows/"+id)

	// Output lines are whole: each starts with a task prefix.
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if line == "" || strings.HasPrefix(line, "TASK") || strings.HasPrefix(line, "run ") {
			continue
		}
		if !strings.HasPrefix(line, "[") {
			isRow := false
			for _, task := range []string{"chief-0", "worker-0", "worker-1", "ps-0"} {
				isRow = isRow || strings.HasPrefix(line, task+" ")
			}
			assert.True(t, isRow, "line without a task prefix: %q", line)
		}
	}

	st, err := outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.TaskStopped, st.Task("ps-0").State)
	// Logs in torchrun's layout.
	out, err := os.ReadFile(filepath.Join(activities.AttemptDir(env.logDir, id, 1, "worker-1"), "stdout.log"))
	require.NoError(t, err)
	assert.Contains(t, string(out), "I am worker-1 (rank 2 of 4) on host host-b")
}

// Every task writes what clusterrun told it; the views must agree.
func TestE2E_TFConfigConsistentAcrossTasks(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: tfconfig
command: [sh, -c, 'printf "{\"tf\":%s,\"rank\":\"%s\",\"world\":\"%s\",\"local_rank\":\"%s\",\"local_world\":\"%s\",\"master\":\"%s:%s\",\"host\":\"%s\",\"task\":\"%s\",\"temporal\":\"%s|%s|%s\",\"torchrun\":\"%s|%s|%s\"}" "$TF_CONFIG" "$RANK" "$WORLD_SIZE" "$LOCAL_RANK" "$LOCAL_WORLD_SIZE" "$MASTER_ADDR" "$MASTER_PORT" "$CLUSTERRUN_HOST" "$CLUSTERRUN_TASK" "$TEMPORAL_ADDRESS" "$TEMPORAL_NAMESPACE" "$CLUSTERRUN_WORKER_LOG_FORMAT" "$GROUP_RANK" "$GROUP_WORLD_SIZE" "$TORCHELASTIC_RESTART_COUNT" > "$CLUSTERRUN_RESULT_FILE"']
env: {TEMPORAL_NAMESPACE: "set-by-the-spec${TEMPORAL_ADDRESS}"}
chiefExit: wait
tasks:
  chief: {replicas: 1, hosts: [host-a]}
  worker: {replicas: 3, hosts: [host-a, host-b]}
  ps: {replicas: 1, hosts: [host-b]}
  evaluator: {replicas: 1, hosts: [host-a]}
`)
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	st, err := outcome(t, id)
	require.NoError(t, err)

	type view struct {
		TF struct {
			Cluster map[string][]string `json:"cluster"`
			Task    struct {
				Type  string `json:"type"`
				Index int    `json:"index"`
			} `json:"task"`
		} `json:"tf"`
		Rank       string `json:"rank"`
		World      string `json:"world"`
		LocalRank  string `json:"local_rank"`
		LocalWorld string `json:"local_world"`
		Master     string `json:"master"`
		Host       string `json:"host"`
		Task       string `json:"task"`
		Temporal   string `json:"temporal"`
		Torchrun   string `json:"torchrun"`
	}
	views := map[string]view{}
	for _, task := range st.Tasks {
		var v view
		require.NoError(t, json.Unmarshal(task.Result, &v), "%s wrote %s", task.Name, task.Result)
		views[task.Name] = v
	}
	chief := views["chief-0"]
	require.Len(t, chief.TF.Cluster["worker"], 3)
	assert.NotContains(t, chief.TF.Cluster, "evaluator", "evaluators stay out of the cluster spec")
	ranks := map[string]bool{}
	for name, v := range views {
		assert.Equal(t, chief.TF.Cluster, v.TF.Cluster, "%s sees another cluster", name)
		assert.Equal(t, name, fmt.Sprintf("%s-%d", v.TF.Task.Type, v.TF.Task.Index))
		assert.Equal(t, chief.TF.Cluster["chief"][0], v.Master, "%s has another master", name)
		assert.Equal(t, st.Task(name).Host, v.Host)
		// The worker's Temporal address (its workers have TEMPORAL_ADDRESS) and configuration stay out of the task,
		// also through the spec's ${TEMPORAL_ADDRESS}; what the spec sets itself gets in.
		assert.Equal(t, "|set-by-the-spec|", v.Temporal, "%s saw the worker's Temporal settings", name)
		if name == "evaluator-0" {
			assert.Empty(t, v.Rank)
			continue
		}
		assert.Equal(t, "5", v.World)
		assert.False(t, ranks[v.Rank], "rank %s given twice", v.Rank)
		ranks[v.Rank] = true
	}
	assert.Equal(t, "0", views["chief-0"].Rank)
	// host-a runs chief-0, worker-0, worker-2; host-b runs worker-1, ps-0.
	assert.Equal(t, "3", views["worker-2"].LocalWorld)
	assert.Equal(t, "2", views["worker-2"].LocalRank)
	assert.Equal(t, "1", views["ps-0"].LocalRank)
	// torchrun's node rank: host-a holds rank 0; a first start has restarted 0 times.
	assert.Equal(t, "0|2|0", views["worker-2"].Torchrun)
	assert.Equal(t, "1|2|0", views["ps-0"].Torchrun)
	assert.Equal(t, "||", views["evaluator-0"].Torchrun, "evaluators are outside the world")
	// Each task's own address in the map is the port it was given.
	assert.Equal(t, fmt.Sprintf("127.0.0.1:%d", st.Task("ps-0").Port), chief.TF.Cluster["ps"][0])
}

func TestE2E_ChiefExitStopsSleepingPS(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: chief-exit
command: [sleep, "300"]
stopGracePeriod: 5s
tasks:
  chief: {replicas: 1, command: [sh, -c, 'sleep 1; echo chief done'], hosts: [host-a]}
  ps: {replicas: 2, hosts: [host-b, host-a]}
`)
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	st, err := outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, st.Status)
	for _, ps := range []string{"ps-0", "ps-1"} {
		assert.Equal(t, workflows.TaskStopped, st.Task(ps).State, ps)
		assert.Equal(t, "SIGTERM", st.Task(ps).Signal, ps)
	}
	assert.Empty(t, markedProcessesOf(t, "sleep 300"), "ps processes outlived the run")
}

// markedProcessesOf lists this suite's live processes whose command line holds substr.
func markedProcessesOf(t *testing.T, substr string) []string { return env.processesOf(substr) }

// processesOf lists this cluster's live processes whose command line holds substr (waiting up to 5s for them
// to be gone).
func (c *cluster) processesOf(substr string) []string {
	return markedProcesses(c.marker, substr, 5*time.Second)
}

func TestE2E_AutoRestartSucceedsOnAttempt2(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: restart
command: [sh, -c, 'echo "attempt $CLUSTERRUN_ATTEMPT"; sleep 1; if [ "$CLUSTERRUN_ATTEMPT" = 1 ]; then echo "flaky failure" >&2; exit 1; fi']
tasks:
  worker: {replicas: 2, restart: {policy: OnFailure, maxRestarts: 2, backoff: 200ms}}
`)
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	st, err := outcome(t, id)
	require.NoError(t, err)
	for _, w := range []string{"worker-0", "worker-1"} {
		assert.Equal(t, 2, st.Task(w).Attempt, w)
		assert.Equal(t, workflows.TaskSucceeded, st.Task(w).State, w)
		host := st.Task(w).Host
		require.NotEmpty(t, host)
		// Both attempts left their logs.
		assert.Equal(t, []string{"flaky failure"}, readLines(filepath.Join(activities.AttemptDir(env.logDir, id, 1, w), "stderr.log")))
		assert.Equal(t, []string{"attempt 2"}, readLines(filepath.Join(activities.AttemptDir(env.logDir, id, 2, w), "stdout.log")))
	}
	assert.Contains(t, r.stdout, "running on", "restart shown live")
	assert.Contains(t, r.stdout, "(attempt 2)", "restart shown live")
}

// A run whose task fails once more after its last restart says that no restart was left, in the run's last
// line and in the task's status, not only how the attempt ended.
func TestE2E_ARunOutOfRestartsSaysSo(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: outofrestarts
command: [sh, -c, 'echo "gives up on attempt $CLUSTERRUN_ATTEMPT" >&2; exit 3']
tasks:
  worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 1, backoff: 10ms}}
`)
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 3, r.code, r.String())
	assert.Regexp(t, `run `+id+` Failed: worker-0 exited with code 3 on host-[ab] \(attempt 2\): gives up on attempt 2; `+
		`not restarted: its 1 restart \(maxRestarts: 1\) is used up \(onFailure: failFast\)\n`, r.stdout)
	status := cli(t, "status", id, "-o", "json")
	require.Equal(t, 0, status.code, status.String())
	assert.Contains(t, status.stdout, `not restarted: its 1 restart (maxRestarts: 1) is used up"`, "the task's own error")
}

// An attempt that starts and fails between two of the CLI's looks at the run still has its start, its output
// (read from the host it ran on) and why it restarted shown, in that order; the status says where each earlier
// attempt ran, and logs --attempt reads it there.
func TestE2E_FastCrashOutputIsShown(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: fastcrash
command: [sh, -c, 'if [ "$CLUSTERRUN_ATTEMPT" -lt 3 ]; then echo "attempt $CLUSTERRUN_ATTEMPT on $CLUSTERRUN_HOST says goodbye"; echo "crash $CLUSTERRUN_ATTEMPT" >&2; exit 1; fi; echo "attempt 3 made it"']
tasks:
  worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 2, backoff: 10ms}}
`)
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	st, err := outcome(t, id)
	require.NoError(t, err)
	w := st.Task("worker-0")
	require.Equal(t, 3, w.Attempt)
	require.Len(t, w.Earlier, 2, "attempts 1 and 2 started and ended")
	for i, e := range w.Earlier {
		assert.Equal(t, i+1, e.Attempt)
		assert.Contains(t, r.stdout, fmt.Sprintf("attempt %d on %s says goodbye", e.Attempt, e.Host), "attempt %d's output", e.Attempt)
		assert.Contains(t, r.stdout, fmt.Sprintf("crash %d", e.Attempt))
		assert.Contains(t, r.stdout, fmt.Sprintf("waiting: restart %d of 2 in 10ms after: worker-0", e.Attempt), "why attempt %d restarted", e.Attempt)
		assert.Equal(t, 1, strings.Count(r.stdout, fmt.Sprintf("restart %d of 2", e.Attempt)), "said once")
	}
	assert.Contains(t, r.stdout, "attempt 3 made it")
	// Each attempt in order: its start, its output, why it restarted.
	var want []string
	for _, e := range w.Earlier {
		want = append(want, fmt.Sprintf("running on %s (attempt %d)", e.Host, e.Attempt), fmt.Sprintf("attempt %d on %s says goodbye", e.Attempt, e.Host),
			fmt.Sprintf("waiting: restart %d of 2", e.Attempt))
	}
	want = append(want, fmt.Sprintf("running on %s (attempt 3)", w.Host), "attempt 3 made it", "── exited 0")
	at := 0
	for _, line := range want {
		i := strings.Index(r.stdout[at:], line)
		require.GreaterOrEqual(t, i, 0, "%q after %q in:\n%s", line, r.stdout[:at], r.stdout)
		at += i + len(line)
	}
	first := cli(t, "logs", id, "worker-0", "--attempt", "1")
	require.Equal(t, 0, first.code, first.String())
	assert.Equal(t, fmt.Sprintf("attempt 1 on %s says goodbye\ncrash 1\n", w.Earlier[0].Host), first.stdout, "its stdout and stderr, in the order written")
	assert.Empty(t, first.stderr)
	latest := cli(t, "logs", id, "worker-0")
	require.Equal(t, 0, latest.code, latest.String())
	assert.Equal(t, "attempt 3 made it\n", latest.stdout)
	assert.Equal(t, "clusterrun logs: this was worker-0's attempt 3; read its attempts 1 to 2 with: clusterrun logs "+id+" worker-0 --attempt N\n",
		latest.stderr, "and where the crashes' output is")
}

// Tasks that fail within milliseconds of one another restart together, a backoff after the first: their
// restarts share one timer. With a timer each, the Temporal server makes the next only when the first fires
// and puts it off to a second ahead, so all but the first restarted a whole second late (benchmarks.md).
func TestE2E_TasksThatFailTogetherRestartTogether(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: failtogether
command: [sh, -c, 'clusterrun task barrier crash || exit 9; [ "$CLUSTERRUN_ATTEMPT" -ge 2 ] && exit 0; sleep "0.0$CLUSTERRUN_TASK_INDEX"; exit 3']
tasks:
  worker: {replicas: 8, restart: {policy: OnFailure, maxRestarts: 1, backoff: 3s}}
`)
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	st, err := outcome(t, id)
	require.NoError(t, err)
	for _, w := range st.Tasks {
		assert.Equal(t, 2, w.Attempt, w.Name)
	}
	timers := 0
	it := env.client.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if a := ev.GetTimerStartedEventAttributes(); a != nil && a.GetStartToFireTimeout().AsDuration() == 3*time.Second {
			timers++
		}
	}
	// The 8 exits spread over 70 ms, and reach the run in one or more workflow tasks: one timer, or two or three
	// on a busy machine (each timer takes the restarts queued within 100 ms after it), never one each.
	assert.Less(t, timers, 5, "backoff timers for 8 restarts")
}

// A task waiting out its restart backoff is said to wait while it waits, with why, not when the restart comes:
// here the restart never comes (a backoff of an hour), and the run is canceled once the wait is said. The task
// runs a second, so that the CLI reads its output while it runs (a task that ends between two looks is read
// to its end at once).
func TestE2E_ARestartWaitIsSaidWhileItWaits(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: longbackoff
command: [sh, -c, 'echo "attempt $CLUSTERRUN_ATTEMPT"; sleep 1; echo "giving up" >&2; exit 3']
tasks:
  worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 1, backoff: 1h}}
`)
	run := exec.Command(filepath.Join(env.bin, "clusterrun"), "run", spec, "--id", id)
	run.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.address)
	var out syncBuffer
	run.Stdout, run.Stderr = &out, &out
	require.NoError(t, run.Start())
	exited := make(chan struct{})
	go func() { _ = run.Wait(); close(exited) }()
	t.Cleanup(func() { _ = run.Process.Kill(); <-exited })
	waitUntil(t, "clusterrun run to say that the task waits for its restart", time.Minute, func() bool {
		return strings.Contains(out.String(), "── waiting: restart 1 of 1 in 1h0m0s after: worker-0 exited with code 3")
	})
	st, ok := query(t, id)
	require.True(t, ok)
	assert.Equal(t, workflows.TaskPending, st.Task("worker-0").State, "still waiting:\n%s", out.String())
	assert.Contains(t, out.String(), "[worker-0] giving up\n", "its output came first")
	r := cli(t, "cancel", id)
	require.Equal(t, 0, r.code, r.String())
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("clusterrun run did not end after the cancel:\n%s", out.String())
	}
}

func TestE2E_FailFast(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: failfast
command: [sleep, "300"]
tasks:
  chief: {replicas: 1, hosts: [host-a]}
  worker: {replicas: 3, hosts: [host-a, host-b]}
  bad: {replicas: 1, command: [sh, -c, 'sleep 0.5; echo "bad shard 7: checksum mismatch" >&2; exit 3'], hosts: [host-b]}
stopGracePeriod: 3s
`)
	r := cli(t, "run", spec, "--id", id)
	assert.Equal(t, 3, r.code, r.String())
	assert.Contains(t, r.stdout, "bad-0 exited with code 3 on host-b (attempt 1): bad shard 7: checksum mismatch")
	assert.Contains(t, r.stdout, "Failed")
	st, err := outcome(t, id)
	require.Error(t, err)
	assert.Equal(t, workflows.StatusFailed, st.Status)
	for _, task := range []string{"chief-0", "worker-0", "worker-1", "worker-2"} {
		assert.Equal(t, workflows.TaskStopped, st.Task(task).State, task)
	}
	if assert.NotNil(t, st.Task("bad-0").Logs) {
		assert.Equal(t, workflows.LogSizes{Stderr: int64(len("bad shard 7: checksum mismatch\n"))}, *st.Task("bad-0").Logs)
	}
	assert.Empty(t, markedProcessesOf(t, "sleep 300"))
}

// The end of a run of more than 40 tasks lists the task that failed and counts the others, rather than a row each.
func TestE2E_LargeRunsEndListsWhatFailed(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: failfast-large
command: [sleep, "301"]
tasks:
  worker: {replicas: 44, hosts: [host-a, host-b]}
  bad: {replicas: 1, command: [sh, -c, 'sleep 1; echo "bad shard 7" >&2; exit 3'], hosts: [host-b]}
stopGracePeriod: 3s
`)
	r := cli(t, "run", spec, "--id", id)
	assert.Equal(t, 3, r.code, r.String())
	end := r.stdout[strings.LastIndex(r.stdout, "TASK "):]
	assert.Contains(t, end, "bad-0 exited with code 3 on host-b (attempt 1): bad shard 7")
	assert.Contains(t, end, "45 tasks: 44 Stopped, 1 Failed. Listed: the 1 that did not end cleanly")
	assert.Contains(t, end, "`clusterrun status "+id+"` lists each")
	assert.NotContains(t, end, "worker-0 ", "stopped tasks are counted, not listed")
	assert.Less(t, strings.Count(r.stdout, "── stopped"), 10, "tasks stopped together share a line:\n%s", r.stdout)
	assert.Contains(t, r.stdout, "tasks]")
	assert.Empty(t, markedProcessesOf(t, "sleep 301"))

	status := cli(t, "status", id)
	assert.Contains(t, status.stdout, "worker-43 ", "status lists every task")
}

func TestE2E_TemporalCLIStartQueryCancel(t *testing.T) {
	id := runID(t)
	specJSON := filepath.Join(t.TempDir(), "spec.json")
	require.NoError(t, os.WriteFile(specJSON, []byte(`{"name":"via-cli","command":["sleep","300"],"tasks":{"worker":{"replicas":2}},"stopGracePeriod":"2s"}`), 0o644))
	temporal := func(args ...string) string {
		out, err := temporalCLI(t, args...)
		require.NoError(t, err, "temporal %v: %s", args, out)
		return out
	}
	temporal("workflow", "start", "--type", workflows.WorkflowType, "--task-queue", workflows.TaskQueue,
		"--workflow-id", id, "--input-file", specJSON)

	waitUntil(t, "both workers running", time.Minute, func() bool {
		st, ok := query(t, id)
		return ok && st.Task("worker-0").State == workflows.TaskRunning && st.Task("worker-1").State == workflows.TaskRunning
	})
	out := temporal("workflow", "query", "--workflow-id", id, "--name", workflows.QueryStatus)
	assert.Contains(t, out, `"state":"Running"`)
	// Started without clusterrun's search attributes, the run set them itself (the namespace has them): list
	// names it, and finds it by name and state.
	listed := func(state string) bool {
		r := cli(t, "list", "--name", "via-cli", "--state", state, "-o", "json")
		var runs []struct{ RunID, Name, State string }
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &runs) == nil &&
			slices.Contains(runs, struct{ RunID, Name, State string }{id, "via-cli", state})
	}
	waitUntil(t, "clusterrun list to find the run by its name, Running", 30*time.Second, func() bool { return listed(workflows.StatusRunning) })

	// The pid arrives with the first heartbeat after the start.
	var status cliResult
	waitUntil(t, "status to show a pid", 30*time.Second, func() bool {
		status = cli(t, "status", id)
		return status.code == 0 && regexp.MustCompile(`worker-0\s+Running\s+host-[ab]\s+1\s+\d+`).MatchString(status.stdout)
	})

	temporal("workflow", "cancel", "--workflow-id", id)
	st, err := outcome(t, id)
	require.Error(t, err)
	assert.Equal(t, workflows.StatusCanceled, st.Status)
	assert.Equal(t, workflows.TaskStopped, st.Task("worker-0").State)
	assert.Empty(t, markedProcessesOf(t, "sleep 300"))
	waitUntil(t, "clusterrun list to find the run Canceled", 30*time.Second, func() bool { return listed(workflows.StatusCanceled) })
}

// A run the temporal CLI started with a spec clusterrun's CLI would have refused ends Failed in its first step,
// and says why wherever it is read: status names the problem (no empty state, no bare header), and logs says
// there is nothing to read and why.
func TestE2E_ARunThatRejectedItsSpecSaysSo(t *testing.T) {
	t.Parallel()
	id := runID(t)
	specJSON := filepath.Join(t.TempDir(), "spec.json")
	require.NoError(t, os.WriteFile(specJSON, []byte(`{"name":"rejected-spec","command":["true"],"env":{"PATH":"/x:$PATH"},"tasks":{"worker":{"replicas":1}}}`), 0o644))
	out, err := temporalCLI(t, "workflow", "start", "--type", workflows.WorkflowType, "--task-queue", workflows.TaskQueue,
		"--workflow-id", id, "--input-file", specJSON)
	require.NoError(t, err, "%s", out)
	_, err = outcome(t, id)
	require.Error(t, err)

	problem := `env.PATH: "/x:$PATH" has $PATH, which no shell expands here`
	st := cli(t, "status", id)
	require.Equal(t, 0, st.code, st.String())
	assert.True(t, strings.HasPrefix(st.stdout, "run "+id+" (rejected-spec): Failed: it rejected its spec: invalid run spec (1 problem(s)): "+problem), st.stdout)
	assert.NotContains(t, st.stdout, "TASK")
	js := cli(t, "status", id, "-o", "json")
	var got workflows.RunStatus
	require.NoError(t, json.Unmarshal([]byte(js.stdout), &got), js.stdout)
	assert.Equal(t, workflows.StatusFailed, got.Status)
	assert.Equal(t, "rejected-spec", got.Name)
	assert.Contains(t, got.Reason, problem)
	assert.WithinDuration(t, time.Now(), got.StartTime, 5*time.Minute, "when the run started, not the zero time")
	logs := cli(t, "logs", id)
	assert.Equal(t, 1, logs.code, logs.String())
	assert.Contains(t, logs.stderr, "run "+id+" has no logs: it ended Failed before it had any task: it rejected its spec: ")
	// list finds it by its name, as it would an accepted run (visibility lags the run's own record)
	var list cliResult
	waitUntil(t, "list --name finds the rejected run", time.Minute, func() bool {
		list = cli(t, "list", "--name", "rejected-spec", "--query", "WorkflowId = '"+id+"'", "-o", "jsonl")
		return list.code == 0 && strings.Contains(list.stdout, `"name":"rejected-spec","state":"Failed"`)
	})
}

func TestE2E_ClusterrunCancel(t *testing.T) {
	id := runID(t)
	// Sharded, so that one of its shards can be mistaken for a run below.
	spec := writeSpec(t, `{name: cancel-me, command: [sleep, "300"], tasks: {worker: {replicas: 2}}, tasksPerShard: 1, stopGracePeriod: 2s}`)
	r := cli(t, "run", spec, "--id", id, "--detach")
	require.Equal(t, 0, r.code, r.String())
	assert.Equal(t, id+"\n", r.stdout)
	waitUntil(t, "workers running", time.Minute, func() bool {
		st, ok := query(t, id)
		return ok && st.Task("worker-1").State == workflows.TaskRunning
	})
	// A running workflow of another type is not a run to cancel (nor to stop): it is left running.
	shard := workflows.ShardWorkflowID(id, 0, 0)
	for _, verb := range []string{"cancel", "stop"} {
		wrong := cli(t, verb, shard)
		assert.Equal(t, 1, wrong.code, wrong.String())
		assert.Contains(t, wrong.stderr, shard+" is a ClusterShard workflow, not a clusterrun run")
	}
	d, err := env.client.DescribeWorkflowExecution(context.Background(), shard, "")
	require.NoError(t, err)
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, d.GetWorkflowExecutionInfo().GetStatus())

	c := cli(t, "cancel", id)
	assert.Equal(t, 0, c.code, c.String())
	assert.Contains(t, c.stdout, "Canceled")
	assert.Empty(t, markedProcessesOf(t, "sleep 300"))

	again := cli(t, "cancel", id)
	assert.Equal(t, 1, again.code)
	assert.Contains(t, again.stderr, "has already ended")
}

// A cancel reaches each host from the run's history, where every host reads it at once: the hosts start
// stopping their tasks before the run's StopTasks are handed out to them (docs/design.md, "Stopping"), and
// the run still ends with each task's stop confirmed by its host.
func TestE2E_HostsStopACanceledRunFromItsHistory(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: cancel-from-history
command: [sleep, "301"]
stopGracePeriod: 5s
tasks: {chief: {replicas: 1, hosts: [host-a]}, worker: {replicas: 1, hosts: [host-b]}}
`)
	r := cli(t, "run", spec, "--id", id, "--detach")
	require.Equal(t, 0, r.code, r.String())
	waitUntil(t, "both tasks running", time.Minute, func() bool {
		st, ok := query(t, id)
		return ok && st.Task("chief-0").State == workflows.TaskRunning && st.Task("worker-0").State == workflows.TaskRunning
	})
	c := cli(t, "cancel", id)
	require.Equal(t, 0, c.code, c.String())
	st, err := outcome(t, id)
	require.Error(t, err)
	assert.Equal(t, workflows.StatusCanceled, st.Status)
	for _, task := range []string{"chief-0", "worker-0"} {
		ts := st.Task(task)
		assert.Equal(t, workflows.TaskStopped, ts.State, task)
		assert.Equal(t, "SIGTERM", ts.Signal, "%s: its host confirmed the stop, and it took SIGTERM", task)
	}
	for _, host := range []string{"host-a", "host-b"} {
		log, err := os.ReadFile(filepath.Join(env.workDir, "worker-"+host+".log"))
		require.NoError(t, err)
		assert.Regexp(t, `stopping tasks, as the run's history says.*"run": "`+regexp.QuoteMeta(id)+`".*"reason": "run canceled", "on": "cancel request"`, string(log),
			"%s stopped its task on the cancel request in the run's history", host)
	}
	assert.Empty(t, markedProcessesOf(t, "sleep 301"))
}

// A stop the run decides (here, the chief's exit) reaches the other host from the run's history too: the
// StopTasks scheduled for it is read there and started before the activity comes.
func TestE2E_HostsStopFromTheHistoryWhenTheChiefExits(t *testing.T) {
	id := runID(t)
	up := filepath.Join(t.TempDir(), "worker-up")
	spec := writeSpec(t, fmt.Sprintf(`
name: chief-exit-from-history
stopGracePeriod: 5s
tasks:
  chief: {replicas: 1, hosts: [host-a], command: [sh, -c, 'while [ ! -f %[1]s ]; do sleep 0.05; done']}
  worker: {replicas: 1, hosts: [host-b], command: [sh, -c, 'touch %[1]s; exec sleep 302']}
`, up))
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	st, err := outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, st.Status)
	w := st.Task("worker-0")
	assert.Equal(t, workflows.TaskStopped, w.State)
	assert.Equal(t, "SIGTERM", w.Signal, "host-b confirmed the stop, and the worker took SIGTERM")
	log, err := os.ReadFile(filepath.Join(env.workDir, "worker-host-b.log"))
	require.NoError(t, err)
	assert.Regexp(t, `stopping tasks, as the run's history says.*"run": "`+regexp.QuoteMeta(id)+`".*"reason": "chief-0 exited 0", "on": "StopTasks"`, string(log))
	assert.Empty(t, markedProcessesOf(t, "sleep 302"))
}

func TestE2E_MaxRunTime(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `{name: slow, command: [sleep, "300"], maxRunTime: 2s, stopGracePeriod: 1s, tasks: {chief: {replicas: 1}}}`)
	r := cli(t, "run", spec, "--id", id)
	assert.Equal(t, 124, r.code, r.String())
	assert.Contains(t, r.stdout, "TimedOut: maxRunTime 2s reached")
}

func TestE2E_GangRestart(t *testing.T) {
	id := runID(t)
	// In generation 0 worker-1 fails; every task restarts with a new rendezvous and all succeed.
	spec := writeSpec(t, `
name: gang
command: [sh, -c, 'echo "$CLUSTERRUN_RESTART_COUNT $MASTER_PORT" > "$CLUSTERRUN_RESULT_FILE.txt"; if [ "$CLUSTERRUN_TASK" = worker-1 ] && [ "$CLUSTERRUN_RESTART_COUNT" = 0 ]; then echo "worker-1 gives up"; exit 1; fi; sleep 1; echo "{\"restart\": $CLUSTERRUN_RESTART_COUNT}" > "$CLUSTERRUN_RESULT_FILE"']
restart: {policy: OnFailure, maxRestarts: 1, backoff: 100ms, scope: all}
tasks: {chief: {replicas: 1}, worker: {replicas: 2}}
`)
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	// A follower that first sees the restart after its 100 ms backoff reads it as done: no "in 100ms".
	assert.Regexp(t, `\[clusterrun\] ── gang restart 1 of 1 (in 100ms )?after: worker-1 `, r.stdout, "the follower says why every task started again")
	// In order: the output of the attempt that failed, the gang restart, the new attempts.
	gave, gang := strings.Index(r.stdout, "worker-1 gives up"), strings.Index(r.stdout, "── gang restart")
	again := strings.Index(r.stdout, "(attempt 2)")
	assert.True(t, gave >= 0 && gave < gang && gang < again, "out of order:\n%s", r.stdout)
	st, err := outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, 1, st.RestartCount)
	assert.JSONEq(t, `{"restart": 1}`, string(st.Task("chief-0").Result))
	assert.Equal(t, 2, st.Task("chief-0").Attempt)
}

func TestE2E_BadInput(t *testing.T) {
	t.Run("invalid spec", func(t *testing.T) {
		spec := writeSpec(t, "name: Bad\ntasks: {chief: {replicas: 2}}\n")
		r := cli(t, "run", spec)
		assert.Equal(t, 2, r.code)
		assert.Contains(t, r.stderr, "tasks.chief.replicas: a run has at most one chief")
		assert.Contains(t, r.stderr, "name: \"Bad\" may hold only lowercase")
		v := cli(t, "validate", spec)
		assert.Equal(t, 2, v.code)
		assert.Contains(t, v.stderr, "3 problem(s)")
		assert.Contains(t, v.stderr, "tasks.chief.command: no command")
	})
	t.Run("valid spec", func(t *testing.T) {
		v := cli(t, "validate", "examples/demo.yaml")
		assert.Equal(t, 0, v.code, v.String())
		assert.Contains(t, v.stdout, "valid run spec \"demo\" with 4 task(s)")
	})
	t.Run("missing file", func(t *testing.T) {
		r := cli(t, "run", "/no/such/spec.yaml")
		assert.Equal(t, 2, r.code)
		assert.Contains(t, r.stderr, "no such file")
	})
	t.Run("a run name for its ID", func(t *testing.T) {
		id := runID(t)
		spec := writeSpec(t, `{name: named-not-id, command: ["true"], tasks: {worker: {replicas: 1}}}`)
		require.Equal(t, 0, cli(t, "run", spec, "--id", id).code)
		var r cliResult
		waitUntil(t, "status names the run of that name", time.Minute, func() bool {
			r = cli(t, "status", "named-not-id")
			return strings.Contains(r.stderr, "as "+id+" (the newest)")
		})
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, `no run with ID "named-not-id" in namespace default; named-not-id is a run name, not an ID: give a run's ID, as `+id+" (the newest)")
	})
	t.Run("a run ID cut short or mistyped", func(t *testing.T) {
		id := starter.NewRunID("cut-short")
		spec := writeSpec(t, `{name: cut-short, command: ["true"], tasks: {worker: {replicas: 1}}}`)
		require.Equal(t, 0, cli(t, "run", spec, "--id", id).code)
		cut := id[:len(id)-2]
		var r cliResult
		waitUntil(t, "status names the run whose ID starts so", time.Minute, func() bool {
			r = cli(t, "status", cut)
			return strings.Contains(r.stderr, "start with it are "+id)
		})
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, fmt.Sprintf(`no run with ID %q in namespace default; give a whole run ID: those that start with it are %s (the newest)`, cut, id))
		typo := cut + "zz"
		r = cli(t, "logs", typo)
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, fmt.Sprintf(`no run with ID %q in namespace default; did you mean %s?`, typo, id))
	})
	t.Run("duplicate run id", func(t *testing.T) {
		id := runID(t)
		spec := writeSpec(t, `{name: dup, command: ["true"], tasks: {worker: {replicas: 1}}}`)
		require.Equal(t, 0, cli(t, "run", spec, "--id", id).code)
		r := cli(t, "run", spec, "--id", id)
		assert.Equal(t, 2, r.code)
		assert.Contains(t, r.stderr, "already taken")
	})
	t.Run("command not found", func(t *testing.T) {
		spec := writeSpec(t, `{name: nocmd, command: [sleep, "300"], tasks: {chief: {replicas: 1, command: [no-such-program-xyz]}, worker: {replicas: 1}}}`)
		r := cli(t, "run", spec)
		assert.NotEqual(t, 0, r.code)
		assert.Contains(t, r.stdout, `command "no-such-program-xyz" not found on this host`)
		assert.Empty(t, markedProcessesOf(t, "sleep 300"), "no half-started cluster")
	})
	t.Run("env dollar name", func(t *testing.T) {
		spec := writeSpec(t, `{name: envref, command: ["true"], env: {PATH: "/opt/x/bin:$PATH"}, tasks: {worker: {replicas: 1}}}`)
		r := cli(t, "run", spec)
		assert.Equal(t, 2, r.code, r.String())
		assert.Contains(t, r.stderr, `env.PATH: "/opt/x/bin:$PATH" has $PATH, which no shell expands here: write ${PATH} for the host's value, or $$PATH for the text`)
	})
	t.Run("missing working dir", func(t *testing.T) {
		spec := writeSpec(t, `{name: nodir, command: ["true"], workingDir: /no/such/dir, tasks: {worker: {replicas: 1}}}`)
		r := cli(t, "run", spec)
		assert.NotEqual(t, 0, r.code)
		assert.Contains(t, r.stdout, `working directory "/no/such/dir" does not exist`)
	})
	t.Run("unknown run", func(t *testing.T) {
		r := cli(t, "status", "no-such-run")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, `no run with ID "no-such-run"`)
		assert.Contains(t, r.stderr, "list runs with `clusterrun list`")
	})
	t.Run("unknown namespace", func(t *testing.T) {
		spec := writeSpec(t, `{name: x, command: ["true"], tasks: {worker: {replicas: 1}}}`)
		for _, args := range [][]string{{"run", spec}, {"status", "no-such-run"}, {"list"}, {"hosts"}} {
			r := cli(t, append(args, "--namespace", "no-such-ns")...)
			assert.Equal(t, 1, r.code, r.String())
			assert.Contains(t, r.stderr, `has no namespace "no-such-ns": name the one your runs are in with --namespace`, args[0])
			assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line, without the step that met it (%s)", r.stderr)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := env.workerCommand("host-no-ns", env.address, "--namespace", "no-such-ns")
		worker := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
		worker.Env, worker.Dir = cmd.Env, cmd.Dir
		out, err := worker.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "the worker does not start: %s", out)
		assert.Equal(t, 2, exit.ExitCode(), "%s", out)
		assert.Contains(t, string(out), `clusterrun-worker: the Temporal server at `+env.address+` has no namespace "no-such-ns"`)
	})
	t.Run("unreachable server", func(t *testing.T) {
		spec := writeSpec(t, `{name: x, command: ["true"], tasks: {worker: {replicas: 1}}}`)
		r := cliEnv(t, []string{"TEMPORAL_ADDRESS=127.0.0.1:1"}, "run", spec)
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "cannot reach the Temporal server at 127.0.0.1:1")
	})
	t.Run("usage", func(t *testing.T) {
		r := cli(t, "run")
		assert.Equal(t, 2, r.code)
		assert.Contains(t, r.stderr, "missing SPEC (a YAML or JSON spec file; docs/spec.md); usage: clusterrun run SPEC")
		r = cli(t, "run", "--bogus", "x.yaml")
		assert.Equal(t, 2, r.code)
		r = cli(t, "status", "--help")
		assert.Equal(t, 0, r.code)
		assert.Contains(t, r.stderr, "Example:")
	})
}

// A spec's env value takes the host's value of a variable as ${NAME}: PATH: "...:${PATH}" extends the PATH
// the task would have had, and its programs are still found. A value that names another the spec sets reads
// the spec's, the task type's over the run's, and a type's value that names itself extends the run's.
func TestE2E_EnvValuesExtendTheHostsEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, `
name: envref
command: [sh, -c, 'echo "$PATH" > "$OUT/path"; echo "$PRICE" > "$OUT/price"; command -v sleep > "$OUT/sleep"; echo "$CKPT" > "$OUT/ckpt-$CLUSTERRUN_TASK"; echo "$PYTHONPATH" > "$OUT/pp-$CLUSTERRUN_TASK"']
env: {PATH: "/opt/none/bin:${PATH}", PRICE: "$$5", OUT: "`+dir+`", BASE: "/ckpt/${CLUSTERRUN_RUN_ID}", CKPT: "${BASE}/${CLUSTERRUN_TASK}", PYTHONPATH: /common}
tasks: {worker: {replicas: 2}, ps: {replicas: 1, env: {BASE: /ps-ckpt, PYTHONPATH: "${PYTHONPATH}:/ps"}}}
`)
	id := runID(t)
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	path := read("path")
	assert.True(t, strings.HasPrefix(path, "/opt/none/bin:/"), "the host's PATH after the spec's folder: %q", path)
	assert.NotContains(t, path, "$")
	assert.Equal(t, "$5", read("price"))
	assert.NotEmpty(t, read("sleep"), "programs on the host's PATH are still found")
	assert.Equal(t, "/ckpt/"+id+"/worker-0", read("ckpt-worker-0"), "a task's own variables are there to refer to, through the spec's BASE")
	assert.Equal(t, "/ckpt/"+id+"/worker-1", read("ckpt-worker-1"))
	assert.Equal(t, "/ps-ckpt/ps-0", read("ckpt-ps-0"), "the run's CKPT reads the type's BASE")
	assert.Equal(t, "/common", read("pp-worker-0"))
	assert.Equal(t, "/common:/ps", read("pp-ps-0"), "a type's value that names itself extends the run's")
}

// The Go client path: a run started with the SDK directly, as the starter does.
func TestE2E_SDKStartAndQuery(t *testing.T) {
	id := runID(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := env.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.WorkflowType,
		map[string]any{"name": "sdk", "command": []string{"sh", "-c", "echo '{\"ok\":true}' > $CLUSTERRUN_RESULT_FILE"}, "tasks": map[string]any{"chief": map[string]any{"replicas": 1}}})
	require.NoError(t, err)
	var st workflows.RunStatus
	require.NoError(t, run.Get(ctx, &st))
	assert.JSONEq(t, `{"ok":true}`, string(st.Task("chief-0").Result))
}

// A run with maxRunTime and a deadline warning that is canceled ends Canceled, its tasks never warned: the
// cancel also cancels the run's maxRunTime and warning timers, and the run once took their resolving for the
// time passing (seen as a user: canceled after a minute, the run said "TimedOut: maxRunTime 10m0s reached").
func TestE2E_ACanceledRunWithAMaxRunTimeEndsCanceled(t *testing.T) {
	id := runID(t)
	marks := t.TempDir()
	spec := writeSpec(t, fmt.Sprintf(`
name: cancel-before-deadline
maxRunTime: 1h
deadlineWarning: {signal: SIGUSR1, before: 30m}
stopGracePeriod: 5s
command: [sh, -c, 'trap "touch %s/warned-$CLUSTERRUN_TASK" USR1; trap "exit 0" TERM; while :; do sleep 0.2; done']
tasks: {worker: {replicas: 2}}
`, marks))
	r := cli(t, "run", spec, "--id", id, "--detach")
	require.Equal(t, 0, r.code, r.String())
	waitUntil(t, "both workers running", time.Minute, func() bool {
		st, ok := query(t, id)
		return ok && st.Task("worker-0").State == workflows.TaskRunning && st.Task("worker-1").State == workflows.TaskRunning
	})
	c := cli(t, "cancel", id)
	assert.Equal(t, 0, c.code, c.String())
	assert.Contains(t, c.stdout, "Canceled")
	st, err := outcome(t, id)
	require.Error(t, err)
	assert.Equal(t, workflows.StatusCanceled, st.Status, st.Reason)
	assert.Equal(t, workflows.ReasonCanceled, st.Reason)
	warned, err := os.ReadDir(marks)
	require.NoError(t, err)
	assert.Empty(t, warned, "no task was sent the deadline warning")
}

// A run canceled in a gang restart's backoff ends Canceled there, with no next generation: the cancel also
// cancels the backoff's timer and the maxRunTime timer, and neither is the time passing.
func TestE2E_ARunCanceledInAGangBackoffStartsNoNextGeneration(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: cancel-in-backoff
maxRunTime: 1h
restart: {policy: OnFailure, maxRestarts: 3, backoff: 5m, scope: all}
stopGracePeriod: 2s
command: [sh, -c, 'if [ "$CLUSTERRUN_TASK" = worker-0 ]; then exit 3; fi; exec sleep 309']
tasks: {worker: {replicas: 2}}
`)
	r := cli(t, "run", spec, "--id", id, "--detach")
	require.Equal(t, 0, r.code, r.String())
	waitUntil(t, "the gang restart's backoff", time.Minute, func() bool {
		st, ok := query(t, id)
		return ok && strings.Contains(st.Reason, "gang restart 1 of 3")
	})
	// In the backoff, each row is its attempt as it ended, waiting for the restart.
	status := cli(t, "status", id)
	assert.Regexp(t, `\(gang restarts: 1\); the next generation starts in [45]m[0-9]+s\n`, status.stdout)
	assert.Regexp(t, `worker-0\s+Failed\s+host-[ab]\s+1\s.*\s3\s+waits for gang restart 1; worker-0 exited with code 3`, status.stdout)
	assert.Regexp(t, `worker-1\s+Stopped\s+host-[ab]\s+1\s.*\(SIGTERM\)\s+waits for gang restart 1\n`, status.stdout)
	c := cli(t, "cancel", id)
	assert.Equal(t, 0, c.code, c.String())
	st, err := outcome(t, id)
	require.Error(t, err)
	assert.Equal(t, workflows.StatusCanceled, st.Status, st.Reason)
	for _, task := range st.Tasks {
		assert.Equal(t, 1, task.Attempt, "%s: no next generation was launched", task.Name)
	}
	assert.Equal(t, workflows.TaskFailed, st.Task("worker-0").State, "each task ends as its attempt ended")
	assert.Equal(t, workflows.TaskStopped, st.Task("worker-1").State)
	assert.Empty(t, markedProcessesOf(t, "sleep 309"))
}

// A task in a gang restart's backoff is not over, though its row is the attempt the restart ended: start-task
// says what it waits for, and terminate-task ends its next attempt as the generation starts.
func TestE2E_TerminateATaskInAGangBackoff(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: terminate-in-backoff
restart: {policy: OnFailure, maxRestarts: 1, backoff: 4s, scope: all}
stopGracePeriod: 2s
command: [sh, -c, 'if [ "$CLUSTERRUN_TASK" = worker-0 ] && [ "$CLUSTERRUN_ATTEMPT" = 1 ]; then exit 3; fi; exec sleep 305']
tasks: {worker: {replicas: 2}}
`)
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	waitUntil(t, "the gang restart's backoff", time.Minute, func() bool {
		st, ok := query(t, id)
		return ok && st.Task("worker-1").GangWait == 1
	})
	again := cli(t, "start-task", id, "worker-1")
	assert.Equal(t, 1, again.code, again.String())
	assert.Contains(t, again.stderr, "worker-1 has not ended (it is waiting for gang restart 1, attempt 1)")
	term := cli(t, "terminate-task", id, "worker-1")
	require.Equal(t, 0, term.code, term.String())
	assert.Regexp(t, `worker-1\s+Terminated\s+host-[ab]\s+2\s`, term.stdout)
	waitUntil(t, "worker-0's next attempt to run", time.Minute, func() bool {
		st, ok := query(t, id)
		return ok && st.Task("worker-0").Attempt == 2 && st.Task("worker-0").State == workflows.TaskRunning
	})
	assert.Len(t, markedProcessesOf(t, "sleep 305"), 1, "worker-1 did not run again")
	require.Equal(t, 0, cli(t, "cancel", id).code)
}

// A second Ctrl-C while the cancel waits for tasks that ignore SIGTERM gives the terminal back at once; the
// run goes on stopping them and kills them at the end of their stopGracePeriod.
func TestE2E_RunInterruptedTwiceDetachesWhileTheStopGoesOn(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `{name: interrupted, command: [sh, -c, 'trap "" TERM; exec sleep 304'], stopGracePeriod: 12s, tasks: {worker: {replicas: 1}}}`)
	cmd := exec.Command(filepath.Join(env.bin, "clusterrun"), "run", spec, "--id", id)
	cmd.Dir = env.root
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.address)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	waitUntil(t, "the task running", time.Minute, func() bool { return len(markedProcessesOf(t, "sleep 304")) == 1 })

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	waitUntil(t, "the cancel", 30*time.Second, func() bool { return strings.Contains(out.String(), "canceling run "+id) })
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, out.String())
	assert.Equal(t, 130, ee.ExitCode(), out.String())
	assert.Contains(t, out.String(), "detached; run "+id+" is still stopping its tasks")
	st := cli(t, "status", id, "-o", "json")
	assert.Contains(t, st.stdout, `"status": "Stopping"`, "the stop goes on without the CLI")

	final, _ := outcome(t, id)
	assert.Equal(t, workflows.StatusCanceled, final.Status)
	assert.Empty(t, markedProcessesOf(t, "sleep 304"), "killed at the end of its stopGracePeriod")
	w := final.Task("worker-0")
	assert.Equal(t, workflows.TaskStopped, w.State)
	assert.Equal(t, "SIGKILL", w.Signal)
	assert.Equal(t, "it did not exit within its 12s grace period (stopGracePeriod) after SIGTERM", w.Error, "the status says why it was killed")
	assert.Contains(t, cli(t, "status", id).stdout, "it did not exit within its 12s grace period (stopGracePeriod) after SIGTERM")
}

// runOfTwoSleepers starts clusterrun run of two tasks that sleep for arg seconds (no terminal), and returns
// once both run.
func runOfTwoSleepers(t *testing.T, name, arg string) (id string, cmd *exec.Cmd, out *strings.Builder) {
	t.Helper()
	id = runID(t)
	spec := writeSpec(t, fmt.Sprintf(`{name: %s, command: [sleep, "%s"], stopGracePeriod: 2s, tasks: {worker: {replicas: 2}}}`, name, arg))
	cmd = exec.Command(filepath.Join(env.bin, "clusterrun"), "run", spec, "--id", id)
	cmd.Dir = env.root
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.address)
	out = &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	waitUntil(t, "both tasks running", time.Minute, func() bool { return len(markedProcesses(env.marker, "sleep "+arg, 0)) == 2 })
	return id, cmd, out
}

// signaled sends cmd sig and returns its exit code.
func signaled(t *testing.T, cmd *exec.Cmd, sig os.Signal, out *strings.Builder) int {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(sig))
	var ee *exec.ExitError
	require.ErrorAs(t, cmd.Wait(), &ee, out.String())
	return ee.ExitCode()
}

// Ctrl-C without a terminal cancels the run: every task stops, the CLI exits 130.
func TestE2E_RunInterruptedCancels(t *testing.T) {
	id, cmd, out := runOfTwoSleepers(t, "interrupted", "303")
	assert.Equal(t, 130, signaled(t, cmd, os.Interrupt, out), out.String())
	assert.Contains(t, out.String(), "canceling run "+id)
	st, _ := outcome(t, id)
	assert.Equal(t, workflows.StatusCanceled, st.Status)
	assert.Empty(t, markedProcessesOf(t, "sleep 303"))
}

// A hang-up (SIGHUP, what a closed terminal or a dropped SSH session sends) detaches clusterrun run: the run
// is not the terminal's. Its tasks go on, the same processes, and attach follows it again.
func TestE2E_RunHungUpDetaches(t *testing.T) {
	t.Parallel()
	id, cmd, out := runOfTwoSleepers(t, "hungup", "304")
	running := func() []string { return markedProcesses(env.marker, "sleep 304", 0) }
	pids := running()
	assert.Equal(t, 129, signaled(t, cmd, syscall.SIGHUP, out), out.String())
	assert.Contains(t, out.String(), "hung up: detached; run "+id+" goes on. Follow it again with: clusterrun attach "+id)
	r := cli(t, "status", id)
	assert.Contains(t, r.stdout, "Running", r.String())
	assert.Equal(t, pids, running(), "the same processes go on")
	require.Equal(t, 0, cli(t, "cancel", id).code)
	waitUntil(t, "the tasks gone after the cancel", time.Minute, func() bool { return len(markedProcessesOf(t, "sleep 304")) == 0 })
}

// A reader of clusterrun run's output that leaves (run ... | head) ends neither the run nor its following: run
// says so once, follows the run to its end and exits with its code, as srun does. Before, the Go runtime's
// SIGPIPE ended the command at its next write, with no word and no exit code of the run's.
func TestE2E_RunWhoseReaderLeavesFollowsToTheEnd(t *testing.T) {
	t.Parallel()
	t.Run("table", func(t *testing.T) { runWhoseReaderLeaves(t) })
	// The JSON comes at the end only, when its reader is gone: before, the command failed with 1 there.
	t.Run("json", func(t *testing.T) { runWhoseReaderLeaves(t, "-o", "json") })
	t.Run("attached to an ended run", attachedToAnEndedRunWhoseReaderLeaves)
}

// attach to a run that has ended has nothing to follow: once its reader is gone, it says how the run ended
// (it said the run "is followed to its end", and offered Ctrl-C to cancel it), and exits with the run's code.
func attachedToAnEndedRunWhoseReaderLeaves(t *testing.T) {
	t.Parallel()
	id := runID(t)
	spec := writeSpec(t, `{name: ended, tasks: {worker: {replicas: 1}}, command: [sh, -c, 'echo one; echo two; exit 3']}`)
	require.Equal(t, 3, cli(t, "run", spec, "--id", id).code)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	r.Close() // the reader left before the first line, as head -0 does
	cmd := exec.Command(filepath.Join(env.bin, "clusterrun"), "attach", id)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.address)
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	require.NoError(t, cmd.Start())
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("attach to an ended run did not exit")
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, stderr.String())
	assert.Equal(t, 3, exit.ExitCode(), "the run's code: %s", stderr.String())
	assert.Contains(t, stderr.String(), "the output's reader is gone; run "+id+" had ended (Failed), and this command exits with its code")
	assert.NotContains(t, stderr.String(), "followed to its end")
}

func runWhoseReaderLeaves(t *testing.T, flags ...string) {
	t.Parallel()
	id, mark := runID(t), t.TempDir()
	spec := writeSpec(t, `{name: reader-leaves, env: {MARK: `+mark+`}, tasks: {worker: {replicas: 1}},
  command: [sh, -c, 'i=0; while [ ! -e "$MARK/end" ]; do echo "line $i"; i=$((i + 1)); sleep 0.1; done; exit 3']}`)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(env.bin, "clusterrun"), append([]string{"run", spec, "--id", id}, flags...)...)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.address)
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); cli(t, "cancel", id) }) // nothing left behind if the test fails
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if len(flags) == 0 {
		out := bufio.NewReader(r)
		for line := ""; !strings.Contains(line, "line 0"); {
			line, err = out.ReadString('\n')
			require.NoError(t, err, stderr.String())
		}
	}
	r.Close() // the reader leaves, as head does

	left := "the output's reader is gone; run " + id + " is followed to its end"
	if len(flags) == 0 {
		waitUntil(t, "run to say its reader left", time.Minute, func() bool { return strings.Contains(stderr.String(), left) })
	}
	waitUntil(t, "the task to write on", time.Minute, func() bool {
		return strings.Contains(cli(t, "logs", id, "worker-0", "--stdout").stdout, "line 30\n")
	})
	select {
	case err := <-exited:
		t.Fatalf("run ended while its run went on: %v\n%s", err, stderr.String())
	default:
	}
	touch(t, filepath.Join(mark, "end"))
	select {
	case err = <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatal("run did not end with its run")
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, stderr.String())
	assert.Equal(t, 3, exit.ExitCode(), "the run's code: %s", stderr.String())
	assert.Equal(t, 1, strings.Count(stderr.String(), left), stderr.String())
}

// A task's stdout is a file, which Python fills in 8 KiB blocks: a training script's prints showed only once
// the block filled or the script ended, and were lost when it was killed. Hosts run tasks with
// PYTHONUNBUFFERED=1 unless they or the spec set it; the suite's workers, like a host's service, have none of
// their own. So a print shows while the task runs, and is in its log after a SIGTERM, which ends Python
// without flushing what it holds.
func TestE2E_PythonPrintsShowAsTheyAreMade(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is needed for the Python print test")
	}
	id := runID(t)
	spec := writeSpec(t, `
name: prints
command:
  - python3
  - -c
  - |
    import time
    print("epoch 1 loss 0.5")
    time.sleep(600)
tasks: {worker: {replicas: 1}}
`)
	run := env.startCLIToFile(t, "run", spec, "--id", id)
	run.waitFor(t, "the print while the task runs", regexp.MustCompile(`\[worker-0\] epoch 1 loss 0\.5\n`))
	require.Equal(t, 0, cli(t, "cancel", id).code)
	var exit *exec.ExitError
	require.ErrorAs(t, run.wait(t, 2*time.Minute), &exit)
	assert.Equal(t, 130, exit.ExitCode(), run.output())
	assert.Equal(t, "epoch 1 loss 0.5\n", cli(t, "logs", id, "worker-0", "--stdout").stdout, "the print is in the log of the task SIGTERM ended")
}

// A run started with --detach (or left with Ctrl-C) is followed again with `clusterrun attach`: the last lines
// each task attempt wrote before it, then everything as it comes, the end table, and the run's exit code. Ctrl-C
// without a terminal leaves the run going. `logs --follow --tail N` cuts only what was written before it began: a
// restart's output comes whole (it cut the new attempt's first read to N lines, too).
func TestE2E_AttachFollowsARunStartedElsewhere(t *testing.T) {
	id := runID(t)
	release := filepath.Join(t.TempDir(), "release")
	spec := writeSpec(t, fmt.Sprintf(`
name: attach
command:
  - sh
  - -c
  - |
    if [ "$CLUSTERRUN_ATTEMPT" = 1 ]; then
      for i in 1 2 3 4 5; do echo a1-$i; done
      while [ ! -e %s ]; do sleep 0.05; done
      exit 1
    fi
    for i in $(seq 1 30); do echo a2-$i; done
    exit 3
tasks: {worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 1, backoff: 100ms}}}
`, release))
	detached := cli(t, "run", spec, "--id", id, "--detach")
	require.Equal(t, 0, detached.code, detached.String())
	assert.Equal(t, id+"\n", detached.stdout, "the ID alone, for scripts")
	assert.Contains(t, detached.stderr, "follow it with: clusterrun attach "+id+"\n")
	require.Eventually(t, func() bool { return strings.Contains(cli(t, "logs", id, "--stdout").stdout, "a1-5\n") },
		2*time.Minute, 100*time.Millisecond, "attempt 1 wrote its lines")
	attach := env.startCLIToFile(t, "attach", id, "--tail", "2")
	follow := env.startCLIToFile(t, "logs", id, "--follow", "--tail", "2")
	// No earlier line, as tail -n 0 -f. A line's time is its host's sample of the file (every 250 ms): the
	// command starts once a1's lines are dated before now.
	waitUntil(t, "attempt 1's lines to be dated", time.Minute, func() bool {
		r := cli(t, "logs", id, "--stdout", "--since", time.Now().UTC().Format(time.RFC3339Nano))
		return r.code == 0 && r.stdout == ""
	})
	fromNow := env.startCLIToFile(t, "logs", id, "--follow", "--tail", "0")
	leaves := env.startCLIToFile(t, "attach", id)
	firstLines := regexp.MustCompile(`a1-5\n`)
	attach.waitFor(t, "attempt 1's last lines", firstLines)
	follow.waitFor(t, "attempt 1's last lines", firstLines)
	leaves.waitFor(t, "attempt 1's lines", firstLines)

	require.NoError(t, leaves.cmd.Process.Signal(os.Interrupt))
	var exit *exec.ExitError
	require.ErrorAs(t, leaves.wait(t, time.Minute), &exit)
	assert.Equal(t, 130, exit.ExitCode(), leaves.output())
	assert.Contains(t, leaves.output(), "detached; run "+id+" goes on. Follow it again with: clusterrun attach "+id)
	assert.Contains(t, leaves.output(), "a1-1\n", "the default tail holds all 5 lines")
	require.NoError(t, os.WriteFile(release, nil, 0o644))

	require.ErrorAs(t, attach.wait(t, 2*time.Minute), &exit)
	assert.Equal(t, 3, exit.ExitCode(), "the run's exit code, as clusterrun run gives it\n%s", attach.output())
	var attempt2 []string
	for i := 1; i <= 30; i++ {
		attempt2 = append(attempt2, fmt.Sprintf("a2-%d", i))
	}
	out := attach.output()
	assert.Contains(t, out, "attached to run "+id+" (Running, 1 task)\n")
	assert.NotContains(t, out, "a1-3", "only the last 2 lines written before it attached")
	assert.Contains(t, out, "[worker-0] a1-4\n[worker-0] a1-5\n")
	assert.Contains(t, out, "[worker-0] "+strings.Join(attempt2, "\n[worker-0] ")+"\n", "the restart's output, whole")
	assert.Regexp(t, `worker-0\s+Failed\s+\S+\s+2\s+3 `, out, "the end table")
	assert.Contains(t, out, "run "+id+" Failed: worker-0 exited with code 3")

	require.NoError(t, follow.wait(t, 2*time.Minute))
	assert.Equal(t, "a1-4\na1-5\n"+strings.Join(attempt2, "\n")+"\n", follow.output())
	require.NoError(t, fromNow.wait(t, 2*time.Minute))
	assert.Equal(t, strings.Join(attempt2, "\n")+"\n", fromNow.output(), "only what was written after it started")

	ended := cli(t, "attach", id, "--tail", "1")
	assert.Equal(t, 3, ended.code, ended.String())
	assert.Contains(t, ended.stdout, "[worker-0] a1-5\n")
	assert.Contains(t, ended.stdout, "[worker-0] a2-30\n")
	assert.NotContains(t, ended.stdout, "a2-29", "a run that has ended: its last lines and its end")
	assert.Contains(t, ended.stdout, "run "+id+" Failed: worker-0 exited with code 3")
	// --tail 0 is no line and -1 every line, for attach as for logs (kubectl logs --tail reads them so).
	all := cli(t, "attach", id, "--tail", "-1")
	assert.Contains(t, all.stdout, "[worker-0] a1-1\n")
	assert.Contains(t, all.stdout, "[worker-0] a2-1\n")
	none := cli(t, "attach", id, "--tail", "0")
	assert.Equal(t, 3, none.code, none.String())
	assert.NotContains(t, none.stdout, "a2-30")
	assert.Contains(t, none.stdout, "run "+id+" Failed: worker-0 exited with code 3")
}

// Tasks that end as soon as they start keep their start times: their hosts send most of their starts with their
// ends, not on their own (docs/design.md, "Decision: ends carry their starts").
func TestE2E_QuickTasksKeepTheirStartTimes(t *testing.T) {
	t.Parallel()
	s, err := spec.Parse([]byte(`{name: quick, command: ["true"], tasks: {worker: {replicas: 16}}}`))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := starter.NewClient(env.client, "default").Start(ctx, s, starter.StartOptions{ID: runID(t)})
	require.NoError(t, err)
	st, err := run.Wait(ctx)
	require.NoError(t, err)
	require.Len(t, st.Tasks, 16)
	for _, task := range st.Tasks {
		require.NotNil(t, task.StartTime, task.Name)
		require.NotNil(t, task.EndTime, task.Name)
		assert.False(t, task.EndTime.Before(*task.StartTime), "%s ended before it started", task.Name)
		assert.NotEmpty(t, task.Host, task.Name)
		assert.Equal(t, workflows.TaskSucceeded, task.State, task.Name)
	}
}

// A cancel of a run that no worker serves (started in a namespace no clusterrun-worker polls) waited without a
// word for as long as that lasted; it now says once, after 10 s, that no worker took the request up and where
// one is missing.
func TestE2E_ACancelThatNoWorkerTakesUpSaysSo(t *testing.T) {
	nc, err := client.NewNamespaceClient(client.Options{HostPort: env.address})
	require.NoError(t, err)
	defer nc.Close()
	ns := "unserved"
	err = nc.Register(t.Context(), &workflowservice.RegisterNamespaceRequest{Namespace: ns,
		WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)})
	var exists *serviceerror.NamespaceAlreadyExists
	if !errors.As(err, &exists) {
		require.NoError(t, err)
	}
	spec := writeSpec(t, `{name: x, command: ["true"], tasks: {worker: {replicas: 1}}}`)
	id := runID(t)
	waitUntil(t, "the new namespace to take a run", 30*time.Second, func() bool {
		return cli(t, "run", spec, "--id", id, "--detach", "-n", ns).code == 0
	})
	c, err := client.Dial(client.Options{HostPort: env.address, Namespace: ns})
	require.NoError(t, err)
	defer c.Close()
	defer func() { _ = c.TerminateWorkflow(context.Background(), id, "", "test over") }()

	b := env.startCLI(t, "cancel", id, "-n", ns)
	waitUntil(t, "the cancel to say that no worker took it up", time.Minute, func() bool {
		return strings.Contains(b.errb.String(), "no clusterrun-worker has taken the run's request up")
	})
	assert.Contains(t, b.errb.String(), "is one running for namespace unserved (and polling task queue clusterrun)?")
	assert.Equal(t, 1, strings.Count(b.errb.String(), "no clusterrun-worker"), "said once")

	// clusterrun run, interrupted, cancels the run it started, and says the same of that cancel (it waited
	// without a word).
	other := id + "-run"
	defer func() { _ = c.TerminateWorkflow(context.Background(), other, "", "test over") }()
	r := env.startCLI(t, "run", spec, "--id", other, "-n", ns)
	waitUntil(t, "the run to start", 30*time.Second, func() bool { return strings.Contains(r.errb.String(), "run "+other+" started") })
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
	waitUntil(t, "the interrupted run's cancel to say that no worker took it up", time.Minute, func() bool {
		return strings.Contains(r.errb.String(), "clusterrun run: no clusterrun-worker has taken the run's request up")
	})
	assert.Contains(t, r.errb.String(), "canceling run "+other)
}

// clusterrun run --env NAME=VALUE sets a variable over the spec's env, also where a task type sets it, and the
// run's input carries it.
func TestE2E_RunEnvOverridesTheSpec(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: run-env
command: [sh, -c, 'printf "\"%s\"" "$LR $EPOCHS $DATA" > "$CLUSTERRUN_RESULT_FILE"']
env: {LR: "0.1", DATA: /d}
chiefExit: wait
tasks:
  chief: {replicas: 1}
  worker: {replicas: 1, env: {LR: "0.5"}}
`)
	r := cli(t, "run", spec, "--id", id, "--env", "LR=0.01", "--env", "EPOCHS=3")
	require.Equal(t, 0, r.code, r.String())
	st, err := outcome(t, id)
	require.NoError(t, err)
	assert.JSONEq(t, `"0.01 3 /d"`, string(st.Task("chief-0").Result))
	assert.JSONEq(t, `"0.01 3 /d"`, string(st.Task("worker-0").Result), "over the task type's own LR too")
	bad := cli(t, "run", spec, "--env", "RANK=1")
	assert.Equal(t, 2, bad.code, bad.String())
	assert.Contains(t, bad.stderr, "env.RANK: RANK is set by clusterrun")
}

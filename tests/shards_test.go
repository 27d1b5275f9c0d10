package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/clusterrun/clusterrun/workflows"
)

// A run whose leases are held in shards of 2 tasks: the rendezvous gives every task the whole map, a barrier
// releases all of them, a task in another shard restarts and its host worker is SIGKILLed and comes back, the
// logs of a task in the last shard read, and the chief's exit stops every shard's tasks.
func TestE2E_ShardedRunWorksAcrossShards(t *testing.T) {
	c := isolated(t, "host-a", "host-b")
	id := runID(t)
	failed := filepath.Join(t.TempDir(), "failed-once")
	spec := writeSpec(t, fmt.Sprintf(`
name: sharded
tasksPerShard: 2
stopGracePeriod: 5s
command: [sh, -c, 'echo "hello from $CLUSTERRUN_TASK"; clusterrun task barrier ready --timeout 120s || exit 9; echo "$TF_CONFIG"; exec sleep 600']
tasks:
  chief: {replicas: 1, hosts: [host-a], command: [sh, -c, 'clusterrun task barrier ready --timeout 120s || exit 9; printf "%%s" "$TF_CONFIG" > "$CLUSTERRUN_RESULT_FILE"; while [ ! -e %[1]s.go ]; do sleep 0.2; done']}
  worker: {replicas: 5, hosts: [host-a, host-b]}
  ps: {replicas: 1, hosts: [host-b], restart: {policy: OnFailure, maxRestarts: 2, backoff: 100ms},
       command: [sh, -c, 'if [ ! -e %[1]s ]; then touch %[1]s; exit 3; fi; clusterrun task barrier ready --timeout 120s || exit 9; printf "%%s" "$TF_CONFIG" > "$CLUSTERRUN_RESULT_FILE"; exec sleep 600']}
`, failed))
	r := c.cli(t, "run", spec, "--id", id, "--detach")
	require.Equal(t, 0, r.code, r.String())

	// Every task runs past the barrier: it released all seven, across four shards.
	waitUntil(t, "every task past the barrier", 2*time.Minute, func() bool {
		st, ok := c.query(t, id)
		return ok && len(st.Barriers) == 1 && st.Barriers[0].Released
	})
	st, ok := c.query(t, id)
	require.True(t, ok)
	require.True(t, st.Sharded)
	require.Len(t, st.Tasks, 7)
	assert.Equal(t, 7, st.Barriers[0].ArrivedCount)
	// A sharded run's tasks are not placed ahead of time: their hosts pick their ports, in their --ports.
	var from, to int
	_, err := fmt.Sscanf(c.ports, "%d-%d", &from, &to)
	require.NoError(t, err, c.ports)
	for _, task := range st.Tasks {
		assert.True(t, task.Port >= from && task.Port <= to, "%s listens at %d, outside its host's --ports %s", task.Name, task.Port, c.ports)
	}
	assert.Equal(t, 2, st.Task("ps-0").Attempt, "the ps failed once and was restarted in its shard")
	for i := 0; i < 4; i++ {
		desc, err := c.client.DescribeWorkflowExecution(context.Background(), workflows.ShardWorkflowID(id, 0, i), "")
		require.NoError(t, err, "shard %d", i)
		assert.Equal(t, workflows.ShardWorkflowType, desc.GetWorkflowExecutionInfo().GetType().GetName())
	}

	// A host worker SIGKILLed and started again: its tasks run on, their leases taken up again through
	// their shards.
	waitUntil(t, "the six sleepers exec'd", time.Minute, func() bool { return len(c.sleepers()) == 6 })
	before := c.sleepers()
	c.stopWorker("host-b", syscall.SIGKILL)
	require.NoError(t, c.startWorker("host-b"))
	waitUntil(t, "host-b's tasks re-attached", 2*time.Minute, func() bool {
		st, ok := c.query(t, id)
		if !ok {
			return false
		}
		for _, task := range st.Tasks {
			if task.Host == "host-b" && task.State != workflows.TaskRunning {
				return false
			}
		}
		return true
	})
	assert.Equal(t, before, c.sleepers(), "the same processes")

	// Live status reads the leases' heartbeats from the shards: worker-4's pid shows.
	status := c.cli(t, "status", id)
	require.Equal(t, 0, status.code, status.String())
	pidShown := false
	for _, line := range strings.Split(status.stdout, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[0] == "worker-4" {
			pidShown = f[1] == workflows.TaskRunning && f[4] != "-"
		}
	}
	assert.True(t, pidShown, status.stdout)

	logs := c.cli(t, "logs", id, "--tasks", "worker-4")
	require.Equal(t, 0, logs.code, logs.String())
	assert.Contains(t, logs.stdout, "hello from worker-4")
	// worker-4 (shard 2) has the whole map.
	i := strings.Index(logs.stdout, `{"cluster"`)
	require.GreaterOrEqual(t, i, 0, logs.stdout)
	line, _, _ := strings.Cut(logs.stdout[i:], "\n")
	var tf4 struct{ Cluster map[string][]string }
	require.NoError(t, json.Unmarshal([]byte(line), &tf4), line)
	assert.Equal(t, []int{1, 5, 1}, []int{len(tf4.Cluster["chief"]), len(tf4.Cluster["worker"]), len(tf4.Cluster["ps"])})

	require.NoError(t, os.WriteFile(failed+".go", nil, 0o644))
	res, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, res.Status, res.Reason)
	for _, task := range res.Tasks {
		want := workflows.TaskStopped
		if task.Name == "chief-0" {
			want = workflows.TaskSucceeded
		}
		assert.Equal(t, want, task.State, task.Name)
	}
	var tf struct{ Cluster map[string][]string }
	require.NoError(t, json.Unmarshal(res.Task("chief-0").Result, &tf), "%s", res.Task("chief-0").Result)
	assert.Len(t, tf.Cluster["chief"], 1)
	assert.Len(t, tf.Cluster["worker"], 5)
	assert.Len(t, tf.Cluster["ps"], 1)
	waitUntil(t, "every shard closed", time.Minute, func() bool {
		for i := 0; i < 4; i++ {
			desc, err := c.client.DescribeWorkflowExecution(context.Background(), workflows.ShardWorkflowID(id, 0, i), "")
			if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				return false
			}
		}
		return true
	})
	assert.Empty(t, markedProcesses(c.marker, "sleep", 5*time.Second), "no task process is left")
}

// sleepers lists the marked task processes that have become sleep 600 (the run's tasks but its chief), sorted.
func (c *cluster) sleepers() []string {
	var ps []string
	for _, p := range markedProcesses(c.marker, "sleep 600", 0) {
		if strings.HasSuffix(p, ": sleep 600 ") {
			ps = append(ps, p)
		}
	}
	sort.Strings(ps)
	return ps
}

// A run of 4,000 tasks, held in four shards, completes with every task listed in its status. make test runs it
// alone, after the rest of the suite (SCALE_TESTS).
func TestE2E_FourThousandTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("4,000 processes")
	}
	c := isolated(t, "host-a", "host-b")
	id := runID(t)
	spec := writeSpec(t, `
name: big
command: ["true"]
startTimeout: 10m
heartbeatTimeout: 1m
tasks: {worker: {replicas: 4000, hosts: [host-a, host-b]}}
`)
	start := time.Now()
	r := c.cli(t, "run", spec, "--id", id, "--detach")
	require.Equal(t, 0, r.code, r.String())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var st workflows.RunStatus
	require.NoError(t, c.client.GetWorkflow(ctx, id, "").Get(ctx, &st))
	t.Logf("4,000 tasks: submit to result %s", time.Since(start).Round(time.Millisecond))
	assert.True(t, st.Sharded)
	require.Len(t, st.Tasks, 4000)
	seen := map[string]bool{}
	for _, task := range st.Tasks {
		assert.Equal(t, workflows.TaskSucceeded, task.State, task.Name)
		assert.NotEmpty(t, task.Host, task.Name)
		seen[task.Name] = true
	}
	assert.Len(t, seen, 4000, "every task once")
	out := c.cli(t, "status", id)
	require.Equal(t, 0, out.code, out.String())
	assert.Contains(t, out.stdout, "worker-3999")
}

// A shard terminated by hand (the Web UI lists a run's shards, each with a Terminate button) costs the run
// nothing: its task runs on, the same process, taken up again through a new execution of the shard, and no
// restart is used. A shard canceled by hand stops its tasks, and the run goes on. A shard terminated while its run stops (one host's worker is gone, so the stop waits for
// that host) does not keep the stop waiting past that host's time to answer: the lease the shard held, which
// would have timed out there, ends with it.
func TestE2E_ShardTerminatedByHand(t *testing.T) {
	c := isolated(t, "host-a", "host-b")
	id := runID(t)
	spec := writeSpec(t, `
name: shard-lost
tasksPerShard: 1
stopGracePeriod: 5s
heartbeatTimeout: 30s
hostLossGrace: 5s
command: [sleep, "600"]
tasks:
  worker: {replicas: 2, hosts: [host-a]}
  ps: {replicas: 1, hosts: [host-b]}
`)
	r := c.cli(t, "run", spec, "--id", id, "--detach")
	require.Equal(t, 0, r.code, r.String())
	waitUntil(t, "the three sleepers exec'd", time.Minute, func() bool { return len(c.sleepers()) == 3 })
	before := c.sleepers()

	// Phase 1: worker-0's shard is terminated while the run runs.
	shard := c.shardHolding(t, id, "worker-0")
	require.NoError(t, c.client.TerminateWorkflow(context.Background(), shard, "", "by hand, in a test"))
	waitUntil(t, "worker-0's lease held by a new execution of its shard", time.Minute, func() bool {
		again := c.shardHolding(t, id, "worker-0")
		return again != "" && again != shard
	})
	waitUntil(t, "every task running", time.Minute, func() bool {
		st, ok := c.query(t, id)
		if !ok || st.Status != workflows.StatusRunning {
			return false
		}
		for _, task := range st.Tasks {
			if task.State != workflows.TaskRunning {
				return false
			}
		}
		return true
	})
	st, ok := c.query(t, id)
	require.True(t, ok)
	assert.Equal(t, 1, st.Task("worker-0").Attempt, "no restart was used")
	assert.Equal(t, before, c.sleepers(), "the same processes run on")
	assert.Equal(t, shard+".take2", c.shardHolding(t, id, "worker-0"))

	// A shard canceled by hand stops the tasks it holds, as a cancel does; the run goes on.
	workerOne := c.shardHolding(t, id, "worker-1")
	require.NotEmpty(t, workerOne)
	require.NoError(t, c.client.CancelWorkflow(context.Background(), workerOne, ""))
	waitUntil(t, "worker-1 stopped", time.Minute, func() bool {
		st, ok := c.query(t, id)
		return ok && st.Task("worker-1").State == workflows.TaskStopped
	})
	waitUntil(t, "worker-1's process gone", time.Minute, func() bool { return len(c.sleepers()) == 2 })
	st, ok = c.query(t, id)
	require.True(t, ok)
	assert.Equal(t, workflows.StatusRunning, st.Status)

	// Phase 2: host-b's worker dies, the run is canceled, and ps-0's shard is terminated while the stop waits
	// for host-b: well before ps-0's lease would time out there (heartbeatTimeout).
	c.stopWorker("host-b", syscall.SIGKILL)
	cancel := c.cli(t, "cancel", id, "--no-wait")
	require.Equal(t, 0, cancel.code, cancel.String())
	waitUntil(t, "the run stopping", time.Minute, func() bool {
		st, ok := c.query(t, id)
		return ok && st.Status == workflows.StatusStopping
	})
	psShard := c.shardHolding(t, id, "ps-0")
	require.NotEmpty(t, psShard)
	require.NoError(t, c.client.TerminateWorkflow(context.Background(), psShard, "", "by hand, during the stop"))
	// The stop waits for host-b to take its StopTasks up (heartbeatTimeout) and its grace, then ends.
	waitUntil(t, "the run's end", 2*time.Minute, func() bool {
		desc, err := c.client.DescribeWorkflowExecution(context.Background(), id, "")
		return err == nil && desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	})
	res, err := c.outcome(t, id)
	require.Error(t, err)
	assert.Equal(t, workflows.StatusCanceled, res.Status, res.Reason)
	require.NotNil(t, res.Task("ps-0"), "%+v", res)
	assert.Equal(t, workflows.TaskStopped, res.Task("worker-0").State)
	assert.Equal(t, workflows.TaskStopped, res.Task("ps-0").State)
	assert.Contains(t, res.Task("ps-0").Error, "not confirmed")

	// host-b's worker comes back and stops what the ended run left there.
	require.NoError(t, c.startWorker("host-b"))
	assert.Empty(t, markedProcesses(c.marker, "sleep 600", time.Minute), "no task process is left")
}

// shardHolding names the running shard of run id whose pending activities include task's lease ("" if none).
func (c *cluster) shardHolding(t *testing.T, id, task string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	desc, err := c.client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return ""
	}
	for _, child := range desc.GetPendingChildren() {
		cd, err := c.client.DescribeWorkflowExecution(ctx, child.GetWorkflowId(), "")
		if err != nil || cd.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			continue
		}
		for _, a := range cd.GetPendingActivities() {
			if a.GetActivityId() == task || strings.HasPrefix(a.GetActivityId(), task+".") {
				return child.GetWorkflowId()
			}
		}
	}
	return ""
}

// A run ID given again (the temporal CLI allows it once the run has ended) right after that run was terminated:
// the earlier run's shards are still stopping its tasks under the shard IDs. The new run's shards cannot start
// under them; their leases go out again through each shard's next take, and the run runs. Before, every task
// of the new run failed at once with "child workflow execution already started".
func TestE2E_ARunIDGivenAgainWhileItsShardsStillStop(t *testing.T) {
	id := runID(t)
	specJSON := filepath.Join(t.TempDir(), "spec.json")
	require.NoError(t, os.WriteFile(specJSON, []byte(`{"name":"given-again","tasksPerShard":1,"stopGracePeriod":"20s",`+
		`"command":["sh","-c","trap 'sleep 8; exit 0' TERM; while :; do sleep 0.2; done; echo given-again-marker"],"tasks":{"worker":{"replicas":2}}}`), 0o644))
	temporal := func(args ...string) {
		out, err := temporalCLI(t, args...)
		require.NoError(t, err, "temporal %v: %s", args, out)
	}
	start := []string{"workflow", "start", "--type", workflows.WorkflowType, "--task-queue", workflows.TaskQueue,
		"--workflow-id", id, "--input-file", specJSON}
	allRunning := func() bool {
		st, ok := query(t, id)
		return ok && st.Status == workflows.StatusRunning && st.Task("worker-0").State == workflows.TaskRunning &&
			st.Task("worker-1").State == workflows.TaskRunning
	}
	temporal(start...)
	waitUntil(t, "both workers of the first run running", time.Minute, allRunning)
	temporal("workflow", "terminate", "--workflow-id", id, "--reason", "given again in a test")
	temporal(start...)
	d, err := env.client.DescribeWorkflowExecution(context.Background(), workflows.ShardWorkflowID(id, 0, 0), "")
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, d.GetWorkflowExecutionInfo().GetStatus(),
		"the first run's shard still stops its task (the test's premise)")

	waitUntil(t, "both workers of the second run running", time.Minute, allRunning)
	assert.Equal(t, workflows.ShardTakeID(id, 0, 0, 2), env.shardHolding(t, id, "worker-0"))
	require.Equal(t, 0, cli(t, "cancel", id).code)
	st, _ := outcome(t, id)
	assert.Equal(t, workflows.StatusCanceled, st.Status, st.Reason)
	assert.Empty(t, markedProcessesOf(t, "given-again-marker"))
}

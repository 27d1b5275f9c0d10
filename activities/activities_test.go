package activities

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

func clusterOf(endpoints ...workflows.Endpoint) workflows.ClusterMap {
	return workflows.ClusterMap{Endpoints: endpoints}
}

func TestTaskEnv_Contract(t *testing.T) {
	m := clusterOf(
		workflows.Endpoint{Task: "chief-0", Host: "a", Addr: "10.0.0.1", Port: 1000},
		workflows.Endpoint{Task: "worker-0", Host: "a", Addr: "10.0.0.1", Port: 1001},
		workflows.Endpoint{Task: "worker-1", Host: "b", Addr: "10.0.0.2", Port: 1002},
		workflows.Endpoint{Task: "evaluator-0", Host: "b", Addr: "10.0.0.2", Port: 1003},
	)
	task := spec.Task{Name: "worker-1", Type: "worker", Index: 1, Rank: 2, Env: map[string]string{"DATA": "/d", "HOME": "/override"}}
	env := TaskEnv([]string{"HOME=/root", "PATH=/bin"}, TaskIdentity{RunID: "r1", Task: task, Attempt: 3, RestartCount: 1,
		Host: "b", ResultFile: "/l/result.json", ErrorFile: "/l/error.json"}, m)
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for k, want := range map[string]string{
		"PATH": "/bin", "HOME": "/override", "DATA": "/d",
		"CLUSTERRUN_RUN_ID": "r1", "CLUSTERRUN_TASK": "worker-1", "CLUSTERRUN_TASK_TYPE": "worker", "CLUSTERRUN_TASK_INDEX": "1",
		"CLUSTERRUN_ATTEMPT": "3", "CLUSTERRUN_RESTART_COUNT": "1", "CLUSTERRUN_HOST": "b",
		"CLUSTERRUN_RESULT_FILE": "/l/result.json", "CLUSTERRUN_ERROR_FILE": "/l/error.json", "TORCHELASTIC_ERROR_FILE": "/l/error.json",
		"RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
		"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1000",
	} {
		assert.Equal(t, want, got[k], k)
	}
	assert.JSONEq(t, `{"cluster":{"chief":["10.0.0.1:1000"],"worker":["10.0.0.1:1001","10.0.0.2:1002"]},"task":{"type":"worker","index":1}}`, got["TF_CONFIG"])

	eval := TaskEnv(nil, TaskIdentity{Task: spec.Task{Name: "evaluator-0", Type: "evaluator", Rank: -1}}, m)
	joined := strings.Join(eval, "\n")
	assert.NotContains(t, joined, "RANK=")
	assert.Contains(t, joined, "MASTER_ADDR=10.0.0.1")
	assert.Contains(t, joined, `"task":{"index":0,"type":"evaluator"}`)
}

func TestReadLogs_WholeLinesOnly(t *testing.T) {
	h := NewHost("h", "127.0.0.1", t.TempDir(), nil, quiet())
	dir := AttemptDir(h.LogDir, "run", 1, "worker-0")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stdout.log"), []byte("one\ntwo\npart"), 0o644))

	res, err := h.ReadLogs(context.Background(), workflows.ReadLogsInput{RunID: "run", Requests: []workflows.ReadLogsRequest{
		{Task: "worker-0", Attempt: 1, Stream: "stdout"},
		{Task: "worker-0", Attempt: 1, Stream: "stderr"},
		{Task: "worker-0", Attempt: 1, Stream: "bogus"},
	}})
	require.NoError(t, err)
	assert.Equal(t, "one\ntwo\n", string(res.Chunks[0].Data))
	assert.Equal(t, int64(8), res.Chunks[0].Next)
	assert.True(t, res.Chunks[1].Missing)
	assert.Contains(t, res.Chunks[2].Error, "unknown stream")

	res, _ = h.ReadLogs(context.Background(), workflows.ReadLogsInput{RunID: "run", Requests: []workflows.ReadLogsRequest{
		{Task: "worker-0", Attempt: 1, Stream: "stdout", Offset: 8, Flush: true},
		{Task: "worker-0", Attempt: 1, Stream: "stdout", Tail: 9},
	}})
	assert.Equal(t, "part", string(res.Chunks[0].Data), "a finished task's last line comes out on flush")
	assert.True(t, res.Chunks[0].EOF)
	assert.Equal(t, "two\n", string(res.Chunks[1].Data), "a tail starts at a line boundary")
}

// signalingClient answers RunTask's placement signal the way the workflow does: with a Release.
type signalingClient struct {
	client.Client
	host *Host
}

func (c *signalingClient) SignalWorkflow(ctx context.Context, wfID, runID, name string, arg interface{}) error {
	for _, p := range arg.(workflows.PlacedSignal).Placements {
		go func() {
			_, _ = c.host.Release(context.Background(), workflows.ReleaseInput{WorkflowID: wfID, RunID: runID,
				Tasks:   []workflows.TaskAttempt{{Task: p.Task, Attempt: p.Attempt}},
				Cluster: clusterOf(workflows.Endpoint{Task: p.Task, Host: p.Host, Addr: p.Addr, Port: p.Port})})
		}()
	}
	return nil
}

func quiet() log.Logger { return log.NewStructuredLogger(slog.New(slog.DiscardHandler)) }

type activityHarness struct {
	suite testsuite.WorkflowTestSuite
	env   *testsuite.TestActivityEnvironment
	host  *Host
}

func newActivityHarness(t *testing.T) *activityHarness {
	a := &activityHarness{}
	a.suite.SetLogger(quiet())
	a.env = a.suite.NewTestActivityEnvironment()
	a.host = NewHost("test-host", "127.0.0.1", t.TempDir(), nil, quiet())
	a.host.Client = &signalingClient{host: a.host}
	a.env.RegisterActivity(a.host.RunTask)
	return a
}

func taskSpec(cmd ...string) spec.Task {
	return spec.Task{Name: "worker-0", Type: "worker", Command: cmd, Restart: spec.Restart{Policy: spec.PolicyNever}}
}

func TestRunTask_SuccessWithResult(t *testing.T) {
	a := newActivityHarness(t)
	v, err := a.env.ExecuteActivity(a.host.RunTask, workflows.RunTaskInput{Task: taskSpec("sh", "-c",
		`echo "port in map: $TF_CONFIG"; echo '{"loss": 0.1}' > "$CLUSTERRUN_RESULT_FILE"`), StopGracePeriod: time.Second})
	require.NoError(t, err)
	var res workflows.TaskResult
	require.NoError(t, v.Get(&res))
	assert.Equal(t, 0, res.ExitCode)
	assert.JSONEq(t, `{"loss": 0.1}`, string(res.Result))
	assert.Equal(t, "test-host", res.Host)
	assert.NotZero(t, res.PID)
	assert.Equal(t, 0, a.host.Running(), "the attempt left the registry")
}

func TestRunTask_FailureCarriesErrorFileAndPolicy(t *testing.T) {
	a := newActivityHarness(t)
	tk := taskSpec("sh", "-c", `printf '%s' '{"message": {"message": "CUDA out of memory\nTraceback..."}}' > "$TORCHELASTIC_ERROR_FILE"; echo noise >&2; exit 137`)
	tk.Restart = spec.Restart{Policy: spec.PolicyExitCode, MaxRestarts: 1}
	_, err := a.env.ExecuteActivity(a.host.RunTask, workflows.RunTaskInput{Task: tk, StopGracePeriod: time.Second})
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "got %v", err)
	assert.Equal(t, workflows.ErrTaskFailed, appErr.Type())
	assert.False(t, appErr.NonRetryable(), "137 is retryable under ExitCode")
	assert.Contains(t, appErr.Message(), "worker-0 exited with code 137 on test-host (attempt 1): CUDA out of memory")
	var res workflows.TaskResult
	require.NoError(t, appErr.Details(&res))
	assert.Equal(t, "noise\n", res.StderrTail)
	assert.NotEmpty(t, res.ErrorFile)
}

func TestRunTask_StartFailureIsPermanent(t *testing.T) {
	a := newActivityHarness(t)
	_, err := a.env.ExecuteActivity(a.host.RunTask, workflows.RunTaskInput{Task: taskSpec("no-such-binary-xyz")})
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "got %v", err)
	assert.Equal(t, workflows.ErrTaskStartFailed, appErr.Type())
	assert.True(t, appErr.NonRetryable())
	assert.Contains(t, appErr.Message(), `worker-0 cannot start on host test-host: command "no-such-binary-xyz" not found`)
}

func TestRunTask_BadResultFileIsReported(t *testing.T) {
	a := newActivityHarness(t)
	v, err := a.env.ExecuteActivity(a.host.RunTask, workflows.RunTaskInput{Task: taskSpec("sh", "-c", `echo 'not json' > "$CLUSTERRUN_RESULT_FILE"`)})
	require.NoError(t, err)
	var res workflows.TaskResult
	require.NoError(t, v.Get(&res))
	assert.Nil(t, res.Result)
	assert.Contains(t, res.Error, "not valid JSON")
}

func TestRunTask_StopTasksStopsIt(t *testing.T) {
	a := newActivityHarness(t)
	done := make(chan struct{})
	var res workflows.TaskResult
	var runErr error
	go func() {
		defer close(done)
		v, err := a.env.ExecuteActivity(a.host.RunTask, workflows.RunTaskInput{Task: taskSpec("sleep", "300"), StopGracePeriod: 5 * time.Second})
		runErr = err
		if err == nil {
			runErr = v.Get(&res)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for a.host.Running() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	var stopped workflows.StopTasksResult
	require.Eventually(t, func() bool {
		entries := a.host.find("default-test-workflow-id", "default-test-run-id", nil)
		if len(entries) == 0 {
			return false
		}
		var err error
		stopped, err = a.host.StopTasks(context.Background(), workflows.StopTasksInput{
			WorkflowID: "default-test-workflow-id", RunID: "default-test-run-id", GracePeriod: time.Second, Reason: "test"})
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	<-done
	require.NoError(t, runErr)
	assert.Equal(t, []string{"worker-0"}, stopped.Stopped)
	assert.True(t, res.Stopped)
	b, _ := json.Marshal(res)
	assert.Contains(t, string(b), `"stopped":true`)
}

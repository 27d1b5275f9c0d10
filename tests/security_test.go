package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/workflows"
)

// overflowSpec is the spec that once took every host worker down: its replicas overflow their sum, and planning
// it ran out of memory in workflow code on each worker.
const overflowSpec = `{"name": "overflow", "command": ["true"], "maxRunTime": "2562047h47m",
 "tasks": {"a": {"replicas": 4611686018427387904}, "b": {"replicas": 4611686018427387904}}}`

// A hostile spec is refused on each path in: by validate, by run, and (started behind the CLI's back) by the
// workflow, which fails the run InvalidSpec while the host workers carry on and run the next spec.
func TestE2E_HostileSpecFailsTheRunNotTheWorkers(t *testing.T) {
	c := isolated(t, "host-h")
	path := filepath.Join(t.TempDir(), "overflow.json")
	require.NoError(t, os.WriteFile(path, []byte(overflowSpec), 0o644))

	v := c.cli(t, "validate", path)
	assert.Equal(t, 2, v.code, v.String())
	assert.Contains(t, v.stderr, "tasks.a.replicas: 4611686018427387904 is more than 1000")
	assert.Contains(t, v.stderr, "maxRunTime: 2562047h47m is more than the 8760h maximum")
	assert.NotContains(t, v.stderr, "goroutine", "no stack trace")

	r := c.cli(t, "run", path)
	assert.Equal(t, 2, r.code, r.String())
	assert.Contains(t, r.stderr, "tasks.a.replicas")

	id := runID(t)
	out, err := exec.Command(filepath.Join(c.root, "bin", "temporal"), "workflow", "start", "--address", c.address,
		"--type", workflows.WorkflowType, "--task-queue", workflows.TaskQueue, "--workflow-id", id, "--input-file", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	_, err = c.outcome(t, id)
	require.Error(t, err)
	assert.Contains(t, err.Error(), workflows.ErrInvalidSpec)
	assert.Contains(t, err.Error(), "tasks.a.replicas: 4611686018427387904 is more than 1000")

	c.mu.Lock()
	w := c.workers["host-h"]
	c.mu.Unlock()
	assert.False(t, w.exited(), "the host worker is still up")
	ok := c.cli(t, "run", writeSpec(t, `{name: after, command: [sh, -c, "echo fine"], tasks: {worker: {replicas: 1}}}`))
	assert.Equal(t, 0, ok.code, ok.String())
	assert.Contains(t, ok.stdout, "fine")
}

// The host decides what runs on it: a refused program or folder fails the task at once, not retried, with the
// host and the rule named, and nothing is started; an allowed one runs; each leaves one audit line.
func TestE2E_HostPolicy(t *testing.T) {
	c := isolated(t)
	work := t.TempDir()
	require.NoError(t, c.startWorker("host-p", "--allow-command", "/usr/bin/sleep", "--allow-command", "/usr/bin/echo", "--allow-dir", work))
	logPath := filepath.Join(c.workDir, "worker-host-p.log")
	canary := filepath.Join(t.TempDir(), "ran")

	refusedID := runID(t) + "-refused"
	refused := c.cli(t, "run", "--id", refusedID, writeSpec(t, `{name: refused, command: [sh, -c, "touch `+canary+`"], workingDir: `+work+`,
 restart: {policy: OnFailure, maxRestarts: 3}, tasks: {worker: {replicas: 1}}}`))
	assert.NotEqual(t, 0, refused.code, refused.String())
	assert.Contains(t, refused.stdout+refused.stderr, "host-p refuses /usr/bin/sh: not in --allow-command")
	assert.NotContains(t, refused.stdout, "no longer exists", "a task that never started is not followed for logs")
	logs := c.cli(t, "logs", refusedID, "worker-0")
	assert.Equal(t, 1, logs.code, logs.String())
	assert.Contains(t, logs.stderr, "worker-0 never started (host-p refuses /usr/bin/sh: not in --allow-command")
	assert.NoFileExists(t, canary, "nothing was started")
	waitUntil(t, "the refusal's audit line", 10*time.Second, func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Count(string(b), "audit: task refused") == 1
	})
	b, _ := os.ReadFile(logPath)
	assert.NotContains(t, string(b), "audit: task process started", "the refused task started nothing")
	assert.NoDirExists(t, filepath.Join(c.logDir, refusedID), "not even a log folder")
	assert.NotContains(t, string(b), "no host policy", "this host has a policy")
	if os.Getuid() == 0 {
		assert.Contains(t, string(b), "tasks run as root (--run-as root)", "running tasks as root is said at start")
	}
	suite, _ := os.ReadFile(filepath.Join(env.workDir, "worker-host-a.log"))
	assert.Contains(t, string(suite), "no host policy: anyone who can start a workflow in the namespace can run any command on this host")

	outside := c.cli(t, "run", writeSpec(t, `{name: outside, command: [echo, hi], workingDir: /tmp, tasks: {worker: {replicas: 1}}}`))
	assert.NotEqual(t, 0, outside.code, outside.String())
	assert.Contains(t, outside.stdout+outside.stderr, "host-p refuses working directory /tmp: not in --allow-dir")

	id := runID(t)
	ok := c.cli(t, "run", "--id", id, writeSpec(t, `{name: allowed, command: [echo, allowed-ran], workingDir: `+work+`, tasks: {worker: {replicas: 1}}}`))
	assert.Equal(t, 0, ok.code, ok.String())
	assert.Contains(t, ok.stdout, "allowed-ran")
	b, _ = os.ReadFile(logPath)
	var audit string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "audit: task process started") && strings.Contains(line, id) {
			audit = line
		}
	}
	require.NotEmpty(t, audit, "one audit line per process start:\n%s", b)
	for _, want := range []string{`"task": "worker-0"`, `"attempt": 1`, `"argv": ["echo", "allowed-ran"]`, `"exe": "/usr/bin/echo"`, `"dir": "` + work + `"`, `"user": "`, `"pid": `} {
		assert.Contains(t, audit, want)
	}
}

// A worker running as root runs its tasks as the --run-as user: the task is that user, with its HOME, can use its
// control socket and write its result, and cannot reach its supervisor's socket; its logs are its own.
func TestE2E_RunAs(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("running tasks as another user needs a worker running as root")
	}
	c := isolated(t)
	// The task's user must be let through to its log folder (the operator's part, as for any --log-dir).
	require.NoError(t, os.Chmod(c.workDir, 0o711))
	require.NoError(t, c.startWorker("host-u", "--run-as", "nobody"))
	id := runID(t)
	r := c.cli(t, "run", "--id", id, writeSpec(t, `{name: run-as, workingDir: /tmp, tasks: {worker: {replicas: 1}},
 command: [sh, -c, 'echo "uid=$(id -u) home=$HOME user=$USER";
   curl -sS --unix-socket "$CLUSTERRUN_SOCKET" http://task/v1/info | grep -o "\"task\":\"worker-0\"";
   sup="$(dirname "$CLUSTERRUN_SOCKET")/shim.sock"; [ -S "$sup" ] && echo "supervisor socket exists";
   curl -s --unix-socket "$sup" http://shim/; echo "supervisor: curl exit $?";
   echo "{\"ok\": true}" > "$CLUSTERRUN_RESULT_FILE"']}`))
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "uid=65534 home=/nonexistent user=nobody")
	assert.Contains(t, r.stdout, `"task":"worker-0"`, "the task reaches its control socket")
	assert.Contains(t, r.stdout, "supervisor socket exists")
	assert.Contains(t, r.stdout, "supervisor: curl exit 7", "the task cannot connect to its supervisor")

	dir := filepath.Join(c.logDir, id, "attempt_1", "worker-0")
	st, err := os.Stat(filepath.Join(dir, "stdout.log"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), st.Mode().Perm(), "logs are not for everyone")
	assert.Equal(t, uint32(65534), st.Sys().(*syscall.Stat_t).Uid, "logs belong to the task's user")
	st, err = os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	assert.FileExists(t, filepath.Join(dir, "result.json"), "the task wrote its result")
}

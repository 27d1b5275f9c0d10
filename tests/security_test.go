package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

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

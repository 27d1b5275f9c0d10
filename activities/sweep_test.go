package activities

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A host worker that starts without cgroups kills what its own earlier tasks left behind, and nothing of
// another worker that runs under the same host name with a log folder of its own (a second dev environment
// on the machine, the end-to-end suite's clusters side by side): before, it killed every process of its name
// that it held no attempt of.
func TestHost_SweepKillsItsOwnLeftoversOnly(t *testing.T) {
	ours, theirs := t.TempDir(), t.TempDir()
	leftover := func(logDir string) *exec.Cmd {
		cmd := exec.Command("sleep", "300")
		cmd.Env = []string{"CLUSTERRUN_HOST=" + testHost, "CLUSTERRUN_RUN_ID=gone", "CLUSTERRUN_TASK=worker-0", "CLUSTERRUN_ATTEMPT=1",
			"CLUSTERRUN_RESULT_FILE=" + filepath.Join(AttemptDir(logDir, "gone", 1, "worker-0"), "result.json")}
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
		return cmd
	}
	mine, other := leftover(ours), leftover(theirs)

	newHost(t, t.TempDir(), "", ours, &fakeServer{})
	require.Eventually(t, func() bool { return !alive(mine.Process.Pid) }, 10*time.Second, 20*time.Millisecond,
		"the leftover of this worker's own task was not swept")
	assert.True(t, alive(other.Process.Pid), "the task of another worker with this host name and its own log folder was killed")
}

package tests

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A follow whose reader leaves (clusterrun logs -f RUN | head -2) ends at once with 141, as the SIGPIPE of
// its next write would have, while the run goes on. It waited for its next write: the task's next line, for
// good if the task was quiet, or the next refresh of status --watch.
func TestE2E_FollowsEndWhenTheirReaderLeaves(t *testing.T) {
	t.Parallel()
	id, mark := runID(t), t.TempDir()
	spec := writeSpec(t, `{name: quiet, env: {MARK: `+mark+`}, tasks: {worker: {replicas: 1}},
  command: [sh, -c, 'echo "line 1"; echo "line 2"; while [ ! -e "$MARK/end" ]; do sleep 0.1; done']}`)
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	t.Cleanup(func() { touch(t, filepath.Join(mark, "end")); cli(t, "cancel", id) })
	waitUntil(t, "the task to write", time.Minute, func() bool {
		return strings.Contains(cli(t, "logs", id, "--stdout").stdout, "line 2\n")
	})
	t.Run("logs --follow", func(t *testing.T) { followUntilItsReaderLeaves(t, "line 2", "logs", id, "--follow") })
	t.Run("status --watch", func(t *testing.T) { followUntilItsReaderLeaves(t, "worker-0", "status", id, "--watch", "10m") })
	assert.Contains(t, cli(t, "status", id).stdout, "Running", "the run goes on")
}

// followUntilItsReaderLeaves runs clusterrun with args, reads its output up to a line holding last, leaves,
// and expects the command to end at once with 141.
func followUntilItsReaderLeaves(t *testing.T, last string, args ...string) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(env.bin, "clusterrun"), args...)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.address)
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	out := bufio.NewReader(r)
	for line := ""; !strings.Contains(line, last); {
		line, err = out.ReadString('\n')
		require.NoError(t, err, stderr.String())
	}
	r.Close() // the reader leaves, as head does, after the last line the command had to write for now
	select {
	case err = <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s went on after its reader left\n%s", strings.Join(args, " "), stderr.String())
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, stderr.String())
	assert.Equal(t, 141, exit.ExitCode(), stderr.String())
	assert.Empty(t, stderr.String())
}

package activities

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/workflows"
)

// A host with --log-retention deletes the log folder of a run that has ended and was not written for the
// retention, and keeps every other: a run that still runs (however quiet), one written lately, one it holds an
// attempt of, one whose end the server cannot confirm now, one of another namespace, and what is not a run's
// folder.
func TestPruneLogs_OnlyEndedRunsPastTheRetention(t *testing.T) {
	h := NewHost("h", "127.0.0.1", t.TempDir(), nil, quiet())
	h.LogRetention = time.Hour
	h.Namespace = "ours"
	now := time.Now()
	old := now.Add(-2 * time.Hour)
	ended := map[string]bool{"ended-old": true, "ended-lately": true, "held": true, "marked-ours": true, "marked-theirs": true}
	h.RunEnded = func(_ context.Context, runID string) (bool, error) {
		if runID == "unknown" {
			return false, errors.New("the server does not answer")
		}
		return ended[runID], nil
	}
	logFolder := func(name string, written time.Time) string {
		dir := filepath.Join(h.LogDir, name, "attempt_1", "worker-0")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		file := filepath.Join(dir, "stdout.log")
		require.NoError(t, os.WriteFile(file, []byte("a line\n"), 0o644))
		for _, p := range []string{file, dir, filepath.Dir(dir), filepath.Join(h.LogDir, name)} {
			require.NoError(t, os.Chtimes(p, old, old))
		}
		require.NoError(t, os.Chtimes(file, written, written))
		return filepath.Join(h.LogDir, name)
	}
	for _, name := range []string{"ended-old", "running-quiet", "held", "unknown", ".pruned-half-deleted", "Not_A_Run"} {
		logFolder(name, old)
	}
	logFolder("ended-lately", now.Add(-10*time.Minute))
	// Workers of two namespaces may share a log folder; each judges only its own runs (unknown to the other's).
	for name, ns := range map[string]string{"marked-ours": "ours", "marked-theirs": "theirs"} {
		logFolder(name, old)
		h.Namespace = ns
		require.NoError(t, h.markNamespace(name))
		for _, p := range []string{filepath.Join(h.LogDir, name, namespaceFile), filepath.Join(h.LogDir, name)} {
			require.NoError(t, os.Chtimes(p, old, old))
		}
	}
	h.Namespace = "ours"
	require.NoError(t, os.WriteFile(filepath.Join(h.LogDir, "notes.txt"), nil, 0o644))
	_, _, err := h.reg.add(&entry{ref: attemptRef{WorkflowID: "held", RunID: "r", Task: "worker-0", Attempt: 2}})
	require.NoError(t, err)

	h.pruneLogs(context.Background(), now)

	left, err := os.ReadDir(h.LogDir)
	require.NoError(t, err)
	var names []string
	for _, d := range left {
		names = append(names, d.Name())
	}
	assert.ElementsMatch(t, []string{"running-quiet", "held", "unknown", "ended-lately", "marked-theirs", "Not_A_Run", "notes.txt"}, names)
	b, err := os.ReadFile(filepath.Join(h.LogDir, "ended-lately", "attempt_1", "worker-0", "stdout.log"))
	require.NoError(t, err)
	assert.Equal(t, "a line\n", string(b), "what is kept is kept whole")

	// Once the run is let go and its retention has passed since its last write, it goes too.
	h.reg.remove(h.reg.all()[0])
	h.pruneLogs(context.Background(), now.Add(time.Hour))
	for _, gone := range []string{"held", "ended-lately"} {
		assert.NoDirExists(t, filepath.Join(h.LogDir, gone))
	}
	assert.DirExists(t, filepath.Join(h.LogDir, "running-quiet"))
}

// A read of a run's log that the host pruned says so with the host's retention, for the CLI to name; a file
// missing from a run folder that is there does not.
func TestReadLogs_APrunedRunSaysTheRetention(t *testing.T) {
	h := NewHost("h", "127.0.0.1", t.TempDir(), nil, quiet())
	h.LogRetention = 30 * 24 * time.Hour
	pruned := h.readChunk("gone-run", workflows.ReadLogsRequest{Task: "worker-0", Attempt: 1, Stream: "stdout"})
	assert.True(t, pruned.Missing)
	assert.Equal(t, 30*24*time.Hour, pruned.Retention)

	require.NoError(t, os.MkdirAll(filepath.Join(h.LogDir, "here-run"), 0o755))
	deleted := h.readChunk("here-run", workflows.ReadLogsRequest{Task: "worker-0", Attempt: 1, Stream: "stdout"})
	assert.True(t, deleted.Missing)
	assert.Zero(t, deleted.Retention, "the run's folder is there: someone deleted the file")
}

// Supervisors' logs go with the retention too, but not that of a supervisor whose socket is there (it may run
// on, quiet), nor a file that is no supervisor's log.
func TestPruneLogs_SupervisorLogsOfSupervisorsGone(t *testing.T) {
	h := NewHost("h", "127.0.0.1", t.TempDir(), nil, quiet())
	h.StateDir, h.SocketDir = t.TempDir(), t.TempDir()
	h.LogRetention = time.Hour
	old := time.Now().Add(-2 * time.Hour)
	require.NoError(t, os.MkdirAll(h.supervisorLogs(), 0o700))
	for _, name := range []string{"run-gone.log", "run-live.log", "run-lately.log", "notes.log"} {
		p := filepath.Join(h.supervisorLogs(), name)
		require.NoError(t, os.WriteFile(p, []byte("a line\n"), 0o600))
		if name != "run-lately.log" {
			require.NoError(t, os.Chtimes(p, old, old))
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(h.SocketDir, "run-live.sock"), nil, 0o600))

	h.pruneLogs(context.Background(), time.Now())

	left, err := os.ReadDir(h.supervisorLogs())
	require.NoError(t, err)
	var names []string
	for _, d := range left {
		names = append(names, d.Name())
	}
	assert.ElementsMatch(t, []string{"run-live.log", "run-lately.log", "notes.log"}, names)
}

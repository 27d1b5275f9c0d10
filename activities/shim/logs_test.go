package shim

import (
	"io"
	"log"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/activities/logfile"
)

// One sampler dates the logs of every running task, each as it grows, and stops ticking once no task is left.
func TestLogSampler_DatesEveryTaskAndStopsWithTheLast(t *testing.T) {
	dir := t.TempDir()
	var s logSampler
	logger := log.New(io.Discard, "", 0)
	files := func(name string) Config {
		c := Config{Stdout: filepath.Join(dir, name+".out"), Stderr: filepath.Join(dir, name+".err")}
		for _, p := range []string{c.Stdout, c.Stderr} {
			require.NoError(t, os.WriteFile(p, nil, 0o600))
		}
		return c
	}
	a, b := files("a"), files("b")
	la, lb := s.add(a, logger), s.add(b, logger)
	marks := func(path string) int { return len(logfile.Marks(path, 0, math.MaxInt64)) }
	write := func(path, line string) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		_, err = f.WriteString(line)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}

	write(a.Stdout, "a's first line\n")
	write(b.Stderr, "b's first line\n")
	require.Eventually(t, func() bool { return marks(a.Stdout) == 1 && marks(b.Stderr) == 1 }, 10*time.Second, 10*time.Millisecond,
		"both tasks' lines are dated while they run")

	s.finish(la)
	write(b.Stderr, "b's second line\n")
	require.Eventually(t, func() bool { return marks(b.Stderr) == 2 }, 10*time.Second, 10*time.Millisecond,
		"the other task is still sampled once one has ended")
	write(a.Stdout, "written after a's end\n")

	s.finish(lb)
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return !s.ticking }, 10*time.Second, 10*time.Millisecond,
		"the ticker stops once no task is left")
	assert.Equal(t, 1, marks(a.Stdout), "a task's logs are not sampled after its end")
	assert.Zero(t, marks(a.Stderr)+marks(b.Stdout), "files that did not grow get no mark")

	lc := s.add(files("c"), logger)
	defer s.finish(lc)
	s.mu.Lock()
	defer s.mu.Unlock()
	assert.True(t, s.ticking, "a new task starts the ticker again")
}

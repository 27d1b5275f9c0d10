package shim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newSpares keeps a spare for supervisors whose logs go to a folder of the test's, and lets it go at the end.
func newSpares(t *testing.T) (*Spares, Supervisor) {
	t.Helper()
	sup := newSupervisor(t)
	s := &Spares{Command: shimCommand(), Env: shimEnv(), LogDir: filepath.Dir(sup.Log)}
	t.Cleanup(s.Close)
	sup.Spares = s
	s.Fill()
	return s, sup
}

// readySpare waits for the spare to be started, and returns its pid.
func readySpare(t *testing.T, s *Spares) int {
	t.Helper()
	var pid int
	waitFor(t, "a spare supervisor", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.ready != nil {
			pid = s.ready.proc.Pid
		}
		return s.ready != nil
	})
	return pid
}

// A run's first task starts under the spare, which serves the run's socket and writes the run's log; the
// next spare starts meanwhile.
func TestSpares_TheSpareBecomesTheRunsSupervisor(t *testing.T) {
	s, sup := newSpares(t)
	spare := readySpare(t, s)
	dir, cfg := record(t, "sleep 30", nil)
	st, err := start(sup, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = Client{Socket: cfg.Socket}.Stop(context.Background(), Stop{By: "test", Reason: "test over"})
		waitFor(t, "the task to end", func() bool { _, ok, _ := ReadExit(dir); return ok })
	})
	assert.Equal(t, spare, st.ShimPID, "the task's supervisor is the spare")
	log, err := os.ReadFile(sup.Log)
	require.NoError(t, err)
	assert.Contains(t, string(log), "supervisor listening on "+sup.Socket)
	assert.Contains(t, string(log), "task started: pid")
	next := readySpare(t, s)
	assert.NotEqual(t, spare, next, "a new spare for the next run")

	// The run's second task goes to the same supervisor; the new spare waits on.
	_, cfg2 := record(t, "sleep 30", nil)
	st2, err := start(sup, cfg2)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = Client{Socket: cfg2.Socket}.Stop(context.Background(), Stop{By: "test", Reason: "test over"})
	})
	assert.Equal(t, spare, st2.ShimPID)
	assert.Equal(t, next, readySpare(t, s))
}

// A spare ends when its worker lets it go (or ends: the kernel closes the worker's end of the link the same
// way), even while another child of the worker runs: no other child holds the link open.
func TestSpares_ASpareEndsWithItsWorkersLink(t *testing.T) {
	s, _ := newSpares(t)
	spare := readySpare(t, s)
	other := exec.Command("sleep", "30")
	require.NoError(t, other.Start())
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	assert.True(t, alive(spare))
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", spare))
	require.NoError(t, err)
	// make down finds a host's supervisors, spares included, by their logs' folder on the command line.
	assert.Contains(t, strings.ReplaceAll(string(cmdline), "\x00", " "), "--log-dir "+s.LogDir)
	s.Close()
	waitFor(t, "the spare to exit", func() bool { return !alive(spare) })
}

// A spare that died is no supervisor: the run's supervisor starts as a program of its own.
func TestSpares_ADeadSpareIsPassedOver(t *testing.T) {
	s, sup := newSpares(t)
	spare := readySpare(t, s)
	require.NoError(t, syscall.Kill(spare, syscall.SIGKILL))
	waitFor(t, "the spare to die", func() bool { return !alive(spare) })
	dir, cfg := record(t, "sleep 30", nil)
	st, err := start(sup, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = Client{Socket: cfg.Socket}.Stop(context.Background(), Stop{By: "test", Reason: "test over"})
		waitFor(t, "the task to end", func() bool { _, ok, _ := ReadExit(dir); return ok })
	})
	assert.NotEqual(t, spare, st.ShimPID)
	assert.True(t, alive(st.ShimPID))
	assert.NotEqual(t, spare, readySpare(t, s), "a new spare follows")
}

// A spare takes up only a log in its own folder: an adoption that names another is refused, and the run's
// supervisor starts as a program of its own.
func TestSpares_ALogElsewhereIsNotTakenUp(t *testing.T) {
	s, sup := newSpares(t)
	spare := readySpare(t, s)
	sup.Log = filepath.Join(t.TempDir(), "elsewhere.log")
	dir, cfg := record(t, "sleep 30", nil)
	st, err := start(sup, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = Client{Socket: cfg.Socket}.Stop(context.Background(), Stop{By: "test", Reason: "test over"})
		waitFor(t, "the task to end", func() bool { _, ok, _ := ReadExit(dir); return ok })
	})
	assert.NotEqual(t, spare, st.ShimPID)
	assert.Equal(t, spare, readySpare(t, s), "the spare waits on for a run of its own folder")
}

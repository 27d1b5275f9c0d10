package main

import (
	"errors"
	"io"
	"sync/atomic"
	"syscall"
)

// closedOutput is the output of a command that follows a run: once its reader is gone (clusterrun run ... |
// head), a write fails with EPIPE, and closedOutput drops that write and every later one, after calling
// gone once. The command follows the run on to its end and exits with its code, as srun does: a reader that
// leaves asks neither to cancel the run nor to detach from it. Without this, the Go runtime's SIGPIPE ended
// the command at its next write with 141, and a script's wait on it said nothing of the run.
type closedOutput struct {
	w      io.Writer
	closed atomic.Bool
	gone   func()
}

func (c *closedOutput) Write(p []byte) (int, error) {
	if c.closed.Load() {
		return len(p), nil
	}
	n, err := c.w.Write(p)
	if errors.Is(err, syscall.EPIPE) {
		if c.closed.CompareAndSwap(false, true) {
			c.gone()
		}
		return len(p), nil
	}
	return n, err
}

package activities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

// Release hands the cluster map to the named attempts waiting on this host. An attempt that is no longer here
// (it failed or was replaced) is skipped: a later attempt reports its placement again.
func (h *Host) Release(_ context.Context, in workflows.ReleaseInput) (workflows.ReleaseResult, error) {
	var out workflows.ReleaseResult
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ta := range in.Tasks {
		e := h.entries[key(in.WorkflowID, in.RunID, ta.Task)]
		if e == nil || e.attempt != ta.Attempt {
			continue
		}
		select {
		case e.release <- in.Cluster:
			out.Released = append(out.Released, ta.Task)
		default: // already released
		}
	}
	return out, nil
}

// StopTasks stops the named tasks of a run on this host and returns once their processes are gone (or, for an
// attempt that had not started its process yet, once that attempt has ended), with how each ended.
func (h *Host) StopTasks(ctx context.Context, in workflows.StopTasksInput) (workflows.StopTasksResult, error) {
	entries := h.find(in.WorkflowID, in.RunID, in.Tasks)
	h.Logger.Info("stopping tasks", "run", in.WorkflowID, "tasks", len(entries), "reason", in.Reason)
	ownEnd := map[*entry]bool{}
	for _, e := range entries {
		if p := e.process(); p != nil {
			select {
			case <-p.Done():
				ownEnd[e] = true // it ended before the stop: its RunTask reports that
			default:
			}
		}
		e.requestStop(stopByRun, in.Reason)
	}
	var out workflows.StopTasksResult
	for _, e := range entries {
		p := e.process()
		var gone <-chan struct{} = e.finished
		if p != nil {
			gone = p.Done()
		}
		select {
		case <-gone:
		case <-e.finished:
		case <-ctx.Done():
			return out, fmt.Errorf("stop tasks on %s: %w", h.Name, ctx.Err())
		}
		if ownEnd[e] {
			continue
		}
		out.Stopped = append(out.Stopped, e.task)
		if p := e.process(); p != nil {
			exit := p.Exit()
			out.Exits = append(out.Exits, workflows.TaskExit{Task: e.task, Attempt: e.attempt, ExitCode: exit.Code, Signal: exit.Signal})
		}
	}
	sort.Strings(out.Stopped)
	return out, nil
}

// NotifyStop tells this host's tasks of a run that the run should stop (their should-stop turns true).
func (h *Host) NotifyStop(_ context.Context, in workflows.NotifyStopInput) error {
	entries := h.find(in.WorkflowID, in.RunID, nil)
	h.Logger.Info("run asks its tasks to stop", "run", in.WorkflowID, "by", in.By, "error", in.Error, "tasks", len(entries))
	for _, e := range entries {
		e.setNotice(in)
	}
	return nil
}

// SignalTasks sends a signal to the process group of every task of a run on this host.
func (h *Host) SignalTasks(_ context.Context, in workflows.SignalTasksInput) error {
	num := spec.SignalNumber(in.Signal)
	if num == 0 {
		return fmt.Errorf("unknown signal %q", in.Signal)
	}
	entries := h.find(in.WorkflowID, in.RunID, nil)
	h.Logger.Info("signaling tasks", "run", in.WorkflowID, "signal", in.Signal, "tasks", len(entries))
	for _, e := range entries {
		if p := e.process(); p != nil {
			if err := p.Signal(syscall.Signal(num)); err != nil {
				h.Logger.Warn("signal failed", "task", e.task, "error", err)
			}
		}
	}
	return nil
}

// MaxLogChunk bounds one chunk of a log read.
const MaxLogChunk = 256 << 10

// ReadLogs reads chunks of this host's log files.
func (h *Host) ReadLogs(_ context.Context, in workflows.ReadLogsInput) (workflows.ReadLogsResult, error) {
	var out workflows.ReadLogsResult
	for _, r := range in.Requests {
		out.Chunks = append(out.Chunks, h.readChunk(in.RunID, r))
	}
	return out, nil
}

func (h *Host) readChunk(runID string, r workflows.ReadLogsRequest) workflows.LogChunk {
	c := workflows.LogChunk{ReadLogsRequest: r, Next: r.Offset}
	if r.Stream != "stdout" && r.Stream != "stderr" {
		c.Error = fmt.Sprintf("unknown stream %q: use stdout or stderr", r.Stream)
		return c
	}
	path := filepath.Join(AttemptDir(h.LogDir, runID, r.Attempt, r.Task), r.Stream+".log")
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		c.Missing = true
		return c
	}
	if err != nil {
		c.Error = err.Error()
		return c
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		c.Error = err.Error()
		return c
	}
	off := r.Offset
	if off == 0 && r.Tail > 0 && st.Size() > r.Tail {
		off = st.Size() - r.Tail
	}
	if off > st.Size() {
		off = st.Size() // the file was truncated by a new run with the same ID
	}
	buf := make([]byte, min(st.Size()-off, MaxLogChunk))
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		c.Error = err.Error()
		return c
	}
	buf = buf[:n]
	// Hand out whole lines only, so a reader never prints half a line; a partial last line waits for the next
	// read (unless a single line is longer than a whole chunk).
	if i := lastNewline(buf); r.Flush {
		// The task has ended: everything is final.
	} else if i >= 0 {
		buf = buf[:i+1]
	} else if len(buf) < MaxLogChunk && !r.Flush {
		buf = nil
	}
	if r.Offset == 0 && off > 0 {
		// Tail: start at a line boundary.
		if i := indexNewline(buf); i >= 0 {
			off += int64(i + 1)
			buf = buf[i+1:]
		}
	}
	c.Data = buf
	c.Next = off + int64(len(buf))
	c.EOF = c.Next == st.Size()
	return c
}

func lastNewline(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			return i
		}
	}
	return -1
}

func indexNewline(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

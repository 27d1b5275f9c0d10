package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/activities/proc"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/task"
	"github.com/clusterrun/clusterrun/workflows"
)

// Bounds on what a task attempt reports back; they keep payloads far below Temporal's 2 MB limit.
const (
	MaxResultBytes    = 256 << 10
	MaxErrorFileBytes = 32 << 10
	StderrTailBytes   = 2 << 10
	LastLineRunes     = 100
)

// AttemptDir is where one attempt's files live: <log-dir>/<run-id>/attempt_<n>/<task>.
func AttemptDir(logDir, runID string, attempt int, task string) string {
	return filepath.Join(logDir, runID, "attempt_"+strconv.Itoa(attempt), task)
}

// RunTask runs one attempt of one task on this host: reserve a port, report the placement, wait for the
// rendezvous, start the process group, heartbeat, and report how it ended.
func (h *Host) RunTask(ctx context.Context, in workflows.RunTaskInput) (workflows.TaskResult, error) {
	info := activity.GetInfo(ctx)
	wf := info.WorkflowExecution
	t := in.Task
	attempt := in.AttemptOffset + int(info.Attempt)
	res := workflows.TaskResult{Task: t.Name, Host: h.Name, Attempt: attempt}

	e, err := h.register(wf.ID, wf.RunID, t.Name, attempt, in.Generation)
	if err != nil {
		return res, temporal.NewApplicationError(fmt.Sprintf("%s: %v", h.Name, err), workflows.ErrTaskFailed, res)
	}
	defer h.unregister(e)

	// Hold the port until the process starts, so nothing else on this host takes it meanwhile.
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return res, fmt.Errorf("reserve a port on %s for %s: %w", h.Name, t.Name, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	defer ln.Close()

	hb := startHeartbeats(ctx, heartbeatEvery(info.HeartbeatTimeout), workflows.HeartbeatDetails{Host: h.Name, Attempt: attempt, Phase: "rendezvous"})
	defer hb.stop()
	placed := workflows.Placement{Task: t.Name, Generation: in.Generation, Attempt: attempt, Host: h.Name, Addr: h.Addr, Port: port}
	if err := h.placements.add(ctx, wf.ID, wf.RunID, placed); err != nil {
		return res, fmt.Errorf("report placement of %s to run %s: %w", t.Name, wf.ID, err)
	}

	var cluster workflows.ClusterMap
wait:
	for {
		select {
		case cluster = <-e.release:
			break wait
		case <-e.stopReq:
			return h.stoppedBeforeStart(ctx, e, res)
		case <-ctx.Done():
			return res, temporal.NewCanceledError(res)
		}
	}

	dir := AttemptDir(h.LogDir, wf.ID, attempt, t.Name)
	stdout, stderr, err := openLogs(dir)
	if err != nil {
		return res, fmt.Errorf("log files for %s on %s: %w", t.Name, h.Name, err)
	}
	defer stdout.Close()
	defer stderr.Close()
	resultFile, errorFile := filepath.Join(dir, "result.json"), filepath.Join(dir, "error.json")
	ctl, err := h.startControl(e, taskInfo(wf.ID, t, attempt, in.Generation, h.Name, cluster), in.Generation)
	if err != nil {
		return res, fmt.Errorf("control socket for %s on %s: %w", t.Name, h.Name, err)
	}
	defer ctl.close()
	env := TaskEnv(os.Environ(), TaskIdentity{RunID: wf.ID, Task: t, Attempt: attempt, RestartCount: in.Generation,
		Host: h.Name, ResultFile: resultFile, ErrorFile: errorFile, Socket: ctl.path}, cluster)

	ln.Close()
	p, err := proc.Start(proc.Config{Argv: t.Command, Env: env, Dir: t.WorkingDir, Stdout: stdout, Stderr: stderr})
	if err != nil {
		res.ExitCode, res.Error = 127, err.Error()
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s cannot start on host %s: %v", t.Name, h.Name, err),
			workflows.ErrTaskStartFailed, nil, res)
	}
	e.started(p, in.StopGracePeriod)
	h.taskStarted(attempt)
	res.PID, res.StartTime = p.Pid(), time.Now()
	h.Logger.Info("task started", "run", wf.ID, "task", t.Name, "attempt", attempt, "pid", p.Pid())
	stdoutPath, stderrPath := stdout.Name(), stderr.Name()
	hb.update(func(d *workflows.HeartbeatDetails) { d.PID, d.Phase = p.Pid(), "running" }, func(d *workflows.HeartbeatDetails) {
		d.Last = lastLine(stdoutPath, stderrPath)
		d.Progress = e.lastProgress()
	})

	select {
	case <-p.Done():
	case <-ctx.Done():
		// The run is stopping and StopTasks did not reach this host first, or the SDK gave this attempt up
		// (heartbeats kept failing, or the server no longer knows it). Either way the process must not outlive it.
		e.requestStop(stopByRun, "canceled")
		<-p.Done()
	}

	exit := p.Exit()
	h.taskExited(exit.Code)
	res.ExitCode, res.Signal, res.EndTime = exit.Code, exit.Signal, time.Now()
	collectFiles(&res, resultFile, errorFile, stderrPath)
	h.Logger.Info("task exited", "run", wf.ID, "task", t.Name, "attempt", attempt, "exit", exit.String())

	if p.Stopping() {
		if e.stopSource() == stopByHost {
			res.Error = "host worker " + h.Name + " shut down"
			return res, workflows.ExitOutcome(t, res)
		}
		res.Stopped = true
		if ctx.Err() != nil {
			if lost := lostContact(ctx); lost != "" {
				res.Stopped, res.Error = false, lost
				return res, temporal.NewApplicationError(fmt.Sprintf("%s on %s was stopped: %s", t.Name, h.Name, lost), workflows.ErrTaskFailed, res)
			}
			return res, temporal.NewCanceledError(res)
		}
		return res, nil
	}
	return res, workflows.ExitOutcome(t, res)
}

// lostContact explains a canceled activity context that is not a cancellation request from the run: the SDK
// also cancels it when heartbeats keep failing. It returns "" for a real cancellation request.
func lostContact(ctx context.Context) string {
	cause := context.Cause(ctx)
	var canceled *temporal.CanceledError
	if cause == nil || errors.Is(cause, context.Canceled) || errors.As(cause, &canceled) {
		return ""
	}
	return "lost contact with the Temporal server (heartbeat failed: " + cause.Error() + ")"
}

func taskInfo(runID string, t spec.Task, attempt, generation int, host string, m workflows.ClusterMap) task.Info {
	info := task.Info{Run: runID, Task: t.Name, Type: t.Type, Index: t.Index, Attempt: attempt, RestartCount: generation, Host: host}
	for _, ep := range m.Endpoints {
		info.Cluster = append(info.Cluster, task.Endpoint{Task: ep.Task, Host: ep.Host, Addr: ep.Addr, Port: ep.Port})
	}
	return info
}

func (h *Host) stoppedBeforeStart(ctx context.Context, e *entry, res workflows.TaskResult) (workflows.TaskResult, error) {
	if e.stopSource() == stopByHost {
		res.ExitCode, res.Error = -1, "host worker "+h.Name+" shut down before the task started"
		return res, temporal.NewApplicationError(res.Error, workflows.ErrTaskFailed, res)
	}
	res.Stopped = true
	if ctx.Err() != nil {
		return res, temporal.NewCanceledError(res)
	}
	return res, nil
}

// heartbeatEvery picks the heartbeat period: often enough that a beat lands well within the timeout (the SDK
// throttles what actually goes out to 0.8 × the timeout).
func heartbeatEvery(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return 5 * time.Second
	}
	return max(timeout/4, 100*time.Millisecond)
}

// heartbeater records heartbeats on its own goroutine: RecordHeartbeat can block on an RPC, and the task's
// main loop must stay free to react to its process and to stop requests.
type heartbeater struct {
	mu      sync.Mutex
	details workflows.HeartbeatDetails
	refresh func(*workflows.HeartbeatDetails)
	kick    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

func startHeartbeats(ctx context.Context, every time.Duration, d workflows.HeartbeatDetails) *heartbeater {
	b := &heartbeater{details: d, kick: make(chan struct{}, 1), done: make(chan struct{})}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		// No beat at once: the SDK sends a task's first heartbeat immediately but holds each later one for its
		// throttle interval (0.8 × heartbeatTimeout). Keeping the first for the process start (the kick) shows
		// its pid in the Web UI and in status at once; the ticker beats in time should the rendezvous be slow.
		for {
			select {
			case <-tick.C:
			case <-b.kick:
			case <-b.done:
				return
			case <-ctx.Done():
				return
			}
			b.mu.Lock()
			if b.refresh != nil {
				b.refresh(&b.details)
			}
			d := b.details
			b.mu.Unlock()
			activity.RecordHeartbeat(ctx, d)
		}
	}()
	return b
}

// update changes the details now and sets what to refresh before each later beat.
func (b *heartbeater) update(now, refresh func(*workflows.HeartbeatDetails)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now(&b.details)
	b.refresh = refresh
	select {
	case b.kick <- struct{}{}: // beat now, so the new details show at once
	default:
	}
}

func (b *heartbeater) stop() {
	close(b.done)
	b.wg.Wait()
}

func openLogs(dir string) (stdout, stderr *os.File, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	for _, name := range []string{"result.json", "error.json"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, err
		}
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if stdout, err = os.OpenFile(filepath.Join(dir, "stdout.log"), flags, 0o644); err != nil {
		return nil, nil, err
	}
	if stderr, err = os.OpenFile(filepath.Join(dir, "stderr.log"), flags, 0o644); err != nil {
		stdout.Close()
		return nil, nil, err
	}
	return stdout, stderr, nil
}

// lastLine is the newer of the last stdout and stderr lines.
func lastLine(stdoutPath, stderrPath string) string {
	out, errLine := proc.LastLine(stdoutPath, LastLineRunes), proc.LastLine(stderrPath, LastLineRunes)
	if errLine == "" {
		return out
	}
	if out == "" {
		return errLine
	}
	so, e1 := os.Stat(stdoutPath)
	se, e2 := os.Stat(stderrPath)
	if e1 == nil && e2 == nil && se.ModTime().After(so.ModTime()) {
		return errLine
	}
	return out
}

// collectFiles reads the result file, error.json and the stderr tail into the task result, bounded.
func collectFiles(res *workflows.TaskResult, resultFile, errorFile, stderrPath string) {
	if data, truncated, err := proc.ReadBounded(resultFile, MaxResultBytes); err == nil && data != nil {
		switch {
		case truncated:
			res.Error = appendCause(res.Error, fmt.Sprintf("result file is over %d bytes and was dropped", MaxResultBytes))
		case !json.Valid(data):
			res.Error = appendCause(res.Error, "result file is not valid JSON and was dropped")
		default:
			res.Result = json.RawMessage(data)
		}
	}
	if data, _, err := proc.ReadBounded(errorFile, MaxErrorFileBytes); err == nil && data != nil && json.Valid(data) {
		res.ErrorFile = json.RawMessage(data)
		if msg := errorFileMessage(data); msg != "" && res.ExitCode != 0 {
			res.Error = msg
		}
	}
	res.StderrTail = proc.Tail(stderrPath, StderrTailBytes)
	if res.Error == "" && res.ExitCode != 0 {
		res.Error = proc.LastLine(stderrPath, 200)
	}
}

// errorFileMessage reads the message of a torchelastic-style error file:
// {"message": {"message": "...", "extraInfo": {...}}} or {"message": "..."}.
func errorFileMessage(data []byte) string {
	var f struct {
		Message json.RawMessage `json:"message"`
	}
	if json.Unmarshal(data, &f) != nil || f.Message == nil {
		return ""
	}
	var s string
	if json.Unmarshal(f.Message, &s) == nil {
		return firstLine(s)
	}
	var nested struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(f.Message, &nested) == nil {
		return firstLine(nested.Message)
	}
	return ""
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:297] + "..."
	}
	return s
}

func appendCause(cur, more string) string {
	if cur == "" {
		return more
	}
	return cur + "; " + more
}

func itoa(i int) string { return strconv.Itoa(i) }

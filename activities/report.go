package activities

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/clusterrun/clusterrun/activities/logfile"
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

// prepareLogs makes an attempt's log folder with empty stdout and stderr files, and no result or error file
// left from an earlier try (nor log sidecars: package logfile).
func (h *Host) prepareLogs(dir string) error {
	// The run's folders let the task's user through, not look around; the attempt's folder is the task's.
	fresh, err := newFolder(dir, 0o700, 0o711)
	if err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	if !fresh {
		if err := removeLeftovers(dir); err != nil {
			return err
		}
	}
	for _, name := range []string{"stdout.log", "stderr.log"} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0o640)
		if err != nil {
			return err
		}
		f.Close()
	}
	return h.giveToTaskUser(dir, filepath.Join(dir, "stdout.log"), filepath.Join(dir, "stderr.log"))
}

// removeLeftovers removes the result and error files and the log sidecars an earlier try left in an attempt's
// log folder.
func removeLeftovers(dir string) error {
	for _, name := range []string{"result.json", "error.json", "stdout.log" + logfile.TimesSuffix, "stdout.log" + logfile.DroppedSuffix,
		"stderr.log" + logfile.TimesSuffix, "stderr.log" + logfile.DroppedSuffix} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// taskInfo is what the control socket's info endpoint answers: the attempt and the cluster map (its view v).
func taskInfo(ref attemptRef, host string, v *mapView) task.Info {
	return task.Info{Run: ref.WorkflowID, Task: ref.Task, Type: ref.Type, Index: ref.Index, Attempt: ref.Attempt,
		RestartCount: ref.Generation, Host: host, Cluster: v.endpoints}
}

// giveInfo gives the task its info with cluster map m.
func (h *Host) giveInfo(e *entry, m workflows.ClusterMap) {
	v := views.of(m)
	e.setInfo(taskInfo(e.ref, h.Name, v), v.hosts)
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
			res.Error = appendCause(res.Error, fmt.Sprintf("result file is over %s and was dropped: keep large outputs in files "+
				"of your own and write their paths in the result", spec.FormatSize(MaxResultBytes)))
		case !json.Valid(data):
			res.Error = appendCause(res.Error, "result file "+notJSON(data)+" and was dropped")
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

// logSizes are the sizes of an ended attempt's logs in dir, or nil when either cannot be read.
func logSizes(dir string) *workflows.LogSizes {
	out, err1 := os.Stat(filepath.Join(dir, "stdout.log"))
	errs, err2 := os.Stat(filepath.Join(dir, "stderr.log"))
	if err1 != nil || err2 != nil {
		return nil
	}
	return &workflows.LogSizes{Stdout: out.Size(), Stderr: errs.Size()}
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

// notJSON says what a result file that is not JSON holds, for its error: its first bytes, quoted.
func notJSON(data []byte) string {
	const n = 40
	switch {
	case len(bytes.TrimSpace(data)) == 0:
		return "is empty"
	case len(data) <= n:
		return "is not valid JSON (it holds " + strconv.Quote(string(data)) + ")"
	}
	return "is not valid JSON (it begins " + strconv.Quote(string(data[:n])) + "...)"
}

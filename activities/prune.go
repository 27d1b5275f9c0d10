package activities

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/clusterrun/clusterrun/spec"
)

// Log retention (--log-retention): a host deletes the log folder of a run that has ended once nothing in it was
// written for the retention period. A run that still runs keeps its folder however quiet its tasks are (a
// find -mtime on the folders, the way the docs said to prune before, deleted those of a month-long training
// run), and so does one whose end the server cannot confirm for now.

// namespaceFile, in a run's log folder, names the Temporal namespace of the run. Workers of other namespaces
// may share a log folder (the default one, under one user), and a run of another namespace is unknown to this
// worker's: without the file, its quiet logs would be taken for an ended run's.
const namespaceFile = ".namespace"

// markNamespace writes the run's log folder's namespace file, once: before its first attempt's logs.
func (h *Host) markNamespace(runID string) error {
	if h.Namespace == "" {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(h.LogDir, runID, namespaceFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = f.WriteString(h.Namespace + "\n")
	return errors.Join(err, f.Close())
}

// ofOtherNamespace says whether a run's log folder names a namespace other than this worker's. One without
// the file (made by a worker before it) is taken for this namespace's.
func (h *Host) ofOtherNamespace(runID string) bool {
	b, err := os.ReadFile(filepath.Join(h.LogDir, runID, namespaceFile))
	return err == nil && h.Namespace != "" && strings.TrimSpace(string(b)) != h.Namespace
}

// prunedPrefix names a run folder taken out of the log folder to be deleted: not a run ID, so no read and no
// prune takes it for one; a worker killed while deleting it deletes the rest at its next pass.
const prunedPrefix = ".pruned-"

// pruneEvery is how often the log folder is looked over: a tenth of the retention, within a second and an hour.
func pruneEvery(retention time.Duration) time.Duration {
	return min(max(retention/10, time.Second), time.Hour)
}

// pruneLoop deletes ended runs' log folders past the retention: first a few seconds after the worker starts
// (what piled up while no worker pruned), then at each pruneEvery.
func (h *Host) pruneLoop(ctx context.Context) {
	wait := min(pruneEvery(h.LogRetention), firstPrune)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if h.contact.ok() {
			h.pruneLogs(ctx, time.Now())
		}
		wait = pruneEvery(h.LogRetention)
	}
}

// firstPrune is how long after its start a worker first looks over its log folder: past the busy moments of a
// start, when it takes its tasks up again.
const firstPrune = 10 * time.Second

// pruneLogs deletes the log folder of each run that ended and whose files were last written a retention
// before now, what an earlier pass left half deleted, and the logs of supervisors long gone.
func (h *Host) pruneLogs(ctx context.Context, now time.Time) {
	dirs, err := os.ReadDir(h.LogDir)
	if err != nil {
		h.Logger.Warn("cannot look over the log folder for runs past --log-retention", "dir", h.LogDir, "error", err)
		return
	}
	for _, d := range dirs {
		name := d.Name()
		switch {
		case !d.IsDir():
		case strings.HasPrefix(name, prunedPrefix):
			_ = os.RemoveAll(filepath.Join(h.LogDir, name))
		case spec.CheckRunID(name) == nil:
			h.pruneRun(ctx, name, now)
		}
	}
	h.pruneSupervisorLogs(now)
}

// pruneSupervisorLogs deletes the log of a run's supervisor on this host (a few hundred bytes per run, in the
// state folder) once it was not written for the retention and the supervisor is gone: its socket is not there.
func (h *Host) pruneSupervisorLogs(now time.Time) {
	dir := h.supervisorLogs()
	logs, err := os.ReadDir(dir)
	if err != nil {
		return // none yet
	}
	for _, l := range logs {
		name, ok := strings.CutSuffix(l.Name(), ".log")
		if !ok || !strings.HasPrefix(name, "run-") {
			continue
		}
		info, err := l.Info()
		if err != nil || now.Sub(info.ModTime()) < h.LogRetention {
			continue
		}
		if _, err := os.Lstat(filepath.Join(SocketDir(h.SocketDir), name+".sock")); !errors.Is(err, os.ErrNotExist) {
			continue // its supervisor may live on
		}
		_ = os.Remove(filepath.Join(dir, l.Name()))
	}
}

// pruneRun deletes one run's log folder if the run (of this worker's namespace) has ended, nothing in it was
// written for the retention, and this host holds no attempt of it. The folder is renamed while the registry is held, so an attempt of the run
// that comes later (a new run given the same ID) makes a folder of its own rather than writing into one being
// deleted.
func (h *Host) pruneRun(ctx context.Context, runID string, now time.Time) {
	dir := filepath.Join(h.LogDir, runID)
	last, err := lastWrite(dir)
	if err != nil || now.Sub(last) < h.LogRetention || h.ofOtherNamespace(runID) {
		return
	}
	if ended, err := h.runHasEnded(ctx, runID); err != nil || !ended {
		return
	}
	gone := filepath.Join(h.LogDir, prunedPrefix+runID)
	moved := h.reg.withoutRun(runID, func() bool { return os.Rename(dir, gone) == nil })
	if !moved {
		return
	}
	if err := os.RemoveAll(gone); err != nil {
		h.Logger.Warn("cannot delete the logs of a run past --log-retention", "run", runID, "dir", gone, "error", err)
		return
	}
	h.Logger.Info("deleted the logs of a run that ended, past --log-retention", "run", runID,
		"lastWritten", last.UTC().Format(time.RFC3339), "retention", h.LogRetention)
}

// lastWrite is when anything in dir (a run's log folder) was last written: the newest modification time of
// its files and folders.
func lastWrite(dir string) (time.Time, error) {
	var last time.Time
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if t := info.ModTime(); t.After(last) {
			last = t
		}
		return nil
	})
	return last, err
}

// runHasEnded says whether the run's workflow has ended: closed, or unknown to the server (deleted after the
// namespace's retention). An error (the server cannot say now) keeps the logs.
func (h *Host) runHasEnded(ctx context.Context, runID string) (bool, error) {
	if h.RunEnded != nil {
		return h.RunEnded(ctx, runID)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	desc, err := h.Client.DescribeWorkflowExecution(ctx, runID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}

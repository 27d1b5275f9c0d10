package activities

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

// noteLogsFull marks the logs of a task that ended on its own whose file system ran out of space while it ran,
// and, when it failed, says so first in its error: its last words (a traceback) were lost with the rest, so
// without the note the failure says only its exit code.
func (h *Host) noteLogsFull(res *workflows.TaskResult, x shim.Exit) {
	if !x.LogsFull {
		return
	}
	if res.Logs == nil {
		res.Logs = &workflows.LogSizes{}
	}
	res.Logs.Full = true
	if res.ExitCode == 0 && res.Signal == "" {
		return
	}
	note := fmt.Sprintf("%s, its last words with it (--log-dir %s%s: free space there, or give the worker a --log-dir with room)",
		workflows.LogsFullNote(h.Name), h.LogDir, room(h.LogDir))
	if res.Error != "" {
		note += "; " + res.Error
	}
	res.Error = note
}

// withRoomNote adds to an error of a task's start that a file system ran out of space which of the host's
// folders it is and what to do: the error alone names a file deep inside it ("write
// /dev/shm/clusterrun-0/run-1e936e8cb514/cluster.json.tmp: no space left on device"). The runtime folder is a
// tmpfs, in memory, which the tasks' own shared memory may fill (PyTorch's data loaders use /dev/shm). Errors
// from the supervisor come as text, so the text is what is looked at.
func (h *Host) withRoomNote(err error) error {
	msg := err.Error()
	if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) &&
		!strings.Contains(msg, syscall.ENOSPC.Error()) && !strings.Contains(msg, syscall.EDQUOT.Error()) {
		return err
	}
	flag, dir := "", ""
	for _, d := range []struct{ flag, dir string }{{"--socket-dir", SocketDir(h.SocketDir)}, {"--log-dir", h.LogDir}, {"--state-dir", h.StateDir}} {
		if d.dir != "" && strings.Contains(msg, filepath.Clean(d.dir)+"/") && len(d.dir) > len(dir) {
			flag, dir = d.flag, d.dir
		}
	}
	if flag == "" {
		return fmt.Errorf("%w (a file system of host %s is full: free space there)", err, h.Name)
	}
	return fmt.Errorf("%w (host %s's %s %s is full%s: free space there, or give the worker a %s with room)", err, h.Name, flag, dir, room(dir), flag)
}

// LogDisk is the file system of the host's log folder, as its reports give it; nil when it cannot be read.
func (h *Host) LogDisk() *workflows.DiskSpace {
	var fs syscall.Statfs_t
	if syscall.Statfs(h.LogDir, &fs) != nil {
		return nil
	}
	return &workflows.DiskSpace{Free: int64(fs.Bavail) * fs.Bsize, Size: int64(fs.Blocks) * fs.Bsize}
}

// room says how much of a folder's file system is free: ", 0 B free of 64 MiB now". Empty when it cannot tell.
func room(dir string) string {
	var fs syscall.Statfs_t
	if syscall.Statfs(dir, &fs) != nil {
		return ""
	}
	return fmt.Sprintf(", %s free of %s now", spec.FormatSize(int64(fs.Bavail)*fs.Bsize), spec.FormatSize(int64(fs.Blocks)*fs.Bsize))
}

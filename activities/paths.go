package activities

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/clusterrun/clusterrun/spec"
)

// Run IDs (workflow IDs) and task names become folder names on the host: a run's log folder, an attempt's.
// Temporal takes any string as a workflow ID, so both are checked before they touch a path: one path component,
// no "..", no hidden names.
var taskNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}-[0-9]{1,9}$`)

func checkPathNames(runID, task string) error {
	if err := spec.CheckRunID(runID); err != nil {
		return err
	}
	if !taskNameRE.MatchString(task) {
		return fmt.Errorf("task name %q is not TYPE-INDEX", cut(task, 64))
	}
	return nil
}

// checkOwnDir makes sure a folder this worker keeps state, logs or sockets in is safe to use: it is created if
// missing (with mode), and refused if it is a symlink, is owned by another user, or can be written by others.
// Another user who could replace or fill it could redirect what the worker writes and reads there.
func checkOwnDir(flag, dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("%s %s: %w", flag, dir, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, dir, err)
	}
	if st.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s %s is a symlink: name the real folder instead", flag, dir)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s %s is not a folder", flag, dir)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("folder ownership is unknown on this system")
	}
	if uid := os.Getuid(); int(sys.Uid) != uid {
		return fmt.Errorf("%s %s belongs to uid %d, not to this worker's user (uid %d): use a folder of the worker's own, or chown it", flag, dir, sys.Uid, uid)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s %s can be written by other users (mode %v): chmod go-w %s", flag, dir, st.Mode().Perm(), dir)
	}
	if want := st.Mode().Perm() | mode; want != st.Mode().Perm() {
		// A folder made by an older worker (0700): tasks run as another user must be let through.
		return os.Chmod(dir, want)
	}
	return nil
}

// lockHost takes this host's lock, a file in its state folder that one worker at a time holds (flock). Two
// workers with the same --host and --state-dir would take up the same records, stop each other's tasks as left
// over and report one host twice. The kernel lets the lock go when the worker exits, SIGKILL included, so a
// worker restarted after a crash takes it at once; the supervisors never hold it (Go opens files close-on-exec).
func lockHost(stateDir, host string) (*os.File, error) {
	path := filepath.Join(stateDir, "worker.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--state-dir: cannot open the host's lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another clusterrun-worker (pid %s) already runs as host %s with this state folder (%s): "+
				"stop it first, or give this one another --host or --state-dir", pidText(holder), host, stateDir)
		}
		return nil, fmt.Errorf("--state-dir: cannot lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// pidText is the pid a lock file holds, or "unknown".
func pidText(b []byte) string {
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
		return strconv.Itoa(pid)
	}
	return "unknown"
}

// newFolder makes dir with mode, and its missing parents with parentMode, and says whether dir is new: a new
// folder has no leftovers to clear. It costs one mkdir where dir's parent exists (MkdirAll first looks at dir
// and at its parent).
func newFolder(dir string, mode, parentMode os.FileMode) (fresh bool, err error) {
	err = os.Mkdir(dir, mode)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dir), parentMode); err != nil {
			return false, err
		}
		err = os.Mkdir(dir, mode)
	}
	if errors.Is(err, os.ErrExist) {
		if st, serr := os.Stat(dir); serr != nil || !st.IsDir() {
			return false, &os.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return false, nil
	}
	return err == nil, err
}

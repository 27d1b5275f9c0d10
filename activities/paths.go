package activities

import (
	"errors"
	"fmt"
	"os"
	"regexp"
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

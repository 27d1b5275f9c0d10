package activities

import (
	"fmt"
	"os"

	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/workflows"
)

// admit checks a new attempt against this host's policy before anything is reserved or started: its names must
// be usable as folder names, and its program and working directory allowed here. A refusal fails the attempt
// at once (TaskStartFailed is never restarted) with an error that names the host and the rule, and leaves one
// audit line.
func (h *Host) admit(ref attemptRef, in workflows.RunTaskInput, res workflows.TaskResult) (Admitted, error) {
	refuse := func(msg string) (Admitted, error) {
		h.Logger.Warn("audit: task refused", "run", ref.WorkflowID, "runId", ref.RunID, "task", ref.Task, "attempt", ref.Attempt,
			"argv", in.Task.Command, "dir", in.Task.WorkingDir, "user", h.taskUserName(), "reason", msg)
		res.ExitCode, res.Error = 127, msg
		return Admitted{}, temporal.NewNonRetryableApplicationError(msg, workflows.ErrTaskStartFailed, nil, res)
	}
	if err := checkPathNames(ref.WorkflowID, ref.Task); err != nil {
		return refuse(fmt.Sprintf("%s refuses the task: %v", h.Name, err))
	}
	adm, err := h.Policy.Admit(h.Name, in.Task.Command, pathOf(in.Task.Env, h.TaskEnv.Filter(os.Environ())), in.Task.WorkingDir)
	if err != nil {
		return refuse(err.Error())
	}
	return adm, nil
}

// audit writes the one line each process start leaves in the worker's log: who asked (run, task, attempt),
// what runs (argv, the program checked), as whom and where.
func (h *Host) audit(e *entry, adm Admitted, pid int) {
	uid := os.Getuid()
	if u := h.Policy.User; u != nil {
		uid = int(u.UID)
	}
	h.Logger.Info("audit: task process started", "run", e.ref.WorkflowID, "runId", e.ref.RunID, "task", e.ref.Task,
		"attempt", e.ref.Attempt, "argv", e.task.Command, "exe", adm.Exe, "user", h.taskUserName(), "uid", uid, "dir", adm.Dir, "pid", pid)
}

func (h *Host) taskUserName() string {
	if u := h.Policy.User; u != nil {
		return u.Name
	}
	return currentUserName()
}

// shimUser is the user the supervisor starts a task as: nil when it is the worker's own.
func (h *Host) shimUser() *shim.User {
	u := h.Policy.User
	if u == nil || int(u.UID) == os.Getuid() && int(u.GID) == os.Getgid() {
		return nil
	}
	return &shim.User{UID: u.UID, GID: u.GID, Groups: u.Groups}
}

// userEnv is the identity a task run as another user sees (a spec's env may still set these).
func (h *Host) userEnv() []string {
	u := h.Policy.User
	if u == nil || int(u.UID) == os.Getuid() {
		return nil
	}
	return []string{"USER=" + u.Name, "LOGNAME=" + u.Name, "HOME=" + u.Home}
}

// giveToTaskUser hands files and folders a task must write (its attempt's log folder, its control socket) to
// the user it runs as; no one else may read them. Nothing changes when tasks run as the worker's user.
func (h *Host) giveToTaskUser(paths ...string) error {
	su := h.shimUser()
	if su == nil {
		return nil
	}
	for _, p := range paths {
		if err := os.Lchown(p, int(su.UID), int(su.GID)); err != nil {
			return fmt.Errorf("hand %s to user %s: %w", p, h.Policy.User.Name, err)
		}
	}
	return nil
}

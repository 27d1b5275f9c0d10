// Package shim is clusterrun's task supervisor, the role slurmstepd plays for a job step: one small process per run
// and host that owns the process trees of that run's tasks on the host, so they do not live or die with the
// long-lived host worker.
//
// Contract:
//   - A host worker asks the run's supervisor to start each task (Supervisor.Prepare, then Pending.Start). The
//     supervisor listens on a Unix socket of its own; the first worker that finds none starts it (clusterrun-shim,
//     in a session of its own). It ends once it has had no task and no worker connection for a while.
//   - For each task the supervisor starts the process (through package proc: its own process group, Pdeathsig
//     from the supervisor, its own cgroup where cgroup v2 is writable), listens on the task's own socket, and
//     writes the task's record folder: proc.json once it runs and, once the task and its group are gone,
//     exit.json, both atomically, so a worker that starts later reads how the task ended even if nobody was
//     listening.
//   - The task's stdout and stderr go straight to the attempt's log files, opened for append: the supervisor
//     copies nothing, and a restarted worker keeps reading the same files.
//   - Ownership is a held connection: a worker "watches" a task over its socket and learns of its exit on that
//     connection. When no worker has watched a task for its OrphanAfter, the supervisor stops it (SIGTERM, Grace,
//     SIGKILL), so no task outlives its host worker by more than that bound.
//   - If the supervisor itself is killed, Pdeathsig takes its tasks' main processes down; what they left in their
//     cgroups or groups is killed by the next worker that finds the supervisor gone (Reap).
//   - SIGTERM or SIGINT to the supervisor stops its tasks (each with its Grace) and ends it; that is how `make
//     down` ends tasks whose workers have detached from them.
//
// The supervisor imports no Temporal code and keeps to the standard library, so it costs little memory.
package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Files in a task attempt's record folder.
const (
	// ProcFile is written by the supervisor once the task runs.
	ProcFile = "proc.json"
	// ExitFile is written by the supervisor (or by Reap) once the task is gone.
	ExitFile = "exit.json"
)

// Config is one task for the supervisor to run.
type Config struct {
	// Record is the task's record folder (proc.json, exit.json); it must exist.
	Record string `json:"record"`
	// Name names the task in the supervisor's log ("worker-3 attempt 2"). Optional: default its record folder.
	Name string   `json:"name,omitempty"`
	Argv []string `json:"argv"`
	// Path is the program to execute, as the host policy checked it. Optional: default argv[0] on Env's PATH.
	Path string `json:"path,omitempty"`
	// User is who the task runs as. Optional: default the supervisor's user.
	User *User `json:"user,omitempty"`
	// Env is the task's full environment, as KEY=VALUE.
	Env []string `json:"env"`
	// Dir is the working directory. Optional: default the shim's.
	Dir string `json:"dir,omitempty"`
	// Stdout and Stderr are the paths of the task's log files, opened for append.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// LogCap keeps at most this many bytes of each log file: past it the oldest are dropped (package logfile).
	// Optional: default no cap.
	LogCap int64 `json:"logCap,omitempty"`
	// Socket is the task's own Unix socket, served by the supervisor (at most 107 bytes long).
	Socket string `json:"socket"`
	// Cgroup is a cgroup v2 folder to create and start the task in. Optional: default none (process group only).
	Cgroup string `json:"cgroup,omitempty"`
	// OrphanAfter is how long the task may go without a watching host worker before the supervisor stops it.
	// Optional: default never.
	OrphanAfter time.Duration `json:"orphanAfter,omitempty"`
	// Grace is the time between SIGTERM and SIGKILL for stops the supervisor decides itself (orphaned, SIGTERM).
	Grace time.Duration `json:"grace"`
}

// User is a user to run a task as.
type User struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
}

// Started says the task runs.
type Started struct {
	ShimPID int `json:"shimPid"`
	PID     int `json:"pid"`
	// Cgroup is the task's cgroup folder, or empty when it has none.
	Cgroup    string    `json:"cgroup,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	// BootID names the boot the pids belong to (/proc/sys/kernel/random/boot_id).
	BootID string `json:"bootId"`
}

// BootID is this boot's ID; pids recorded under another are meaningless. It is read once per process: a boot
// outlives every process in it.
var BootID = sync.OnceValue(func() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
})

// Exit is how a task attempt ended.
type Exit struct {
	// Code is the exit code, or 128+N for a death by signal N; -1 when it is unknown (the shim died).
	Code int `json:"code"`
	// Signal names the signal that killed the task, if one did.
	Signal string `json:"signal,omitempty"`
	// Stopped says a stop request ended the task (it did not end on its own). By says who asked (the host
	// worker's word for it, or ByOrphan, BySignal, ByReap), and Reason why.
	Stopped bool   `json:"stopped,omitempty"`
	By      string `json:"by,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// KilledAfter is the stop's grace period when the task did not end within it after SIGTERM and was killed
	// (SIGKILL); 0 otherwise, and from a supervisor from before this field.
	KilledAfter time.Duration `json:"killedAfter,omitempty"`
	// OOMKilled is the kernel's OOM killer's kill of the task's main process, when the kernel's log told the
	// supervisor of it (oom.go); nil otherwise, and from a supervisor from before this field.
	OOMKilled *OOMKill `json:"oomKilled,omitempty"`
	// OOMKilledChildren are the OOM killer's kills of the task's other processes (its process group's: children,
	// a data loader's workers) that the supervisor could tell were the task's (oom.go).
	OOMKilledChildren []OOMKill `json:"oomKilledChildren,omitempty"`
	// LogsFull says the file system of the task's log files ran out of space (or its disk quota) while the
	// task ran: what it wrote past that was lost, and a failure's own words with it.
	LogsFull bool      `json:"logsFull,omitempty"`
	EndedAt  time.Time `json:"endedAt"`
}

// Who stopped a task, when the shim decided it itself.
const (
	ByOrphan = "orphan" // no host worker watched for OrphanAfter
	BySignal = "signal" // the supervisor got SIGTERM or SIGINT
	ByReap   = "reap"   // the supervisor was gone; Reap recorded the end
)

// StartError says the task could not start at all; the message says why and what to fix.
type StartError struct{ Msg string }

func (e *StartError) Error() string { return e.Msg }

// ReadStarted reads proc.json; ok is false when the task never started.
func ReadStarted(dir string) (s Started, ok bool, err error) {
	err = readJSON(filepath.Join(dir, ProcFile), &s)
	if errors.Is(err, os.ErrNotExist) {
		return s, false, nil
	}
	return s, err == nil, err
}

// ReadExit reads exit.json; ok is false while the task has not ended (or its end was not recorded).
func ReadExit(dir string) (e Exit, ok bool, err error) {
	err = readJSON(filepath.Join(dir, ExitFile), &e)
	if errors.Is(err, os.ErrNotExist) {
		return e, false, nil
	}
	return e, err == nil, err
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeJSON writes v to path atomically: a temporary file renamed into place, so a reader sees the old file or
// the new one, never half of one. durable adds an fsync of the file and of its folder, so the file survives a
// crash of the machine too.
func writeJSON(path string, v any, durable bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if !durable {
		return nil
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Stop is a request to stop a task: SIGTERM, Grace, SIGKILL, optionally after a diagnostic signal.
type Stop struct {
	Grace time.Duration `json:"grace,omitempty"`
	// By says who asks, and Reason why; the first stop's are the ones recorded in the task's exit.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// First, when set, is a signal sent before SIGTERM (so a hung task can dump its stacks), FirstWait before it.
	First     int           `json:"first,omitempty"`
	FirstWait time.Duration `json:"firstWait,omitempty"`
}

// request is one line a client sends. On the supervisor's socket: start (Config). On a task's socket: watch
// (hold the connection: the task's Started, then its Exit), stop (Stop) or signal (Signal).
type request struct {
	Op     string  `json:"op"`
	Config *Config `json:"config,omitempty"`
	Stop   Stop    `json:"stop"`
	Signal int     `json:"signal,omitempty"`
	// Records names the tasks a supervisor's "stop" or "signal" is for, by their record folders (Config.Record).
	Records []string `json:"records,omitempty"`
	// Main, in a supervisor's "signal", sends the signal to each task's own process, not its group.
	Main bool `json:"main,omitempty"`
	// Watch, in a "start", asks that the connection go on as the task's watch (Client.Watch) once it runs: one
	// connection per task, not two. A supervisor from before ignores it, and answers without Watching.
	Watch bool `json:"watch,omitempty"`
	// EnvBytes, in a "start", is the length of the task's environment, which follows the request's line as raw
	// bytes (envBlock) instead of being in Config.Env. Sent only to a supervisor whose greeting says RawEnv.
	EnvBytes int `json:"envBytes,omitempty"`
}

// maxEnvBytes bounds a start's raw environment. Linux takes at most a quarter of the stack limit (2 MiB by
// default) of arguments and environment in an exec; a larger block is a broken or hostile client.
const maxEnvBytes = 16 << 20

// envBlock writes an environment as raw bytes, each KEY=VALUE ending with a NUL byte (as /proc/PID/environ
// does). A task's TF_CONFIG holds its whole cluster map, so its environment grows with the run: JSON took 0.6 ms
// a task to write and read it at 4,000 tasks, where copying it takes microseconds. An entry that holds a NUL
// cannot be written so (false): it goes in Config.Env, where the start fails on it as it always did.
func envBlock(env []string) ([]byte, bool) {
	n := 0
	for _, kv := range env {
		if strings.IndexByte(kv, 0) >= 0 {
			return nil, false
		}
		n += len(kv) + 1
	}
	b := make([]byte, 0, n)
	for _, kv := range env {
		b = append(append(b, kv...), 0)
	}
	return b, true
}

// readEnvBlock reads the raw environment of a start (request.EnvBytes) from r into its Config.
func readEnvBlock(r io.Reader, req *request) error {
	switch {
	case req.Config == nil:
		return errors.New("an environment without a task")
	case req.EnvBytes < 0 || req.EnvBytes > maxEnvBytes:
		return fmt.Errorf("an environment of %d bytes (at most %d)", req.EnvBytes, maxEnvBytes)
	case len(req.Config.Env) > 0:
		return errors.New("an environment both in the task's config and after it")
	}
	b := make([]byte, req.EnvBytes)
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("the environment ended early: %w", err)
	}
	env := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	if len(b) == 0 {
		env = nil
	}
	req.Config.Env = env
	return nil
}

// message is one line the supervisor answers with.
type message struct {
	Started *Started `json:"started,omitempty"`
	Exit    *Exit    `json:"exit,omitempty"`
	OK      bool     `json:"ok,omitempty"`
	Error   string   `json:"error,omitempty"`
	// StartFailed says Error is why the task could not start (a bad command, a missing folder).
	StartFailed bool `json:"startFailed,omitempty"`
	// Ending, in the greeting, says the supervisor is ending and takes no new task: start another.
	Ending bool `json:"ending,omitempty"`
	// Watching, with Started, says the connection is now the task's watch: its Exit comes on it.
	Watching bool `json:"watching,omitempty"`
	// RawEnv, in the greeting, says the supervisor takes a start's environment as raw bytes (request.EnvBytes).
	RawEnv bool `json:"rawEnv,omitempty"`
}
